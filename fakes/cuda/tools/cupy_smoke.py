"""CuPy on a CUDA driver (the fake or a real one): start-up through the CUDA runtime, elementwise kernels,
reductions (through CUB with CuPy's default accelerators), a sort (Thrust), a RawKernel, copies both ways, a
stream and timed events. Prints one line a check and "cupy smoke: ok" at the end; any failure raises. Run by
tests/fakes/test_runtime.py on the fake (with CUB on and off) and by trace_h200.sh on the H200."""

import numpy as np

import cupy


def main() -> None:
    a = cupy.arange(10) * 2
    assert a.tolist() == list(range(0, 20, 2)), a
    print("elementwise:", a.tolist())
    host = np.arange(1000, dtype=np.float32)
    x = cupy.asarray(host)
    assert float(x.sum()) == host.sum() and float(x.max()) == 999.0 and float(x.mean()) == host.mean()
    m = cupy.arange(12, dtype=cupy.float64).reshape(3, 4)
    assert m.sum(axis=0).tolist() == [12.0, 15.0, 18.0, 21.0]
    assert cupy.cumsum(cupy.arange(5)).tolist() == [0, 1, 3, 6, 10]
    print("reductions: sum, max, mean, sum(axis=0), cumsum")
    shuffled = np.random.default_rng(1).permutation(3000).astype(np.int64)
    assert cupy.sort(cupy.asarray(shuffled)).tolist() == list(range(3000))
    assert cupy.argsort(cupy.asarray(shuffled)).get().tolist() == np.argsort(shuffled).tolist()
    print("sort, argsort")
    square = cupy.RawKernel(r'''extern "C" __global__ void square(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = x[i] * x[i];
    }''', "square")
    y = cupy.empty_like(x)
    square((4,), (256,), (x, y, cupy.int32(1000)))
    np.testing.assert_array_equal(y.get(), host * host)
    print("RawKernel: square")
    stream = cupy.cuda.Stream(non_blocking=True)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    with stream:
        start.record()
        z = x * 3 + 1
        end.record()
    stream.synchronize()
    elapsed = cupy.cuda.get_elapsed_time(start, end)
    assert elapsed >= 0
    out = np.empty_like(host)
    z.get(out=out)
    np.testing.assert_array_equal(out, host * 3 + 1)
    back = cupy.empty_like(x)
    back.set(out)
    np.testing.assert_array_equal(cupy.asnumpy(back), out)
    print(f"stream and events: {elapsed:.3f} ms; copies host<->device")
    cupy.cuda.Device().synchronize()
    print("cupy smoke: ok")


if __name__ == "__main__":
    main()
