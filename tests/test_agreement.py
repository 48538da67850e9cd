"""The cross-target agreement section of STATUS.md (the differential check of the SEM tests)."""

from ironaccel.cts import judge, status


def run(name: str, outputs: dict[str, str] | None) -> judge.Run:
    test = {"id": "test_semantics.py::test_u32_wraps", "clauses": ["SEM-1"], "outcome": "pass"}
    if outputs is not None:
        test["outputs"] = outputs
    return judge.Run(doc={"target": {"name": name, "backend": name.split("/")[0]}, "tests": [test]}, simulated=True,
                     stale=())


def test_no_outputs_no_section():
    assert status._agreement([run("cuda/fake", None)]) == []


def test_agreeing_targets_are_listed_together():
    lines = status._agreement([run("cuda/fake", {"wrap": "aa"}), run("vulkan/lavapipe", {"wrap": "aa"})])
    assert "| test_semantics.py::test_u32_wraps | cuda/fake, vulkan/lavapipe | — |" in lines


def test_disagreement_names_both_targets_and_the_output():
    lines = status._agreement([run("cuda/fake", {"wrap": "aa", "x": "1"}), run("opencl/pocl", {"wrap": "aa", "x": "1"}),
                               run("vulkan/lavapipe", {"wrap": "bb", "x": "1"})])
    row = next(line for line in lines if "test_u32_wraps" in line)
    assert "cuda/fake, opencl/pocl" in row and "vulkan/lavapipe ≠ cuda/fake (wrap)" in row
