"""glslangValidator, the reference GLSL front end: the Vulkan backend's GLSL compiler and the OpenGL backend's
preprocessor check. Run with a time limit, because a few lines of macros (each defined as two of the one before)
make any GLSL front end expand without end: past ``COMPILE_TIME_LIMIT_S`` the compile is a CompileError."""

from __future__ import annotations

import shutil
import subprocess

from .errors import CompileError, NotAvailable

GLSLANG = "glslangValidator"
COMPILE_TIME_LIMIT_S = 30.0  # normal kernels take milliseconds


def tool() -> str | None:
    """The glslangValidator on PATH, or None."""
    return shutil.which(GLSLANG)


def run(lang: str, args: list[str], source: str | None = None) -> subprocess.CompletedProcess[str]:
    """glslangValidator ``args`` (with ``source`` on stdin: its output is not kept, only its messages);
    NotAvailable without it, CompileError (naming Device.compile) past the limit."""
    found = tool()
    if found is None:
        raise NotAvailable("vulkan" if lang == "glsl" else "opengl", GLSLANG,
                           "not found on PATH: apt-get install glslang-tools")
    try:
        if source is None:
            return subprocess.run([found, *args], capture_output=True, text=True, timeout=COMPILE_TIME_LIMIT_S)
        # --stdin before the stage: after it, glslangValidator stops at once with a usage error, expanding nothing
        return subprocess.run([found, "--stdin", *args], input=source, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, encoding="utf-8", timeout=COMPILE_TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        raise CompileError("Device.compile", lang, f"{GLSLANG} ran past {COMPILE_TIME_LIMIT_S:g} s and was stopped "
                                                   "(a macro that expands without end?)") from None


def check_expansion(lang: str, source: str) -> None:
    """For a compiler that cannot be stopped (a GL driver's, in this process): the source's macros expand
    within the time limit, checked by preprocessing it with glslangValidator first. Only a source that
    defines macros pays for it; without glslangValidator there is no check (and no limit)."""
    if "#" in source and "define" in source and tool() is not None:
        run(lang, ["-E", "-S", "comp"], source)
