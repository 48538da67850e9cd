"""The CUDA runtime (libcudart) on the fake: the driver's private export tables it asks for, compressed fatbin
entries, and real runtime programs (CuPy, an nvcc-built program) that start and compute on it.

The export tables are called here through ctypes as the runtime calls them (fakes/cuda/export_tables.h lists
their UUIDs); the programs run in child processes (``fakes.child_env()``) with ``IRONACCEL_FAKE_LOG`` set, so
what they asked of the tables is checked too, and against the real driver's traces when those are committed
(fakes/cuda/traces/, made by fakes/cuda/tools/trace_h200.sh).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
from ctypes import byref, c_int, c_uint, c_uint64, c_void_p
from pathlib import Path

import numpy as np
import pytest
from images import pack_fatbin
from images import ptx as ptx_text

from ironaccel import cbuild, fakes

SUCCESS, INVALID_VALUE, INVALID_IMAGE, INVALID_CONTEXT, INVALID_HANDLE = 0, 1, 200, 201, 400
FATBINS = Path(__file__).resolve().parent / "fatbins"
TOOLS = Path(fakes.source_dir()) / "tools"
TRACES = Path(fakes.source_dir()) / "traces"


def _tables() -> dict[str, tuple[bytes, int, bool]]:
    """name -> (UUID bytes, slots, slot 0 is the size), from export_tables.h."""
    text = (Path(fakes.source_dir()) / "export_tables.h").read_text()
    rows = re.findall(r"T\((\w+), (\d+), ([01]), ((?:0x[0-9a-f]{2}, ){15}0x[0-9a-f]{2})\)", text)
    return {name: (bytes(int(b, 16) for b in uuid.split(", ")), int(n), sized == "1") for name, n, sized, uuid in rows}


TABLES = _tables()


def _uuid_text(uuid: bytes) -> str:
    """How a trace writes a UUID: {69A28E9F-2449-8B47-B030-C5DA330EA4E9}."""
    h = uuid.hex().upper()
    return f"{{{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}}}"


#: how a trace names a table its tracer did not know (by its UUID) -> the table's name here
_UUID_NAMES = {_uuid_text(uuid): name for name, (uuid, _, _) in TABLES.items()}


@pytest.fixture()
def lib(cuda):
    return ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD)


def _table(lib, name):
    table = c_void_p()
    assert lib.cuGetExportTable(byref(table), TABLES[name][0]) == SUCCESS
    return ctypes.cast(table, ctypes.POINTER(c_void_p))


def _slot(lib, name, slot, restype, *argtypes):
    return ctypes.CFUNCTYPE(restype, *argtypes)(_table(lib, name)[slot])


def test_every_table_is_found_by_its_uuid_and_sized_ones_say_their_size(lib):
    assert len(TABLES) >= 9
    for name, (_, nslots, sized) in TABLES.items():
        table = _table(lib, name)
        if sized:
            assert table[0] == nslots * 8, name


def test_an_unknown_uuid_is_refused_with_invalid_value(lib):
    table = c_void_p(1)
    assert lib.cuGetExportTable(byref(table), b"\x01" * 16) == INVALID_VALUE
    assert table.value is None


def test_context_local_storage_puts_gets_deletes_per_context(cuda, lib):
    put = _slot(lib, "CONTEXT_LOCAL_STORAGE", 0, c_int, c_void_p, c_void_p, c_void_p, c_void_p)
    delete = _slot(lib, "CONTEXT_LOCAL_STORAGE", 1, c_int, c_void_p, c_void_p)
    get = _slot(lib, "CONTEXT_LOCAL_STORAGE", 2, c_int, ctypes.POINTER(c_void_p), c_void_p, c_void_p)
    ctx, key, value = int(cuda.ctx), 0x1234, c_void_p()
    assert get(byref(value), ctx, key) == INVALID_HANDLE
    assert put(ctx, key, 0xBEEF, None) == SUCCESS
    assert get(byref(value), None, key) == SUCCESS and value.value == 0xBEEF  # NULL: the current context
    assert put(ctx, key, 0xCAFE, None) == SUCCESS  # replaces
    assert get(byref(value), ctx, key) == SUCCESS and value.value == 0xCAFE
    other = c_void_p()
    assert lib.cuDevicePrimaryCtxRetain(byref(other), 0) == SUCCESS
    assert get(byref(value), other, key) == INVALID_HANDLE  # per context
    assert lib.cuDevicePrimaryCtxRelease_v2(0) == SUCCESS
    assert delete(ctx, key) == SUCCESS
    assert get(byref(value), ctx, key) == INVALID_HANDLE
    assert put(0xDEAD0000, key, 1, None) == INVALID_CONTEXT


def test_stored_values_are_destroyed_with_their_context_and_at_a_primary_reset(cuda, lib):
    put = _slot(lib, "CONTEXT_LOCAL_STORAGE", 0, c_int, c_void_p, c_void_p, c_void_p, c_void_p)
    destroyed = []
    Dtor = ctypes.CFUNCTYPE(None, c_void_p, c_void_p, c_void_p)
    dtor = Dtor(lambda ctx, key, value: destroyed.append((ctx, key, value)))
    primary = c_void_p()
    primary_of = _slot(lib, "CUDART_INTERFACE", 2, c_int, ctypes.POINTER(c_void_p), c_int)
    assert primary_of(byref(primary), 0) == SUCCESS  # the primary context, not retained (may be inactive)
    assert put(primary, 7, 70, ctypes.cast(dtor, c_void_p)) == SUCCESS
    assert lib.cuDevicePrimaryCtxReset_v2(0) == SUCCESS
    assert destroyed == [(primary.value, 7, 70)]
    ctx = c_void_p()
    assert lib.cuCtxCreate_v2(byref(ctx), 0, 0) == SUCCESS
    assert put(ctx, 8, 80, ctypes.cast(dtor, c_void_p)) == SUCCESS
    assert lib.cuCtxDestroy_v2(ctx) == SUCCESS
    assert destroyed[1:] == [(ctx.value, 8, 80)]
    assert lib.cuCtxSetCurrent(c_void_p(int(cuda.ctx))) == SUCCESS


def _md2(data: bytes) -> bytes:
    """MD2 (RFC 1319), the oracle for the integrity check."""
    s = _MD2_S
    data += bytes([16 - len(data) % 16]) * (16 - len(data) % 16)
    checksum, last = bytearray(16), 0
    for i in range(0, len(data), 16):
        for j in range(16):
            checksum[j] ^= s[data[i + j] ^ last]
            last = checksum[j]
    data += bytes(checksum)
    x = bytearray(48)
    for i in range(0, len(data), 16):
        x[16:32] = data[i:i + 16]
        x[32:48] = bytes(a ^ b for a, b in zip(x[16:32], x[0:16]))
        t = 0
        for r in range(18):
            for k in range(48):
                x[k] ^= s[t]
                t = x[k]
            t = (t + r) & 0xFF
    return bytes(x[:16])


def _md2_s_table() -> bytes:
    """MD2's permutation (from the digits of pi), as the fake holds it: the RFC's test vectors below check it."""
    text = (Path(fakes.source_dir()) / "export_tables.c").read_text()
    body = re.search(r"MD2_S\[256\] = \{([^}]*)\}", text)[1]
    return bytes(int(v) for v in body.replace("\n", " ").split(",") if v.strip())


_MD2_S = _md2_s_table()


def test_the_md2_oracle_gives_the_rfc_vectors():
    assert len(_MD2_S) == 256 and sorted(_MD2_S) == list(range(256))
    assert _md2(b"").hex() == "8350e5a3e24c153df2275c9f80692773"
    assert _md2(b"abc").hex() == "da853b0d3f88d99b30283a69e6ded6bb"
    assert _md2(b"message digest").hex() == "ab4f496bfb2a530b219ff33031fe06b0"


def test_the_integrity_check_is_the_keyed_md2_of_the_caller_the_time_and_the_device(cuda, lib):
    """HMAC-MD2 under a fixed key of (driver version, check version, process, thread, the CUDART_INTERFACE and
    INTEGRITY_CHECK tables, the check's own function, the time) and each device's UUID and PCI location; the
    runtime refuses a driver whose answer differs (cudaErrorSoftwareValidityNotEstablished)."""
    check = _slot(lib, "INTEGRITY_CHECK", 1, c_int, c_uint, c_uint64, ctypes.POINTER(c_uint64 * 2))
    out = (c_uint64 * 2)()
    assert check(13000, 5, byref(out)) == SUCCESS and list(out) == [0x3341181C03CB675C, 0x8ED383AA1F4CD1E8]
    assert check(13001, 5, byref(out)) == SUCCESS and list(out) == [0x1841181C03CB675C, 0x8ED383AA1F4CD1E8]
    got = []
    for run in range(2):  # the same thread asks twice: the same answer (nothing random is hashed)
        assert check(13002, 1_700_000_000, byref(out)) == SUCCESS
        got.append(bytes(out))
    assert got[0] == got[1]
    version, uuid = c_int(), ctypes.create_string_buffer(16)
    assert lib.cuDriverGetVersion(byref(version)) == SUCCESS and lib.cuDeviceGetUuid_v2(uuid, 0) == SUCCESS
    pci = []
    for attr in (50, 33, 34):
        v = c_int()
        assert lib.cuDeviceGetAttribute(byref(v), attr, 0) == SUCCESS
        pci.append(v.value)
    cudart, integrity = _table(lib, "CUDART_INTERFACE"), _table(lib, "INTEGRITY_CHECK")
    thread = ctypes.CDLL(None).pthread_self
    thread.restype = ctypes.c_ulong
    message = struct.pack("<IIIIQQQQ", version.value, 13002, os.getpid(), thread() & 0xFFFFFFFF,
                          ctypes.addressof(cudart.contents), ctypes.addressof(integrity.contents), integrity[1],
                          1_700_000_000) + uuid.raw + struct.pack("<iii", *pci)
    key = bytes.fromhex("146addae53a9a752aa0841360bf55a9f")
    inner = _md2(bytes(k ^ 0x36 for k in key) + message)
    assert got[0] == _md2(bytes(k ^ 0x5C for k in key) + inner)
    assert check(13002, 1_700_000_001, byref(out)) == SUCCESS and bytes(out) != got[0]


def test_context_checks_and_the_runtime_callback_buffers(lib):
    context_check = _slot(lib, "CONTEXT_CHECKS", 2, c_int, c_void_p, ctypes.POINTER(c_uint), c_void_p)
    flag = c_uint(7)
    assert context_check(None, byref(flag), None) == SUCCESS and flag.value == 0
    for slot, words in ((2, 1024), (6, 14)):
        buffer = _slot(lib, "TOOLS_RUNTIME_CALLBACK_HOOKS", slot, None, ctypes.POINTER(c_void_p),
                       ctypes.POINTER(ctypes.c_size_t))
        p, n = c_void_p(), ctypes.c_size_t()
        buffer(byref(p), byref(n))
        assert p.value and n.value == words
        assert bytes((ctypes.c_char * (4 * words)).from_address(p.value)) == bytes(4 * words)



def test_the_tools_context_table_gives_the_current_contexts_id_as_cuctxgetid(cuda, lib):
    """TOOLS_CONTEXT (95 slots, asked for by CUDA 13.4+ runtimes): slot 4 is the current context's unique ID; its
    first argument is not read (cuBLASLt passes whatever its register held)."""
    context_id = _slot(lib, "TOOLS_CONTEXT", 4, c_int, c_void_p, ctypes.POINTER(ctypes.c_ulonglong))
    got, want = ctypes.c_ulonglong(), ctypes.c_ulonglong()
    assert lib.cuCtxGetId(c_void_p(int(cuda.ctx)), byref(want)) == SUCCESS
    for unread in (None, int(cuda.ctx), 0x20002000000000):
        got.value = 0
        assert context_id(unread, byref(got)) == SUCCESS and got.value == want.value
    no_context = []
    t = threading.Thread(target=lambda: no_context.append(context_id(None, byref(got))))
    t.start()
    t.join()
    assert no_context == [INVALID_CONTEXT]

def test_the_tools_report_slot_cublaslt_calls_succeeds_with_no_tool_attached(cuda, lib):
    """TOOLS_TLS slot 2: cuBLASLt's reports of its calls to a tool; none attaches to the fake, so it succeeds
    (refused, cuBLASLt fails every matmul: "Failed to query heuristics")."""
    report = _slot(lib, "TOOLS_TLS", 2, c_int, c_void_p, c_uint64, c_void_p, c_void_p)
    record = (c_uint64 * 8)(0, 0, 0, 0x41)
    assert report(ctypes.addressof(record), 0x41, None, None) == SUCCESS
    assert list(record) == [0, 0, 0, 0x41, 0, 0, 0, 0]  # the caller's record, untouched


def test_the_table_cublaslt_calls_without_checking_the_lookup_is_served_and_its_slots_refuse(lib):
    """{1734DC26-800D-4745-8726-C0F1E7DD8BCA}: cuBLASLt 13.1 asks for it in the heuristics of half-precision GEMMs
    (cublasLtHSHMatmulAlgoGetHeuristic, CuPy's TestMatmulFp16ComputeTypes) and calls its slot 4 whatever the lookup
    answered: refused (INVALID_VALUE, NULL), the process died of a jump through NULL+0x20. Served, its slots are
    unknown ones: NOT_SUPPORTED, which cuBLASLt checks (CUBLAS_STATUS_INTERNAL_ERROR, no crash)."""
    uuid = bytes.fromhex("1734dc26800d47458726c0f1e7dd8bca")
    table = c_void_p()
    assert lib.cuGetExportTable(byref(table), uuid) == SUCCESS and table.value
    slot4 = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p)(ctypes.cast(table, ctypes.POINTER(c_void_p))[4])
    out = (c_uint64 * 2)(0, 0)  # what cuBLASLt passes: two zeroed words of its stack
    assert slot4(ctypes.addressof(out), ctypes.addressof(out) + 8) == 801  # CUDA_ERROR_NOT_SUPPORTED
    assert list(out) == [0, 0]
    assert TABLES["UNNAMED_1734DC26"][0] == uuid  # named in export_tables.h, so a trace names it alike


# ---- compressed fatbin entries ----

def _image_ptx(lib, image: bytes) -> tuple[int, str]:
    ptx, log = c_void_p(), ctypes.create_string_buffer(1024)
    rc = lib.ironaccel_fake_image_ptx(image, len(image), byref(ptx), log, len(log))
    if rc:
        return rc, log.value.decode()
    text = ctypes.string_at(ptx.value).decode()
    ctypes.CDLL(None).free(ptx)
    return rc, text


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_compressed_fatbin_entry_reads_as_the_ptx_it_holds_and_runs(cuda, lib, codec):
    image = (FATBINS / f"scale.{codec}.fatbin").read_bytes()
    assert struct.unpack_from("<Q", image, 16 + 40)[0] & {"lz4": 0x2000, "zstd": 0x8000}[codec]
    rc, ptx = _image_ptx(lib, image)
    assert rc == SUCCESS, ptx
    assert ptx == _image_ptx(lib, (FATBINS / "scale.plain.fatbin").read_bytes())[1]
    assert ".target sm_90" in ptx and ".entry scale" in ptx
    f = cuda.ok(cuda.d.cuModuleGetFunction(cuda.ok(cuda.d.cuModuleLoadData(image)), b"scale"))
    x = np.arange(256, dtype=np.float32)
    px, py = cuda.upload(x), cuda.alloc(x.nbytes)
    cuda.launch(f, (4,), (64,), py, px, np.uint32(256))
    np.testing.assert_array_equal(cuda.download(py, x), 2 * x + 1)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_corrupt_compressed_entry_is_an_invalid_image_naming_the_codec(cuda, lib, codec):
    image = bytearray((FATBINS / f"scale.{codec}.fatbin").read_bytes())
    header = struct.unpack_from("<I", image, 16 + 4)[0]
    image[16 + header:16 + header + 24] = b"\xff" * 24
    rc, log = _image_ptx(lib, bytes(image))
    assert rc == INVALID_IMAGE and "does not decompress" in log and {"lz4": "LZ4", "zstd": "zstd"}[codec] in log, log
    struct.pack_into("<Q", image, 16 + 56, 1 << 40)  # an impossible uncompressed size
    rc, log = _image_ptx(lib, bytes(image))
    assert rc == INVALID_IMAGE and "impossible sizes" in log, log


def _cupy_fatbins():
    spec = importlib.util.find_spec("cupy")
    if spec is None or spec.origin is None:
        return []
    found = []
    for so in sorted(Path(spec.origin).parent.rglob("*.so")):
        data = so.read_bytes()
        if b"\x50\xed\x55\xba" not in data:  # the fatbin magic
            continue
        shoff, = struct.unpack_from("<Q", data, 0x28)
        size, count, names = struct.unpack_from("<HHH", data, 0x3A)
        table = struct.unpack_from("<IIQQQQ", data, shoff + names * size)[4]
        for i in range(count):
            name, _, _, _, off, length = struct.unpack_from("<IIQQQQ", data, shoff + i * size)
            if data[table + name:data.index(b"\0", table + name)] == b".nv_fatbin":
                found.append((so.name, data[off:off + length]))
    return found


def test_the_ptx_in_cupys_own_fatbins_is_read(cuda, lib):
    """CuPy's prebuilt kernels (CUB, Thrust, cuRAND) ship zstd-compressed PTX for compute_120 only (beside
    machine code for sm_75 to sm_120): the fake reads it."""
    fatbins = _cupy_fatbins()
    if not fatbins:
        pytest.skip("CuPy is not installed (pip install cupy-cuda13x)")
    for name, fatbin in fatbins:
        rc, ptx = _image_ptx(lib, fatbin)
        assert rc == SUCCESS, f"{name}: {ptx}"
        assert re.search(r"^\.version \d+\.\d+", ptx, re.M), name
        assert re.search(r"^\.target sm_\d+", ptx, re.M), name


#: k(u32 *out): out[0] = 7, as PTX for the given target
def _store_seven(target: str) -> bytes:
    return ptx_text(params=".param .u64 out", target=target, body="""
    ld.param.u64 %rd1, [out]; cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, 7; st.global.u32 [%rd2], %r1;
    ret;""").encode()


def test_newer_ptx_stands_in_only_for_machine_code_a_real_sm_90_would_run(cuda):
    """A fatbin with sm_90 machine code and PTX for compute_120 only (CuPy's CUB and Thrust kernels) runs on a real
    H200 (the machine code): the fake runs the compute_120 PTX in its place, and reports that PTX's version (CUB
    picks its tuning policy by it: the policy the PTX was compiled with). Without sm_90 machine code the newer PTX
    is refused, as on a real sm_90, and so is such PTX given as text."""
    d = cuda.d
    sass = b"\x7fELF machine code"
    image = pack_fatbin((2, 80, sass, 0), (2, 90, sass, 0), (2, 120, sass, 0), (1, 120, _store_seven("sm_120"), 0))
    f = cuda.ok(d.cuModuleGetFunction(cuda.ok(d.cuModuleLoadData(image)), b"k"))
    out = cuda.alloc(4)
    cuda.launch(f, (1,), (1,), out)
    assert cuda.download(out, np.zeros(1, np.uint32))[0] == 7
    attr = d.CUfunction_attribute
    assert cuda.ok(d.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_PTX_VERSION, f)) == 120
    assert cuda.ok(d.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_BINARY_VERSION, f)) == 90
    for refused in (pack_fatbin((2, 80, sass, 0), (2, 120, sass, 0), (1, 120, _store_seven("sm_120"), 0)),
                    _store_seven("sm_120") + b"\0"):
        assert cuda.err(d.cuModuleLoadData(refused)) == d.CUresult.CUDA_ERROR_INVALID_PTX
    f80 = cuda.ok(d.cuModuleGetFunction(cuda.ok(d.cuModuleLoadData(_store_seven("sm_80") + b"\0")), b"k"))
    assert cuda.ok(d.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_PTX_VERSION, f80)) == 80


# ---- real runtime programs on the fake ----

def _run_logged(cmd, tmp_path, **env):
    log = tmp_path / "fake.log"
    child = fakes.child_env()
    child.update(IRONACCEL_FAKE_LOG=str(log), **env)
    proc = subprocess.run(cmd, env=child, capture_output=True, text=True, timeout=600)
    return proc, log.read_text() if log.exists() else ""


def _calls(log: str) -> list[tuple[str, ...]]:
    """The lookups and slot calls of a trace: ("export_table", name or UUID, result), ("call", table, slot,
    result); the tracer's arguments and a void slot's result say nothing comparable."""
    out = []
    for line in log.splitlines():
        if m := re.match(r"export_table (\{[0-9A-F-]+\}) (\S+) -> (-?\d+)", line):
            out.append(("export_table", m[2] if m[2] != "<unknown>" else m[1], m[3]))
        elif m := re.match(r"call (\S+)\[(\d+)\]\(.*\) -> (\S+)", line):
            out.append(("call", m[1], m[2], m[3]))
    return out


#: A child that looks up UNNAMED_69A28E9F and calls slot 24 (one the H200's PyTorch trace shows answered with 0)
#: and slot 3 (one no trace shows) with arguments 1..6; prints both results.
_SLOTS_CHILD = f"""
import ctypes
lib = ctypes.CDLL("libcuda.so.1")
assert lib.cuInit(0) == 0
table = ctypes.c_void_p()
assert lib.cuGetExportTable(ctypes.byref(table), {TABLES["UNNAMED_69A28E9F"][0]!r}) == 0
slots = ctypes.cast(table, ctypes.POINTER(ctypes.c_void_p))
call = lambda n: ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_uint64] * 6)(slots[n])(1, 2, 3, 4, 5, 6)
print(call(24), call(3))
"""


def test_slots_of_a_table_pytorch_asks_for_answer_as_traced_and_the_rest_refuse_with_a_logged_call(tmp_path):
    """UNNAMED_69A28E9F (34 slots, asked for by PyTorch on the H200): a slot the real driver's trace shows
    answers 0, as there; any other is NOT_SUPPORTED; both are logged with their table, slot and arguments."""
    proc, log = _run_logged([sys.executable, "-c", _SLOTS_CHILD], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "801"]  # 801: CUDA_ERROR_NOT_SUPPORTED
    assert "call UNNAMED_69A28E9F[24](0x1, 0x2, 0x3, 0x4, 0x5, 0x6) -> 0" in log, log
    assert "call UNNAMED_69A28E9F[3](0x1, 0x2, 0x3, 0x4, 0x5, 0x6) -> 801" in log, log
    assert "slot 3 of export table UNNAMED_69A28E9F" in proc.stderr



#: cuda.bindings' runtime (its own static libcudart, CUDA 13.4+ in cuda-bindings 13.4+) on a context made by
#: cuCtxCreate, as cuda.bindings' tests use it, and then on the primary context: a round trip through each.
_CUDA_BINDINGS_RUNTIME_CHILD = """
import numpy as np
from cuda.bindings import driver, runtime
def ok(result):
    assert result[0] in (driver.CUresult.CUDA_SUCCESS, runtime.cudaError_t.cudaSuccess), result
    return result[1] if len(result) > 1 else None
ok(driver.cuInit(0))
ctx = ok(driver.cuCtxCreate(None, 0, 0))
for where in ("cuCtxCreate", "primary"):
    if where == "primary":
        ok(driver.cuCtxDestroy(ctx))
        ok(runtime.cudaSetDevice(0))
    x, y = np.arange(16, dtype=np.int32), np.zeros(16, dtype=np.int32)
    p = ok(runtime.cudaMalloc(x.nbytes))
    ok(runtime.cudaMemcpy(p, x.ctypes.data, x.nbytes, runtime.cudaMemcpyKind.cudaMemcpyHostToDevice))
    ok(runtime.cudaMemcpy(y.ctypes.data, p, y.nbytes, runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost))
    ok(runtime.cudaFree(p))
    assert (x == y).all()
    print(where, "ok")
"""


def test_the_cuda_bindings_runtime_runs_on_the_fake(tmp_path):
    """CUDA 13.4+ runtimes ask for TOOLS_CONTEXT and, refused, answer every call cudaErrorInvalidValue."""
    pytest.importorskip("cuda.bindings.runtime")
    proc, log = _run_logged([sys.executable, "-c", _CUDA_BINDINGS_RUNTIME_CHILD], tmp_path)
    assert proc.returncode == 0 and proc.stdout.split() == ["cuCtxCreate", "ok", "primary", "ok"], \
        proc.stdout + proc.stderr
    assert ("export_table", "TOOLS_CONTEXT", "0") in _calls(log), log

def _needs_cupy():
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("CuPy is not installed (pip install cupy-cuda13x)")


@pytest.mark.parametrize("accelerators", ["cub", ""])  # CuPy's default (CUB's prebuilt kernels), and off
def test_cupy_starts_and_computes_on_the_fake(tmp_path, accelerators):
    _needs_cupy()
    proc, log = _run_logged([sys.executable, str(TOOLS / "cupy_smoke.py")], tmp_path, CUPY_ACCELERATORS=accelerators)
    assert proc.returncode == 0 and "cupy smoke: ok" in proc.stdout, proc.stdout + proc.stderr
    calls = _calls(log)
    for table in ("CUDART_INTERFACE", "CONTEXT_LOCAL_STORAGE", "INTEGRITY_CHECK", "CONTEXT_CHECKS"):
        assert ("export_table", table, "0") in calls, log
    assert ("call", "INTEGRITY_CHECK", "1", "0") in calls and ("call", "CONTEXT_LOCAL_STORAGE", "0", "0") in calls


def _nvcc():
    nvcc = shutil.which("nvcc") or next((str(p) for p in Path("/usr/local").glob("cuda*/bin/nvcc")), None)
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    return nvcc


@pytest.fixture(scope="module")
def runtime_program(tmp_path_factory):
    out = tmp_path_factory.mktemp("runtime") / "runtime_smoke"
    # nvcc is built without the sanitizer runtime a sanitized test run preloads: it gets its own environment
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    subprocess.run([_nvcc(), "-gencode", "arch=compute_90,code=compute_90", "-o", str(out),
                    str(TOOLS / "runtime_smoke.cu")], check=True, capture_output=True, timeout=600, env=env)
    return out


def test_an_nvcc_built_runtime_program_runs_on_the_fake(runtime_program, tmp_path):
    proc, log = _run_logged([str(runtime_program)], tmp_path)
    assert proc.returncode == 0 and "runtime smoke: ok" in proc.stdout, proc.stdout + proc.stderr
    assert "sm_90" in proc.stdout
    assert ("call", "CUDART_INTERFACE", "2", "0") in _calls(log)


def _tracer() -> Path:
    """tools/export_trace.so, built as trace_h200.sh builds it."""
    return cbuild.build("exporttrace", "export_trace.so", [TOOLS / "export_trace.c", TOOLS.parent / "export_tables.h"],
                        ("-std=gnu11", "-O2", "-fPIC", "-shared"), ("-ldl", "-lpthread"))


def test_the_tracer_sees_what_the_fake_logs(runtime_program, tmp_path):
    """tools/export_trace.so, preloaded in front of the fake, logs the same lookups and slot calls the fake
    logs itself (but INTEGRITY_CHECK's, which it does not wrap): so its traces of the real driver compare."""
    tracer = _tracer()
    trace = tmp_path / "trace.log"
    env = fakes.child_env()
    proc, log = _run_logged([str(runtime_program)], tmp_path, IRONACCEL_EXPORT_TRACE=str(trace),
                            LD_PRELOAD=":".join(filter(None, [env.get("LD_PRELOAD"), str(tracer)])))  # a sanitizer runtime stays first
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fake = [c[:3] if c[-1] == "void" else c for c in _calls(log) if c[1] != "INTEGRITY_CHECK" or c[0] != "call"]
    traced = [c[:3] if c[:3] in {f[:3] for f in fake if len(f) == 3} else c for c in _calls(trace.read_text())]
    assert fake and fake == traced


#: tests/fakes/tracer: a stand-in libcuda.so.1 serving tables the tracer does not know, and a program calling them
TRACER_TESTS = Path(__file__).resolve().parent / "tracer"


def _run_on_stand_in_driver(tmp_path, traced: bool):
    """tracer/caller.c on tracer/driver.c (a libcuda.so.1 linked -Bsymbolic, as a real driver binds its own
    symbols), with the tracer preloaded or not: (process, trace)."""
    driver = cbuild.build("tracerdriver", "libcuda.so.1", [TRACER_TESTS / "driver.c"],
                          ("-std=gnu11", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wl,-Bsymbolic",
                           "-Wl,-soname,libcuda.so.1"))
    caller = cbuild.build("tracercaller", "caller", [TRACER_TESTS / "caller.c"], ("-std=gnu11", "-O2"), ("-ldl",))
    trace = tmp_path / "trace.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("IRONACCEL_")}
    env.update(LD_LIBRARY_PATH=str(driver.parent), IRONACCEL_EXPORT_TRACE=str(trace))
    if traced:  # a sanitizer runtime stays first
        env["LD_PRELOAD"] = ":".join(filter(None, [env.get("LD_PRELOAD"), str(_tracer())]))
    proc = subprocess.run([str(caller)], env=env, capture_output=True, text=True, timeout=120)
    return proc, trace.read_text() if trace.exists() else ""


NVRTC_CACHE = "{DA9151D3-3AE6-CC41-A5C0-4F26D533E328}"
#: Tables a real driver gave a traced program that the fake refuses, each for the reason export_tables.h gives.
REFUSED_ON_PURPOSE = {NVRTC_CACHE}


def test_the_tracer_forwards_every_argument_of_a_slot_it_wraps(tmp_path):
    """A table the tracer does not know but whose size it states is wrapped, and each slot still gets every
    argument and gives back its whole result: nine integer arguments (three on the stack, as NVRTC 13 calls slot
    1 of {DA9151D3-...}, which killed CuPy under the first tracer on the H200), floating-point ones and a double
    result, a 16-byte struct result, a variadic call; a slot holding data is not replaced by a trampoline, and
    the table's read-only page is read-only again after the patch."""
    plain, _ = _run_on_stand_in_driver(tmp_path, traced=False)
    assert plain.returncode == 0 and "caller: ok" in plain.stdout, plain.stdout + plain.stderr
    proc, trace = _run_on_stand_in_driver(tmp_path, traced=True)
    assert proc.returncode == 0 and "caller: ok" in proc.stdout, proc.stdout + proc.stderr + trace
    calls = _calls(trace)
    assert calls[:1] == [("export_table", NVRTC_CACHE, "0")], trace
    assert f"note {NVRTC_CACHE}: 7 slots (slot 0: 56 bytes)" in trace
    slots = [c[2:] for c in calls if c[:2] == ("call", NVRTC_CACHE)]
    # each route calls slots 1-4 and 6 once: the results as the slots gave them (a double's rax is not one)
    assert [s[0] for s in slots] == ["1", "2", "3", "4", "6"] * 2
    assert slots[0] == ("1", "987654321") and slots[2] == ("3", "21") and slots[4] == ("6", "42")


def test_the_tracer_sees_lookups_made_through_cuGetProcAddress(tmp_path):
    """The CUDA runtime dlsyms only cuGetProcAddress_v2, asks it for cuGetProcAddress and resolves everything
    else through what that gave: a real driver (which binds its own symbols) gives its own cuGetExportTable, so
    the tracer must hand out traced cuGetProcAddress functions to see the runtime's lookups at all (the first
    tracer's H200 traces of an nvcc-built program were empty, and PyTorch's and CuPy's lacked every runtime
    lookup). A table of no stated size is looked up and logged but not wrapped."""
    proc, trace = _run_on_stand_in_driver(tmp_path, traced=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("export_table", "UNNAMED_F8CFF951", "0") in _calls(trace), trace
    assert ("export_table", "{0BADC0DE-0001-0203-0405-060708090A0B}", "0") in _calls(trace), trace
    assert "note {0BADC0DE-0001-0203-0405-060708090A0B}: its slots are not traced (length unknown)" in trace


def test_the_real_drivers_traces_replay_on_the_fake(fake):
    """Every table a real driver gave a traced program, and every slot the program called through it, exists
    in the fake (fakes/cuda/traces/*.log from tools/trace_h200.sh), but those refused on purpose, which the fake
    does refuse (INVALID_VALUE)."""
    traces = sorted(TRACES.glob("*.log"))
    if not traces:
        pytest.skip("no real-driver traces committed yet: run fakes/cuda/tools/trace_h200.sh on the H200 "
                    "and commit its *.log files under fakes/cuda/traces/")
    implemented = fake.lib.ironaccel_fake_export_slot_implemented
    implemented.argtypes = [ctypes.c_char_p, c_int]
    missing = []
    for path in traces:
        for call in _calls(path.read_text()):
            table = _UUID_NAMES.get(call[1], call[1])  # a table the tracer did not know is named by its UUID
            if table in REFUSED_ON_PURPOSE:
                continue
            if call[0] == "export_table" and call[2] == "0" and table not in TABLES:
                missing.append(f"{path.name}: table {call[1]}")
            elif call[0] == "call" and not implemented(table.encode(), int(call[2])):
                missing.append(f"{path.name}: {call[1]}[{call[2]}]")
    assert not missing, sorted(set(missing))
    for uuid in REFUSED_ON_PURPOSE:
        table = ctypes.c_void_p()
        assert fake.lib.cuGetExportTable(ctypes.byref(table), bytes.fromhex(uuid.strip("{}").replace("-", ""))) == 1
