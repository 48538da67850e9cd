"""CUDA checkpointing on the fake (fakes/cuda/checkpoint.c): this process locks, checkpoints, restores and
unlocks a child that holds device memory, through the driver's state machine; a locked child's CUDA calls wait
for the unlock, its memory comes back intact, and each wrong step gets the driver's error."""

import ctypes
import os
import select
import subprocess
import sys
import textwrap
import threading
from ctypes import byref, c_int

import pytest

from ironaccel import fakes

RUNNING, LOCKED, CHECKPOINTED = 0, 1, 2
SUCCESS, INVALID_VALUE, NOT_INITIALIZED, OPERATING_SYSTEM, ILLEGAL_STATE = 0, 1, 3, 304, 401

# The child: a context and 1 MiB of device memory holding a pattern; on each line of stdin it copies the
# memory back and prints whether the pattern is intact.
TARGET = '''
import sys
import numpy as np
from cuda.bindings import driver as d
assert d.cuInit(0)[0] == 0
ctx = d.cuCtxCreate(None, 0, 0)[1]
n = 1 << 18
pattern = np.arange(n, dtype=np.uint32) * 2654435761
ptr = d.cuMemAlloc(4 * n)[1]
assert d.cuMemcpyHtoD(ptr, pattern, 4 * n)[0] == 0
print("READY", flush=True)
for line in sys.stdin:
    back = np.zeros_like(pattern)
    err, = d.cuMemcpyDtoH(back, ptr, 4 * n)
    print("INTACT" if err == 0 and (back == pattern).all() else f"BROKEN {err}", flush=True)
'''


@pytest.fixture
def target():
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(TARGET)], env=fakes.child_env(), text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline().strip() == "READY", p.stderr.read()
    yield p
    p.kill()
    p.wait()


@pytest.fixture
def lib(fake):
    return ctypes.CDLL("libcuda.so.1")


def state(lib, pid):
    s = c_int(-1)
    assert lib.cuCheckpointProcessGetState(pid, byref(s)) == SUCCESS
    return s.value


def ask_copy(p) -> None:
    p.stdin.write("copy\n")
    p.stdin.flush()


def answer(p, timeout: float = 60) -> str:
    """The child's next line, "" when none comes within the timeout (a child that never answers fails the test,
    not hangs it)."""
    ready, _, _ = select.select([p.stdout], [], [], timeout)
    return p.stdout.readline().strip() if ready else ""


def test_full_cycle_keeps_memory_and_blocks_calls_while_locked(lib, target):
    pid = target.pid
    assert state(lib, pid) == RUNNING
    assert lib.cuCheckpointProcessLock(pid, None) == SUCCESS
    assert state(lib, pid) == LOCKED
    ask_copy(target)  # its cuMemcpyDtoH waits at the lock
    assert answer(target, timeout=0.5) == "", "a locked process's CUDA call returned"
    assert lib.cuCheckpointProcessCheckpoint(pid, None) == SUCCESS
    assert state(lib, pid) == CHECKPOINTED
    assert lib.cuCheckpointProcessRestore(pid, None) == SUCCESS
    assert state(lib, pid) == LOCKED  # a restore leaves the process locked
    assert lib.cuCheckpointProcessUnlock(pid, None) == SUCCESS
    assert state(lib, pid) == RUNNING
    assert answer(target) == "INTACT"  # the waiting copy ran, on the restored memory
    ask_copy(target)
    assert answer(target) == "INTACT"


def test_steps_out_of_order_are_illegal_state(lib, target):
    pid = target.pid
    assert lib.cuCheckpointProcessUnlock(pid, None) == ILLEGAL_STATE
    assert lib.cuCheckpointProcessCheckpoint(pid, None) == ILLEGAL_STATE
    assert lib.cuCheckpointProcessRestore(pid, None) == ILLEGAL_STATE
    assert lib.cuCheckpointProcessLock(pid, None) == SUCCESS
    assert lib.cuCheckpointProcessLock(pid, None) == ILLEGAL_STATE
    assert lib.cuCheckpointProcessRestore(pid, None) == ILLEGAL_STATE
    assert lib.cuCheckpointProcessCheckpoint(pid, None) == SUCCESS
    assert lib.cuCheckpointProcessUnlock(pid, None) == ILLEGAL_STATE  # restore first
    pairs = (ctypes.c_ubyte * 32)(*([1] * 16 + [2] * 16))  # onto another GPU: this device has no other
    args = (ctypes.c_ubyte * 64)()
    ctypes.memmove(args, byref(ctypes.c_void_p(ctypes.addressof(pairs))), 8)
    ctypes.memmove(ctypes.addressof(args) + 8, byref(ctypes.c_uint(1)), 4)
    assert lib.cuCheckpointProcessRestore(pid, args) == INVALID_VALUE
    assert state(lib, pid) == CHECKPOINTED
    assert lib.cuCheckpointProcessRestore(pid, None) == SUCCESS
    assert lib.cuCheckpointProcessUnlock(pid, None) == SUCCESS
    ask_copy(target)
    assert answer(target) == "INTACT"


def test_restore_thread_is_a_thread_of_the_target(lib, target):
    tid = c_int(0)
    assert lib.cuCheckpointProcessGetRestoreThreadId(target.pid, byref(tid)) == SUCCESS
    assert tid.value > 0 and os.path.isdir(f"/proc/{target.pid}/task/{tid.value}")


def test_a_process_without_cuda_and_bad_arguments_are_refused(lib):
    s = c_int(-1)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert lib.cuCheckpointProcessGetState(sleeper.pid, byref(s)) == NOT_INITIALIZED
    finally:
        sleeper.kill()
        sleeper.wait()
    assert lib.cuCheckpointProcessGetState(0, byref(s)) == OPERATING_SYSTEM  # both as the H100's driver answers
    assert lib.cuCheckpointProcessGetState(os.getpid(), None) == INVALID_VALUE
    lock_args = (ctypes.c_ubyte * 64)()
    lock_args[4] = 1  # reserved0
    assert lib.cuCheckpointProcessLock(os.getpid(), lock_args) == INVALID_VALUE


def test_a_dead_process_whose_forked_child_lives_is_refused_not_waited_on(lib):
    """A child forked after cuInit must not keep its parent's agent socket open: asking for the dead parent's
    state would wait forever on a socket nobody serves."""
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent('''
        import os, sys, time
        from cuda.bindings import driver as d
        assert d.cuInit(0)[0] == 0
        child = os.fork()
        if child == 0:
            time.sleep(30)
            os._exit(0)
        print(child, flush=True)
    ''')], env=fakes.child_env(), text=True, stdout=subprocess.PIPE)
    child = int(answer(parent))
    parent.wait(timeout=60)
    try:
        got = []
        asking = threading.Thread(target=lambda: got.append(state_of(lib, parent.pid)), daemon=True)
        asking.start()
        asking.join(timeout=10)
        assert got == [NOT_INITIALIZED]
    finally:
        os.kill(child, 9)


def state_of(lib, pid):
    s = c_int(-1)
    return lib.cuCheckpointProcessGetState(pid, byref(s))
