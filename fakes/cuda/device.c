/* The one simulated device: count, name, UUID, memory size, compute capability, PCI id and the attribute
 * table, kept consistent with compute capability 9.0 and with what the interpreter does. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "fake.h"

#define DEVICE_NAME "ironaccel fake CUDA device (simulated)"
#define MAX_THREADS_PER_BLOCK 1024

API CUresult cuDeviceGetCount(int *count) {
    ENTER(cuDeviceGetCount);
    NEED_INIT();
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = 1;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
    ENTER(cuDeviceGet);
    NEED_INIT();
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    NEED_DEVICE(ordinal);
    *dev = 0;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    ENTER(cuDeviceGetName);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", DEVICE_NAME);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid(unsigned char *uuid, CUdevice dev) {
    ENTER(cuDeviceGetUuid);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    static const unsigned char UUID[16] = "ironaccel-fake-0"; /* fixed, recognisable */
    memcpy(uuid, UUID, 16);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid_v2(unsigned char *uuid, CUdevice dev) {
    ENTER(cuDeviceGetUuid_v2);
    return cuDeviceGetUuid(uuid, dev);
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    ENTER(cuDeviceTotalMem_v2);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = mem_total();
    return CUDA_SUCCESS;
}

API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev) {
    ENTER(cuDeviceComputeCapability);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
    *major = CC_MAJOR;
    *minor = CC_MINOR;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice dev) {
    ENTER(cuDeviceGetPCIBusId);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!bus || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(bus, (size_t)len, "0000:00:00.0");
    return CUDA_SUCCESS;
}

static int attribute_value(int attr, int *known) {
    *known = 1;
    switch (attr) {
    case 1: return MAX_THREADS_PER_BLOCK;
    case 2: case 3: return 1024;
    case 4: return 64;
    case 5: return 2147483647;
    case 6: case 7: return 65535;
    case 8: return SHARED_PER_BLOCK;
    case 9: return 65536;
    case 10: return 32;
    case 11: return 2147483647;
    case 12: return 65536;
    case 13: return 1000000; /* kHz */
    case 14: return 512;
    case 15: return 1;
    case 16: return g_block_threads; /* one "multiprocessor" per host thread running blocks */
    case 17: return watchdog_armed(); /* KERNEL_EXEC_TIMEOUT: whether kernels have a run-time limit */
    case 18: return 0;
    case 19: return 1;
    case 20: return 0;
    case 21: case 22: return 131072; /* texture and array extents: 1-D, 2-D width (arrays.c) */
    case 23: return 65536;
    case 24: case 25: case 26: return 16384; /* 3-D */
    case 30: return 512;
    case 31: return 1;
    case 32: return 0;
    case 33: case 34: case 35: return 0;
    case 36: return 1000000;
    case 37: return 64;
    case 38: return 4 << 20;
    case 39: return THREADS_PER_SM;
    case 40: return 1;
    case 41: return 1;
    case 50: return 0;
    case 51: return 32;
    case 75: return CC_MAJOR;
    case 76: return CC_MINOR;
    case 78: return 1;
    case 79: case 80: return 1;
    case 81: return SHARED_PER_SM;
    case 82: return 65536;
    case 83: return 1;
    case 84: case 85: return 0;
    case 86: return 0;
    case 87: return 2;
    case 88: return 0; /* pageable host memory is not device-accessible: launches check accesses against allocations */
    case 89: return 1; /* concurrent managed access: managed memory is host memory in one coherent address space */
    case 90: return 0;
    case 91: return 1;
    case 95: return 1;
    case 96: return 0;
    case 97: return SHARED_PER_BLOCK_OPTIN;
    case 99: return 1;
    case 106: return 32;
    case 111: return 1024;
    case 103: return 1; /* HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: shareable pools export a descriptor (pool_share.c) */
    case 113: return 0;
    case 115: return 1;
    case 119: return 1; /* MEMPOOL_SUPPORTED_HANDLE_TYPES: CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
    case 120: return 0;
    case 125: return 1; /* IPC_EVENT_SUPPORTED: interprocess events keep their state in shared memory (ipc.c) */
    case 126: return 1;
    case 127: return 1; /* TENSOR_MAP_ACCESS_SUPPORTED: maps are encoded (tensor_map.c); the PTX using them is not */
    case 129: return 0;
    case 142: return 1; /* HOST_NUMA_MEMORY_POOLS_SUPPORTED: pinned pools of the host's one node, 0 */
    case 144: return 1; /* HOST_MEMORY_POOLS_SUPPORTED: pinned host pools (alloc.c) */
    case 131: return -1; /* NUMA_ID: the device is no NUMA node */
    case 134: return 0;  /* HOST_NUMA_ID: the host's one node, where pinned NUMA pools live */
    default:
        *known = 0;
        return 0;
    }
}

API CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev) {
    ENTER(cuDeviceGetAttribute);
    NEED_INIT();
    NEED_DEVICE(dev);
    if (!value || attr < 1 || attr >= 162) return CUDA_ERROR_INVALID_VALUE;
    int known;
    *value = attribute_value(attr, &known); /* texture, surface, interop limits: 0 (not supported) */
    return CUDA_SUCCESS;
}

