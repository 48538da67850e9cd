"""The PyTorch smoke (issue 26): what PyTorch does on a CUDA driver, checked on the fake and on hardware alike.

Each check needs one of these, and says which:

* ``driver``: the driver API alone (device queries, memory, copies, streams, events);
* ``nvrtc``: kernels PyTorch compiles at run time through NVRTC (the jiterator, and the special functions
  built on it), whose cubins the simulated toolchain gives PTX;
* ``wheel kernels``: PyTorch's prebuilt kernels (fills, arithmetic, reductions), machine code for the GPUs the
  wheel targets and PTX only if ``torch.cuda.get_arch_list()`` lists a ``compute_NN`` (2.11+cu130 lists none);
* ``cublas``: matrix products, through cuBLAS: its fatbins carry sm_90 machine code and compute_120 PTX, which
  the fake runs in the machine code's place (fakes/cuda/README.md), so a small float32 product runs everywhere.
  Which kernel cuBLAS picks depends on the shape and type; those it carries as machine code alone (float64 and
  larger float32 products on the fake) cannot run on a PTX-only device, and this smoke does not check them.

A device that runs PTX alone (the fake, whose name says "simulated") cannot run machine code: there a check
that needs it must fail with exactly the error a driver gives for it, and is reported as "cannot run here"
with the cause; any other outcome (another error, a wrong result) fails. On hardware every check must pass.

``python -m ironaccel.cts.torch_smoke`` prints one line a check and exits 0 when all is as it should be;
the same checks are pytest tests (``ironaccel clients --client pytorch``), a check that cannot run here being
a skip that names its cause.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import torch

#: What a check that needs machine code gets on a device without it, by what it needs: the message's text.
NO_MACHINE_CODE = {"wheel kernels": "no kernel image is available for execution on the device"}


def runs_ptx_only() -> bool:
    return "simulated" in torch.cuda.get_device_name(0)


def cannot_run_here(needs: str) -> str:
    """Why a check needing ``needs`` cannot run on this device, "" when it can."""
    if needs not in NO_MACHINE_CODE or not runs_ptx_only():
        return ""
    ptx = [a for a in torch.cuda.get_arch_list() if a.startswith("compute_") and int(a[8:]) <= 90]
    if ptx:
        return ""
    return (f"no PTX in the wheel: PyTorch {torch.__version__} carries machine code for "
            f"{', '.join(torch.cuda.get_arch_list())} and no compute_NN PTX a PTX-only device could run")


def _properties():
    p = torch.cuda.get_device_properties(0)
    assert p.total_memory > 0 and p.multi_processor_count > 0 and (p.major, p.minor) >= (7, 5)
    return f"{p.name}, sm_{p.major}{p.minor}, {p.total_memory >> 20} MiB, {p.multi_processor_count} SMs"


def _creation_without_kernels():
    empty = torch.empty((64, 64), device="cuda")
    from_host = torch.tensor([1.5, -2.0, 3.25], device="cuda")
    assert empty.is_cuda and empty.shape == (64, 64) and from_host.cpu().tolist() == [1.5, -2.0, 3.25]
    return "empty, tensor(list) to the device"


def _copies():
    host = torch.arange(4096, dtype=torch.float32)
    dev = host.to("cuda")
    assert torch.equal(dev.cpu(), host)
    assert torch.equal(dev.clone().cpu(), host)  # device to device
    pinned = host.pin_memory()
    dev2 = torch.empty(4096, device="cuda")
    dev2.copy_(pinned, non_blocking=True)
    back = torch.empty(4096).pin_memory()
    back.copy_(dev2, non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(back, host)
    return "host -> device -> host, device -> device, pinned async both ways"


def _streams_and_events():
    side = torch.cuda.Stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host = torch.arange(1 << 16, dtype=torch.int32).pin_memory()
    with torch.cuda.stream(side):
        start.record()
        dev = host.to("cuda", non_blocking=True)
        copy = dev.clone()
        end.record()
    torch.cuda.current_stream().wait_stream(side)
    end.synchronize()
    assert end.query() and side.query()
    assert torch.equal(copy.cpu(), host)
    elapsed = start.elapsed_time(end)
    assert elapsed >= 0
    return f"a side stream, timed events ({elapsed:.3f} ms), wait_stream, query"


def _jiterator():
    axpb = torch.cuda.jiterator._create_jit_fn("template <typename T> T axpb(T x, T y, T a) { return a * x + y; }",
                                                a=2.0)
    x = torch.arange(1000, dtype=torch.float32)
    y = torch.linspace(-1, 1, 1000)
    out = axpb(x.cuda(), y.cuda()).cpu()
    assert torch.equal(out, 2 * x + y)
    return "a jiterator kernel (2x + y) over 1000 floats"


def _special_functions():
    x = torch.linspace(0, 20, 257, dtype=torch.float64)
    got = torch.special.bessel_j0(x.cuda()).cpu()
    assert torch.allclose(got, torch.special.bessel_j0(x), rtol=1e-12, atol=1e-14)
    return "bessel_j0 (a jiterated op) over 257 doubles, equal to the CPU's"


def _creation_with_kernels():
    assert torch.zeros(100, device="cuda").cpu().tolist() == [0.0] * 100
    assert torch.full((10,), 7.0, device="cuda").cpu().tolist() == [7.0] * 10
    return "zeros, full"


def _elementwise():
    a = torch.arange(1000, dtype=torch.float32)
    b = a.cuda() * 2 + 1
    assert torch.equal(b.cpu(), a * 2 + 1)
    assert torch.allclose(torch.sqrt(a.cuda()).cpu(), torch.sqrt(a))
    return "mul, add, sqrt"


def _reduction():
    assert torch.arange(1000).cuda().sum().item() == 499500
    return "sum"


def _matmul():
    a = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    assert torch.allclose((a.cuda() @ a.cuda()).cpu(), a @ a)
    return "a 4x4 matrix product"


#: (name, what it needs, check): the order they run in, those every device can run first.
CHECKS: list[tuple[str, str, Callable[[], str]]] = [
    ("properties", "driver", _properties),
    ("creation without kernels", "driver", _creation_without_kernels),
    ("copies", "driver", _copies),
    ("streams and events", "driver", _streams_and_events),
    ("jiterator", "nvrtc", _jiterator),
    ("special functions", "nvrtc", _special_functions),
    ("creation with kernels", "wheel kernels", _creation_with_kernels),
    ("elementwise", "wheel kernels", _elementwise),
    ("reduction", "wheel kernels", _reduction),
    ("matmul", "cublas", _matmul),
    ("synchronize", "driver", lambda: torch.cuda.synchronize() or "done"),
]


def run_check(needs: str, check: Callable[[], str]) -> tuple[str, str]:
    """("ok", detail), ("cannot run", why), or raises: a check that cannot run here must fail as expected."""
    why = cannot_run_here(needs)
    if not why:
        return "ok", check()
    try:
        detail = check()
    except Exception as exc:  # the one error a driver gives for machine code it cannot run, nothing else
        if NO_MACHINE_CODE[needs] not in str(exc):
            raise
        return "cannot run", why
    return "ok", f"{detail} (ran although expected not to: {why})"


@pytest.fixture(scope="module", autouse=True)
def _a_cuda_device():
    if not torch.cuda.is_available():
        pytest.fail("torch.cuda.is_available() is False")


@pytest.mark.parametrize("name, needs, check", CHECKS, ids=[c[0] for c in CHECKS])
def test_torch(name, needs, check):
    outcome, detail = run_check(needs, check)
    if outcome == "cannot run":
        pytest.skip(f"cannot run on a device that runs PTX only: {detail}")


def main() -> int:
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, is_available={torch.cuda.is_available()}")
    if not torch.cuda.is_available():
        print("torch smoke: FAILED torch.cuda.is_available() is False")
        return 1
    print(f"device count {torch.cuda.device_count()}, {torch.cuda.get_device_name(0)}")
    failed, not_run = [], []
    for name, needs, check in CHECKS:
        try:
            outcome, detail = run_check(needs, check)
        except Exception as exc:  # each check reports its own failure and the rest still run
            failed.append(name)
            print(f"{name} [{needs}]: FAILED {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        if outcome == "cannot run":
            not_run.append(name)
        print(f"{name} [{needs}]: {detail if outcome == 'ok' else 'cannot run here: ' + detail}")
    summary = f"{len(CHECKS) - len(failed) - len(not_run)} ran"
    if not_run:
        summary += f", {len(not_run)} cannot run here ({', '.join(not_run)})"
    print(f"torch smoke: ok ({summary})" if not failed else f"torch smoke: FAILED {', '.join(failed)} ({summary})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
