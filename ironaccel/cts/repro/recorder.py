"""A pytest plugin (``-p ironaccel.cts.repro.recorder --repro-record FILE``) that records every kernel launch a
conformance run makes: the kernel's source as compiled, grid, block, the arguments, and each buffer argument's
bytes just before and just after the launch (the stream synchronized around it). ``ironaccel repro`` runs a
test under it on the failing target and on a reference target, and compares the two records launch by launch.

It wraps ``api.Device.compile``, ``api.Stream.launch`` and ``api.LaunchPlan.__call__`` (the two ways to launch)
for the session; a launch inside a graph capture is not recorded (it runs later). At most
``MAX_LAUNCHES`` launches and ``MAX_BUFFER_BYTES`` per buffer are kept; past that the record says so.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ... import api

MAX_LAUNCHES = 64
MAX_BUFFER_BYTES = 16 << 20


class Recorder:
    def __init__(self, path: Path):
        self.path = path
        self.sources: dict[int, dict[str, Any]] = {}  # id(module) -> how it was compiled
        self.launches: list[dict[str, Any]] = []
        self.arrays: dict[str, np.ndarray] = {}
        self.truncated = ""
        self.originals = (api.Device.compile, api.Stream.launch, api.LaunchPlan.__call__)

    def install(self) -> None:
        compile_, launch, call = self.originals
        recorder = self

        def compile(device: api.Device, source: Any, lang: str, *, options: Any = ()) -> api.Module:
            module = compile_(device, source, lang, options=options)
            recorder.sources[id(module)] = {"source": source, "lang": lang, "options": list(options)}
            return module

        def stream_launch(stream: api.Stream, kernel: api.Kernel, grid: object, block: object, args: Any = ()) -> None:
            try:  # the plan the launch will use (cached); a bad launch is left to raise as it would
                plan = kernel._plan("Stream.launch", grid, block)
            except Exception:
                plan = None
            recorder.recorded(stream, plan, args, lambda: launch(stream, kernel, grid, block, args))

        def plan_call(plan: api.LaunchPlan, stream: api.Stream, *args: object) -> None:
            recorder.recorded(stream, plan, args, lambda: call(plan, stream, *args))

        api.Device.compile, api.Stream.launch, api.LaunchPlan.__call__ = compile, stream_launch, plan_call

    def uninstall(self) -> None:
        api.Device.compile, api.Stream.launch, api.LaunchPlan.__call__ = self.originals

    def recorded(self, stream: api.Stream, plan: api.LaunchPlan | None, args: Any, run: Any) -> None:
        """Run one launch (``run``), recording it when it is a launch that can be (bad arguments go straight
        through, to raise as they would)."""
        ok = (plan is not None and isinstance(stream, api.Stream) and isinstance(args, (tuple, list))
              and stream._capturing is None and not stream._device._closed and self.room(args))
        if not ok:
            return run()
        before = self.snapshot(stream, args)
        run()
        self.add(plan, args, before, self.snapshot(stream, args))

    def room(self, args: Any) -> bool:
        if len(self.launches) >= MAX_LAUNCHES:
            self.truncated = f"more than {MAX_LAUNCHES} launches: the later ones are not recorded"
        elif any(isinstance(a, api.Buffer) and a.nbytes > MAX_BUFFER_BYTES for a in args):
            self.truncated = f"a launch with a buffer over {MAX_BUFFER_BYTES} bytes is not recorded"
        else:
            return True
        return False

    @staticmethod
    def snapshot(stream: api.Stream, args: Any) -> list[np.ndarray | None]:
        stream.synchronize()
        out: list[np.ndarray | None] = []
        for a in args:
            if isinstance(a, api.Buffer):
                host = np.empty(a.nbytes, np.uint8)
                stream.copy_dtoh(host, a)
                out.append(host)
            else:
                out.append(None)
        stream.synchronize()
        return out

    def add(self, plan: api.LaunchPlan, args: Any, before: list, after: list) -> None:
        n = len(self.launches)
        described = []
        for i, (a, b, c) in enumerate(zip(args, before, after)):
            if b is None:
                described.append({"scalar": np.asarray(a).dtype.str, "value": np.asarray(a).tolist()})
            else:
                self.arrays[f"L{n}_A{i}_in"], self.arrays[f"L{n}_A{i}_out"] = b, c
                described.append({"buffer": int(b.size)})
        module = plan.kernel.module
        self.launches.append({"kernel": plan.kernel.name, "module": self.sources.get(id(module), {}).get("lang"),
                              "module_id": id(module), "grid": list(plan.grid), "block": list(plan.block),
                              "args": described})

    def write(self) -> None:
        modules: dict[str, Any] = {}
        for launch in self.launches:
            mid = launch.pop("module_id")
            src = self.sources.get(mid)
            if src is not None and str(mid) not in modules:
                key = f"module{len(modules)}"
                data = src["source"]
                self.arrays[key] = np.frombuffer(data if isinstance(data, bytes) else data.encode(), np.uint8)
                modules[str(mid)] = {"array": key, "lang": src["lang"], "options": src["options"],
                                     "binary": isinstance(data, bytes)}
            launch["source"] = modules.get(str(mid))
        meta = {"launches": self.launches, "truncated": self.truncated}
        self.arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
        buf = io.BytesIO()
        np.savez_compressed(buf, **self.arrays)
        self.path.write_bytes(buf.getvalue())


def load(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A record: (its metadata, its arrays by name)."""
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    return json.loads(arrays.pop("meta").tobytes()), arrays


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("ironaccel").addoption("--repro-record", default=None, metavar="FILE",
                                           help="record every kernel launch of the run into FILE (ironaccel repro)")


_KEY = pytest.StashKey[Recorder]()


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--repro-record")
    if path:
        recorder = Recorder(Path(path))
        recorder.install()
        config.stash[_KEY] = recorder


def pytest_unconfigure(config: pytest.Config) -> None:
    recorder = config.stash.get(_KEY, None)
    if recorder is not None:
        recorder.uninstall()
        recorder.write()
