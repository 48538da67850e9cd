"""The C floor: ``cfloor.c``, a small C program making the raw floor's CUDA driver calls, built with the system
C compiler (cached by source hash, as the fake libcuda is) and run beside the bench as a child process.

It is timed interleaved with the Python implementations: each of its samples is one request through a
pipe ("CASE COUNT"), answered with the nanoseconds the program measured around the driver calls, so the
pipe itself is not in the figure. It loads ``libcuda.so.1`` with dlopen — or the fake's path on cuda/fake,
so it runs (simulated) without a GPU too.
"""

from __future__ import annotations

import select
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ... import cbuild, fakes
from ...errors import NotAvailable, Timeout
from .cases import C_FLOOR, Impl

SOURCE = Path(__file__).with_name("cfloor.c")
CFLAGS = ("-std=gnu11", "-O2", "-Wall")
REPLY_TIMEOUT_S = 120.0  # a batch is calibrated to milliseconds; a silent program this long is stuck


def build() -> Path:
    """The compiled program, built once per source hash; safe to call from parallel processes."""
    return cbuild.build("cfloor", "cfloor", [SOURCE], CFLAGS, ("-ldl",))


def driver_library(info: Any) -> str:
    """What the program dlopens: the fake's libcuda.so.1 on the fake (by path), else the system's driver."""
    return str(fakes.build()) if info.driver == fakes.IDENTITY else "libcuda.so.1"


class CFloor:
    """The running program: ``impls()`` are its cases as Impls; ``close()`` ends it."""

    def __init__(self, library: str, image: str | bytes | None, sizes: tuple[int, ...]):
        program = build()
        self._dir = tempfile.TemporaryDirectory(prefix="ironaccel-cfloor-")
        folder = Path(self._dir.name)
        image_file = "-"
        if image is not None:
            path = folder / "kernels.image"
            path.write_bytes(image.encode() if isinstance(image, str) else image)
            image_file = str(path)
        self._stderr = open(folder / "stderr", "w+", encoding="utf-8")
        self._proc = subprocess.Popen([str(program), library, image_file, *(str(n) for n in sizes)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                      text=True, bufsize=1)
        try:
            ready = self._reply("C floor start")
            if not ready.startswith("ready"):
                raise NotAvailable("cuda", C_FLOOR, f"the program did not start: {ready or self._errors()}")
        except BaseException:
            self.close()
            raise
        self.cases = ready.split()[1:]

    def _errors(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().strip() or f"exit status {self._proc.poll()}"

    def _reply(self, op: str) -> str:
        """One line from the program, within REPLY_TIMEOUT_S (each reply is exactly one line, so nothing
        waits in the pipe's buffer while select looks at the descriptor)."""
        out = self._proc.stdout
        assert out is not None
        ready, _, _ = select.select([out], [], [], REPLY_TIMEOUT_S)
        if not ready:
            self._proc.kill()
            raise Timeout(op, REPLY_TIMEOUT_S, "the C floor program stopped answering")
        return out.readline().strip()

    def impl(self, case: str) -> Impl:
        send = self._proc.stdin

        def run(n: int) -> int:
            assert send is not None
            send.write(f"{case} {n}\n")
            send.flush()
            reply = self._reply(f"C floor {case}")
            if not reply:
                raise RuntimeError(f"the C floor program ended: {self._errors()}")
            if reply.startswith("error"):
                raise RuntimeError(f"C floor {case}: {reply}")
            return int(reply)

        return run

    def impls(self) -> dict[str, Impl]:
        return {case: self.impl(case) for case in self.cases}

    def close(self) -> None:
        """End of input ends the program (it frees what it holds first)."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._stderr.close()
        self._dir.cleanup()
