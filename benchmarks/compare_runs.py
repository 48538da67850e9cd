"""Did a bench row move? Each row's ratio to its floors (raw, C floor) in a new bench JSON against the 95%
interval of the same row in an earlier one: within it, faster (below it) or slower (above it). Issue 27 asks
that a behaviour-preserving change keeps every H200 ratio within the last run's interval; this prints that
check as a Markdown table.

    python3 benchmarks/compare_runs.py OLD.json NEW.json [...OLD.json NEW.json]
"""

from __future__ import annotations

import json
import sys

FLOORS = ("raw", "C floor")


def verdict(new: float, old: dict) -> str:
    if new < old["ci_low"]:
        return "faster"
    return "slower" if new > old["ci_high"] else "within"


def compare(old_path: str, new_path: str) -> list[str]:
    old, new = (json.load(open(p)) for p in (old_path, new_path))
    before = {case["name"]: case for case in old["cases"]}
    lines = [f"### {new['target']['name']}: {old['started']} → {new['started']}", "",
             "| operation | floor | before [95% interval] | now | |", "|---|---|---|---|---|"]
    for case in new["cases"]:
        earlier = before.get(case["name"])
        for floor in FLOORS:
            now, then = case["ratios"].get(floor), (earlier or {}).get("ratios", {}).get(floor)
            if now and then:
                lines.append(f"| {case['label']} | {floor} | {then['median']:.2f}× [{then['ci_low']:.2f}–"
                             f"{then['ci_high']:.2f}] | {now['median']:.2f}× | {verdict(now['median'], then)} |")
    return lines + [""]


if __name__ == "__main__":
    pairs = sys.argv[1:]
    if not pairs or len(pairs) % 2:
        sys.exit(__doc__)
    for i in range(0, len(pairs), 2):
        print("\n".join(compare(pairs[i], pairs[i + 1])))
