"""The suite hash covers every library module a conformance run executes, so editing one makes results stale."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from ironaccel.cts import spec
from ironaccel.cts.targets import BUILTIN_DRIVERS

ROOT = Path(__file__).resolve().parent.parent
#: Hashed elsewhere: each backend's package is its own part, the fake's loader is part of cuda/fake's driver;
#: and judge, which the plugin calls only to compare a finished run with a baseline (it changes no outcome).
HASHED_APART = ("ironaccel.backends.", "ironaccel.fakes", "ironaccel.cts.judge")
#: The built-in driver declarations: every run loads them (the target registry), each is hashed with the
#: backends it declares (test below), and what they import must be hashed somewhere too.
DECLARATIONS = {spec_.partition(":")[0] for spec_ in BUILTIN_DRIVERS.values()}


def _module_file(name: str) -> Path | None:
    base = ROOT / name.replace(".", "/")
    for f in (base / "__init__.py", base.with_suffix(".py")):
        if f.is_file():
            return f
    return None


def _imports(path: Path, package: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(parts + ([node.module] if node.module else []))
            found |= {module} | {f"{module}.{a.name}" for a in node.names}
    return {m for m in found if m.split(".")[0] == "ironaccel"}


def _executed_library_modules() -> set[str]:
    """ironaccel modules reached from conformance/, the pytest plugin and the driver declarations, following
    imports (but not into what is hashed apart)."""
    todo = {"ironaccel.cts.pytest_plugin"} | DECLARATIONS
    for f in (ROOT / "conformance").rglob("*.py"):
        todo |= _imports(f, "conformance")
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        path = _module_file(module)
        if module in seen or path is None or (module.startswith(HASHED_APART) and module not in DECLARATIONS):
            continue
        seen.add(module)
        todo |= _imports(path, module if path.name == "__init__.py" else module.rpartition(".")[0])
    return seen


def test_every_library_module_a_run_executes_is_in_the_suite_hash() -> None:
    hashed = {ROOT / "ironaccel" / name for name in spec.SUITE_LIBRARY}
    def covered(path: Path) -> bool:
        return any(path == h or h in path.parents for h in hashed)
    executed = _executed_library_modules()
    missing = sorted(m for m in executed - DECLARATIONS if not covered(_module_file(m)))
    assert not missing, f"modules a conformance run executes but the suite hash ignores: {missing}"
    assert "ironaccel.cts.testing.work" in executed  # the walk follows conformance's imports
    assert "ironaccel.cts.drivers" in executed  # and the declarations' (their shared helpers)
    in_suite = sorted(m for m in DECLARATIONS if covered(_module_file(m)) and _module_file(m).name != "__init__.py")
    assert not in_suite, f"driver declarations in the suite part (editing one would stale every backend): {in_suite}"


def test_each_driver_declaration_is_hashed_with_the_backends_it_declares() -> None:
    def imported(module: str) -> Path:  # where this run imports it from: the checkout, or site-packages (tox)
        return Path(importlib.import_module(module).__file__).resolve()

    for backend, declared in BUILTIN_DRIVERS.items():
        declaration = imported(declared.partition(":")[0])
        files = {path.resolve() for _, path in spec.implementation(backend)}
        assert declaration in files, f"{declaration} is not in backend {backend}'s part"
    assert imported("ironaccel.cts.drivers.vulkan") not in {p.resolve() for _, p in spec.implementation("cuda")}


def test_editing_a_driver_declaration_stales_only_the_backends_it_declares(tmp_path) -> None:
    """drivers/cuda.py declares cuda's targets, drivers/vulkan.py vulkan's and webgpu's (the same ICDs)."""
    import shutil

    from ironaccel.cts import judge
    from results_docs import current_of

    tree = tmp_path / "checkout"
    for part in ("ironaccel", "conformance", "fakes/cuda"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__", "*.so", "build"))

    names = ("cuda/fake", "cuda/nvidia", "vulkan/lavapipe", "vulkan/nvidia", "webgpu/lavapipe", "opengl/llvmpipe")
    before = current_of(tree)

    def stale_after_editing(module: str) -> dict[str, tuple[str, ...]]:
        edited = tree / "ironaccel" / "cts" / "drivers" / module
        edited.write_text(edited.read_text() + "\n# an edit\n")
        after = current_of(tree)
        docs = [{"target": {"name": n, "backend": n.partition("/")[0], "driver": n.partition("/")[2]},
                 "suite": {"hash": before.suite, "parts": before.parts(n)}} for n in names]
        return {doc["target"]["name"]: judge.stale_parts(doc, after) for doc in docs}

    assert stale_after_editing("cuda.py") == {
        "cuda/fake": ("the cuda backend changed",), "cuda/nvidia": ("the cuda backend changed",),
        "vulkan/lavapipe": (), "vulkan/nvidia": (), "webgpu/lavapipe": (), "opengl/llvmpipe": ()}
    before = current_of(tree)
    assert stale_after_editing("vulkan.py") == {
        "cuda/fake": (), "cuda/nvidia": (), "vulkan/lavapipe": ("the vulkan backend changed",),
        "vulkan/nvidia": ("the vulkan backend changed",), "webgpu/lavapipe": ("the webgpu backend changed",),
        "opengl/llvmpipe": ()}
    before = current_of(tree)
    assert set(stale_after_editing("__init__.py").values()) == {("the suite changed",)}  # helpers every backend uses


def test_the_compiled_hot_path_source_is_hashed() -> None:
    """native.py builds _fast_c/, which the pool (every backend) and the CUDA backend run instead of Python."""
    assert {"native.py", "_fast_c", "cbuild.py"} <= set(spec.SUITE_LIBRARY)


def test_a_plugin_targets_declaration_and_expectations_are_hashed_where_they_live(tmp_path, monkeypatch) -> None:
    """A plugin's target keeps its driver declaration and its expectations file in the plugin, not in
    conformance/: editing either stales the target's results, even where the plugin's backend itself is not
    registered (and a target no declaration knows has no expectations part)."""
    from ironaccel.cts import judge, targets

    expectations = tmp_path / "tiny-sim.txt"
    expectations.write_text("# no known failures\n")
    declaration = tmp_path / "tinydrivers.py"
    declaration.write_text("from pathlib import Path\nfrom ironaccel.cts.targets import Target\n\n\n"
                           f"def drivers():\n    return [Target('tiny', 'sim', True, expectations=Path({str(expectations)!r}))]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    targets.register("tiny", "tinydrivers:drivers")
    try:
        before = spec.current(["tiny/sim", "tiny/unregistered"])
        assert set(before.parts("tiny/sim")) == {"suite", "backend", "expectations"}
        assert set(before.parts("tiny/unregistered")) == {"suite", "backend"}
        doc = {"target": {"name": "tiny/sim", "backend": "tiny", "driver": "sim"},
               "suite": {"hash": before.suite, "parts": before.parts("tiny/sim")}}
        assert judge.stale_parts(doc, spec.current(["tiny/sim"])) == ()
        expectations.write_text("t::X-1 fail the driver lacks it\n")
        assert judge.stale_parts(doc, spec.current(["tiny/sim"])) == ("its expectations file changed",)
        declaration.write_text(declaration.read_text() + "# an edit\n")
        assert judge.stale_parts(doc, spec.current(["tiny/sim"]))[0] == "the tiny backend changed"
    finally:
        targets.unregister("tiny")


def test_the_fakes_results_are_judged_by_its_sources_and_by_the_builds_a_run_must_report() -> None:
    """spec.current: the target built here (the fake libcuda) has a "driver" part, its sources, and its build's
    hash beside the compiled extension's; a target whose driver comes from elsewhere has neither."""
    from ironaccel import fakes, native
    from ironaccel.cts.targets import TARGETS

    def listed(name: str) -> set[str]:  # an expectations file is a part where the target has one
        return {"expectations"} if TARGETS[name].expectations_file.is_file() else set()

    current = spec.current(["cuda/fake", "vulkan/lavapipe"])
    assert set(current.parts("cuda/fake")) == {"suite", "backend", "driver"} | listed("cuda/fake")
    assert set(current.parts("vulkan/lavapipe")) == {"suite", "backend"} | listed("vulkan/lavapipe")
    assert current.builds == {"compiled": native.sources_hash(), "driver/cuda/fake": fakes.source_hash()}
    # every registered backend is hashed, whichever targets are asked for
    from ironaccel.backends import registry

    assert {f"backend/{b}" for b in registry() if spec.implementation(b)} <= set(spec.current(["cuda/fake"]).implementations)
