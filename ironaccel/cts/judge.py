"""The one judge: what results documents prove. Certificates (``ironaccel certify``) and STATUS.md
(``ironaccel status``) both take their verdicts from here, so they say the same thing for the same results;
the words are defined once, in SPEC.md's certification section (``definitions``).

* A clause **passes on a target** when the target has at least one test citing it and every one of
  those tests passed. not-supported, xfail, xpass, skip, flaky, fail and not-run are not passes; a
  clause whose tests there were all not-supported is reported as "not-supported".
* A target's run proves one of ``TARGET_LEVELS`` on its own (``target_level``: a certificate's ``proves``);
  a backend's level (``backend_level``: STATUS.md) combines what its targets prove. Certification is per
  target, never pieced together clause by clause from several targets: one run must pass the whole
  required spec.
* Results at another suite hash are stale and never count toward a level. A run is hardware only on the
  evidence it recorded of its device and driver (``hardware``), never on the file's ``simulated`` field: the
  registry has the target as hardware, the device (name, vendor, driver, its own simulated flag) is that
  target's and no simulated target's, and the run loaded that driver's library and no simulated driver's. A
  hardware claim that evidence or the registry contradicts is tampered (``certify --verify``) and simulated
  here; a target the registry does not know, or a file without evidence, is simply not hardware.
* Stale means: the suite, the target's backend, its driver's sources (the fake) or its expectations file
  changed since the run (``stale_parts``); another backend's change leaves a run current. A run whose loaded
  C builds (the compiled extension, the fake libcuda: ``builds``, as they reported themselves) are not builds
  of the sources here is stale too, whatever hashes its file claims: what ran is not what is claimed.
* A weakened run (``weakenings``: part of the suite, ``--force``, a per-test limit other than the default)
  proves at most partial, whatever passed: a certificate of one that claims more is tampered.
* Several results files for one target: the one that counts is the current, finished, latest one;
  the others are superseded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import spec
from ..api import BackendInfo, DeviceInfo, Limits
from .results import DEFAULT_TEST_TIMEOUT_S, Outcome, RunStatus
from .spec import Clause, Current
from .targets import Target

TARGET_LEVELS = ("hardware", "simulated", "partial", "stale")
LEVELS = ("production", "simulated", "partial", "probe", "unavailable")


def definitions(spec_md: Path | None = None) -> dict[tuple[str, str], str]:
    """SPEC.md's definition of every level (``spec.load_definitions``), checked complete, in the order of
    TARGET_LEVELS then LEVELS."""
    found = spec.load_definitions(spec_md)
    wanted = [("target", t) for t in TARGET_LEVELS] + [("backend", b) for b in LEVELS]
    missing = [f"{kind} level {name}" for kind, name in wanted if (kind, name) not in found]
    if missing:
        raise ValueError(f"{spec_md or 'SPEC.md'}: the certification section does not define {', '.join(missing)}")
    return {key: found[key] for key in wanted}


@dataclass(frozen=True)
class Run:
    """One results document as the judge sees it."""

    doc: dict[str, Any]
    simulated: bool
    stale: tuple[str, ...]  # what changed since it ran (``stale_parts``); empty when current
    # simulated: the judge's view (``runs``); the file's own claim is doc["target"]["simulated"]
    superseded: bool = False  # another results file of the same target is the one that counts
    contradiction: str = ""  # why its hardware claim is false (``hardware``): the file is tampered

    @property
    def name(self) -> str:
        return self.doc["target"]["name"]

    @property
    def backend(self) -> str:
        return self.doc["target"]["backend"]

    @property
    def current(self) -> bool:
        return not self.stale

    @property
    def finished(self) -> bool:
        return self.doc["run"]["status"] == RunStatus.OK

    def label(self) -> str:
        """The target name with what a reader must know before trusting its numbers."""
        marks = ([] if self.current else ["STALE"]) + ([] if self.finished else [self.doc["run"]["status"]])
        marks += ["superseded"] if self.superseded else []
        marks += ["part of the suite"] if "selection" in self.doc else []
        return f"{self.name} ({', '.join(marks)})" if marks else self.name

    def tests(self) -> list[dict[str, Any]]:
        return sorted(self.doc["tests"], key=lambda t: (t["id"], t["outcome"], tuple(t["clauses"])))


def clause_state(outcomes: list[str]) -> str:
    """A clause's state on one target from its tests' outcomes there: pass, untested, or the non-pass
    outcomes seen, in Outcome order joined by "/" (so "not-supported" alone means only not-supported)."""
    if not outcomes:
        return "untested"
    bad = [o.value for o in Outcome if o != Outcome.PASS and o in outcomes]
    return "/".join(bad) if bad else Outcome.PASS.value


def required_clause_states(doc: dict[str, Any], clauses: Mapping[str, Clause]) -> dict[str, str]:
    """Required clause id -> its state (``clause_state``) in one results document, in SPEC.md order."""
    by_clause: dict[str, list[str]] = {}
    for t in doc["tests"]:
        for cid in t["clauses"]:
            by_clause.setdefault(cid, []).append(t["outcome"])
    return {cid: clause_state(by_clause.get(cid, [])) for cid, c in clauses.items() if c.required}


def required_gaps(run: Run, clauses: Mapping[str, Clause]) -> dict[str, str]:
    """Required clause id -> its state on ``run``, for every required clause that does not pass."""
    return {cid: state for cid, state in required_clause_states(run.doc, clauses).items() if state != Outcome.PASS}


def doc_key(doc: dict[str, Any]) -> str:
    """A total order on documents, for ties."""
    return json.dumps(doc, sort_keys=True)


PART_NAMES = {"suite": "the suite", "backend": "the {backend} backend", "driver": "the {driver} driver's sources",
              "expectations": "its expectations file"}


def stale_parts(doc: dict[str, Any], current: Current) -> tuple[str, ...]:
    """What changed since ``doc`` ran: the parts (``spec.Current.parts``) whose hashes differ, in words;
    empty when it is current. A file from before per-part hashes (no ``suite.parts``) is judged by its
    suite hash alone."""
    t = doc["target"]
    recorded = doc["suite"].get("parts") or {"suite": doc["suite"]["hash"]}
    now = current.parts(t["name"]) if "parts" in doc["suite"] else {"suite": current.suite}
    out = []
    for label in ("suite", "backend", "driver", "expectations"):
        if recorded.get(label) != now.get(label):
            what = PART_NAMES[label].format(backend=t["backend"], driver=t["driver"])
            gone = label in recorded and label not in now
            out.append(f"{what} is not here to check" if gone else f"{what} changed")
    builds = doc.get("builds", {})
    for label, key, what in (("compiled", "compiled", "the compiled extension"),
                             ("driver", f"driver/{t['name']}", f"the {t['driver']} driver")):
        loaded, expected = builds.get(label), current.builds.get(key)
        if loaded is not None and loaded != expected:
            out.append(f"{what} that ran is a build of other sources ({loaded}) than these ({expected or 'none'})")
    return tuple(out)


def hardware(doc: dict[str, Any], targets: Mapping[str, Target]) -> tuple[bool, str]:
    """(is the run hardware, the contradiction in its claim or ""), decided from the device and driver
    evidence the run recorded (``results.driver_evidence``) against the target registry; see the module
    docstring. A contradiction: the file claims hardware (``simulated`` false) for a target registered as
    simulated, or its evidence shows a simulated device or driver."""
    t = doc["target"]
    known, evidence = targets.get(t["name"]), t.get("evidence")
    if known is None:
        return False, ""
    if known.simulated:
        return False, "" if t["simulated"] else f"it claims hardware, but the registry has {known.name} as simulated"
    if t["simulated"] or evidence is None:  # a claim of less is never tampered; a file from before evidence proves none
        return False, ""
    info = DeviceInfo(t["backend"], 0, t.get("device", ""), t.get("vendor", ""), evidence["driver"],
                      t.get("driver_version", ""), evidence["simulated"], 0, Limits(0, 0, (0, 0, 0), (0, 0, 0), 0))
    paths = [lib["path"] for lib in evidence["libraries"]]
    simulated_kin = [o for o in targets.values() if o.backend == known.backend and o.simulated]
    why = []
    if evidence["simulated"]:
        why.append("its device reported itself simulated")
    if not known.matches(info):
        why.append(f"its device {info.name!r} ({info.vendor}, driver {info.driver!r}) is not a {known.name} device")
    why += [f"its device is a {o.name} device" for o in simulated_kin if o.matches(info)]
    why += [f"it loaded {path}, the {o.name} driver" for o in simulated_kin if (path := o.library_loaded(paths))]
    if known.library_loaded(paths) is None:
        why.append(f"it loaded no {known.name} driver library")
    return not why, "; ".join(why)


def runs(results: Iterable[dict[str, Any]], current: Current,
         targets: Mapping[str, Target]) -> tuple[list[Run], list[Run]]:
    """(the run that counts per target, superseded runs), each sorted by target name."""
    by_target: dict[str, list[Run]] = {}
    for doc in results:
        t = doc["target"]
        is_hardware, contradiction = hardware(doc, targets)
        run = Run(doc, not is_hardware, stale_parts(doc, current), contradiction=contradiction)
        by_target.setdefault(t["name"], []).append(run)
    chosen, superseded = [], []
    for name in sorted(by_target):
        ranked = sorted(
            by_target[name],
            key=lambda r: (r.current, r.finished, r.doc.get("finished", ""), r.doc.get("started", ""), doc_key(r.doc)),
            reverse=True,
        )
        chosen.append(ranked[0])
        superseded += [replace(r, superseded=True) for r in ranked[1:]]
    return chosen, superseded


def weakenings(doc: dict[str, Any]) -> list[str]:
    """How the run ``doc`` departs from a standard run, in words (empty: none): it ran part of the suite
    (``--only``, ``--skip``, ``--shard``), it was forced (``--force``), or its per-test limit was not
    ``results.DEFAULT_TEST_TIMEOUT_S``. A file from before ``options`` were recorded says nothing of its limit."""
    out = []
    selection = doc.get("selection") or {}
    for option in ("only", "skip"):
        if selection.get(option):
            out.append(f"--{option} {' '.join(selection[option])}")
    if selection.get("shard"):
        out.append(f"--shard {selection['shard']}")
    if "forced" in doc:
        out.append(f"--force ({doc['forced']['missing']})")
    options = doc.get("options")
    if options is not None and options["test_timeout"] != DEFAULT_TEST_TIMEOUT_S:
        limit = options["test_timeout"]
        out.append(f"per-test limit {limit:g} s, not {DEFAULT_TEST_TIMEOUT_S} s" if limit else "no per-test limit")
    return out


def target_level(run: Run, clauses: Mapping[str, Clause]) -> tuple[str, str]:
    """(one of TARGET_LEVELS, why): what one target's run proves on its own — a certificate's ``proves``."""
    n_required = sum(c.required for c in clauses.values())
    if not run.current:
        return "stale", "; ".join(run.stale) + " since the run"
    gaps = required_gaps(run, clauses)
    weakened = weakenings(run.doc)
    if weakened:
        return "partial", (f"{n_required - len(gaps)}/{n_required} required clauses pass on {run.name}, in a "
                           f"weakened run ({'; '.join(weakened)})")
    if run.finished and not gaps:
        kind = "simulated" if run.simulated else "hardware"
        return kind, f"all {n_required} required clauses pass on {kind} target {run.name}"
    note = "" if run.finished else f", run {run.doc['run']['status']}"
    return "partial", f"{n_required - len(gaps)}/{n_required} required clauses pass on {run.name}{note}"


def backend_level(info: BackendInfo | None, backend_runs: list[Run], clauses: Mapping[str, Clause], name: str,
                  targets: Mapping[str, Target]) -> tuple[str, str]:
    """(one of LEVELS, why) of one backend, combining what the runs that count of its targets prove."""
    if info is not None and not info.compute:
        return "probe", info.reason or "no compute path in ironaccel yet"
    proven = {r.name: target_level(r, clauses)[0] for r in backend_runs}
    counted = [r for r in backend_runs if r.current]
    if not counted:
        why = ["no current results"]
        stale = [r.name for r in backend_runs if not r.current]
        if stale:
            why.append(f"stale results only ({', '.join(stale)}): re-run `ironaccel certify`")
        else:
            never = sorted(t.name for t in targets.values() if t.backend == name)
            if never:
                why.append(f"no results for {', '.join(never)}")
        if info is not None and info.reason:
            why.append(info.reason)
        return "unavailable", "; ".join(why)
    hardware = sorted(n for n, level in proven.items() if level == "hardware")
    simulated = sorted(n for n, level in proven.items() if level == "simulated")
    n_required = sum(c.required for c in clauses.values())
    if hardware and simulated:
        return "production", (f"all {n_required} required clauses pass on hardware {', '.join(hardware)} "
                              f"and simulated {', '.join(simulated)}")
    stale = [r.name for r in backend_runs if not r.current]
    if simulated:
        hw_runs = [r.name for r in counted if not r.simulated]
        hw = (f"no hardware target passes them all ({', '.join(hw_runs)})" if hw_runs
              else "no current hardware results")
        if stale:
            hw += f"; stale, not counted: {', '.join(stale)}"
        return "simulated", f"all {n_required} required clauses pass on simulated {', '.join(simulated)}; {hw}"
    parts = []
    for r in counted:
        passing = n_required - len(required_gaps(r, clauses))
        note = "" if r.finished else f", run {r.doc['run']['status']}"
        parts.append(f"{r.name}: {passing}/{n_required} required{note}")
    if hardware:
        parts.append("certified on hardware only, no simulated target passes every required clause")
    if stale:
        parts.append(f"stale, not counted: {', '.join(stale)}")
    return "partial", "; ".join(parts)


#: The exit code of a run that regressed against its baseline (pytest ``--baseline``, ``certify --baseline``);
#: above pytest's own codes (0-5) and certify's (0-4).
EXIT_REGRESSION = 6


@dataclass(frozen=True)
class Comparison:
    """A run against an earlier results file of the same target (its baseline)."""

    target: str
    new_failures: list[str]  # tests failing now that did not fail (or did not exist) in the baseline
    fixes: list[str]  # tests that failed in the baseline and do not now
    newly_flaky: list[str]  # tests flaky now that were not in the baseline
    run_worsened: str = ""  # "ok -> crashed" when the run finished in the baseline and does not now

    @property
    def regressed(self) -> bool:
        return bool(self.new_failures or self.run_worsened)

    def report(self) -> list[str]:
        """Lines for people: one per finding, none when nothing changed."""
        lines = [f"{self.target}: run {self.run_worsened}"] if self.run_worsened else []
        for label, ids in (("new failure", self.new_failures), ("fixed", self.fixes),
                           ("newly flaky", self.newly_flaky)):
            lines += [f"{self.target}: {label}: {tid}" for tid in ids]
        return lines


def compare(baseline: dict[str, Any], doc: dict[str, Any]) -> Comparison:
    """What changed from ``baseline`` to ``doc`` (same target), over the tests ``doc`` ran."""
    before = {t["id"]: Outcome(t["outcome"]) for t in baseline["tests"]}
    new_failures, fixes, newly_flaky = [], [], []
    for t in sorted(doc["tests"], key=lambda t: t["id"]):
        now, was = Outcome(t["outcome"]), before.get(t["id"])
        if now.failure and (was is None or not was.failure):
            new_failures.append(t["id"])
        elif was is not None and was.failure and not now.failure:
            fixes.append(t["id"])
        if now == Outcome.FLAKY and was != Outcome.FLAKY:
            newly_flaky.append(t["id"])
    old_run, new_run = baseline["run"]["status"], doc["run"]["status"]
    worsened = f"{old_run} -> {new_run}" if old_run == RunStatus.OK and new_run != RunStatus.OK else ""
    return Comparison(doc["target"]["name"], new_failures, fixes, newly_flaky, worsened)
