"""The WebGPU backend's own behaviour, beyond the shared conformance suite, on every software driver this
machine has (webgpu/lavapipe, webgpu/swiftshader).

wgpu-native picks its Vulkan driver once per process, so each target's scenario runs in a child process
(this file run as a script, ``python tests/test_webgpu_backend.py SCENARIO TARGET``) that prints what it
saw as JSON; the assertions are the parent's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ironaccel.cts import targets

WEBGPU = ["webgpu/lavapipe", "webgpu/swiftshader"]

# A shader whose storage binding is a fixed-size array: a smaller buffer bound to it is a validation error.
FIXED_ARRAY_WGSL = """
@group(0) @binding(0) var<storage, read_write> data: array<u32, 1024>;
@compute @workgroup_size(64)
fn fill_fixed(@builtin(global_invocation_id) g: vec3<u32>) { data[g.x] = 7u; }
"""
FILL_BYTE = 0xAB

# Stores its float scalar's bits: launches whose scalars are equal as values but not as bytes differ.
STORE_BITS_WGSL = """
struct Params { v: f32 }
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(0) @binding(1) var<uniform> p: Params;
@compute @workgroup_size(1)
fn store_bits() { out[0] = bitcast<u32>(p.v); }
"""

# Stores its block size: a relaunch on the same argument objects with another block must run that block.
STORE_BLOCK_WGSL = """
override BLOCK_X: u32 = 1u;
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(BLOCK_X)
fn store_block(@builtin(local_invocation_index) i: u32) { if (i == 0u) { out[0] = BLOCK_X; } }
"""


def undersized_binding_after_fill(target: str) -> dict:
    """A fill, then a launch that binds 64 bytes where the shader's array needs 4096 (issue 12, item 3:
    the launch returned normally, synchronize() raised a raw wgpu error and the fill was dropped)."""
    import numpy as np

    import ironaccel as ia

    dev = ia.open_device("webgpu", 0)
    seen: dict = {"device": dev.info.name, "matches": targets.get(target).matches(dev.info)}
    kernel = dev.compile(FIXED_ARRAY_WGSL, "wgsl").kernel("fill_fixed")
    s = dev.create_stream()
    kept, small = dev.alloc(256), dev.alloc(64)
    s.fill(kept, FILL_BYTE)
    try:
        s.launch(kernel, 1, 64, (small,))
        seen["launch"] = None
    except Exception as exc:  # what it raised is the parent's to judge
        seen["launch"] = [type(exc).__name__, isinstance(exc, ia.InvalidArgument), str(exc)]
    try:
        out = np.zeros(256, np.uint8)
        s.copy_dtoh(out, kept)
        s.synchronize(timeout=60)
        seen["kept"] = out.tolist()
    except Exception as exc:
        seen["kept"] = f"{type(exc).__name__}: {exc}"
    seen["diagnostics"] = dev.diagnostics()
    dev.close()
    return seen


def relaunches_through_the_dispatch_cache(target: str) -> dict:
    """Launches that the cached dispatches (the last launch's, and those keyed by buffers and scalar bytes)
    must tell apart: each records the word its buffer got."""
    import numpy as np

    import ironaccel as ia

    dev = ia.open_device("webgpu", 0)
    seen: dict = {"device": dev.info.name, "matches": targets.get(target).matches(dev.info)}
    kernel = dev.compile(STORE_BITS_WGSL, "wgsl").kernel("store_bits")
    s = dev.create_stream()

    def word(buf: ia.Buffer) -> int:
        out = np.zeros(1, np.uint32)
        s.copy_dtoh(out, buf)
        s.synchronize(timeout=60)
        return int(out[0])

    a, b = dev.alloc(4), dev.alloc(4)
    plus, minus = np.float32(0.0), np.float32(-0.0)
    args = [a, plus]
    s.launch(kernel, 1, 1, args)
    seen["same objects again"] = (s.launch(kernel, 1, 1, args), word(a))[1]
    s.launch(kernel, 1, 1, (a, minus))
    seen["-0.0 after 0.0"] = word(a)
    s.launch(kernel, 1, 1, (b, np.float32(2.0)))
    seen["other buffer"] = [word(a), word(b)]
    values = [np.float32(i) for i in range(40)]  # more dispatches than the cache keeps
    for v in values:
        s.launch(kernel, 1, 1, (a, v))
    s.launch(kernel, 1, 1, (a, values[0]))
    seen["first of 40 again"] = word(a)
    block_kernel = dev.compile(STORE_BLOCK_WGSL, "wgsl").kernel("store_block")
    same = [b]
    seen["blocks"] = [(s.launch(block_kernel, 1, block, same), word(b))[1] for block in (32, 64, 32)]
    a.free()
    c = dev.alloc(4)
    s.fill(c, 0)
    s.launch(kernel, 1, 1, (c, np.float32(1.5)))
    seen["new buffer after a free"] = word(c)
    seen["diagnostics"] = dev.diagnostics()
    dev.close()
    return seen


def inline_copies_against_the_api(target: str) -> dict:
    """WebGPUStream's copy_htod, copy_htod_deferred and copy_dtoh admit their common case inline (issue 30): each
    call on each side of api.Stream's rules, made through them and through api.Stream's own definition on the
    same stream, must end alike (the error's type and text, or success and the bytes moved): the inline check
    admits no more than api.py, the one place the rules and their errors are written."""
    import numpy as np

    import ironaccel as ia
    from ironaccel import api

    dev = ia.open_device("webgpu", 0)
    seen: dict = {"device": dev.info.name, "matches": targets.get(target).matches(dev.info), "differ": [],
                  "outcomes": []}
    s = dev.create_stream()

    def outcome(call) -> list:
        try:
            call()
            s.synchronize(timeout=60)
        except Exception as exc:  # noqa: BLE001 - the outcome compared is any error
            return [type(exc).__name__, str(exc)]
        return ["ok", ""]

    readonly = np.arange(16, dtype=np.uint8)
    readonly.flags.writeable = False
    hosts = [np.arange(16, dtype=np.uint8), np.arange(32, dtype=np.uint8)[::2], np.zeros(3, np.uint8),
             np.asfortranarray(np.arange(16, dtype=np.uint8).reshape(4, 4)), np.arange(4, dtype=np.float32),
             np.array([1, 2], dtype=object), np.zeros(0, np.uint8), np.zeros(65, np.uint8), readonly,
             np.zeros(2, "datetime64[s]"), bytearray(8), [1, 2]]
    buf, freed = dev.alloc(64), dev.alloc(64)
    freed.free()
    other = ia.open_device("webgpu", 0)
    theirs = other.alloc(64)
    for method, keyword in (("copy_htod", "dst_offset"), ("copy_htod_deferred", "dst_offset"),
                            ("copy_dtoh", "src_offset")):
        inline, python = getattr(type(s), method), getattr(api.Stream, method)
        for target_buf in (buf, freed, theirs, "a buffer"):
            for host in hosts:
                for offset in (0, 1, 48, 49, 61, 64, -1, 1.0, True, np.int64(8), None):
                    kwargs = {} if offset is None else {keyword: offset}
                    got = []
                    for how in (inline, python):
                        if target_buf is buf and method != "copy_dtoh":
                            s.fill(target_buf, 0)
                        args = (target_buf, host) if method != "copy_dtoh" else (host, target_buf)
                        if method == "copy_dtoh" and isinstance(host, np.ndarray) and host.flags.writeable:
                            host[...] = 0
                        result = outcome(lambda: how(s, *args, **kwargs))
                        moved = None
                        if result[0] == "ok" and target_buf is buf:
                            out = np.zeros(64, np.uint8)
                            s.copy_dtoh(out, buf)
                            s.synchronize(timeout=60)
                            moved = out.tolist() if method != "copy_dtoh" else bytes(np.asarray(host).tobytes()).hex()
                        got.append((result, moved))
                    seen["outcomes"].append(got[0][0][0])
                    if got[0] != got[1]:
                        seen["differ"].append([method, repr(target_buf)[:40], repr(host)[:60], repr(offset), got])
    other.close()
    dev.close()
    return seen


SCENARIOS = {f.__name__: f for f in (undersized_binding_after_fill, relaunches_through_the_dispatch_cache,
                                     inline_copies_against_the_api)}


def run_scenario(name: str, target: str) -> dict:
    why = targets.get(target).missing()
    if why is not None:
        pytest.skip(f"{target} cannot run here: {why}")
    env = {**os.environ, **targets.get(target).environment()}
    proc = subprocess.run([sys.executable, __file__, name, target], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode} (negative: a signal)\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["matches"], f"{target}: the child got device {seen['device']!r}, another driver"
    return seen


@pytest.mark.parametrize("target", WEBGPU)
def test_undersized_binding_fails_at_the_launch_and_keeps_earlier_work(target):
    seen = run_scenario("undersized_binding_after_fill", target)
    assert seen["launch"] is not None, "a launch binding 64 bytes to a 4096-byte array returned normally"
    kind, typed, message = seen["launch"]
    assert typed, f"the launch raised {kind}, not InvalidArgument: {message}"
    assert "Stream.launch" in message and "fill_fixed" in message, message
    assert seen["kept"] == [FILL_BYTE] * 256, f"the fill before the bad launch was not kept: {seen['kept']}"
    assert seen["diagnostics"] == []


@pytest.mark.parametrize("target", WEBGPU)
def test_relaunches_through_the_dispatch_cache_bind_their_own_buffers_and_scalar_bytes(target):
    seen = run_scenario("relaunches_through_the_dispatch_cache", target)
    bits = lambda v: int(np.float32(v).view(np.uint32))  # noqa: E731
    assert seen["same objects again"] == bits(0.0)
    assert seen["-0.0 after 0.0"] == bits(-0.0), "-0.0 reused the bind group of 0.0 (equal values, other bytes)"
    assert seen["other buffer"] == [bits(-0.0), bits(2.0)]
    assert seen["first of 40 again"] == bits(0.0)
    assert seen["new buffer after a free"] == bits(1.5)
    assert seen["blocks"] == [32, 64, 32], "a relaunch on the same argument objects kept the first block size"
    assert seen["diagnostics"] == []


@pytest.mark.parametrize("target", WEBGPU)
def test_inline_copies_admit_what_the_api_admits(target):
    seen = run_scenario("inline_copies_against_the_api", target)
    assert seen["differ"] == [], seen["differ"][:3]
    assert {"ok", "InvalidArgument", "UseAfterFree"} <= set(seen["outcomes"])  # each side of the rules is reached


if __name__ == "__main__":
    scenario, target_name = sys.argv[1:3]
    print(json.dumps(SCENARIOS[scenario](target_name)))
