"""Random sequences of API calls with bad arguments, on one device: what the hardening clauses promise,
checked the way an adversarial user would (``python -m ironaccel.cts.testing.fuzz``, one target per process).

Every call either works or raises an IronAccelError (or a TypeError/ValueError whose message names the op);
after every sequence, buffers made before it still hold their bytes and a saxpy gives numpy's answer. A
crash (a signal) or a hang shows in the parent as the process's exit status or its time limit
(tests/test_fuzz_api.py). Hypothesis runs derandomized with a bounded example count, so CI runs the same
sequences every time.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import ironaccel as ia
from ironaccel import api

#: Values a careless caller passes where an int, a size or an offset belongs.
JUNK = st.sampled_from([-1, 0, 1, 3, 1 << 62, 2**64, 1.5, float("nan"), "8", None, True, b"x", [4], np.int8(-2)])
SIZES = st.one_of(st.integers(1, 1 << 16), JUNK)
OFFSETS = st.one_of(st.integers(0, 1 << 12), JUNK)
BYTES = st.one_of(st.integers(0, 255), JUNK)
HOSTS = st.sampled_from(["u8", "f32", "strided", "readonly", "object", "datetime", "list", "none", "empty", "2d"])
DIMS = st.one_of(st.integers(1, 64), st.tuples(st.integers(0, 8), st.integers(0, 8)), JUNK,
                 st.just((1, 1, 1, 1)), st.just((True,)), st.just((1.0,)))


def host_array(kind: str, n: int) -> Any:
    n = max(1, min(int(n) if isinstance(n, int) and not isinstance(n, bool) else 64, 1 << 16))
    return {
        "u8": lambda: np.full(n, 0x2B, np.uint8),
        "f32": lambda: np.ones(max(1, n // 4), np.float32),
        "strided": lambda: np.zeros(2 * n, np.uint8)[::2],
        "readonly": lambda: np.frombuffer(bytes(n), np.uint8),
        "object": lambda: np.empty(4, object),
        "datetime": lambda: np.zeros(2, "datetime64[s]"),
        "list": lambda: [1, 2, 3],
        "none": lambda: None,
        "empty": lambda: np.zeros(0, np.uint8),
        "2d": lambda: np.zeros((4, max(1, n // 4)), np.uint8),
    }[kind]()


class Session:
    """The device under fuzz: a few protected buffers that no call may touch, and the kernels to launch."""

    def __init__(self, device: Any, kernels: Callable[[str], Any]):
        self.device, self.kernels = device, kernels
        self.stream = device.create_stream()
        self.protected = []
        for i in range(3):
            buf = device.alloc(4096)
            data = np.random.default_rng(i).integers(1, 256, 4096, dtype=np.uint8)
            self.stream.copy_htod(buf, data)
            self.protected.append((buf, data))
        self.stream.synchronize()
        self.scratch: list[Any] = []

    def check_op_error(self, exc: BaseException, call: str) -> None:
        if isinstance(exc, ia.IronAccelError):
            return
        if isinstance(exc, (TypeError, ValueError)) and any(w in str(exc) for w in ("Device.", "Stream.", "Event.",
                                                                                   "Module.", "Kernel.", "Buffer.")):
            return
        raise AssertionError(f"{call} raised {type(exc).__name__}: {exc}") from exc

    def intact(self) -> None:
        """Protected buffers hold their bytes; a saxpy round trip works."""
        s = self.stream
        s.synchronize(timeout=120)
        for buf, data in self.protected:
            got = np.empty(4096, np.uint8)
            s.copy_dtoh(got, buf)
            s.synchronize(timeout=120)
            assert (got == data).all(), "a fuzzed call changed a buffer it was not given"
        n = 1000
        x = np.arange(n, dtype=np.float32)
        y = np.ones(n, np.float32)
        with self.device.alloc(4 * n) as bx, self.device.alloc(4 * n) as by:
            s.copy_htod(bx, x)
            s.copy_htod(by, y)
            s.launch(self.kernels("saxpy"), (n + 63) // 64, 64, (bx, by, np.float32(2), np.uint32(n)))
            out = np.empty(n, np.float32)
            s.copy_dtoh(out, by)
            s.synchronize(timeout=120)
        np.testing.assert_allclose(out, 2 * x + y)

    def buffer(self, pick: int) -> Any:
        """A buffer the fuzz may use: a fresh one, a scratch one (perhaps freed), or junk."""
        if pick == 0 or not self.scratch:
            try:
                buf = self.device.alloc(1024)
            except ia.OutOfMemory:
                return None
            self.scratch.append(buf)
            return buf
        if pick == 1:
            return "not a buffer"
        return self.scratch[pick % len(self.scratch)]


PICK = st.integers(0, 5)  #: which buffer a call gets: see Session.buffer
SCALARS = st.sampled_from([np.float32(1), np.uint32(7), np.int32(-1), np.float64(2), np.int64(3), np.uint8(1), 1, 1.0,
                           None])
KERNELS = st.sampled_from(["saxpy", "fill_u32", "add_one"])


def own(picked: Any, call: Callable[[Any], Any]) -> Any:
    """``call(picked)`` for a Buffer's own method or property; nothing for the fuzz's junk buffers (a str, or
    None after OutOfMemory), which have none: passed to the library instead, they are the library's to reject."""
    return call(picked) if isinstance(picked, api.Buffer) else None


def operations(sess: Session) -> dict[str, tuple[st.SearchStrategy, Callable[..., Any]]]:
    """name -> (the arguments' strategy, the call). Arguments are drawn whole before the call, so what
    Hypothesis draws never depends on how the device answered."""
    dev, s, buf = sess.device, sess.stream, sess.buffer
    return {
        "alloc": (st.tuples(SIZES), lambda n: sess.scratch.append(dev.alloc(n))),
        "free": (st.tuples(PICK), lambda b: own(buf(b), lambda x: x.free())),
        "htod": (st.tuples(PICK, HOSTS, SIZES, OFFSETS),
                 lambda b, h, n, o: s.copy_htod(buf(b), host_array(h, n), dst_offset=o)),
        "dtoh": (st.tuples(PICK, HOSTS, SIZES, OFFSETS),
                 lambda b, h, n, o: s.copy_dtoh(host_array(h, n), buf(b), src_offset=o)),
        "dtod": (st.tuples(PICK, PICK, SIZES, OFFSETS, OFFSETS),
                 lambda d, r, n, do, so: s.copy_dtod(buf(d), buf(r), n, dst_offset=do, src_offset=so)),
        "fill": (st.tuples(PICK, BYTES, OFFSETS, st.one_of(st.none(), SIZES)),
                 lambda b, v, o, n: s.fill(buf(b), v, offset=o, nbytes=n)),
        "launch": (st.tuples(KERNELS, DIMS, DIMS, st.lists(st.one_of(PICK, SCALARS), max_size=6)),
                   lambda k, g, bl, args: s.launch(sess.kernels(k), g, bl,
                                                   tuple(buf(a) if type(a) is int else a for a in args))),
        "record_wait": (st.tuples(st.booleans()), lambda t: dev.create_stream().wait(s.record(timing=t))),
        "synchronize": (st.tuples(st.sampled_from([None, 30, -1, 0, "1", float("inf")])),
                        lambda t: s.synchronize(timeout=t)),
        "supports": (st.tuples(st.sampled_from(["events.timing", "nope", None, ("x",), 3])), dev.supports),
        "compile": (st.tuples(st.sampled_from(["", "garbage", b"\x03\x02\x23\x07", None, 5]),
                              st.sampled_from([*dev.languages, "cobol", None]),
                              st.sampled_from([(), None, (1, 2), "-O3", ("-DX=1",)])),
                    lambda src, lang, opts: dev.compile(src, lang, options=opts)),
        "kernel": (st.tuples(st.sampled_from(["saxpy", "nope", None, ("x",)])),
                   lambda name: sess.kernels("saxpy").module.kernel(name)),
        "elapsed": (st.tuples(st.booleans(), st.booleans()),
                    lambda a, b: s.record(timing=a).elapsed_ms(s.record(timing=b))),
        "handle": (st.tuples(PICK), lambda b: own(buf(b), lambda x: x.handle)),
    }


def run(device: Any, kernels: Callable[[str], Any], examples: int) -> None:
    sess = Session(device, kernels)
    ops = operations(sess)

    @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def sequence(data: st.DataObject) -> None:
        # every operation once per sequence, in a drawn order, then a few more: no call goes untried
        order = data.draw(st.permutations(sorted(ops)), label="order")
        order += data.draw(st.lists(st.sampled_from(sorted(ops)), max_size=6), label="more")
        for name in order:
            args = data.draw(ops[name][0], label=name)
            try:
                ops[name][1](*args)
            except BaseException as exc:  # checked: only typed errors, or Type/ValueErrors that name the op
                sess.check_op_error(exc, name)
        sess.intact()
        for buf in sess.scratch:
            buf.free()
        sess.scratch.clear()

    sequence()


def main(argv: list[str] | None = None) -> int:
    from ironaccel.cts import targets
    from ironaccel.cts.pytest_plugin import conformance_kernels

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--examples", type=int, default=100)
    args = parser.parse_args(argv)
    target = targets.get(args.target)
    if os.environ.get("IRONACCEL_TARGET") != target.name:  # a driver is chosen by the environment at load
        env = {**os.environ, **target.environment()}
        os.execve(sys.executable, [sys.executable, "-m", __spec__.name, *sys.argv[1:]], env)
    device = ia.open_device(target.backend, 0)
    assert target.matches(device.info), f"{args.target}: got device {device.info.name!r}"
    kernels = conformance_kernels(device, target)
    run(device, kernels, args.examples)
    device.close()
    print(f"fuzz: {args.target}: {args.examples} sequences, every error typed, nothing corrupted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
