"""Green contexts on the fake (fakes/cuda/green_context.c): the device's SMs (one per block-running host thread)
split by sm_90's rules (8-SM partitions and alignment, even counts, 32 co-scheduled at most), resource
descriptors of one split only, green contexts whose CUcontext, streams and kernels work as a context's do.

Each test runs in a child process whose fake has 16 SMs (IRONACCEL_FAKE_CUDA_THREADS), so the splits do not
depend on this machine's CPUs; the last checks a device too small for one partition."""

import subprocess
import sys
import tempfile
import textwrap

from ironaccel import fakes

PRELUDE = '''
import ctypes
import numpy as np
from cuda.bindings import driver as d, nvrtc
E, T = d.CUresult, d.CUdevResourceType
SM, WQ_CONFIG, WQ = T.CU_DEV_RESOURCE_TYPE_SM, T.CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG, T.CU_DEV_RESOURCE_TYPE_WORKQUEUE
BAD_CONFIG = E.CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION
assert d.cuInit(0)[0] == 0
def ok(result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    assert err == E.CUDA_SUCCESS, err
    return rest[0] if len(rest) == 1 else tuple(rest) if rest else None
def params(count, cosched=0, flags=0):
    p = d.CU_DEV_SM_RESOURCE_GROUP_PARAMS()
    p.smCount, p.coscheduledSmCount, p.flags = count, cosched, flags
    return p
def split(device_sm, *groups):
    return d.cuDevSmResourceSplit(len(groups), device_sm, 0, list(groups))
'''


def run(code: str, sms: int = 16) -> str:
    env = dict(fakes.child_env(), IRONACCEL_FAKE_CUDA_THREADS=str(sms))
    with tempfile.NamedTemporaryFile("w", suffix=".py") as script:  # a file: its traceback shows the lines
        script.write(PRELUDE + textwrap.dedent(code))
        script.flush()
        p = subprocess.run([sys.executable, script.name], env=env, text=True, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_device_resources_match_the_multiprocessor_count():
    run('''
        sm = ok(d.cuDeviceGetDevResource(0, SM))
        n = ok(d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0))
        assert (sm.type, sm.sm.smCount, n) == (SM, 16, 16)
        assert (sm.sm.minSmPartitionSize, sm.sm.smCoscheduledAlignment, sm.sm.flags) == (8, 8, 0)
        ctx = ok(d.cuCtxCreate(None, 0, 0))
        assert ok(d.cuCtxGetDevResource(ctx, SM)).sm.smCount == 16
        wq = ok(d.cuDeviceGetDevResource(0, WQ_CONFIG)).wqConfig
        assert (int(wq.device), wq.wqConcurrencyLimit, int(wq.sharingScope)) == (0, 8, 0)
        assert ok(d.cuDeviceGetDevResource(0, WQ)).type == WQ
        assert d.cuDeviceGetDevResource(0, T.CU_DEV_RESOURCE_TYPE_INVALID)[0] == E.CUDA_ERROR_INVALID_RESOURCE_TYPE
        assert d.cuDeviceGetDevResource(1, SM)[0] == E.CUDA_ERROR_INVALID_DEVICE
    ''')


def test_structured_split_follows_sm90_rules():
    run('''
        sm = ok(d.cuDeviceGetDevResource(0, SM))
        groups, rem = ok(split(sm, params(8), params(8)))
        assert [g.sm.smCount for g in groups] == [8, 8] and rem.type == T.CU_DEV_RESOURCE_TYPE_INVALID
        assert [g.sm.smCoscheduledAlignment for g in groups] == [8, 8]
        assert split(sm, params(10))[0] == BAD_CONFIG                 # not a multiple of the 8 co-scheduled
        assert split(sm, params(8), params(16))[0] == BAD_CONFIG      # more than is left
        assert split(sm, params(18))[0] == E.CUDA_ERROR_INVALID_VALUE  # more than the input has
        assert split(sm, params(8, cosched=3))[0] == E.CUDA_ERROR_INVALID_VALUE
        assert split(sm, params(8, cosched=64))[0] == E.CUDA_ERROR_INVALID_VALUE
        assert d.cuDevSmResourceSplit(1, sm, 1, [params(8)])[0] == E.CUDA_ERROR_INVALID_VALUE  # no flags yet
        (g,), rem = ok(split(sm, params(10, flags=1)))                  # backfill: 8 co-scheduled and 2 more
        assert (g.sm.smCount, g.sm.flags, rem.sm.smCount) == (10, 1, 6)
        (g,), rem = ok(split(sm, params(4, cosched=4)))
        assert (g.sm.smCount, g.sm.smCoscheduledAlignment, rem.sm.smCount) == (4, 4, 12)
        (a, b), rem = ok(split(sm, params(8), params(0)))             # the second discovers what is left
        assert (a.sm.smCount, b.sm.smCount) == (8, 8)
    ''')


def test_discovery_without_results_fills_the_counts_in():
    run('''
        lib = ctypes.CDLL("libcuda.so.1")
        sm = ok(d.cuDeviceGetDevResource(0, SM))
        p = params(0)
        rem = d.CUdevResource()
        rc = lib.cuDevSmResourceSplit(None, 1, ctypes.c_void_p(sm.getPtr()), ctypes.c_void_p(rem.getPtr()), 0,
                                      ctypes.c_void_p(p.getPtr()))
        assert (rc, p.smCount, rem.type) == (0, 16, T.CU_DEV_RESOURCE_TYPE_INVALID)
    ''')


def test_split_by_count_rounds_up_to_the_partition_size():
    run('''
        sm = ok(d.cuDeviceGetDevResource(0, SM))
        groups, n, rem = ok(d.cuDevSmResourceSplitByCount(4, sm, 0, 5))
        assert n == 2 and [g.sm.smCount for g in groups[:n]] == [8, 8]
        groups, n, rem = ok(d.cuDevSmResourceSplitByCount(1, sm, 0, 9))
        assert (n, groups[0].sm.smCount, rem.type) == (1, 16, T.CU_DEV_RESOURCE_TYPE_INVALID)
        groups, n, rem = ok(d.cuDevSmResourceSplitByCount(8, sm, 1, 2))  # IGNORE_SM_COSCHEDULING: pairs
        assert n == 8 and groups[0].sm.smCount == 2
        assert d.cuDevSmResourceSplitByCount(1, sm, 0, 17)[0] == E.CUDA_ERROR_INVALID_VALUE
        assert d.cuDevSmResourceSplitByCount(1, sm, 4, 8)[0] == E.CUDA_ERROR_INVALID_VALUE
    ''')


def test_descriptors_take_the_groups_of_one_split():
    run('''
        sm = ok(d.cuDeviceGetDevResource(0, SM))
        (a, b), _ = ok(split(sm, params(8), params(8)))
        (c,), _ = ok(split(sm, params(8)))
        assert d.cuDevResourceGenerateDesc([a, c], 2)[0] == BAD_CONFIG  # two split instances
        assert d.cuDevResourceGenerateDesc([a, a], 2)[0] == BAD_CONFIG  # the same SMs twice
        g = ok(d.cuGreenCtxCreate(ok(d.cuDevResourceGenerateDesc([a, b], 2)), 0, 1))
        assert ok(d.cuGreenCtxGetDevResource(g, SM)).sm.smCount == 16
        forged = d.CUdevResource()
        forged.type = SM
        assert d.cuDevResourceGenerateDesc([forged], 1)[0] == E.CUDA_ERROR_INVALID_RESOURCE_TYPE
        wq = ok(d.cuDeviceGetDevResource(0, WQ_CONFIG))
        wq.wqConfig.wqConcurrencyLimit = 4
        wq.wqConfig.sharingScope = d.CUdevWorkqueueConfigScope.CU_WORKQUEUE_SCOPE_GREEN_CTX_BALANCED
        g = ok(d.cuGreenCtxCreate(ok(d.cuDevResourceGenerateDesc([a, wq], 2)), 0, 1))
        got = ok(d.cuGreenCtxGetDevResource(g, WQ_CONFIG)).wqConfig
        assert (got.wqConcurrencyLimit, int(got.sharingScope)) == (4, 1)
    ''')


FILL = r'extern "C" __global__ void fill(int* out, int v, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = v * i; }'


def test_green_context_streams_run_kernels_and_the_context_ends_cleanly():
    run(f'''
        sm = ok(d.cuDeviceGetDevResource(0, SM))
        (group,), _ = ok(split(sm, params(8)))
        green = ok(d.cuGreenCtxCreate(ok(d.cuDevResourceGenerateDesc([group], 1)), 0, 1))
        ctx = ok(d.cuCtxFromGreenCtx(green))
        assert ok(d.cuCtxGetDevResource(ctx, SM)).sm.smCount == 8
        assert d.cuGreenCtxStreamCreate(green, 0, 0)[0] == E.CUDA_ERROR_INVALID_VALUE  # must be non-blocking
        stream = ok(d.cuGreenCtxStreamCreate(green, 1, 0))
        assert int(ok(d.cuStreamGetGreenCtx(stream))) == int(green)
        primary, owner = ok(d.cuStreamGetCtx_v2(stream))
        assert int(owner) == int(green) and int(primary) == int(ok(d.cuDevicePrimaryCtxRetain(0)))
        assert ok(d.cuStreamGetDevResource(stream, SM)).sm.smCount == 8
        assert d.cuStreamGetDevResource(stream, WQ_CONFIG)[0] == E.CUDA_ERROR_INVALID_RESOURCE_TYPE
        ok(d.cuCtxPushCurrent(ctx))
        assert int(ok(d.cuStreamGetCtx(stream))) == int(ctx)
        prog = ok(nvrtc.nvrtcCreateProgram({FILL!r}.encode(), b"fill.cu", 0, [], []))
        assert nvrtc.nvrtcCompileProgram(prog, 1, [b"--gpu-architecture=compute_90"])[0] == 0
        ptx = b" " * nvrtc.nvrtcGetPTXSize(prog)[1]
        nvrtc.nvrtcGetPTX(prog, ptx)
        fill = ok(d.cuModuleGetFunction(ok(d.cuModuleLoadData(ptx)), b"fill"))
        n = 1000
        out = ok(d.cuMemAlloc(4 * n))
        boxes = [np.array([int(out)], np.uint64), np.array([7], np.int32), np.array([n], np.int32)]
        args = np.array([b.ctypes.data for b in boxes], np.uint64)
        ok(d.cuLaunchKernel(fill, (n + 127) // 128, 1, 1, 128, 1, 1, 0, stream, args.ctypes.data, 0))
        host = np.zeros(n, np.int32)
        ok(d.cuMemcpyDtoHAsync(host.ctypes.data, out, 4 * n, stream))
        ok(d.cuStreamSynchronize(stream))
        assert (host == 7 * np.arange(n)).all()
        assert int(ok(d.cuStreamGetGreenCtx(d.CUstream(0)))) == int(green)  # the null stream of the current one
        ok(d.cuMemFree(out))
        ok(d.cuCtxPopCurrent())
        assert d.cuCtxDestroy(ctx)[0] == E.CUDA_ERROR_INVALID_CONTEXT  # a green context's goes with it
        ok(d.cuStreamDestroy(stream))
        ok(d.cuGreenCtxDestroy(green))
        assert d.cuGreenCtxDestroy(green)[0] == E.CUDA_ERROR_INVALID_HANDLE
        assert d.cuCtxPushCurrent(ctx)[0] == E.CUDA_ERROR_INVALID_CONTEXT
    ''')


def test_a_device_smaller_than_a_partition_cannot_split():
    run('''
        sm = ok(d.cuDeviceGetDevResource(0, SM))
        assert sm.sm.smCount == 4
        assert split(sm, params(8))[0] == E.CUDA_ERROR_INVALID_VALUE  # more than the device has
        assert split(sm, params(0))[0] == BAD_CONFIG                  # no whole 8-SM window to discover
        assert d.cuDevSmResourceSplitByCount(1, sm, 0, 0)[0] == BAD_CONFIG
        (g,), _ = ok(split(sm, params(4, cosched=2)))
        assert g.sm.smCount == 4
    ''', sms=4)
