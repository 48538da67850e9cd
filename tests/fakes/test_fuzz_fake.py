"""A seeded fuzz of the fake's front end (issue 31): real NVRTC PTX of the conformance kernels, and the fatbins
and ELF files that carry it, mutated (truncation, byte flips, huge numbers, spliced directives, field
overwrites) and fed to the ASan/UBSan build of the fake through cuModuleLoadData, cuModuleLoad,
cuLinkAddData and, for a quarter of the PTX, a launch. Any sanitizer report, crash or hang fails the test,
naming the case (seed and index: ``IRONACCEL_FAKE_FUZZ_SEED``/``_CASES`` replay it); which CUresult a
mutant gets is not checked, only that the fake answers with one.

It runs in the normal ``pytest tests`` run (marked ``fuzz``: ``-m "not fuzz"`` leaves it out). The cases run
in a child process (fakeprobe.py) restarted after each death; it stops at a time budget
(``IRONACCEL_FAKE_FUZZ_BUDGET_S``, default 240 s) and then fails unless all cases ran, so a run that gets
slow is seen rather than cut short in silence.
"""

from __future__ import annotations

import base64
import os
import random
import re
import struct
import time
from pathlib import Path

import pytest

from ironaccel import fakes
from fakeprobe import Probe, ProbeDied
from images import calls_ptx, pack_elf, pack_fatbin, printf_ptx

pytestmark = pytest.mark.fuzz

SEED = int(os.environ.get("IRONACCEL_FAKE_FUZZ_SEED", "31"))
CASES = int(os.environ.get("IRONACCEL_FAKE_FUZZ_CASES", "3000"))
BUDGET_S = float(os.environ.get("IRONACCEL_FAKE_FUZZ_BUDGET_S", "240"))
CASE_TIMEOUT_S = 30  # no case takes a second: the watchdog below ends every launch within 2 s
KERNELS = Path(__file__).resolve().parents[2] / "conformance" / "kernels" / "cuda"
WATCHDOG = {"IRONACCEL_FAKE_WATCHDOG_S": "2", "IRONACCEL_FAKE_WATCHDOG_INSTRUCTIONS": "2000000",
            "IRONACCEL_FAKE_CUDA_LEAKS": "off"}
CU_JIT_INPUT = {"cubin": 0, "ptx": 1, "fatbin": 2, "object": 3}

HUGE = ["0", "1", "7", "8", "31", "32", "255", "1024", "65536", "2147483647", "2147483648", "4294967295",
        "4294967296", "1099511627776", "9223372036854775807", "18446744073709551615", "18446744073709551616",
        "99999999999999999999999", "0x7fffffff", "0xffffffffffffffff", "0fFFFFFFFF", "-1"]
#: Lines spliced into PTX: directives and declarations at their limits or past them, cut ones, odd ones.
DIRECTIVES = [".pragma \"nounroll\";", ".pragma", ".alias", ".alias a, b;", ".callprototype ()_ (.param .b32 _);",
              "p: .callprototype", ".reg .b32 %q<4294967295>;", ".reg .b64 %x<1048576>;", ".local .b8 l[524288];",
              ".local .align 65536 .b8 l[16];", ".shared .align 2147483648 .b8 s[8];", ".shared .b8 s[49152];",
              ".shared .b8 s[4294967040];", ".global .b8 g[4294967296];", ".global .b8 g[1099511627776];",
              ".global .u32 g[2] = {1, 2, 3, 4};", ".const .b8 c[] = {1};", ".extern .shared .align 16 .b8 d[];",
              ".maxntid 4294967295;", ".reqntid 1024, 1024;", ".target sm_99999999999999999999", ".target banana",
              ".version 99999999999.0", ".address_size 32", ".entry", ".func", "{", "}", ";", "(", ")", "[", "]",
              "ret;", "exit;", "bra.uni $L__BB0_1;", "$L__BB0_1:", "trap;", "bar.sync 0;", "call.uni vprintf, ();",
              "ld.param.u64 %rd1, [%rd1];", "st.global.u32 [0], 1;", "ld.shared.u32 %r1, [4294967295];",
              "ld.param.u32 %r1, [-8];", "mov.u64 %rd1, 18446744073709551615;", ".section .debug_info {"]


def _nvrtc_ptx(source: str) -> bytes:
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"fuzz.cu", 0, [], [])
    opts = [b"--gpu-architecture=compute_90"]
    if nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise AssertionError(f"NVRTC could not compile a conformance kernel:\n{source}")
    _, size = nvrtc.nvrtcGetPTXSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetPTX(prog, buf)
    nvrtc.nvrtcDestroyProgram(prog)
    return buf.rstrip(b"\0")


def _nvrtc_cubin(source: str) -> bytes:
    """Real machine code (an sm_90 cubin: ELF without PTX), for the ELF reader."""
    from cuda.bindings import nvrtc

    _, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"fuzz.cu", 0, [], [])
    opts = [b"--gpu-architecture=sm_90"]
    assert nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    _, size = nvrtc.nvrtcGetCUBINSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, buf)
    nvrtc.nvrtcDestroyProgram(prog)
    return buf


def seed_corpus() -> tuple[list[bytes], list[bytes]]:
    """(PTX texts, images): each conformance kernel's NVRTC PTX, plus a printf call and a call chain; each
    PTX in a fatbin, in an ELF .nv_fatbin and in an ELF .nv_debug_ptx_txt; a real SASS cubin."""
    pytest.importorskip("cuda.bindings")
    sources = sorted(KERNELS.glob("*.cu"))
    texts = [_nvrtc_ptx(p.read_text()) for p in sources]
    texts += [printf_ptx(b"%d %.3f %s %p\n").encode(), calls_ptx(3, 2).encode()]
    images = [_nvrtc_cubin(sources[0].read_text())]
    for text in texts:
        fatbin = pack_fatbin((1, 90, text, 0))
        images += [fatbin, pack_elf([(".nv_fatbin", fatbin)]), pack_elf([(".nv_debug_ptx_txt", text + b"\0")])]
    return texts, images


# ---- mutators: each takes the bytes and the case's random source ----

def truncate(b: bytes, r: random.Random) -> bytes:
    """Cut anywhere, or just after a directive that reads up to a terminator."""
    marks = [m.end() for m in re.finditer(rb"\.pragma|\.alias|\.callprototype|\.param|\.reg|\{|=|\(", b)]
    at = r.choice(marks) + r.randrange(0, 8) if marks and r.random() < 0.5 else r.randrange(0, len(b) + 1)
    return b[:at]


def flip(b: bytes, r: random.Random) -> bytes:
    out = bytearray(b)
    for _ in range(r.randint(1, 8)):
        if out:
            out[r.randrange(len(out))] = r.randrange(256) if r.random() < 0.3 else r.choice(b"{}[]();,.%<>-+0123456789")
    return bytes(out)


def huge_number(b: bytes, r: random.Random) -> bytes:
    numbers = list(re.finditer(rb"(?<![\w$%])\d+(?![\w.])", b))
    if not numbers:
        return b
    m = r.choice(numbers)
    return b[:m.start()] + r.choice(HUGE).encode() + b[m.end():]


def splice(b: bytes, r: random.Random, others: list[bytes]) -> bytes:
    """A hostile directive, or a line of another seed, between two lines."""
    lines = b.split(b"\n")
    line = r.choice(DIRECTIVES).encode() if r.random() < 0.7 else r.choice(r.choice(others).split(b"\n"))
    lines.insert(r.randrange(len(lines) + 1), line)
    return b"\n".join(lines)


def shuffle_lines(b: bytes, r: random.Random) -> bytes:
    lines = b.split(b"\n")
    i, j = r.randrange(len(lines)), r.randrange(len(lines))
    action = r.randrange(3)
    if action == 0:
        del lines[i]
    elif action == 1:
        lines.insert(i, lines[j])
    else:
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def overwrite_field(b: bytes, r: random.Random) -> bytes:
    """An image field (2, 4 or 8 bytes, aligned, in the headers more often than not) set to an extreme."""
    if len(b) < 8:
        return b
    size = r.choice([2, 4, 8])
    limit = min(len(b), 128) if r.random() < 0.4 else len(b)
    at = r.randrange(0, (limit - size) // size + 1) * size if r.random() < 0.6 else len(b) - size - r.randrange(
        0, min(len(b) - size, 512) + 1) // size * size
    bits = 8 * size
    value = r.choice([0, 1, 64, 2**(bits - 1), 2**bits - 1, 2**bits - 64, r.randrange(2**bits)])
    out = bytearray(b)
    struct.pack_into({2: "<H", 4: "<I", 8: "<Q"}[size], out, at, value)
    return bytes(out)


def make_case(index: int, texts: list[bytes], images: list[bytes]) -> dict:
    """Case index of the run: the same seed and index give the same case."""
    r = random.Random(f"{SEED}:{index}")
    if r.random() < 0.6:
        text = r.choice(texts)
        for _ in range(r.choice([1, 1, 2, 3])):
            mutate = r.choice([truncate, flip, huge_number, huge_number, splice, splice, shuffle_lines])
            text = mutate(text, r, texts) if mutate is splice else mutate(text, r)
        how = r.random()
        if how < 0.25:
            entry = re.search(rb"\.entry\s+([\w$]+)", text)
            return {"op": "launch", "ptx": text.decode("latin-1").replace("\0", " "),
                    "kernel": entry.group(1).decode() if entry else "k", "grid": [2, 1, 1], "block": [64, 1, 1],
                    "extra": 1 << 16}
        body = base64.b64encode(text + b"\0").decode()
        if how < 0.7:
            return {"op": "load", "via": "data", "image": body}
        if how < 0.85:
            return {"op": "load", "via": "file", "image": body}
        return {"op": "link", "type": CU_JIT_INPUT["ptx"], "image": base64.b64encode(text).decode()}
    image = r.choice(images)
    for _ in range(r.choice([1, 1, 2, 4])):
        mutate = r.choice([overwrite_field, overwrite_field, overwrite_field, flip, truncate])
        image = mutate(image, r)
    if not image:
        image = b"\0"
    body = base64.b64encode(image).decode()
    if r.random() < 0.6:  # sized: every offset in it must be checked against its size
        return {"op": "link", "type": r.choice([0, 2, 3]), "image": body}
    return {"op": "load", "via": "file", "image": body}


def test_seeded_fuzz_of_ptx_and_images_is_clean_under_asan_and_ubsan(monkeypatch, record_property):
    env = fakes.sanitizer_env()
    if env is None:
        pytest.skip("the compiler has no libasan (apt-get install gcc): the ASan/UBSan build cannot load")
    texts, images = seed_corpus()
    monkeypatch.setenv("IRONACCEL_FAKE_SANITIZE", "1")
    probe = Probe(fakes.build(), {**env, **WATCHDOG})
    start, failures, ran = time.monotonic(), [], 0
    try:
        for index in range(CASES):
            if time.monotonic() - start > BUDGET_S:
                break
            case = make_case(index, texts, images)
            try:
                answer = probe.run(case, CASE_TIMEOUT_S)
                assert isinstance(answer["rc"], int)
            except ProbeDied as e:
                failures.append(f"case {index} (seed {SEED}, {case['op']} via {case.get('via', case.get('type'))}): "
                                f"the fake {e}")
                if len(failures) == 5:
                    break
            ran += 1
    finally:
        probe.close()
    elapsed = time.monotonic() - start
    record_property("fuzz_cases", ran)
    record_property("fuzz_seconds", round(elapsed, 1))
    assert not failures, "\n\n".join(failures)
    assert ran == CASES, f"only {ran} of {CASES} cases ran in the {BUDGET_S:g} s budget ({elapsed:.0f} s)"
