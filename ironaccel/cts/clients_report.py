"""CLIENTS.md from the client results files alone (``ironaccel clients --report``): per client, each target's
counts, and the tests that pass on hardware (or numba's simulator) but not on the fake, grouped by cause."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from . import client_machine, tables
from .clients import CLIENTS, CUDASIM, FAKE, NVIDIA, OUTCOMES, is_partial
from .runs import RUNS


def load_results(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*--*.json"))]


def load_machines(results: Path) -> dict[str, list[dict]]:
    """Other machines' runs: each subfolder of ``results`` (but its run folders' ``runs/``) holds one machine's
    results files, named after the machine (``clients/results/h200-host/``). A subfolder, not a suffix on the
    file name: ``ironaccel clients --results clients/results/LABEL`` writes there as it writes anywhere, and the
    top-level files, which the rest of CLIENTS.md reads, stay one per (client, target)."""
    if not results.is_dir():
        return {}
    return {d.name: load_results(d) for d in sorted(results.iterdir())
            if d.is_dir() and d.name != RUNS and not d.name.startswith(".")}


_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")
_CUDA_ERROR = re.compile(r"CUDA_ERROR_[A-Z_]+")


def cause(message: str) -> str:
    """A failure's cause for grouping: its CUDA_ERROR_* name if it has one, else its first line with numbers
    and addresses as N (so "at 0x7f.." and "index 3" group)."""
    found = _CUDA_ERROR.search(message)
    if found:
        return found.group(0)
    return _NUMBERS.sub("N", message)[:160] or "(no message)"


def _cell(doc: dict | None) -> list[str]:
    if doc is None:
        return ["not run"] * 4 + [""]
    run = doc["run"]
    notes = []
    if doc["source"]["commit"]:
        notes.append(f"tests of {doc['source']['commit'][:12]}")
    if run["sample"] > 1:
        notes.append(f"1 test in {run['sample']}, by a hash of its id")
    if "shard" in run:
        notes.append(f"shard {run['shard']} only")
    if "shards" in run:
        notes.append(f"{len(run['shards'])} shards joined, each a run of its own; seconds summed")
    if "workers" in run:  # results from before xdist runs do not say
        notes.append("one process" if run["workers"] == "0" else f"xdist -n {run['workers']}")
    if run["select"]:
        notes.append(f"-k {run['select']!r}")
    if run["status"] != "finished":
        notes.append(run["status"])
    notes.append(f"{run['seconds']:g} s")
    return [str(doc["counts"][o]) for o in OUTCOMES] + ["; ".join(notes)]


def _code(cause: str) -> str:
    """A failure's cause as inline code in a Markdown table ('|' would end the cell)."""
    return f"`{cause.replace('|', '/')}`"


def gap(better: dict, worse: dict) -> dict[str, list[str]]:
    """Cause -> test ids that pass on ``better`` but not on ``worse`` (both ran them)."""
    groups: dict[str, list[str]] = {}
    for tid, t in better["tests"].items():
        other = worse["tests"].get(tid)
        if t["outcome"] == "pass" and other is not None and other["outcome"] != "pass":
            key = f"{other['outcome']}: {cause(other['message'])}"
            groups.setdefault(key, []).append(tid)
    return groups


def _gap_section(title: str, groups: dict[str, list[str]], header: str = "outcome there: cause") -> list[str]:
    total = sum(len(v) for v in groups.values())
    lines = [f"#### {title}: {total} tests", ""]
    if not groups:
        return lines + ["none", ""]
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    lines += tables.markdown(["tests", header], [[str(len(ids)), _code(key)] for key, ids in ordered],
                             right={0})
    lines += ["", "<details><summary>the tests, by cause</summary>", ""]
    for key, ids in ordered:
        lines.append(f"- {_code(key)}: " + ", ".join(f"`{i}`" for i in sorted(ids)))
    return lines + ["", "</details>", ""]


def comparisons(by: dict) -> list[dict]:
    """Per client and other target: of the tests that pass there (both runs ran them), how many pass on the
    fake and how the rest end there; ``by``: (client, target) -> results document. CLIENTS.md's summary
    table and the site's clients page are made from these."""
    out = []
    for client in CLIENTS.values():
        fake = by.get((client.name, FAKE))
        for other in (NVIDIA, CUDASIM):
            better = by.get((client.name, other))
            if fake is None or better is None:
                continue
            both = [tid for tid, t in better["tests"].items() if t["outcome"] == "pass" and tid in fake["tests"]]
            ends = [fake["tests"][tid]["outcome"] for tid in both]
            passed = ends.count("pass")
            share = passed / len(both) if both else 0.0
            goal = ""
            if is_partial(fake["run"]) or is_partial(better["run"]):
                goal = "a sample: not a whole-suite figure"
            elif other == NVIDIA and client.fake_goal:
                goal = f">= {client.fake_goal:.0%}: {'met' if share >= client.fake_goal else 'MISSED'}"
            out.append({"client": client.name, "other": other, "pass_there": len(both), "pass_on_fake": passed,
                        "share": share, "fail_on_fake": ends.count("fail") + ends.count("error"),
                        "skip_on_fake": ends.count("skip"), "goal": goal, "gap": gap(better, fake)})
    return out


def _summary(by: dict) -> list[str]:
    """Per client: of the tests that pass on the better target (both ran them), how many pass on the fake."""
    lines = ["## The fake against hardware and numba's simulator", "",
             "Of the tests that pass on the other target and that both runs ran (samples and versions as in the",
             "tables below): how many pass on the fake, and how the rest end there (a skip there is often a package",
             "the fake's machine lacks, see the causes).", ""]
    rows = [[c["client"], c["other"], str(c["pass_there"]), str(c["pass_on_fake"]), f"{c['share']:.1%}",
             str(c["fail_on_fake"]), str(c["skip_on_fake"]), c["goal"]] for c in comparisons(by)]
    header = ["client", "other target", "pass there", "pass on the fake too", "share", "fail or error on the fake",
              "skip on the fake", "goal"]
    return lines + tables.markdown(header, rows, right={2, 3, 4, 5, 6}) + [""]


def _settings(doc: dict) -> dict[str, str]:
    run = doc["run"]
    return {"version": doc["version"], "tests of": doc["source"]["commit"][:12] or doc["source"]["path"],
            "xdist workers": run.get("workers", client_machine.NOT_RECORDED),
            "per-test limit": f"{run['test_timeout_s']:g} s", "run": f"{run['status']}, {run['seconds']:g} s",
            **client_machine.describe(doc)}


def _two_machines(by: dict, machines: dict[str, list[dict]]) -> list[str]:
    """Each client with a fake run on another machine: how far its two fake runs agree, and every difference."""
    pairs = [(label, by[(d["client"], FAKE)], d) for label, docs in machines.items() for d in docs
             if d["target"] == FAKE and (d["client"], FAKE) in by and d["client"] in CLIENTS]
    if not pairs:
        return []
    lines = ["## The fake on two machines", "",
             "Each client's fake run in `clients/results/` (here) against its fake run on another machine, in the",
             "subfolder named after that machine (there). Agreement: of the tests both runs ran, the share that",
             "ended with the same outcome (pass, fail, error or skip); tests only one run ran are counted apart,",
             "not in the share. Every difference is listed by cause: a package whose version differs between the",
             "machines (or that one lacks) and that a message of the test names, listed all the same; else the",
             "per-test time limit or the test's own, when a message is a timeout; else both outcomes with their",
             "causes.", ""]
    results = [(label, here, there, client_machine.agreement(here, there, CLIENTS[here["client"]].optional))
               for label, here, there in sorted(pairs, key=lambda p: (p[1]["client"], p[0]))]
    rows = [[here["client"], label, str(a["both"]), str(a["same"]), f"{a['share']:.1%}", str(a["only_here"]),
             str(a["only_there"])] for label, here, _, a in results]
    lines += tables.markdown(["client", "there", "both ran", "same outcome", "agreement", "only here", "only there"],
                             rows, right={2, 3, 4, 5, 6}) + [""]
    for label, here, there, a in results:
        lines += [f"### {here['client']}: here and on {label}", ""]
        mine, theirs = _settings(here), _settings(there)
        lines += tables.markdown(["", "here", label], [[k, mine[k].replace("|", "/"), theirs[k].replace("|", "/")]
                                                       for k in mine]) + [""]
        lines += _gap_section(f"Different outcomes (of the {a['both']} tests both ran)", a["causes"], "cause")
    return lines


def render(docs: list[dict], machines: dict[str, list[dict]] | None = None) -> str:
    """CLIENTS.md from results documents (``machines``: other machines' runs, ``load_machines``); depends only
    on their content, not their order."""
    by = {(d["client"], d["target"]): d for d in docs}
    lines = ["# Client suites on the fake and on hardware", "",
             "Generated by `ironaccel clients --report` from `clients/results/*.json`; do not edit. Each row is",
             "one run of another project's own test suite (`ironaccel clients --client NAME --target T`).",
             "numba/cudasim is numba's own CUDA simulator (NUMBA_ENABLE_CUDASIM=1), the comparison for the fake;",
             "its skips include tests it cannot run, so compare sets of tests (below), not rates.", ""]
    lines += _summary(by)
    lines += _two_machines(by, machines or {})
    for client in CLIENTS.values():
        lines += [f"## {client.name}", ""]
        rows = []
        for target in client.targets:
            doc = by.get((client.name, target))
            rows.append([target, doc["version"] if doc else "-", *_cell(doc)])
        lines += tables.markdown(["target", "version", *OUTCOMES, "run"], rows, right={2, 3, 4, 5}) + [""]
        fake = by.get((client.name, FAKE))
        if fake is None:
            lines += ["Not run on the fake yet." + (
                f" Its tests are fetched at run time: {client.how_to_get.format(version='<installed version>')}"
                if client.how_to_get else ""), ""]
            continue
        for better_target in (NVIDIA, CUDASIM):
            if better_target not in client.targets:
                continue
            better = by.get((client.name, better_target))
            if better is None:
                lines += [f"#### Pass on {better_target} but not on {FAKE}: {better_target} not run", ""]
            else:
                both = len(better["tests"].keys() & fake["tests"].keys())
                lines += _gap_section(f"Pass on {better_target} but not on {FAKE} (of the {both} tests both ran)",
                                      gap(better, fake))
        failing: dict[str, int] = {}
        for t in fake["tests"].values():
            if t["outcome"] in ("fail", "error"):
                key = f"{t['outcome']}: {cause(t['message'])}"
                failing[key] = failing.get(key, 0) + 1
        ordered = sorted(failing.items(), key=lambda kv: (-kv[1], kv[0]))
        rows = [[str(n), _code(key)] for key, n in ordered] or [["0", "none"]]
        lines += [f"#### Every failure and error on {FAKE}, by cause", ""]
        lines += tables.markdown(["tests", "cause"], rows, right={0}) + [""]
    return "\n".join(lines).rstrip() + "\n"


def report(results: Path, output: Path, check: bool = False) -> int:
    text = render(load_results(results), load_machines(results))
    if check:
        if not output.is_file() or output.read_text() != text:
            print(f"{output} is not what {results} generates: run `ironaccel clients --report`", file=sys.stderr)
            return 1
        return 0
    output.write_text(text)
    print(f"wrote {output} from {results}")
    return 0
