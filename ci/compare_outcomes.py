"""Did a change preserve behaviour? ``python ci/compare_outcomes.py BEFORE AFTER``: two results folders (each
from ``ironaccel certify --all --results FOLDER``), every target's per-test outcomes side by side.

Prints one row per target (tests, same outcome, changed, only before, only after, run status) and then each
test whose outcome differs; exit 1 when any target or test differs. Durations, hashes and messages are not
compared: a move of code changes them without changing what a run does.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ironaccel.cts import results, tables


def outcomes(folder: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """target -> (its run status, test id -> outcome), for every results file in ``folder``."""
    found = {}
    for path in sorted(folder.glob("*.json")):
        if path.name.endswith(results.CERTIFICATE_SUFFIX):
            continue
        doc = results.load(path)
        found[doc["target"]["name"]] = (doc["run"]["status"], {t["id"]: t["outcome"] for t in doc["tests"]})
    return found


def compare(before: Path, after: Path) -> tuple[list[list[str]], list[str]]:
    """The table's rows and the differing tests, one line each."""
    old, new = outcomes(before), outcomes(after)
    rows, differences = [], []
    for target in sorted(old.keys() | new.keys()):
        if target not in old or target not in new:
            rows.append([target, "", "", "", "", "", "only " + ("after" if target in new else "before")])
            differences.append(f"{target}: results only {'after' if target in new else 'before'}")
            continue
        (old_status, a), (new_status, b) = old[target], new[target]
        changed = sorted(t for t in a.keys() & b.keys() if a[t] != b[t])
        gone, added = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
        status = old_status if old_status == new_status else f"{old_status} -> {new_status}"
        rows.append([target, str(len(a)), str(len(a.keys() & b.keys()) - len(changed)), str(len(changed)),
                     str(len(gone)), str(len(added)), status])
        differences += [f"{target} {t}: {a[t]} -> {b[t]}" for t in changed]
        differences += [f"{target} {t}: {a[t]} before, absent after" for t in gone]
        differences += [f"{target} {t}: absent before, {b[t]} after" for t in added]
        if old_status != new_status:
            differences.append(f"{target}: run {status}")
    return rows, differences


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    rows, differences = compare(Path(argv[0]), Path(argv[1]))
    print("\n".join(tables.markdown(["target", "tests", "same", "changed", "only before", "only after", "run"], rows,
                                    right=range(1, 6))))
    for line in differences:
        print(line)
    print("identical outcomes" if not differences else f"{len(differences)} difference(s)")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
