"""The mutation catalogue stays honest: every mutant applies to the tree as it is now, exactly once, and the
runner's verdicts and staleness check mean what they say (the run itself: ``tox -e mutants``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import re

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci" / "mutants"))

import run  # noqa: E402
from ironaccel.cts import spec  # noqa: E402
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
    clauses = spec.load_clauses(ROOT / "conformance" / "SPEC.md")
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
    # any outcome that differs: a capability lost (pass -> not-supported) or claimed (not-supported -> pass)
    claims = run.verdict({**ok, "tests": [{"id": "a", "outcome": "not-supported"}, {"id": "c", "outcome": "pass"}]},
                         "", baseline)
    assert claims[:2] == ("killed", ["a (not-supported)", "c (pass)"])
    assert run.verdict(None, "certify ran past 360 s", baseline) == ("killed", [], "certify ran past 360 s")


def test_a_run_fail_fast_stopped_is_read_from_its_run_folder(monkeypatch, tmp_path):
    """certify never promotes a run that did not finish (fail-fast stops at the first failure): the mutants'
    certify reads it from its run folder, so the verdict names the test that caught the mutant."""
    doc = {"run": {"status": "error", "message": "3 test(s) never ran"}, "tests": [{"id": "a", "outcome": "fail"}]}

    def certify_stopped(cmd, limit, env, **kwargs):
        folder = tmp_path / "runs" / "20261202T060000Z-t-fake-abc123"
        folder.mkdir(parents=True)
        (folder / "t-fake.json").write_text(json.dumps(doc))
        return subprocess.CompletedProcess(cmd, 1, "", "")

    monkeypatch.setattr(run, "reaped", certify_stopped)
    got, problem = run.certify(tmp_path, "t/fake", {}, tmp_path, ("a", "b"), 60)
    assert (got, problem) == (doc, "")
    assert run.verdict(got, problem, {"a": "pass"})[:2] == ("killed", [])  # the run did not finish: a kill


START_ON_WAIT_CHILD = r"""
import ctypes, os, sys, time
from ironaccel import fakes
fakes.load()
from cuda.bindings import driver as cu

def ok(result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return rest[0] if rest else None

ok(cu.cuInit(0))
ctx = ok(cu.cuDevicePrimaryCtxRetain(ok(cu.cuDeviceGet(0))))
ok(cu.cuCtxSetCurrent(ctx))
n = 1 << 20
stream, dst = ok(cu.cuStreamCreate(0)), ok(cu.cuMemAlloc(n))
src = ok(cu.cuMemHostAlloc(n, 0))  # pinned: the DMA reads it when it runs, not when it is queued
back = (ctypes.c_uint8 * n)()
got = []
for wait in ("cuStreamSynchronize", "cuStreamQuery", "cuEventQuery"):
    ctypes.memset(src, 1, n)
    ok(cu.cuMemsetD8(dst, 0, n))
    ok(cu.cuMemcpyHtoDAsync(dst, src, n, stream))
    event = ok(cu.cuEventCreate(0))
    ok(cu.cuEventRecord(event, stream))
    if os.environ["IRONACCEL_FAKE_CUDA_START_ON_WAIT"] == "1":
        time.sleep(0.2)  # ample time for the copy, were the fake to start it unasked
    else:  # the fake's device memory is host memory: watch the copy land without asking the driver
        deadline = time.monotonic() + 60
        while ctypes.string_at(int(dst) + n - 1, 1) != b"\x01":
            assert time.monotonic() < deadline, "the fake never ran the queued copy"
            time.sleep(0.001)
    ctypes.memset(src, 2, n)  # before the host looks: what the copy reads if it has not run
    if wait == "cuStreamSynchronize":
        ok(cu.cuStreamSynchronize(stream))
    else:  # polling a query alone completes the work
        poll, handle = (cu.cuStreamQuery, stream) if wait == "cuStreamQuery" else (cu.cuEventQuery, event)
        deadline = time.monotonic() + 60
        while poll(handle)[0] == cu.CUresult.CUDA_ERROR_NOT_READY:
            assert time.monotonic() < deadline, wait + " never completed the work"
    ok(cu.cuMemcpyDtoH(back, dst, n))
    got.append(f"{wait}={set(bytes(back))}")
print(" ".join(got))
"""


@pytest.mark.parametrize("mode", ["1", "0"])
def test_the_fake_starts_queued_work_only_when_the_host_looks(mode):
    """IRONACCEL_FAKE_CUDA_START_ON_WAIT=1 (the mutation run's kill of a ring reused before its fence rests on
    it): a copy queued from pinned memory has not run before the host synchronizes or queries, however long
    the host takes; without it the fake runs queued work unasked."""
    import subprocess

    from ironaccel import fakes

    pytest.importorskip("cuda.bindings")
    env = {**fakes.child_env(), "PYTHONPATH": str(ROOT), "IRONACCEL_FAKE_CUDA_START_ON_WAIT": mode}
    proc = subprocess.run([sys.executable, "-c", START_ON_WAIT_CHILD], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    value = "{2}" if mode == "1" else "{1}"
    assert proc.stdout.split() == [f"{w}={value}" for w in ("cuStreamSynchronize", "cuStreamQuery", "cuEventQuery")]


# -- the generated-mutant engine (ci/mutants/generated.py, operators.py) ------------------------------------

import operators  # noqa: E402
import covered  # noqa: E402
import generated  # noqa: E402
import tree  # noqa: E402
import modules  # noqa: E402

PY_SAMPLE = '''
LIMIT = 4


def put(ring, n):
    """Docstring: no mutant."""
    if n < LIMIT and ring.ready:
        ring.flush()
    total = n * 2 + 1
    ring.copy(total, n)
    return total


def close(ring):
    ring.release()
    raise ValueError(f"closed {ring}")
'''


def changes(muts, operator):
    return sorted((m.old, m.new) for m in muts if m.operator == operator)


def test_python_operators_derive_every_place_they_apply():
    muts = operators.python_mutants("x.py", PY_SAMPLE)
    assert changes(muts, "cmp-flip") == [("<", "<=")]
    assert changes(muts, "arith") == [("*", "//"), ("+", "-")]
    assert ("4", "5") in changes(muts, "const") and ("2", "3") in changes(muts, "const")
    assert changes(muts, "drop-call") == [('raise ValueError(f"closed {ring}")', "pass"),
                                          ("ring.flush()", "pass"), ("ring.release()", "pass")]
    assert changes(muts, "negate") == [("n < LIMIT and ring.ready", "not (n < LIMIT and ring.ready)")]
    assert changes(muts, "swap-args") == [("total, n", "n, total")]
    assert [m.function for m in muts if m.operator == "early-return"] == ["close"]  # put returns a value
    limit = next(m for m in muts if m.old == "4")
    assert limit.toplevel and not next(m for m in muts if m.old == "2").toplevel
    for m in muts:  # every mutant is a valid program that differs from the original
        assert m.apply(PY_SAMPLE) != PY_SAMPLE
        compile(m.apply(PY_SAMPLE), "x.py", "exec")


def test_mutant_ids_survive_edits_elsewhere_in_the_file():
    before = {m.id for m in operators.python_mutants("x.py", PY_SAMPLE)}
    after = {m.id for m in operators.python_mutants("x.py", "import os\n\n" + PY_SAMPLE)}
    assert before == after and len(before) == len(operators.python_mutants("x.py", PY_SAMPLE))


C_SAMPLE = '''
#include <stdio.h>
/* a comment: if (a < b) */
static void release_slot(Slot *s) { s->busy = 0; }
static int check(int n) { return n > 3 ? 1 : 0; }
int cuThing(Slot *s, int n) {
    Stream *o = s->stream;
    if (n <= 0) return 1;
    release_slot(s);
    memcpy(s->dst, s->src, n * 4);
    return check(n);
}
'''


def test_c_operators_work_on_tokens_and_know_functions():
    muts = operators.c_mutants("f.c", C_SAMPLE)
    assert {m.function for m in muts} == {"release_slot", "check", "cuThing"}
    assert ("<=", "<") in changes(muts, "cmp-flip") and (">", ">=") in changes(muts, "cmp-flip")
    assert changes(muts, "arith") == [("*", "/")]  # `Stream *o` is a declaration, not a product
    assert ("release_slot(s)", "(void)0") in changes(muts, "drop-call")
    assert ("n <= 0", "!(n <= 0)") in changes(muts, "negate")
    assert ("s->dst, s->src", "s->src, s->dst") in changes(muts, "swap-args")
    early = {m.function: m.new for m in muts if m.operator == "early-return"}
    assert early == {"release_slot": "return; ", "check": "return 0; ", "cuThing": "return 0; "}
    assert not [m for m in muts if m.line <= 3]  # nothing in the include or the comment


def test_the_c_call_graph_reaches_through_calls_and_function_pointers():
    graph = covered.CallGraph(C_SAMPLE + "static PyMethodDef m[] = {{\"go\", (PyCFunction)(void (*)(void))cuThing, 0}};\n"
                                "static void worker(void) { start(release_slot); }\n")
    assert graph.reach({"cuThing"}) == {"cuThing", "release_slot", "check"}
    assert graph.reach({"worker"}) == {"worker", "release_slot"}
    assert graph.methods == {"go": {"cuThing"}}


STANDIN_SAMPLE = '''
class _Core:
    hits = 0

    def alloc(self):
        return self.hits


_compiled = load()


class Pool(_compiled.Core if _compiled else _Core):
    size = 4
'''


def test_a_class_body_the_compiled_module_stands_in_for_is_judged_where_it_is_used():
    assert generated.compiled_standins(STANDIN_SAMPLE) == {"_Core"}
    muts = {m.old + "@" + m.function: m for m in operators.python_mutants("x.py", STANDIN_SAMPLE) if m.operator == "const"}
    hits, size = muts["0@_Core"], muts["4@Pool"]
    cov = covered.Coverage({"x.py": {2: ["t1"], 3: ["t1"], 6: ["t2"], 12: ["t1"], 13: ["t1"]}}, {}, {}, 1.0,
                           {"t1": "pass", "t2": "pass"}, {}, {})
    compiled = generated.tests_finder("x.py", None, cov, cov.usable(), {"_Core"})
    pure = generated.tests_finder("x.py", None, cov, cov.usable())
    assert compiled(hits) == [] and pure(hits) == ["t1", "t2"]  # the compiled run's import ran it, unused
    assert compiled(size) == pure(size) == ["t1", "t2"]
    assert {r.compiled for r in modules.RUNS if r.env} == {False}  # the pure-Python runs judge them


def test_quotas_split_the_sample_evenly_and_pass_on_what_an_area_cannot_use():
    assert generated.quotas(["a", "b", "c"], 10, {"a": 100, "b": 2, "c": 100}) == {"a": 4, "b": 2, "c": 4}
    assert generated.quotas(["a"], 10, {"a": 3}) == {"a": 3}


def test_equivalent_mutants_are_read_with_their_reason(tmp_path):
    f = tmp_path / "equivalent.txt"
    f.write_text("# comment\n\nbackends/x.py:f:const:12345678 the value is only compared with 0\n")
    assert generated.read_equivalent(f) == {"backends/x.py:f:const:12345678": "the value is only compared with 0"}
    for mid in generated.read_equivalent():  # the committed list: ids as the engine writes them, each with a reason
        assert re.fullmatch(r"[\w./-]+:[\w.<>-]+:[a-z-]+:[0-9a-f]{8}", mid), mid
    assert all(generated.read_equivalent().values())


def test_every_area_glob_matches_a_file():
    for areas in (modules.SUITE_AREAS, modules.PLATFORM_AREAS):
        files, empty = tree.area_files(ROOT, areas)
        assert not empty and all(files.values())
    assert {a for r in modules.RUNS for a in r.areas} == set(modules.SUITE_AREAS)


def test_annotations_and_commutative_calls_give_no_mutants():
    muts = operators.python_mutants("x.py", "x: int | None = max(a, b)\ny = f(a, b)\n")
    assert [m.old for m in muts if m.operator == "swap-args"] == ["a, b"] and [m.line for m in muts] == [2]
    assert not [m for m in operators.c_mutants("f.c", "int f(int a, int b) { return MAX(a, b); }") if m.operator == "swap-args"]


def test_the_mutants_compiler_reuses_objects_the_source_hash_define_does_not_reach(tmp_path):
    """cc.py keys an object by its source, the headers and included parts beside it, and the flags, leaving out
    the build's source-hash define (which every mutant's build changes) unless the source names the macro: a
    mutant of one file recompiles that file and the one that embeds the hash, and a change of an ``.inc`` part
    (or a header) recompiles its folder."""
    import subprocess

    src = tmp_path / "src"
    src.mkdir()
    (src / "part.inc").write_text("static int part(void) { return 1; }\n")
    (src / "main.c").write_text('#include "part.inc"\nint main_value(void) { return part(); }\n')
    (src / "hash.c").write_text("const char *hash(void) { return IRONACCEL_SOURCE_HASH; }\n")
    objects = tmp_path / "objects"

    def build(define: str) -> None:
        cmd = [sys.executable, str(ROOT / "ci" / "mutants" / "cc.py"), "-fPIC", "-shared", f"-DIRONACCEL_SOURCE_HASH={define}",
               "-o", str(tmp_path / "lib.so"), str(src / "main.c"), str(src / "hash.c")]
        subprocess.run(cmd, check=True, env={**os.environ, "IRONACCEL_MUTANTS_OBJECTS": str(objects)})

    build('"a"')
    build('"b"')  # a new hash: hash.c again, main.c reused
    assert sorted(p.name.split("-")[0] for p in objects.glob("*.o")) == ["hash", "hash", "main"]
    (src / "part.inc").write_text("static int part(void) { return 2; }\n")
    build('"b"')  # an included part changed: every object of its folder again
    assert sorted(p.name.split("-")[0] for p in objects.glob("*.o")) == ["hash", "hash", "hash", "main", "main"]


def test_the_coverage_build_tells_the_c_lines_no_test_ran(tmp_path):
    """cc.py with IRONACCEL_MUTANTS_GCOV=1 builds with gcov; covered.gcov_lines reads the counters a process left
    at exit: the branch not taken is a line of code never run (no mutant is drawn there), the others ran."""
    import subprocess

    (tmp_path / "a.c").write_text("int f(int x) {\n    if (x > 3)\n        return x * 7;\n    return 2;\n}\n")
    objects = tmp_path / "objects"
    env = {**os.environ, "IRONACCEL_MUTANTS_OBJECTS": str(objects), "IRONACCEL_MUTANTS_GCOV": "1"}
    subprocess.run([sys.executable, str(ROOT / "ci" / "mutants" / "cc.py"), "-O0", "-fPIC", "-shared", "-o",
                    str(tmp_path / "a.so"), str(tmp_path / "a.c")], check=True, env=env)
    subprocess.run([sys.executable, "-c", f"import ctypes; assert ctypes.CDLL({str(tmp_path / 'a.so')!r}).f(1) == 2"],
                   check=True)
    unrun, summary = covered.gcov_lines(objects, tmp_path)
    assert unrun == {"a.c": [3]} and summary == {"a.c": [4, 3, 0, 0]}


def test_the_coverage_build_tells_the_c_lines_an_if_branch_not_taken_drops(tmp_path):
    """The lines of an ``#if`` branch the build does not take hold no code: no mutant is drawn there (one in the
    Python 3.12 branch of _fast_c on 3.11 was drawn and could only survive); the taken branch, a macro's
    definition and a line ending in a comment are kept."""
    import subprocess

    (tmp_path / "part.h").write_text("#if NEVER\nint g(void) { return 5; }\n#endif\n")
    (tmp_path / "a.c").write_text('#include "part.h"\n#define TWICE(x) \\\n    ((x) * 2)\nint f(int x) {\n'
                                  "#if NEVER\n    return x + 1;\n#else\n    return TWICE(x); // the other\n#endif\n}\n")
    objects = tmp_path / "objects"
    env = {**os.environ, "IRONACCEL_MUTANTS_OBJECTS": str(objects), "IRONACCEL_MUTANTS_GCOV": "1"}
    subprocess.run([sys.executable, str(ROOT / "ci" / "mutants" / "cc.py"), "-fPIC", "-shared", "-o",
                    str(tmp_path / "a.so"), str(tmp_path / "a.c")], check=True, env=env)
    assert covered.inactive_lines(objects, tmp_path) == {"a.c": [6], "part.h": [2]}
    cov = covered.Coverage({}, {}, {}, 0.0, {"t": "pass"}, {}, {}, c_inactive={"fakes/cuda/a.c": [6]})
    finder = generated.tests_finder("fakes/cuda/a.c", lambda build, cov: {"f": ["t"]}, cov, {"t"})
    at = lambda line: operators.Mutant("x", "fakes/cuda/a.c", line, "f", "const", 0, 1, "1", "2")  # noqa: E731
    assert finder(at(6)) == [] and finder(at(8)) == ["t"]


# -- the judging of a generated mutant: covering tests first, then the rest of the suite (judging.py) ------------

import judging  # noqa: E402
import reporting  # noqa: E402

SUITE = {"a": "pass", "b": "pass", "c": "not-supported", "d": "pass", "e": "fail"}  # e fails unmutated: never run


class FakeCertify:
    """Stands for run.certify: every test gives its baseline outcome but those in ``differs``; records each call."""

    def __init__(self, differs: dict[str, str]):
        self.differs, self.calls = differs, []

    def __call__(self, tree, target, env, results, only, limit, test_timeout=60):
        self.calls.append((tuple(only), limit, env["PYTEST_ADDOPTS"]))
        return {"run": {"status": "ok", "message": ""}, "builds": {},
                "tests": [{"id": t, "outcome": self.differs.get(t, SUITE[t])} for t in only]}, ""


def judged(monkeypatch, tmp_path, covering: list[str], differs: dict[str, str]):
    """A Python mutant judged with ``covering`` as its covering tests, against SUITE's baseline (a recorded run
    of 100 s), certify faked by FakeCertify(differs): (the outcome, the certify calls)."""
    (tmp_path / "m.py").write_text("x = 1\n")
    fake = FakeCertify(differs)
    monkeypatch.setattr(judging, "certify", fake)
    monkeypatch.setattr(judging, "copy_tree", lambda dest, src, platform: (dest / "m.py").write_text("x = 1\n"))
    mutant = operators.Mutant("m.py::const:00000000", "m.py", 1, "", "const", 4, 5, "1", "2", toplevel=True)
    run = modules.Run("t/fake", "t/fake")
    base = covered.Coverage({}, {}, {}, 100.0, SUITE, dict.fromkeys(SUITE, 2.0), {})
    outcome = judging.run_candidate(judging.Candidate(mutant, "area", run, covering), tmp_path, {run.name: base},
                                    300, 30, False)
    return outcome, fake.calls


def test_a_mutant_its_covering_tests_kill_is_not_escalated(monkeypatch, tmp_path):
    outcome, calls = judged(monkeypatch, tmp_path, ["a", "b"], {"b": "fail"})
    assert (outcome.status, outcome.stage, outcome.killers) == ("killed", "covering", ["b (fail)"])
    assert not outcome.escalation_s
    assert calls == [(("a", "b"), 60 + 4 * 4.0, "--maxfail=1")]  # the covering tests' limit: 60 s + 4 x their time


def test_a_survivor_of_its_covering_tests_is_killed_by_the_rest_of_the_suite(monkeypatch, tmp_path):
    """The escalation runs every other test that passes unmutated (not the covering ones again, not e, which
    fails unmutated and would stop a fail-fast run), fail-fast, within 60 s + 4 x the recorded run's time."""
    outcome, calls = judged(monkeypatch, tmp_path, ["a"], {"c": "fail"})
    assert (outcome.status, outcome.stage, outcome.killers) == ("killed", "suite", ["c (fail)"])
    assert calls == [(("a",), 60 + 4 * 2.0, "--maxfail=1"), (("b", "c", "d"), 60 + 4 * 100.0, "--maxfail=1")]
    assert outcome.escalated == 3 and outcome.escalation_s > 0 and outcome.ran == 1


def test_the_escalation_runs_the_likely_killers_first():
    """Those that execute the line but --max-tests left out, in a run of their own before the others (fail-fast:
    a kill there skips the rest of the suite); each run in the suite's order."""
    rest = ["f.py::x", "g.py::late", "g.py::y", "h.py::z"]
    assert judging.likely_first(rest, ["h.py::z", "g.py::y", "k.py::w"]) == [["g.py::y", "h.py::z"],
                                                                             ["f.py::x", "g.py::late"]]
    assert judging.likely_first(rest, ["k.py::w"]) == [rest]
    assert judging.likely_first(rest, rest) == [rest]


def test_a_survivor_is_escalated_to_its_likely_killers_then_the_rest(monkeypatch, tmp_path):
    """A mutant whose line 3 tests execute, of which --max-tests chose 1: the escalation runs the 2 left out
    first, then the rest; a kill among the first ends it there."""
    suite = {"t1.py::a": "pass", "t1.py::b": "pass", "t2.py::c": "pass", "t3.py::d": "pass"}
    calls = []

    def certify(tree, target, env, results, only, limit, test_timeout=60):
        calls.append(tuple(only))
        return {"run": {"status": "ok", "message": ""}, "builds": {},
                "tests": [{"id": t, "outcome": "fail" if t == killer else suite[t]} for t in only]}, ""
    monkeypatch.setattr(judging, "certify", certify)
    monkeypatch.setattr(judging, "copy_tree", lambda dest, src, platform: (dest / "m.py").write_text("x = 1\n"))
    mutant = operators.Mutant("m.py::const:00000000", "m.py", 1, "", "const", 4, 5, "1", "2")
    run = modules.Run("t/fake", "t/fake")
    base = covered.Coverage({}, {}, {}, 100.0, suite, dict.fromkeys(suite, 2.0), {})
    candidate = judging.Candidate(mutant, "area", run, ["t1.py::a"],
                                  executing={run.name: ["t1.py::a", "t1.py::b", "t3.py::d"]})
    runs = [("t1.py::a",), ("t1.py::b", "t3.py::d"), ("t2.py::c",)]
    for killer, status, escalated in (("t3.py::d", "killed", 2), ("t2.py::c", "killed", 3), ("", "survived", 3)):
        calls.clear()
        outcome = judging.run_candidate(candidate, tmp_path, {run.name: base}, 300, 30, False)
        assert (outcome.status, outcome.escalated) == (status, escalated)
        assert calls == runs[:2 if killer == "t3.py::d" else 3]


def test_a_survivor_is_one_the_whole_suite_misses(monkeypatch, tmp_path):
    outcome, calls = judged(monkeypatch, tmp_path, ["a", "d"], {"e": "pass", "c": "not-supported"})  # as unmutated
    assert (outcome.status, outcome.stage, outcome.ran, outcome.escalated) == ("survived", "", 2, 2)
    assert [only for only, _, _ in calls] == [("a", "d"), ("b", "c")]
    assert "2 covering tests and the suite's 2 others" in outcome.detail
    everything, calls = judged(monkeypatch, tmp_path, ["a", "b", "c", "d"], {})
    assert everything.status == "survived" and len(calls) == 1 and not everything.escalation_s  # nothing left


class FlakyOnce(FakeCertify):
    """FakeCertify whose ``differs`` hold for the first call alone, ``later`` for the calls after it: a test
    flaky under load, as in the baseline (or failing outright) when run again."""

    def __init__(self, differs: dict[str, str], later: dict[str, str] | None = None):
        super().__init__(differs)
        self.later = later or {}

    def __call__(self, tree, target, env, results, only, limit, test_timeout=60):
        doc = super().__call__(tree, target, env, results, only, limit, test_timeout)
        self.differs = self.later
        return doc


def test_a_kill_by_flaky_outcomes_alone_stands_only_where_one_more_run_fails_them(monkeypatch, tmp_path):
    """A test that passed only when re-run may be the machine's load or the sanitized build, not the mutant:
    its kill stands only when a second run of the flaky tests fails one outright; flaky twice, or as in the
    baseline, is no kill (the survivor goes on to the rest of the suite); a failure needs no confirmation."""
    twice, calls = judged(monkeypatch, tmp_path, ["a", "b"], {"b": "flaky"})
    assert twice.status == "survived" and [c[0] for c in calls][:2] == [("a", "b"), ("b",)]
    failed, calls = judged(monkeypatch, tmp_path, ["a", "b"], {"a": "fail", "b": "flaky"})
    assert failed.status == "killed" and [c[0] for c in calls] == [("a", "b")]
    run = modules.Run("t/fake", "t/fake")
    mutant = operators.Mutant("m.py::const:00000000", "m.py", 1, "", "const", 4, 5, "1", "2", toplevel=True)
    base = covered.Coverage({}, {}, {}, 100.0, SUITE, dict.fromkeys(SUITE, 2.0), {})
    for later, status in (({}, "survived"), ({"b": "fail"}, "killed")):
        fake = FlakyOnce({"b": "flaky"}, later)
        monkeypatch.setattr(judging, "certify", fake)
        once = judging.run_candidate(judging.Candidate(mutant, "area", run, ["a", "b"]), tmp_path,
                                     {run.name: base}, 300, 30, False)
        assert once.status == status and [c[0] for c in fake.calls][:2] == [("a", "b"), ("b",)]
        if status == "killed":
            assert once.killers == ["b (fail)"]


def test_a_run_the_machine_refused_processes_is_tried_again_and_never_a_kill(monkeypatch, tmp_path):
    """A certify that left no results file because fork was refused (EAGAIN: a few seconds of a full process
    table once made 8 mutants "killed" in 1 s each) is tried again; a try that writes its results is the verdict,
    and refusals on every try make the mutant "not judged" — never killed, never counted. A run that left no
    results for any other reason (a mutant that breaks certify itself) stays a kill."""
    exhausted = "BlockingIOError: [Errno 11] Resource temporarily unavailable"
    results = tmp_path / "results"
    tries = []
    succeed_on, stderr = 0, ""

    def reaped(cmd, limit, env, **kwargs):
        tries.append(cmd)
        if len(tries) == succeed_on:
            results.mkdir(exist_ok=True)
            (results / "t-fake.json").write_text(json.dumps({"run": {"status": "ok"}, "tests": []}))
        return subprocess.CompletedProcess(cmd, 1, "", stderr)

    monkeypatch.setattr(run, "reaped", reaped)
    monkeypatch.setattr(run.time, "sleep", lambda seconds: None)
    for succeed_on, stderr, want in ((2, exhausted, "results"), (0, exhausted, run.NOT_JUDGED),
                                     (0, "ImportError: a mutated certify", "certify exited 1")):
        tries.clear()
        shutil.rmtree(results, ignore_errors=True)
        doc, problem = run.certify(tmp_path, "t/fake", {}, results, ("a",), 10)
        if want == "results":
            assert doc is not None and len(tries) == 2, (doc, problem, tries)
        else:
            assert doc is None and problem.startswith(want), problem
            assert len(tries) == (run.EXHAUSTED_TRIES if want == run.NOT_JUDGED else 1), tries
    monkeypatch.setattr(judging, "certify", lambda *args: (None, run.NOT_JUDGED + "the machine refused processes"))
    monkeypatch.setattr(judging, "copy_tree", lambda dest, src, platform: (dest / "m.py").write_text("x = 1\n"))
    mutant = operators.Mutant("m.py::const:00000000", "m.py", 1, "", "const", 4, 5, "1", "2", toplevel=True)
    target = modules.Run("t/fake", "t/fake")
    base = covered.Coverage({}, {}, {}, 100.0, SUITE, dict.fromkeys(SUITE, 2.0), {})
    outcome = judging.run_candidate(judging.Candidate(mutant, "area", target, ["a"]), tmp_path, {target.name: base},
                                    300, 30, False)
    assert outcome.status == "not judged" and not outcome.killers, outcome


def test_a_test_slower_unmutated_than_a_quarter_of_the_test_timeout_gets_four_times_its_time(monkeypatch, tmp_path):
    """The per-test timeout of a judged run is --test-timeout, or 4 times its slowest test's unmutated time where
    that is more: GLSL's endless-macro refusal takes 31 s unmutated and timed out at 30 s under every mutant."""
    timeouts = []

    def certify(tree, target, env, results, only, limit, test_timeout=60):
        timeouts.append((tuple(only), test_timeout))
        return {"run": {"status": "ok", "message": ""}, "builds": {},
                "tests": [{"id": t, "outcome": SUITE[t]} for t in only]}, ""
    monkeypatch.setattr(judging, "certify", certify)
    monkeypatch.setattr(judging, "copy_tree", lambda dest, src, platform: (dest / "m.py").write_text("x = 1\n"))
    mutant = operators.Mutant("m.py::const:00000000", "m.py", 1, "", "const", 4, 5, "1", "2", toplevel=True)
    run = modules.Run("t/fake", "t/fake")
    base = covered.Coverage({}, {}, {}, 100.0, SUITE, {**dict.fromkeys(SUITE, 2.0), "d": 31.0}, {})
    judging.run_candidate(judging.Candidate(mutant, "area", run, ["a"]), tmp_path, {run.name: base}, 300, 30, False)
    assert timeouts == [(("a",), 30), (("b", "c", "d"), 4 * 31.0)]


def test_a_line_run_at_import_is_judged_on_every_run_that_imports_it(monkeypatch, tmp_path):
    """A survivor of its first run's covering tests is judged by its tests of each other run (against that
    run's baseline, with its environment) before the escalation: a default one backend leaves to it."""
    fake = FakeCertify({"d": "fail"})
    monkeypatch.setattr(judging, "certify", fake)
    monkeypatch.setattr(judging, "copy_tree", lambda dest, src, platform: (dest / "m.py").write_text("x = 1\n"))
    mutant = operators.Mutant("m.py::const:00000000", "m.py", 1, "", "const", 4, 5, "1", "2", toplevel=True)
    first, pure, other = (modules.Run("t/one", "t/one"), modules.Run("t/one pure", "t/one", {"X": "1"}),
                          modules.Run("t/two", "t/two"))
    base = covered.Coverage({}, {}, {}, 100.0, SUITE, dict.fromkeys(SUITE, 2.0), {})
    candidate = judging.Candidate(mutant, "area", first, ["a"], [(pure, ["b"]), (other, ["b", "d"])])
    outcome = judging.run_candidate(candidate, tmp_path, {r.name: base for r in (first, pure, other)}, 300, 30, False)
    assert (outcome.status, outcome.stage, outcome.killers, outcome.ran) == ("killed", "other run", ["d (fail)"], 4)
    assert [only for only, _, _ in fake.calls] == [("a",), ("b",), ("b", "d")]  # no escalation: killed before


def test_a_survivor_is_escalated_on_every_run_that_executes_its_line(monkeypatch, tmp_path):
    """A survivor of every run's covering tests and its first run's escalation is escalated on each other run
    that executes its line, in turn (within that run's limit): another target's run, where the test that shows
    it may be one the covering sample left out (api.py's default warp_size on OpenCL), and the pure-Python run,
    the only one where the suite reaches the code the compiled module stands in for."""
    calls = []

    def certify(tree, target, env, results, only, limit, test_timeout=60):
        calls.append((env.get("X", ""), tuple(only)))
        killed = env.get("X") == "2" and "c" in only
        return {"run": {"status": "ok", "message": ""}, "builds": {},
                "tests": [{"id": t, "outcome": "fail" if killed and t == "c" else SUITE[t]} for t in only]}, ""
    monkeypatch.setattr(judging, "certify", certify)
    monkeypatch.setattr(judging, "copy_tree", lambda dest, src, platform: (dest / "m.py").write_text("x = 1\n"))
    mutant = operators.Mutant("m.py::const:00000000", "m.py", 1, "", "const", 4, 5, "1", "2", toplevel=True)
    first, pure, other = (modules.Run("t/one", "t/one"), modules.Run("t/one pure", "t/one", {"X": "1"}),
                          modules.Run("t/two", "t/two", {"X": "2"}))
    base = covered.Coverage({}, {}, {}, 100.0, SUITE, dict.fromkeys(SUITE, 2.0), {})
    candidate = judging.Candidate(mutant, "area", first, ["a"], [(other, ["a"]), (pure, ["a"])])
    outcome = judging.run_candidate(candidate, tmp_path, {r.name: base for r in (first, pure, other)}, 300, 30, False)
    assert calls == [("", ("a",)), ("2", ("a",)), ("1", ("a",)), ("", ("b", "c", "d")), ("2", ("b", "c", "d"))]
    assert (outcome.status, outcome.stage, outcome.killers, outcome.escalated) == ("killed", "suite", ["c (fail)"], 6)


def test_a_fake_mutant_is_judged_on_the_fakes_sanitized_build_too(monkeypatch, tmp_path):
    """A memory error of the fake that changes no result on its plain build (a write one past a stack array into
    the frame's padding) ends the run on its ASan build: a survivor of cuda/fake's covering tests is judged on the
    sanitized run next, with that run's own build of the mutant made first and checked as the one it loaded, and
    the kill names the run; a sanitized build that cannot be made is "not built", never a survivor."""
    from ironaccel import fakes

    monkeypatch.setattr(fakes, "sanitizer_env", lambda base=None: {**base, "IRONACCEL_FAKE_SANITIZE": "1"})
    calls, builds = [], []

    def certify(tree, target, env, results, only, limit, test_timeout=60):
        sanitized = env.get("IRONACCEL_FAKE_SANITIZE") == "1"
        calls.append((sanitized, tuple(only)))
        status = ("crashed", "AddressSanitizer: stack-buffer-overflow") if sanitized else ("ok", "")
        return {"run": dict(zip(("status", "message"), status)), "builds": {"driver": "h"},
                "tests": [{"id": t, "outcome": SUITE[t]} for t in only]}, ""

    def build_mutant(c, tree, env):
        builds.append((c.run.name, env.get("IRONACCEL_FAKE_SANITIZE", "")))
        return "h", ""
    monkeypatch.setattr(judging, "certify", certify)
    monkeypatch.setattr(judging, "build_mutant", build_mutant)
    monkeypatch.setattr(judging, "copy_tree", lambda dest, src, platform: (
        (dest / "fakes" / "cuda").mkdir(parents=True), (dest / "fakes" / "cuda" / "x.c").write_text("x = 1\n")))
    mutant = operators.Mutant("fakes/cuda/x.c:f:const:00000000", "fakes/cuda/x.c", 1, "f", "const", 4, 5, "1", "2")
    plain, sanitized = (r for name in ("cuda/fake", "cuda/fake sanitized") for r in modules.RUNS if r.name == name)
    assert sanitized.sanitized and sanitized.target == plain.target and "fake" in sanitized.areas
    base = covered.Coverage({}, {}, {}, 100.0, SUITE, dict.fromkeys(SUITE, 2.0), {})
    candidate = judging.Candidate(mutant, "fake", plain, ["a"], [(sanitized, ["a", "b"])])
    outcome = judging.run_candidate(candidate, tmp_path, {plain.name: base, sanitized.name: base}, 300, 30, False)
    assert calls == [(False, ("a",)), (True, ("a", "b"))] and builds == [(plain.name, ""), (sanitized.name, "1")]
    assert (outcome.status, outcome.stage, outcome.killed_on) == ("killed", "other run", "cuda/fake sanitized")
    assert "stack-buffer-overflow" in outcome.detail
    monkeypatch.setattr(judging, "build_mutant", lambda c, tree, env: ("h", "") if c.run is plain else (None, "no"))
    unbuilt = judging.run_candidate(candidate, tmp_path, {plain.name: base, sanitized.name: base}, 300, 30, False)
    assert (unbuilt.status, unbuilt.detail) == ("not built", "cuda/fake sanitized: no")


def test_generated_mutants_go_to_every_run_that_executes_their_line(tmp_path):
    (tmp_path / "m.py").write_text("LIMIT = 4\n\n\ndef f(n):\n    return n < 2\n")
    cov = covered.Coverage({"m.py": {1: ["a"], 5: ["b"]}}, {}, {}, 1.0, SUITE, {}, {})
    runs = [(modules.Run("one", "one"), cov), (modules.Run("two", "two"), cov)]
    pool, _ = generated.candidates("area", ["m.py"], tmp_path, runs, {})
    limit, body = (next(c for c in pool if c.mutant.old == v) for v in ("4", "2"))
    assert (limit.run.name, limit.tests, [(r.name, t) for r, t in limit.others]) == ("one", ["a", "b"], [("two", ["a", "b"])])
    assert (body.run.name, body.tests, [(r.name, t) for r, t in body.others]) == ("one", ["b"], [("two", ["b"])])


def test_a_platform_survivor_of_its_covering_unit_tests_is_escalated_to_the_rest(monkeypatch, tmp_path):
    """The platform's mutants follow the same rule with pytest -x as the judge: the covering unit tests, then
    every other one that passes unmutated (not e, which fails unmutated)."""
    calls = []

    def pytest(cmd, limit, env, **kw):
        tests = cmd[cmd.index("--timeout") + 2:]
        calls.append((tuple(tests), limit))
        failing = [t for t in tests if t == "c"]
        return subprocess.CompletedProcess(cmd, 1 if failing else 0, "".join(f"FAILED {t}\n" for t in failing), "")

    monkeypatch.setattr(judging, "reaped", pytest)
    monkeypatch.setattr(judging, "copy_tree", lambda dest, src, platform: (dest / "m.py").write_text("x = 1\n"))
    mutant = operators.Mutant("m.py::const:00000000", "m.py", 1, "", "const", 4, 5, "1", "2")
    base = covered.Coverage({}, {}, {}, 100.0, SUITE, {}, {})
    outcome = judging.run_candidate(judging.Candidate(mutant, "area", None, ["a"]), tmp_path, {"unit tests": base},
                                    300, 30, True)
    assert (outcome.status, outcome.stage, outcome.killers, outcome.escalated) == ("killed", "suite", ["c"], 3)
    assert calls == [(("a",), 300), (("b", "c", "d"), 60 + 4 * 100.0)]
    calls.clear()
    outcome = judging.run_candidate(judging.Candidate(mutant, "area", None, ["a", "c"]), tmp_path,
                                    {"unit tests": base}, 300, 30, True)
    assert (outcome.status, outcome.stage, [c for c, _ in calls]) == ("killed", "covering", [("a", "c")])


def test_the_report_counts_kills_by_stage_per_area():
    def outcome(area, status, stage, escalation_s):
        return judging.Outcome(judging.Candidate(None, area, None, []), status, stage=stage, escalation_s=escalation_s,
                               escalated=5 if escalation_s else 0)

    table = reporting.stage_table([outcome("x", "killed", "covering", 0), outcome("x", "killed", "suite", 60),
                                   outcome("x", "survived", "", 120), outcome("y", "killed", "covering", 0),
                                   outcome("y", "killed", "other run", 0)])
    assert table[2:] == ["| x | 1 | 0 | 1 | 2 | 10 | 3.0 min |", "| y | 1 | 1 | 0 | 0 | 0 | 0.0 min |",
                         "| **all** | 2 | 1 | 1 | 2 | 10 | 3.0 min |"]


def test_a_platform_recording_past_its_limit_is_a_named_error_and_caches_nothing(tmp_path, monkeypatch):
    """A busy machine made the unit tests' coverage recording run past its limit: the runner says so (main prints
    a RuntimeError and exits 1) instead of dying with a TimeoutExpired traceback, and leaves no cached coverage."""
    def too_slow(cmd, **kwargs):
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])

    monkeypatch.setattr(covered.subprocess, "run", too_slow)
    monkeypatch.setattr(covered, "_cached", lambda name: tmp_path / "cache" / f"{name}.json")
    with pytest.raises(RuntimeError, match=r"ran past 5 s .*--record-timeout"):
        covered.record_platform(tmp_path, ["ironaccel/cts/judge.py"], "digest", 5, ("tests/test_results.py",))
    assert not (tmp_path / "cache").exists()


def test_what_a_mutants_run_leaves_behind_is_killed_also_in_a_session_of_its_own(tmp_path):
    """A mutated certify that no longer kills its test process (platform seed s12c) left hung processes for
    the rest of the sample: the runner kills whatever the run started once it returns."""
    pid_file = tmp_path / "pid"
    script = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
              f" start_new_session=True); open({str(pid_file)!r}, 'w').write(str(p.pid))")
    proc = run.reaped([sys.executable, "-c", script], 60, dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    left = int(pid_file.read_text())
    assert not run._alive(Path(f"/proc/{left}/stat")), "the detached child still runs"


import union  # noqa: E402


def _run_cov(executed: dict) -> covered.Coverage:
    return covered.Coverage({}, {}, {}, 1.0, {}, {}, {}, executed=executed)


def test_a_backend_modules_branch_coverage_is_the_union_of_its_own_runs_arcs():
    """A branch taken by either CUDA run counts once; another backend's run of the same file counts not; the
    branches are those any run knows (taken or missing), not a sum of percentages."""
    f = "ironaccel/backends/cuda/stream.py"
    covs = {
        "cuda/fake": _run_cov({f: {"lines": [1, 2, 3], "missing_lines": [4, 5],
                                   "taken": [[2, 3], [3, -1]], "missing": [[2, 4], [3, 5]]}}),
        "cuda/fake pure-python": _run_cov({f: {"lines": [1, 2, 4], "missing_lines": [3, 5],
                                               "taken": [[2, 4]], "missing": [[2, 3], [3, 5], [3, -1]]}}),
        "vulkan/lavapipe": _run_cov({f: {"lines": [5], "missing_lines": [], "taken": [[3, 5]], "missing": []}}),
    }
    (m,) = union.union(covs)
    assert (m.file, m.backend, m.runs) == (f, "cuda", ["cuda/fake", "cuda/fake pure-python"])
    assert (len(m.lines_run), len(m.lines)) == (4, 5)
    assert (len(m.taken), len(m.branches)) == (3, 4)  # vulkan's 3->5 is not cuda's own
    assert m.missing == [f"{f}:3->5"]
    assert m.reachable({f"{f}:3->5": "a real driver's error"}) == 3
    assert m.reachable({f"{f}:2->3": "taken: no effect"}) == 4


def test_the_union_section_gives_reasons_and_flags_stale_entries(tmp_path):
    f = "ironaccel/backends/opengl/context.py"
    covs = {"opengl/llvmpipe": _run_cov({f: {"lines": [1], "missing_lines": [2], "taken": [[1, 2]],
                                             "missing": [[1, 3], [5, -4]]}})}
    listed = tmp_path / "unreachable.txt"
    listed.write_text(f"# comment\n\n{f}:5->exit only a driver without GL 4.3\n{f}:1->2 taken now\n")
    reasons = union.read_unreachable(listed)
    assert reasons == {f"{f}:5->exit": "only a driver without GL 4.3", f"{f}:1->2": "taken now"}
    text = "\n".join(union.section(covs, reasons))
    assert f"| {f} | opengl/llvmpipe | 1/2 | 50% | 1/3 | 33% | 1 | 50% |" in text
    assert f"`{f}:1->3`\n" in text + "\n" and f"`{f}:5->exit`: unreachable: only a driver without GL 4.3" in text
    assert "Stale entries" in text and f"- `{f}:1->2`" in text
    assert "No run recorded" in "\n".join(union.section({"opengl/llvmpipe": _run_cov({})}, {}))


def test_renumbering_moves_entries_with_their_code_and_leaves_changed_lines(tmp_path):
    f = "mod.py"
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    (tmp_path / f).write_text("def a(x):\n    if x:\n        return 1\n    if not x:\n        return 2\n")
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", f], check=True)
    subprocess.run(git + ["commit", "-qm", "m"], check=True)
    (tmp_path / f).write_text("import os\n\ndef a(x):\n    if x:\n        return 1\n    if x is None:\n        return 2\n")
    listed = tmp_path / "unreachable.txt"
    listed.write_text(f"# kept\n{f}:2->3 only a real driver\n{f}:4->exit changed since\n")
    assert union.renumber("HEAD", listed, tmp_path) == [f"{f}:2->3 -> {f}:4->5"]
    assert listed.read_text() == f"# kept\n{f}:4->5 only a real driver\n{f}:4->exit changed since\n"


def test_every_unreachable_entry_names_a_backend_branch_with_a_reason():
    for branch, reason in union.read_unreachable().items():
        assert re.fullmatch(r"[\w./-]+\.py:\d+->(\d+|exit)", branch) and union.backend_of(branch.rpartition(":")[0]), branch
        assert reason, branch


def test_a_mutant_of_a_file_that_fills_a_cache_fills_one_of_its_own(tmp_path, monkeypatch):
    """A mutant of nvrtc.py can store what it compiled wrongly (an empty PTX under a broken source's key): read by
    every later run from the shared cache, it would change their outcomes. Its runs start that kind empty in a
    cache of their own, every other kind linked; other Python mutants use the shared cache as it is."""
    shared = tmp_path / "shared"
    for kind in ("nvrtc", "fakecuda", "mutants"):
        (shared / kind).mkdir(parents=True)
    monkeypatch.setenv("IRONACCEL_CACHE", str(shared))
    run = modules.RUNS[0]

    def env_of(file: str, scratch: Path) -> dict[str, str]:
        scratch.mkdir()
        mutant = operators.Mutant("m", file, 1, "f", "const", 0, 1, "0", "1")
        return judging.mutant_env(judging.Candidate(mutant, "cuda", run, ["t"]), tmp_path, scratch)

    env = env_of("ironaccel/backends/cuda/nvrtc.py", tmp_path / "a")
    own = Path(env["IRONACCEL_CACHE"])
    assert own != shared and sorted(p.name for p in own.iterdir()) == ["fakecuda"]
    assert (own / "fakecuda").resolve() == (shared / "fakecuda").resolve() and "CC" not in env
    assert judging.mutant_env(judging.Candidate(operators.Mutant("m", "ironaccel/backends/cuda/nvrtc.py", 1, "f", "const",
                                                                 0, 1, "0", "1"), "cuda", run, ["t"]),
                              tmp_path, tmp_path / "a")["IRONACCEL_CACHE"] == str(own)  # another run of it: the same
    assert env_of("ironaccel/backends/cuda/device.py", tmp_path / "b")["IRONACCEL_CACHE"] == str(shared)
    assert set(modules.CACHE_WRITERS) <= {f for globs in modules.SUITE_AREAS.values() for g in globs
                                          for f in map(str, [p.relative_to(ROOT) for p in ROOT.glob(g)])}


def test_the_compiled_modules_calls_are_recorded_on_every_run_that_judges_its_mutants(tmp_path, monkeypatch):
    """The probe maps a test to the compiled module's C functions through the methods it calls; a run of the
    ``fast`` area that records none (vulkan/lavapipe did not: the probe recorded on cuda/ targets alone) never
    judges a mutant there, and the MemPool core's non-CUDA path went unjudged."""
    monkeypatch.setenv("IRONACCEL_CACHE", str(tmp_path))
    asked: dict[str, str] = {}

    def refuse(tree, target, env, results, only, limit):  # noqa: ARG001
        asked[target] = env.get("IRONACCEL_MUTANTS_FAST_CALLS", "")
        return None, "not run"

    monkeypatch.setattr(covered, "certify", refuse)
    for r in modules.RUNS:
        asked.clear()
        with pytest.raises(RuntimeError):
            covered.record_suite(r, ROOT, [], f"test-{r.name}", 1)
        assert (asked[r.target] == "1") == ("fast" in r.areas), r.name
    with open(ROOT / "ci" / "mutants" / "probe.py", encoding="utf-8") as f:
        assert 'FAST_CALLS = "IRONACCEL_MUTANTS_FAST_CALLS"' in f.read()  # the name the probe reads
