"""PyTorch on a CUDA driver (the fake or a real one): what a driver without cuBLAS/cuDNN work can honestly run.
torch.cuda.is_available(), device properties, tensor creation and copies both ways, elementwise ops,
a stream and timed events, torch.cuda.synchronize(). Prints one line a check and "torch smoke: ok" at the end;
a check that fails prints why and the script exits 1 after running the others.

PyTorch's wheels carry machine code for the GPUs they target and little or no PTX, so on the fake (which runs
PTX only) its own kernels may be refused with "no kernel image is available": that is reported per check,
not hidden."""

import sys
import traceback

import torch


def check(name, fn, failures):
    try:
        print(f"{name}: {fn()}")
    except Exception as exc:  # each check reports its own failure and the rest still run
        failures.append(name)
        print(f"{name}: FAILED {type(exc).__name__}: {exc}")
        traceback.print_exc(limit=3)


def properties():
    p = torch.cuda.get_device_properties(0)
    return f"{p.name}, sm_{p.major}{p.minor}, {p.total_memory >> 20} MiB, {p.multi_processor_count} SMs"


def round_trip():
    host = torch.arange(1024, dtype=torch.float32)
    dev = host.to("cuda")
    back = dev.cpu()
    assert torch.equal(back, host)
    pinned = host.pin_memory()
    dev2 = torch.empty(1024, device="cuda")
    dev2.copy_(pinned, non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(dev2.cpu(), host)
    return "host -> device -> host, pinned async"


def creation():
    z = torch.zeros(100, device="cuda")
    o = torch.ones(100, device="cuda", dtype=torch.int32)
    f = torch.full((10,), 7.0, device="cuda")
    assert z.sum().item() == 0 and o.sum().item() == 100 and f.cpu().tolist() == [7.0] * 10
    return "zeros, ones, full"


def elementwise():
    a = torch.arange(1000, dtype=torch.float32, device="cuda")
    b = a * 2 + 1
    assert torch.equal(b.cpu(), torch.arange(1000, dtype=torch.float32) * 2 + 1)
    c = torch.sqrt(a).cpu()
    assert torch.allclose(c, torch.sqrt(torch.arange(1000, dtype=torch.float32)))
    return "mul, add, sqrt"


def streams_events():
    s = torch.cuda.Stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(s):
        start.record()
        x = torch.ones(1 << 16, device="cuda") * 3
        end.record()
    end.synchronize()
    torch.cuda.current_stream().wait_stream(s)
    assert x.sum().item() == 3 * (1 << 16)
    return f"{start.elapsed_time(end):.3f} ms"


def main() -> int:
    failures: list[str] = []
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, is_available={torch.cuda.is_available()}")
    if not torch.cuda.is_available():
        print("torch smoke: FAILED torch.cuda.is_available() is False")
        return 1
    print(f"device count {torch.cuda.device_count()}, {torch.cuda.get_device_name(0)}")
    for name, fn in [("properties", properties), ("creation", creation), ("copies", round_trip),
                     ("elementwise", elementwise), ("streams and events", streams_events),
                     ("synchronize", lambda: torch.cuda.synchronize() or "done")]:
        check(name, fn, failures)
    print("torch smoke: ok" if not failures else f"torch smoke: FAILED {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
