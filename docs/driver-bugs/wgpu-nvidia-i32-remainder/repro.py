"""WGSL's i32 `%` gives wrong remainders on an NVIDIA H200 through wgpu-native — standalone reproducer.

Needs only numpy and wgpu-py (`pip install numpy wgpu==0.32.0`); it does not use ironaccel.

    python3 repro.py                          # the default high-performance adapter
    VK_DRIVER_FILES=/path/icd.json python3 repro.py   # a chosen Vulkan driver

Exit 1 and the first wrong cases when the adapter computes any remainder that differs from WGSL's
definition (a truncated remainder: the result takes the dividend's sign, |r| < |b|), exit 0 otherwise.
The inputs are every pair of 17 edge values and 3,000 seeded random pairs, never b == 0 nor INT_MIN % -1.
"""

import sys

import numpy as np
import wgpu

SHADER = """
@group(0) @binding(0) var<storage, read> a: array<i32>;
@group(0) @binding(1) var<storage, read> b: array<i32>;
@group(0) @binding(2) var<storage, read_write> q: array<i32>;
@group(0) @binding(3) var<storage, read_write> r: array<i32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < arrayLength(&a)) {
        q[g.x] = a[g.x] / b[g.x];
        r[g.x] = a[g.x] % b[g.x];
    }
}
"""
EDGE = np.array([0, 1, 2, 3, 7, 31, 32, 33, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFE, 0xFFFFFFFF,
                 0x10000, 0xFFFF, 0x12345678, 0x9E3779B9], dtype=np.uint32)


def inputs() -> tuple[np.ndarray, np.ndarray]:
    a, b = (g.ravel() for g in np.meshgrid(EDGE, EDGE))
    r = np.random.default_rng(11)
    a = np.concatenate([a, r.integers(0, 2**32, 3000, dtype=np.uint32)])
    b = np.concatenate([b, r.integers(0, 2**32, 3000, dtype=np.uint32)])
    b[b == 0] = 5
    b[(a == 0x80000000) & (b == 0xFFFFFFFF)] = 3
    return a.view(np.int32), b.view(np.int32)


def main() -> int:
    a, b = inputs()
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    info = adapter.info
    print(f"adapter: {info.get('device')} ({info.get('vendor')}), backend {info.get('backend_type')}, "
          f"driver {info.get('description')}; wgpu-py {wgpu.__version__}")
    device = adapter.request_device_sync()
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC
    bufs = [device.create_buffer_with_data(data=a, usage=usage), device.create_buffer_with_data(data=b, usage=usage),
            device.create_buffer(size=a.nbytes, usage=usage), device.create_buffer(size=a.nbytes, usage=usage)]
    pipeline = device.create_compute_pipeline(layout="auto", compute={
        "module": device.create_shader_module(code=SHADER), "entry_point": "main"})
    group = device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
        {"binding": i, "resource": {"buffer": buf, "offset": 0, "size": buf.size}} for i, buf in enumerate(bufs)])
    encoder = device.create_command_encoder()
    compute = encoder.begin_compute_pass()
    compute.set_pipeline(pipeline)
    compute.set_bind_group(0, group)
    compute.dispatch_workgroups((a.size + 63) // 64)
    compute.end()
    device.queue.submit([encoder.finish()])
    q = np.frombuffer(device.queue.read_buffer(bufs[2]), dtype=np.int32)
    r = np.frombuffer(device.queue.read_buffer(bufs[3]), dtype=np.int32)

    wide_a, wide_b = a.astype(np.int64), b.astype(np.int64)
    want_q = np.sign(wide_a) * np.sign(wide_b) * (np.abs(wide_a) // np.abs(wide_b))
    want_r = (wide_a - want_q * wide_b).astype(np.int32)
    bad_q = np.flatnonzero(q != want_q.astype(np.int32))
    bad_r = np.flatnonzero(r != want_r)
    print(f"i32 /: {bad_q.size} of {a.size} wrong;  i32 %: {bad_r.size} of {a.size} wrong")
    for i in bad_r[:10]:
        print(f"  {a[i]} % {b[i]} = {r[i]}, WGSL says {want_r[i]}")
    return 1 if bad_q.size or bad_r.size else 0


if __name__ == "__main__":
    sys.exit(main())
