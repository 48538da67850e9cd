"""Hostile PTX, images, files and launch arguments against the fake (issue 31, findings 3 and 4): each input ->
the CUresult a real driver gives, never a crash, a hang or gigabytes allocated.

Every case runs in a child process (tests/fakes/fakeprobe.py) with a time limit, so a crash or a hang fails
that case instead of killing pytest; the same table runs against the plain build and the ASan/UBSan build
(fakes.SANITIZE_CFLAGS), where any sanitizer report fails the case.
"""

from __future__ import annotations

import base64
import os
import struct
import time

import pytest

from ironaccel import fakes
from fakeprobe import Probe, ProbeDied
from images import calls_ptx, pack_elf, pack_fatbin, printf_ptx, ptx

SUCCESS, INVALID_VALUE, OUT_OF_MEMORY = 0, 1, 2
INVALID_IMAGE, NO_BINARY_FOR_GPU, INVALID_PTX, FILE_NOT_FOUND = 200, 209, 218, 301
ILLEGAL_ADDRESS, LAUNCH_OUT_OF_RESOURCES, LAUNCH_TIMEOUT = 700, 701, 702
CASE_TIMEOUT_S = 60  # a case that has not answered by then hangs
CASE_SECONDS_MAX = 5  # what one case may take (the slowest, stopped by a 1 s watchdog, ~1 s): a blow-up in time
RSS_GROWTH_MAX_KB = 512 << 10  # what one case may add to the child's peak memory


def data(image: bytes | str, via: str = "data") -> dict:
    image = image.encode() + b"\0" if isinstance(image, str) else image
    return {"op": "load", "via": via, "image": base64.b64encode(image).decode()}


def link(image: bytes, kind: int) -> dict:
    return {"op": "link", "type": kind, "image": base64.b64encode(image).decode()}


def launch(text: str, args=(), grid=(1, 1, 1), block=(1, 1, 1), shared=0, env=None) -> dict:
    case = {"op": "launch", "ptx": text, "kernel": "k", "grid": list(grid), "block": list(block), "shared": shared,
            "args": [list(a) for a in args]}
    return {**case, "env": env} if env else case


CUBIN, FATBINARY, OBJECT = 0, 2, 3
SCALE = ptx(params=".param .u64 y", body="ld.param.u64 %rd1, [y]; st.global.u32 [%rd1], %r1;")
FATBIN = pack_fatbin((1, 90, SCALE.encode(), 0))
ELF = pack_elf([(".nv_fatbin", FATBIN)])
SHOFF = 0x28  # e_shoff in an ELF64 header


def patched(image: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(image)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def last_section_header(image: bytes) -> int:
    shoff, = struct.unpack_from("<Q", image, SHOFF)
    shnum, = struct.unpack_from("<H", image, 0x3C)
    return shoff + (shnum - 1) * 64


#: (name, case, expected CUresult, text the report must contain or None)
CASES = [
    # the memory checker's arithmetic (finding 3)
    ("p[-1] of a null pointer", launch(ptx("ld.param.u64 %rd1, [p]; st.global.u32 [%rd1+-4], %r1;", ".param .u64 p"),
                                       [("u64", 0)]), ILLEGAL_ADDRESS, "0xfffffffffffffffc"),
    ("generic load at 2^64-1", launch(ptx("ld.param.u64 %rd1, [p]; ld.u8 %r1, [%rd1];", ".param .u64 p"),
                                      [("u64", 2**64 - 1)]), ILLEGAL_ADDRESS, "0xffffffffffffffff"),
    ("read before the parameter buffer", launch(ptx("ld.param.u32 %r1, [p+-8]; ld.param.u64 %rd1, [p];"
                                                    "st.global.u32 [%rd1], %r1;", ".param .u64 p"),
                                                [("ptr", 64)]), ILLEGAL_ADDRESS, "param"),
    ("read past the parameter buffer", launch(ptx("ld.param.u64 %rd1, [p+8];", ".param .u64 p"),
                                              [("ptr", 64)]), ILLEGAL_ADDRESS, "param"),
    ("printf %s of a wild pointer", launch(printf_ptx(b"%s\n"), [("u64", 2**64 - 1), ("u64", 0)]),
     ILLEGAL_ADDRESS, None),
    ("printf %.999999999f", launch(printf_ptx(b"%.999999999f|%s\n"), [("u64", 0), ("u64", 0)]), SUCCESS, None),
    ("printf %.999999999d", launch(printf_ptx(b"%.999999999d\n"), [("u64", 0), ("u64", 0)]), SUCCESS, None),
    # sizes read from PTX (finding 3)
    ("4294967295 registers", data(ptx(".reg .b32 %q<4294967295>;")), INVALID_PTX, None),
    ("registers past 2^32 in sum", data(ptx(".reg .b32 %q<1048576>;\n" * 4096)), INVALID_PTX, None),
    ("4 GiB of kernel parameters", data(ptx(params=".param .align 8 .b8 p[4294967295]")), INVALID_PTX, None),
    ("parameters past the kernel limit", data(ptx(params=".param .align 8 .b8 p[40000]")), INVALID_PTX, None),
    ("4 GiB local frame", data(ptx(".local .align 8 .b8 depot[4294967295];")), INVALID_PTX, None),
    ("array size wrapping 2^64", data(ptx(".local .b8 x[4294967296][4294967296];")), INVALID_PTX, None),
    ("4 GiB of device function parameters", data(ptx(decls=".func f(.param .b8 a[4294967295])\n{\nret;\n}")),
     INVALID_PTX, None),
    # blow-ups (finding 4)
    ("4 GB .global is not zeroed by hand", data(ptx(decls=".global .align 8 .u64 g[536870912];")), SUCCESS, None),
    ("a .global of 2^32 bytes is not one byte", launch(ptx("mov.u64 %rd1, g; st.global.u32 [%rd1+4096], %r1;",
                                                          decls=".global .align 8 .b8 g[4294967296];")), SUCCESS, None),
    ("a .global larger than the device", data(ptx(decls=".global .align 8 .b8 g[1099511627776];")), OUT_OF_MEMORY,
     None),
    (".align 2^31", data(ptx(decls=".shared .align 2147483648 .b8 s[8];")), INVALID_PTX, None),
    (".align not a power of two", data(ptx(decls=".global .align 12 .b8 g[8];")), INVALID_PTX, None),
    ("4 GiB .shared", data(ptx(decls=".shared .align 4 .b8 s[4294967040];")), INVALID_PTX, None),
    ("3 GiB .shared past a signed check", launch(ptx(decls=".shared .align 4 .b8 s[3221225472];")), INVALID_PTX,
     None),
    ("sharedMemBytes 2^31", launch(ptx(), shared=2**31), INVALID_VALUE, None),
    ("sharedMemBytes 2^32-1", launch(ptx(), shared=2**32 - 1), INVALID_VALUE, None),
    (".maxntid 2^32-1", data(ptx().replace(".visible .entry k()", ".visible .entry k() .maxntid 4294967295")),
     INVALID_PTX, None),
    ("immediate past 64 bits", data(ptx("add.u32 %r1, %r1, 99999999999999999999999;")), INVALID_PTX, None),
    ("hex immediate past 64 bits", data(ptx("add.u64 %rd1, %rd1, 0x1ffffffffffffffff;")), INVALID_PTX, None),
    ("absurd .target number", data(ptx(target="sm_99999999999999999999")), INVALID_PTX, None),
    ("unknown .target", data(ptx(target="banana")), INVALID_PTX, None),
    (".target past 2^32", data(ptx(target="sm_4294967386")), INVALID_PTX, None),
    ("suffixed .target", data(ptx(target="sm_90a")), SUCCESS, None),
    # the parser at the end of the text (finding 4)
    ("EOF inside a module .pragma", data(ptx() + '.pragma "nounroll"'), INVALID_PTX, None),
    ("EOF inside .alias", data(ptx() + ".alias a, k"), INVALID_PTX, None),
    ("EOF inside a body .pragma", data(ptx('.pragma "nounroll"').rsplit("}", 1)[0].rstrip()), INVALID_PTX, None),
    ("EOF inside .callprototype", data(ptx("proto: .callprototype ()_ (.param .b32 _)").rsplit("}", 1)[0]),
     INVALID_PTX, None),
    ("EOF inside a function's .pragma", data(ptx().replace("{", '.pragma "x"', 1).split("\n.reg")[0]), INVALID_PTX,
     None),
    ("EOF after .target", data(".version 8.0\n.target"), INVALID_PTX, None),
    ("EOF inside an initializer", data(ptx(decls=".global .b32 g[2] = {1,")), INVALID_PTX, None),
    # the watchdog counts blocks and calls, not only loop back-edges (finding 4)
    ("2^31-1 loop-free blocks", launch(ptx("add.u32 %r1, %r1, 1;"), grid=(2**31 - 1, 1, 1),
                                       env={"IRONACCEL_FAKE_WATCHDOG_S": "1"}),
     LAUNCH_TIMEOUT, "IRONACCEL_FAKE_WATCHDOG_S"),
    ("loop-free calls that multiply", launch(calls_ptx(12, 8), env={"IRONACCEL_FAKE_WATCHDOG_S": "1"}),
     LAUNCH_TIMEOUT, "IRONACCEL_FAKE_WATCHDOG_S"),
    # ... and lets a kernel within its time run to the end (the clients runner sets it for every test)
    ("a short kernel under a watchdog", launch(ptx("add.u32 %r1, %r1, 1;"), env={"IRONACCEL_FAKE_WATCHDOG_S": "60"}),
     SUCCESS, None),
    # launch memory bounded
    ("a block's registers past the limit", launch(ptx(".reg .b32 %q<1000000>;"), block=(1024, 1, 1)),
     LAUNCH_OUT_OF_RESOURCES, None),
    # files (finding 4)
    ("cuModuleLoad of /dev/zero", {"op": "load", "via": "path", "path": "/dev/zero"}, FILE_NOT_FOUND, None),
    ("cuModuleLoad of a FIFO", {"op": "load", "via": "path", "path": "{fifo}"}, FILE_NOT_FOUND, None),
    ("cuModuleLoad of a directory", {"op": "load", "via": "path", "path": "/"}, FILE_NOT_FOUND, None),
    ("cuModuleLoad of a good fatbin file", data(FATBIN, "file"), SUCCESS, None),
    # images: every offset checked against the size (finding 3)
    ("ELF section headers past the end (link)", link(patched(ELF, SHOFF, "<Q", 1 << 40), CUBIN), INVALID_IMAGE,
     None),
    ("ELF section headers past the end (file)", data(patched(ELF, SHOFF, "<Q", 1 << 40), "file"), INVALID_IMAGE,
     None),
    ("ELF section past the end", link(patched(ELF, last_section_header(ELF) + 24, "<Q", 1 << 40), CUBIN),
     INVALID_IMAGE, None),
    ("ELF section size wrapping", link(patched(ELF, last_section_header(ELF) + 32, "<Q", 2**64 - 8), CUBIN),
     INVALID_IMAGE, None),
    ("ELF section name past the names", link(patched(ELF, last_section_header(ELF), "<I", 0xFFFFFFF0), CUBIN),
     NO_BINARY_FOR_GPU, None),
    ("ELF truncated to its header", link(ELF[:64], CUBIN), INVALID_IMAGE, None),
    ("ELF of 8 bytes", link(ELF[:8], OBJECT), INVALID_IMAGE, None),
    ("fatbin entries past the end", link(patched(FATBIN, 8, "<Q", 1 << 40), FATBINARY), INVALID_IMAGE, None),
    ("fatbin size wrapping", link(patched(FATBIN, 8, "<Q", 2**64 - 8), FATBINARY), INVALID_IMAGE, None),
    ("fatbin entry header past the end", link(patched(FATBIN, 16 + 4, "<I", 0xFFFFFF00), FATBINARY), INVALID_IMAGE,
     None),
    ("fatbin entry payload wrapping", link(patched(FATBIN, 16 + 8, "<Q", 2**64 - 32), FATBINARY), INVALID_IMAGE,
     None),
    ("fatbin truncated", link(FATBIN[:40], FATBINARY), INVALID_IMAGE, None),
    ("fatbin wrapper in a sized buffer", link(struct.pack("<IIQQ", 0x466243B1, 1, 0xDEAD0000, 0), FATBINARY),
     INVALID_IMAGE, None),
    ("fatbin wrapper of NULL", data(struct.pack("<IIQQ", 0x466243B1, 1, 0, 0), "fatbinary"), INVALID_IMAGE, None),
]


@pytest.fixture(scope="module", params=["plain", "sanitized"])
def probe(request, tmp_path_factory):
    """A build of the fake and a probe factory for it (a fresh child per case: a crash ends one case only)."""
    env = None
    if request.param == "sanitized":
        env = fakes.sanitizer_env()
        if env is None:
            pytest.skip("the compiler has no libasan (apt-get install gcc): the ASan/UBSan build cannot load")
    old = os.environ.get("IRONACCEL_FAKE_SANITIZE")
    os.environ["IRONACCEL_FAKE_SANITIZE"] = "1" if env else "0"
    try:
        library = fakes.build()
    finally:
        if old is None:
            os.environ.pop("IRONACCEL_FAKE_SANITIZE")
        else:
            os.environ["IRONACCEL_FAKE_SANITIZE"] = old
    fifo = tmp_path_factory.mktemp("hostile") / "fifo"
    os.mkfifo(fifo)
    return library, env, str(fifo)


@pytest.mark.parametrize("name,case,expected,report", CASES, ids=[c[0] for c in CASES])
def test_hostile_input_gets_the_drivers_error(probe, name, case, expected, report):
    library, env, fifo = probe
    case = dict(case)
    extra_env = case.pop("env", None)
    if case.get("path") == "{fifo}":
        case["path"] = fifo
    child_env = {**(env if env is not None else os.environ), **(extra_env or {})}
    p = Probe(library, child_env)
    try:
        p.run(data(ptx()), CASE_TIMEOUT_S)  # the child started and the driver initialized: then the case is timed
        start = time.monotonic()
        answer = p.run(case, CASE_TIMEOUT_S)
        seconds = time.monotonic() - start
    except ProbeDied as e:
        pytest.fail(f"{name}: the fake {e}")
    finally:
        p.close()
    assert answer["rc"] == expected, f"{name}: got {answer['rc']}, want {expected}; report: {answer['report']}"
    if report is not None:
        assert report in answer["report"], answer["report"]
    assert answer["rss_growth_kb"] < RSS_GROWTH_MAX_KB, f"{name}: the child grew by {answer['rss_growth_kb']} KiB"
    assert seconds < CASE_SECONDS_MAX, f"{name}: took {seconds:.1f} s"
