"""The mutation catalogue stays honest: every mutant applies to the tree as it is now, exactly once, and the
runner's verdicts and staleness check mean what they say (the run itself: ``tox -e mutants``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci" / "mutants"))

import run  # noqa: E402
from catalogue import MUTANTS  # noqa: E402

AREAS = {"webgpu", "vulkan", "cuda", "opengl", "pool", "plugin", "fake"}


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.id for m in MUTANTS])
def test_every_mutant_applies_once_and_changes_something(mutant):
    text = (ROOT / mutant.file).read_text(encoding="utf-8")
    assert text.count(mutant.old) == 1, f"{mutant.id}: the catalogue is stale for {mutant.file}"
    assert mutant.old != mutant.new
    assert mutant.area in AREAS and mutant.check in ("suite", "canary")
    assert mutant.bug and mutant.clauses


def test_the_catalogue_is_big_enough_and_cites_real_clauses():
    ids = [m.id for m in MUTANTS]
    assert len(ids) == len(set(ids)) and len(ids) >= 60
    assert {m.area for m in MUTANTS} == AREAS
    clauses = run.spec_clauses()
    assert not [(m.id, c) for m in MUTANTS for c in m.clauses if c not in clauses]


def test_a_stale_mutant_fails_to_apply_loudly(tmp_path):
    mutant = MUTANTS[0]
    (tmp_path / mutant.file).parent.mkdir(parents=True)
    (tmp_path / mutant.file).write_text("the code moved on\n")
    with pytest.raises(run.Stale, match="occurs 0 times"):
        run.apply(mutant, tmp_path)
    (tmp_path / mutant.file).write_text(mutant.old + mutant.old)
    with pytest.raises(run.Stale, match="occurs 2 times"):
        run.apply(mutant, tmp_path)


def test_verdicts():
    baseline = {"a": "pass", "b": "pass", "c": "not-supported"}
    ok = {"run": {"status": "ok", "message": ""}}
    assert run.verdict({**ok, "tests": [{"id": "a", "outcome": "pass"}]}, "", baseline)[0] == "survived"
    status, killers, _ = run.verdict({**ok, "tests": [{"id": "a", "outcome": "pass"}, {"id": "b", "outcome": "flaky"},
                                                      {"id": "c", "outcome": "fail"}]}, "", baseline)
    assert status == "killed" and killers == ["b (flaky)", "c (fail)"]
    assert run.verdict({"run": {"status": "crashed", "message": "segfault"}, "tests": []}, "", baseline)[0] == "killed"
    assert run.verdict(None, "certify ran past 360 s", baseline) == ("killed", [], "certify ran past 360 s")
