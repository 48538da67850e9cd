/* The first lines of a linked image's PTX, as the fake's driver linker (link.c) and the nvJitLink shim
 * (toolchain/nvjitlink.c) write them and the module loader reads them: one place for both. */
#ifndef IRONACCEL_FAKE_LINKED_IMAGE_H
#define IRONACCEL_FAKE_LINKED_IMAGE_H

#define LINKED_HEADER "// ironaccel fake linked image: the PTX of its inputs, in order\n"
/* after the header when the link had a register limit (CU_JIT_MAX_REGISTERS, nvJitLink's -maxrregcount):
 * the loaded module keeps the limit */
#define MAX_REGISTERS_LINE "// max registers per thread (CU_JIT_MAX_REGISTERS): "

#endif
