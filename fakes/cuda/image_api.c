/* The fake's image reader (image.c) for the toolchain shims (toolchain/): what PTX the fake would run from a
 * cubin, fatbin or ELF object. The nvJitLink shim asks it of each binary input, so the linked image carries
 * exactly the PTX the fake itself reads from those inputs: one reader, not two. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

/** The PTX the fake runs from the size bytes of ``image`` (malloc'ed into *ptx; free it with free), 0 on
 * success; otherwise the CUresult a load would return, with the reason in log. Every offset in it is checked
 * against size. */
API int ironaccel_fake_image_ptx(const void *image, size_t size, char **ptx, char *log, size_t loglen) {
    const char *text;
    char *owned;
    if (!image || !size || !ptx || !log || !loglen) return CUDA_ERROR_INVALID_VALUE;
    log[0] = 0;
    CUresult rc = image_ptx(image, size, &text, &owned, NULL, log, loglen);
    if (rc) return rc;
    *ptx = owned ? owned : strndup(text, size); /* PTX text: up to its NUL or its size */
    return *ptx ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
