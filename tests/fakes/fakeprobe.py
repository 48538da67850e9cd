"""A child process that feeds hostile inputs to the fake libcuda, one JSON case a line on stdin, one JSON
answer a line on stdout: ``{"rc": CUresult, "report": the memcheck/launch report it made ("" for none),
"rss_growth_kb": how much it raised the process's peak memory}``.

It drives the fake through ctypes alone (no cuda.bindings, no NVRTC), so that a crash, a hang or a sanitizer
report in the fake ends this process and never the test runner; the parent (``Probe``) kills it at a time
limit and starts another. Cases:

* ``{"op": "load", "via": "data"|"fatbinary"|"file", "image": base64}``: cuModuleLoadData /
  cuModuleLoadFatBinary of the bytes, or cuModuleLoad of them written to a file;
* ``{"op": "load", "via": "path", "path": p}``: cuModuleLoad of a path as it is (a device, a FIFO);
* ``{"op": "link", "type": CUjitInputType, "image": base64}``: cuLinkAddData_v2 with its size, then
  cuLinkComplete;
* ``{"op": "launch", "ptx": text, "kernel": name, "grid": [x, y, z], "block": [x, y, z], "shared": n,
  "args": [["ptr", bytes] | ["u32", v] | ["u64", v], ...]}``: loads, allocates, launches, synchronizes;
  with ``"extra": bytes`` instead of args, the parameters are a sized ``extra`` buffer whose every 8 bytes
  point to one allocation of that size (whatever parameters a mutated kernel declares).

A case that leaves the context with a sticky error gets a fresh context for the next one.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import resource
import selectors
import subprocess
import sys
import tempfile
from pathlib import Path

c_void_pp = ctypes.POINTER(ctypes.c_void_p)
EXTRA_BYTES = 32768  # a parameter buffer as large as any kernel's parameters may be (PARAM_BYTES_MAX)


class Driver:
    def __init__(self, library: str):
        self.cu = ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
        self.cu.ironaccel_fake_last_report.restype = ctypes.c_char_p
        self.cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p, c_void_pp,
                                                                                       c_void_pp]
        self.cu.cuLinkAddData_v2.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                             ctypes.c_char_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        for name in ("cuModuleUnload", "cuLinkDestroy", "cuMemFree_v2", "cuCtxDestroy_v2"):
            getattr(self.cu, name).argtypes = [ctypes.c_void_p]
        self.cu.cuModuleGetFunction.argtypes = [c_void_pp, ctypes.c_void_p, ctypes.c_char_p]
        self.cu.cuLinkComplete.argtypes = [ctypes.c_void_p, c_void_pp, ctypes.POINTER(ctypes.c_size_t)]
        assert self.cu.cuInit(0) == 0
        self.ctx = ctypes.c_void_p()
        self._new_context()
        self.scratch = Path(tempfile.mkdtemp(prefix="fakeprobe-"))

    def _new_context(self):
        if self.ctx:
            self.cu.cuCtxDestroy_v2(self.ctx)
        assert self.cu.cuCtxCreate_v2(ctypes.byref(self.ctx), 0, 0) == 0

    def _load(self, image: bytes, via: str, path: str | None) -> int:
        mod = ctypes.c_void_p()
        buf = ctypes.create_string_buffer(image, len(image))  # exactly the bytes: no NUL added after them
        if via == "data":
            rc = self.cu.cuModuleLoadData(ctypes.byref(mod), buf)
        elif via == "fatbinary":
            rc = self.cu.cuModuleLoadFatBinary(ctypes.byref(mod), buf)
        else:
            if via == "file":
                path = str(self.scratch / "image")
                Path(path).write_bytes(image)
            rc = self.cu.cuModuleLoad(ctypes.byref(mod), path.encode())
        if rc == 0:
            self.cu.cuModuleUnload(mod)
        return rc

    def _link(self, kind: int, image: bytes) -> int:
        state = ctypes.c_void_p()
        assert self.cu.cuLinkCreate_v2(0, None, None, ctypes.byref(state)) == 0
        try:
            buf = ctypes.create_string_buffer(image, len(image))
            rc = self.cu.cuLinkAddData_v2(state, kind, buf, len(image), b"fuzz", 0, None, None)
            if rc == 0:
                out, size = ctypes.c_void_p(), ctypes.c_size_t()
                rc = self.cu.cuLinkComplete(state, ctypes.byref(out), ctypes.byref(size))
            return rc
        finally:
            self.cu.cuLinkDestroy(state)

    def _launch(self, case: dict) -> int:
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        text = case["ptx"].encode() + b"\0"
        rc = self.cu.cuModuleLoadData(ctypes.byref(mod), text)
        if rc:
            return rc
        allocations, values = [], []
        try:
            rc = self.cu.cuModuleGetFunction(ctypes.byref(fn), mod, case["kernel"].encode())
            if rc:
                return rc
            for kind, value in case.get("args", []):
                if kind == "ptr":
                    p = ctypes.c_uint64()
                    assert self.cu.cuMemAlloc_v2(ctypes.byref(p), value) == 0
                    allocations.append(p.value)
                    values.append(p)
                else:
                    values.append((ctypes.c_uint32 if kind == "u32" else ctypes.c_uint64)(value))
            params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
            extra = None
            if "extra" in case:  # any parameter list: a sized buffer whose every word points to one allocation
                p = ctypes.c_uint64()
                assert self.cu.cuMemAlloc_v2(ctypes.byref(p), case["extra"]) == 0
                allocations.append(p.value)
                buffer = (ctypes.c_uint64 * (EXTRA_BYTES // 8))(*[p.value] * (EXTRA_BYTES // 8))
                size = ctypes.c_size_t(EXTRA_BYTES)
                extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 0)
                params, values = None, values + [buffer, size]
            rc = self.cu.cuLaunchKernel(fn, *case["grid"], *case["block"], case.get("shared", 0), None,
                                        ctypes.cast(params, c_void_pp), ctypes.cast(extra, c_void_pp))
            return rc or self.cu.cuCtxSynchronize()
        finally:
            for p in allocations:
                self.cu.cuMemFree_v2(ctypes.c_void_p(p))
            self.cu.cuModuleUnload(mod)

    def run(self, case: dict) -> dict:
        before = self.cu.ironaccel_fake_last_report() or b""
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        op = case["op"]
        image = base64.b64decode(case["image"]) if "image" in case else b""
        if op == "load":
            rc = self._load(image, case["via"], case.get("path"))
        elif op == "link":
            rc = self._link(case["type"], image)
        else:
            rc = self._launch(case)
        if self.cu.cuCtxSynchronize():  # a sticky launch error: the next case gets a context of its own
            self._new_context()
        report = self.cu.ironaccel_fake_last_report() or b""
        return {"rc": rc, "report": report.decode(errors="replace") if report != before else "",
                "rss_growth_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak}


def main() -> None:
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what kernels print (device printf goes to stdout) must not mix with the answers
    driver = Driver(sys.argv[1])
    for line in sys.stdin:
        answer = driver.run(json.loads(line))
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


class ProbeDied(Exception):
    """The child crashed, hung past its time limit, or a sanitizer stopped it: what it printed is the message."""


class Probe:
    """The parent's side: a running fakeprobe child, restarted after it dies."""

    def __init__(self, library: Path, env: dict[str, str] | None = None):
        self.library, self.env, self.proc = str(library), env, None

    def run(self, case: dict, timeout: float) -> dict:
        """The fake's answer to case; ProbeDied (with the child's stderr) when it crashed or hung."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self._log.seek(0, os.SEEK_END)
        self._case_log_at = self._log.tell()
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise ProbeDied(("hung (no answer in %gs)" % timeout if not ready else "died") + ": " + self._log_text())
        return json.loads(line)

    def _start(self):
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, __file__, self.library], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True, env=self.env)

    def _log_text(self) -> str:
        """What the child wrote to stderr during the last case (its end, where a sanitizer report is)."""
        self._log.seek(self._case_log_at)
        return self._log.read()[-6000:].decode(errors="replace")

    def close(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc.stdin.close()
            self.proc.stdout.close()
            self.proc = None


if __name__ == "__main__":
    main()
