/* Entry points only the CUDA runtime (libcudart) is known to call while it starts, beside the export tables
 * (export_tables.c): what it asks the driver about how modules are loaded. */
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define CU_MODULE_EAGER_LOADING 1
#define CU_MODULE_LAZY_LOADING 2

/* As a real driver: CUDA_MODULE_LOADING=EAGER or LAZY, lazy by default (CUDA 12.2 on). The fake loads every
 * module when asked either way; the runtime decides from this when it asks. */
API CUresult cuModuleGetLoadingMode(int *mode) {
    ENTER(cuModuleGetLoadingMode);
    NEED_INIT();
    if (!mode) return CUDA_ERROR_INVALID_VALUE;
    const char *env = getenv("CUDA_MODULE_LOADING");
    *mode = env && !strcmp(env, "EAGER") ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
    return CUDA_SUCCESS;
}
