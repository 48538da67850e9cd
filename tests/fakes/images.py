"""Driver images for the fake's tests, built byte by byte: PTX modules (one kernel, printf calls, call trees) and
the fatbin and ELF containers that carry them (layouts as cuobjdump shows them)."""

from __future__ import annotations

import struct


def ptx(body: str = "ret;", params: str = "", decls: str = "", target: str = "sm_90") -> str:
    """A module with one kernel k(params) whose body declares a few registers, then body."""
    return (f".version 8.0\n.target {target}\n.address_size 64\n{decls}\n.visible .entry k({params})\n{{\n"
            f".reg .pred %p<2>;\n.reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n{body}\n}}\n")


VPRINTF = ".extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);"


def printf_ptx(fmt: bytes) -> str:
    """k(u64 a, u64 b): printf(fmt, a, b), as NVRTC writes a printf call."""
    data = ", ".join(str(b) for b in fmt + b"\0")
    decls = f"{VPRINTF}\n.global .align 1 .b8 fmt[{len(fmt) + 1}] = {{{data}}};"
    return ptx(params=".param .u64 a, .param .u64 b", decls=decls, body="""
    .local .align 16 .b8 depot[16];
    .reg .b64 %SP;
    mov.u64 %rd1, depot; cvta.local.u64 %SP, %rd1;
    ld.param.u64 %rd2, [a]; ld.param.u64 %rd3, [b];
    st.local.v2.u64 [%rd1], {%rd2, %rd3};
    mov.u64 %rd4, fmt; cvta.global.u64 %rd5, %rd4;
    {
    .param .b64 param0; st.param.b64 [param0+0], %rd5;
    .param .b64 param1; st.param.b64 [param1+0], %SP;
    .param .b32 retval0;
    call.uni (retval0), vprintf, (param0, param1);
    }
    ret;""")


def calls_ptx(levels: int, fanout: int) -> str:
    """A loop-free kernel whose calls multiply: each of `levels` functions calls the next `fanout` times
    (fanout ** levels calls, with no back-edge anywhere: every callee is defined after its caller)."""
    protos = "\n".join(f".func f{i}();" for i in range(levels))
    calls = lambda i: "\n".join(f"call.uni f{i};" for _ in range(fanout))  # noqa: E731
    funcs = "\n".join(f".func f{i}()\n{{\n{calls(i + 1) if i + 1 < levels else ''}\nret;\n}}" for i in range(levels))
    return ptx(decls=protos, body=calls(0) + "\nret;") + funcs


def pack_fatbin(*entries):
    """A fatbin of (kind, arch, payload, flags) entries: kind 1 PTX, 2 ELF (layout as cuobjdump shows it)."""
    body = b""
    for kind, arch, payload, flags in entries:
        padded = payload + b"\0" * (-len(payload) % 8)
        body += struct.pack("<HHIQIIHHIIIQQQ", kind, 0x0101, 64, len(padded), 0, 0, 0, 9, arch, 0, 0, flags, 0, 0)
        body += padded
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def pack_elf(sections, machine=190, flags=0x5A04, abi=(0x41, 8)):
    """A minimal ELF64 file with the given (name, bytes) sections; abi: the OS/ABI byte and ABI version of CUDA
    12.8+ cubins (whose flags hold the SM in bits 8-15; (0x33, 7) before, in bits 0-7)."""
    names = b"\0.shstrtab\0" + b"".join(name.encode() + b"\0" for name, _ in sections)
    blobs, offsets, offset = [names] + [data for _, data in sections], [], 64
    for blob in blobs:
        offsets.append(offset)
        offset += len(blob) + (-len(blob) % 8)
    image = bytearray(b"\x7fELF" + bytes([2, 1, 1, *abi]) + bytes(7))
    image += struct.pack("<HHIQQQIHHHHHH", 1, machine, 1, 0, 0, offset, flags, 64, 0, 0, 64, len(blobs) + 1, 1)
    for blob in blobs:
        image += blob + bytes(-len(blob) % 8)
    image += bytes(64)  # the null section
    name_at = 1
    for blob, at in zip(blobs, offsets):
        image += struct.pack("<IIQQQQIIQQ", name_at, 3 if blob is names else 1, 0, 0, at, len(blob), 0, 0, 8, 0)
        name_at += len(b".shstrtab\0") if blob is names else len(sections[blobs.index(blob) - 1][0]) + 1
    return bytes(image)
