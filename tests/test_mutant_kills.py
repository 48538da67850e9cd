"""The generated-mutant engine can kill (issue 23): a few mutants the operators derive, one per area, each sure
to break a conformance test, go through the engine's own path (a copy of the tree, the C build remade, certify
--only, the verdict against the baseline) and are killed; an equivalent change of a C file is rebuilt and
survives; a C mutant whose build the run did not load is "not built", never "survived".

About 7 certify runs of one or two tests each (a minute or two on an idle machine)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci" / "mutants"))

import covered  # noqa: E402
import modules  # noqa: E402
import operators  # noqa: E402
from judging import Candidate, run_candidate  # noqa: E402
from tree import copy_tree  # noqa: E402

pytest.importorskip("cuda.bindings")

RUNS = {r.name: r for r in modules.RUNS}
FAKE, PURE = RUNS["cuda/fake"], RUNS["cuda/fake pure-python"]
ROUND_TRIP = "test_copy.py::test_htod_dtoh_round_trip"
QUERY = "test_event.py::test_query_never_blocks"

#: (area, file, function, operator, old, new, run, tests): each breaks what its tests check
MUST_KILL = [
    ("fake", "fakes/cuda/copies.c", "copy", "early-return", "", "return 0; ", FAKE, [ROUND_TRIP]),
    ("fast", "ironaccel/_fast_c/stream.inc", "event_poll", "cmp-flip", "==", "!=", FAKE, [QUERY]),
    ("cuda", "ironaccel/backends/cuda/stream.py", "CudaEvent._query", "negate", "not err", "(err)", PURE,
     ["test_event.py::test_query_is_false_while_work_runs"]),
    ("core", "ironaccel/api.py", "_check_range", "drop-call", "raise InvalidArgument(", "pass", PURE,
     ["test_copy.py::test_out_of_range_is_invalid_and_copies_nothing*"]),
    ("pool", "ironaccel/pool.py", "MemPool._check_usable", "drop-call", 'raise UseAfterFree(op, "the MemPool"', "pass",
     PURE, ["test_pool.py::test_close_gives_everything_back_and_later_allocs_raise"]),
]


def derived(file: str, function: str, operator: str, old: str, new: str) -> operators.Mutant:
    """The one mutant the operators derive from ``file`` as it is now that matches (``old``: a prefix)."""
    found = [m for m in operators.mutants_of(file, (ROOT / file).read_text(encoding="utf-8"))
             if m.function == function and m.operator == operator and m.old.startswith(old) and m.new == new]
    assert len(found) == 1, f"{file}:{function} {operator} {old!r}->{new!r}: {len(found)} mutants (the code moved?)"
    return found[0]


def by_hand(file: str, old: str, new: str) -> operators.Mutant:
    """An edit no operator makes (the equivalent control), as the engine's Mutant."""
    text = (ROOT / file).read_text(encoding="utf-8")
    start = text.index(old)
    return operators.Mutant(f"{file}:control", file, text[:start].count("\n") + 1, "", "control", start,
                            start + len(old), old, new)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    tree = tmp_path_factory.mktemp("snapshot")
    copy_tree(tree, ROOT, platform=False)
    return tree


def judge(snapshot: Path, area: str, mutant: operators.Mutant, run: modules.Run, tests: list[str]):
    """The engine's verdict, against a baseline where ``tests`` pass (the control below shows they do)."""
    baseline = covered.Coverage({}, {}, {}, 0.0, dict.fromkeys(tests, "pass"), dict.fromkeys(tests, 5.0), {})
    return run_candidate(Candidate(mutant, area, run, tests), snapshot, {run.name: baseline}, 300, 60, False)


@pytest.mark.parametrize("area,file,function,operator,old,new,run,tests", MUST_KILL, ids=[k[0] for k in MUST_KILL])
def test_a_sure_mutant_of_each_area_is_killed(snapshot, area, file, function, operator, old, new, run, tests):
    outcome = judge(snapshot, area, derived(file, function, operator, old, new), run, tests)
    assert outcome.status == "killed", f"{outcome.status}: {outcome.detail}"


def test_an_equivalent_change_of_the_fake_is_rebuilt_and_survives(snapshot):
    """A change of the text only (new source hash, so a new build that the run must load) kills nothing: the
    engine does not call every C mutant killed, and the baseline of the sure mutants' tests is a pass."""
    mutant = by_hand("fakes/cuda/copies.c", "return copy(dst, MEM_DEVICE, (uint64_t)(uintptr_t)src, MEM_HOST, n, NULL, 1);",
                     "return (copy(dst, MEM_DEVICE, (uint64_t)(uintptr_t)src, MEM_HOST, n, NULL, 1));")
    outcome = judge(snapshot, "fake", mutant, FAKE, [ROUND_TRIP, QUERY])
    assert (outcome.status, outcome.ran) == ("survived", 2), outcome.detail


def test_a_mutant_whose_build_did_not_run_is_not_built(snapshot):
    """The compiled module's mutant certified where the compiled module is not loaded (pure Python): the
    results file's ``builds`` says so, and the engine reports it as not built instead of survived."""
    outcome = judge(snapshot, "fast", derived("ironaccel/_fast_c/stream.inc", "event_poll", "cmp-flip", "==", "!="),
                    PURE, [QUERY])
    assert outcome.status == "not built" and "compiled build None" in outcome.detail, outcome.detail
