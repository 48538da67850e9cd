/* The driver's private export tables: what NVIDIA's libraries (the CUDA runtime above all) ask
 * cuGetExportTable for. One row a table: its name (ZLUDA's, vosen/ZLUDA dark_api/src/lib.rs, where one exists),
 * the number of slots, whether slot 0 holds the table's size in bytes instead of a function, and the 16 bytes
 * of its UUID in the order cuGetExportTable reads them.
 *
 * Shared by the fake (export_tables.c) and the tracer (tools/export_trace.c), so both name a table alike; the
 * traces under traces/ say which of them each program asks for. UNNAMED_69A28E9F is one a CUDA 13 driver (580.159)
 * gave a traced PyTorch that ZLUDA does not list: named by its UUID, its slots' purpose unknown.
 * TOOLS_CONTEXT (CU_ETID_ToolsContext in public notes on the driver's symbols) is asked for by CUDA 13.4+ runtimes,
 * which fail every call without it; 95 slots with the size, as driver 595.99.02 serves it (public notes).
 * UNNAMED_1734DC26 is one cuBLASLt 13.1 asks for (through the runtime's cudaGetExportTable) in the heuristics of
 * half-precision GEMMs (cublasLtHSHMatmulAlgoGetHeuristic), and then calls its slot 4 WITHOUT checking the lookup's
 * result: refused, cuBLASLt jumps through NULL+0x20 and the process dies (SIGSEGV; CuPy's
 * TestMatmulFp16ComputeTypes). A real driver evidently serves it (the tests pass on the H200). Its slots' meaning and
 * count are not known (32 is a guess that covers the slots 4 and 13 seen called), so every slot is an unknown
 * one: it says so on stderr and returns NOT_SUPPORTED, which cuBLASLt checks and turns into an error status.
 *
 * UNNAMED_F8CFF951 (3 slots with the size) is asked for at start-up by every CUDA 13.0 runtime the H200's driver
 * (580.159) was traced with (CuPy's, PyTorch's and an nvcc-built program's: traces/*.log); none calls a slot, so
 * every slot is an unknown one. Refused, the runtimes went on as well: served as the real driver serves it.
 *
 * Left out on purpose: {DA9151D3-3AE6-CC41-A5C0-4F26D533E328} (7 slots with the size), which NVRTC 13 asks for at
 * nvrtcCompileProgram. The real driver gives it (traces/cupy.log, traces/torch.log) and NVRTC then calls, for each
 * program it compiles, slot 1 (nine arguments, one a length of the program's size: 0 on the H200), slot 3 (which
 * answered 500, CUDA_ERROR_NOT_FOUND, every time), slot 4 (a pointer and a length: 0) and slot 2 (0). That reads like
 * a lookup that misses and a store (a compiled-output cache), but nothing shows what slot 1 makes or what a hit
 * would return; the fake refuses the lookup (INVALID_VALUE), after which NVRTC compiles as it always has here,
 * rather than answer for slots whose contract nobody has seen. */
#ifndef FAKECUDA_EXPORT_TABLES_H
#define FAKECUDA_EXPORT_TABLES_H

#define EXPORT_TABLES(T)                                                                                        \
    T(CUDART_INTERFACE, 13, 1, 0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9) \
    T(TOOLS_TLS, 4, 1, 0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc)        \
    T(TOOLS_RUNTIME_CALLBACK_HOOKS, 7, 1, 0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66) \
    T(CONTEXT_LOCAL_STORAGE, 4, 0, 0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93) \
    T(CTX_CREATE_BYPASS, 2, 1, 0x0c, 0xa5, 0x0b, 0x8c, 0x10, 0x04, 0x92, 0x9a, 0x89, 0xa7, 0xd0, 0xdf, 0x10, 0xe7, 0x72, 0x86) \
    T(HEAP_ACCESS, 3, 1, 0x19, 0x5b, 0xcb, 0xf4, 0xd6, 0x7d, 0x02, 0x4a, 0xac, 0xc5, 0x1d, 0x29, 0xce, 0xa6, 0x31, 0xae)      \
    T(DEVICE_EXTENDED_RT, 26, 1, 0xb1, 0x05, 0x41, 0xe1, 0xf7, 0xc7, 0xc7, 0x4a, 0x9f, 0x64, 0xf2, 0x23, 0xbe, 0x99, 0xf1, 0xe2) \
    T(INTEGRITY_CHECK, 3, 1, 0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2)  \
    T(CONTEXT_CHECKS, 4, 1, 0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e) \
    T(UNNAMED_69A28E9F, 34, 1, 0x69, 0xa2, 0x8e, 0x9f, 0x24, 0x49, 0x8b, 0x47, 0xb0, 0x30, 0xc5, 0xda, 0x33, 0x0e, 0xa4, 0xe9) \
    T(TOOLS_CONTEXT, 95, 1, 0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2) \
    T(UNNAMED_1734DC26, 32, 1, 0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca) \
    T(UNNAMED_F8CFF951, 3, 1, 0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9)

/* The most slots any table has (TOOLS_CONTEXT). */
#define EXPORT_TABLE_SLOTS_MAX 95

/* Applies X(arg, n) to every slot number below EXPORT_TABLE_SLOTS_MAX. */
#define EXPORT_TABLE_SLOT_NUMBERS(X, arg)                                                                      \
    X(arg, 0) X(arg, 1) X(arg, 2) X(arg, 3) X(arg, 4) X(arg, 5) X(arg, 6) X(arg, 7) X(arg, 8) X(arg, 9)        \
    X(arg, 10) X(arg, 11) X(arg, 12) X(arg, 13) X(arg, 14) X(arg, 15) X(arg, 16) X(arg, 17) X(arg, 18)         \
    X(arg, 19) X(arg, 20) X(arg, 21) X(arg, 22) X(arg, 23) X(arg, 24) X(arg, 25) X(arg, 26) X(arg, 27)         \
    X(arg, 28) X(arg, 29) X(arg, 30) X(arg, 31) X(arg, 32) X(arg, 33) X(arg, 34) X(arg, 35) X(arg, 36)         \
    X(arg, 37) X(arg, 38) X(arg, 39) X(arg, 40) X(arg, 41) X(arg, 42) X(arg, 43) X(arg, 44) X(arg, 45)         \
    X(arg, 46) X(arg, 47) X(arg, 48) X(arg, 49) X(arg, 50) X(arg, 51) X(arg, 52) X(arg, 53) X(arg, 54)         \
    X(arg, 55) X(arg, 56) X(arg, 57) X(arg, 58) X(arg, 59) X(arg, 60) X(arg, 61) X(arg, 62) X(arg, 63)         \
    X(arg, 64) X(arg, 65) X(arg, 66) X(arg, 67) X(arg, 68) X(arg, 69) X(arg, 70) X(arg, 71) X(arg, 72)         \
    X(arg, 73) X(arg, 74) X(arg, 75) X(arg, 76) X(arg, 77) X(arg, 78) X(arg, 79) X(arg, 80) X(arg, 81)         \
    X(arg, 82) X(arg, 83) X(arg, 84) X(arg, 85) X(arg, 86) X(arg, 87) X(arg, 88) X(arg, 89) X(arg, 90)         \
    X(arg, 91) X(arg, 92) X(arg, 93) X(arg, 94)

#endif
