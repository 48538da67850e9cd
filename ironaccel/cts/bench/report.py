"""The outputs of a run: the JSON report (every sample), the Markdown table and a plot (PNG through
matplotlib when it imports, else an SVG written here). Results on a simulated device say SIMULATED in each."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .. import tables
from ...errors import InvalidArgument
from .cases import C_FLOOR, FLOOR, GRAPH_LAUNCHES, OURS
from .units import format_ns

SIMULATED_LABEL = "SIMULATED (a CPU driver, not a GPU: these figures measure the host-side layer only)"


def _ratio(r: dict[str, float] | None) -> str:
    if not r:
        return "—"
    return f"{r['median']:.2f}× [{r['ci_low']:.2f}–{r['ci_high']:.2f}]"


def columns(report: dict[str, Any]) -> list[str]:
    """The implementations other than ironaccel that appear in the report: the floor, the C floor, the peers."""
    seen: list[str] = []
    for case in report["cases"]:
        for name in case["impls"]:
            if name != OURS and name not in seen:
                seen.append(name)
    return sorted(seen, key=lambda n: (n != FLOOR, n != C_FLOOR, n.lower()))


def markdown(report: dict[str, Any]) -> str:
    t = report["target"]
    others = columns(report)
    lines = [f"# ironaccel bench: {t['name']}" + (" — SIMULATED" if report["simulated"] else ""), ""]
    if report["simulated"]:
        lines += [f"**{SIMULATED_LABEL}.** No figure here says anything about GPU performance.", ""]
    s = report["settings"]
    lines += [
        f"Device: {t['device']} ({t['vendor']}, driver {t['driver_version']}). Python {report['host']['python']}, "
        f"{report['host']['cpus']} CPUs; {report['started']}."
        + (f" ironaccel's hot path: {report['compiled_hot_path']}." if "compiled_hot_path" in report else ""),
        f"Time per operation, median of {s['samples']} paired rounds; ratio = ironaccel / other, the median of "
        f"per-round ratios with a {int(s['confidence'] * 100)}% bootstrap interval (below 1: ironaccel is faster). "
        "Copies are timed to completion (copy + stream synchronize) except the *call only* rows (the call alone, "
        f"synchronized between calls, untimed). `{FLOOR}` is the floor: the same operation "
        f"through the raw driver calls; `{C_FLOOR}` makes the same driver calls from a C program, timed in the same "
        "rounds.",
        "",
    ]
    head = ["operation", OURS] + [h for o in others for h in (o, f"vs {o}")] + ["goal"]
    rows = []
    by_name = {case["name"]: case for case in report["cases"]}
    for case in report["cases"]:
        impls = case["impls"]
        row = [case["label"], format_ns(impls.get(OURS, {}).get("median_ns"))]
        for o in others:
            row += [format_ns(impls.get(o, {}).get("median_ns")), _ratio(case["ratios"].get(o))]
        row.append(goal_text(case, by_name, report["simulated"]))
        rows.append(row)
    lines += tables.markdown(head, rows)
    missing = report.get("peers_unavailable", {})
    if missing:
        lines += ["", "Not measured: " + "; ".join(f"{k} ({v})" for k, v in missing.items()) + "."]
    return "\n".join(lines) + "\n"


def goal_text(case: dict[str, Any], by_name: dict[str, dict[str, Any]], simulated: bool) -> str:
    """The goal cell of ``case``: its goal and verdict; where a semantic of the API costs the gap (the goal's
    ``cost``), also that semantic, the alternative row without it, and the semantic's measured cost: this row's
    time less the alternative's (stated on every run; on a simulated one it measures the host layer only)."""
    goal = case.get("goal")
    if goal is None:
        return ""
    if simulated:
        text = f"{goal['text']} (not judged: simulated)"
    elif goal["met"] is None:
        text = f"{goal['text']} (not judged: no figure to compare with)"
    else:
        text = f"{goal['text']}: {'met' if goal['met'] else 'MISSED'}"
    other = by_name.get(goal.get("alternative") or "")
    if other is None or (goal["met"] and not simulated):
        return text
    ours, theirs = (c["impls"].get(OURS, {}).get("median_ns") for c in (case, other))
    cost = ("-" * (ours < theirs) + format_ns(abs(ours - theirs))) if ours is not None and theirs is not None else (
        "not measured")
    verdict = "" if other.get("goal") is None or simulated or other["goal"]["met"] is None else (
        f", {'met' if other['goal']['met'] else 'MISSED'}")
    return (f"{text}; the gap is {goal['cost']}; its measured cost (this row less the alternative): {cost}; "
            f"alternative: {other['label']} ({format_ns(theirs)}{verdict})")


#: The rows of the README's table (those a report has), in order: the control-plane rows of issue 14, the
#: graph replay beside the launches it replaces, and the copies that show bandwidth.
HEADLINE = ("alloc_free.device", "alloc_free.pool", "stream_sync", "event_record_sync", "event_rerecord_sync",
            "launch.async", "launch.args4", f"launch.x{GRAPH_LAUNCHES}", f"graph.x{GRAPH_LAUNCHES}", "htod.pinned.256.call",
            "htod.pinned.256.deferred.call", "htod.pageable.256.call", "htod.pageable.256.deferred.call",
            "htod.pinned.65536.call", "htod.pinned.65536.deferred.call", "htod.pinned.65536",
            "htod.pinned.65536.deferred", "htod.pageable.1048576", "htod.pageable.67108864", "htod.pinned.67108864",
            "dtoh.pageable.67108864")


def table(report: dict[str, Any], names: tuple[str, ...] = HEADLINE) -> str:
    """The README's table made from a report (``bench --table FILE.json``): ironaccel, the C floor and the
    ratio to it, the raw floor and the ratio to it, then each peer's time, and the goal."""
    t, s = report["target"], report["settings"]
    peers = [o for o in columns(report) if o not in (FLOOR, C_FLOOR)]
    simulated = report["simulated"]
    lines = [
        f"Measured {report['started'][:10]} on {t['device']} ({t['name']}, driver {t['driver_version']}, "
        f"Python {report['host']['python']})" + (f" — **{SIMULATED_LABEL}**" if simulated else "") + ". "
        f"Medians of {s['samples']} paired rounds; ratio = ironaccel / other, with its "
        f"{int(s['confidence'] * 100)}% bootstrap interval.",
        "",
    ]
    head = ["operation", OURS, C_FLOOR, f"vs {C_FLOOR}", f"{FLOOR} floor", f"vs {FLOOR}", *peers, "goal"]
    rows = []
    by_name = {case["name"]: case for case in report["cases"]}
    for name in names:
        case = by_name.get(name)
        if case is None:
            continue
        impls, ratios = case["impls"], case["ratios"]

        def ns(impl: str) -> str:
            return format_ns(impls.get(impl, {}).get("median_ns"))

        row = [case["label"], ns(OURS), ns(C_FLOOR), _ratio(ratios.get(C_FLOOR)), ns(FLOOR), _ratio(ratios.get(FLOOR)),
               *(ns(p) for p in peers), goal_text(case, by_name, simulated)]
        rows.append(row)
    return "\n".join(lines + tables.markdown(head, rows)) + "\n"


def plot(report: dict[str, Any], path_stem: Path) -> Path:
    """Ratio ironaccel / other per operation with its interval: a PNG via matplotlib, else an SVG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = path_stem.with_suffix(".svg")
        path.write_text(svg_plot(report), encoding="utf-8")
        return path
    others = columns(report)
    cases = report["cases"]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(cases) * max(len(others), 1) + 1.5))
    height = 0.8 / max(len(others), 1)
    for j, other in enumerate(others):
        ys, xs, lo, hi = [], [], [], []
        for i, case in enumerate(cases):
            r = case["ratios"].get(other)
            if r:
                ys.append(i + j * height)
                xs.append(r["median"])
                lo.append(r["median"] - r["ci_low"])
                hi.append(r["ci_high"] - r["median"])
        ax.barh(ys, xs, height=height, xerr=[lo, hi], label=f"vs {other}")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(cases))], [c["label"] for c in cases], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ironaccel time / other time (log; < 1: ironaccel faster)")
    ax.set_title(_plot_title(report), fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = path_stem.with_suffix(".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_title(report: dict[str, Any]) -> str:
    t = report["target"]
    return f"ironaccel bench: {t['name']} ({t['device']})" + (" — SIMULATED" if report["simulated"] else "")


SVG_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3")


def svg_plot(report: dict[str, Any]) -> str:
    """The same chart as ``plot`` as a hand-written SVG (log-scale bars, intervals as whiskers)."""
    others = columns(report)
    cases = report["cases"]
    bar, label_w, plot_w, top = 9, 300, 480, 50
    row_h = bar * max(len(others), 1) + 6
    height = top + row_h * len(cases) + 40
    ratios = [r[k] for c in cases for r in c["ratios"].values() for k in ("ci_low", "ci_high") if r[k] > 0]
    lo_exp = math.floor(math.log10(min(ratios, default=0.5)))
    hi_exp = math.ceil(math.log10(max(ratios, default=2.0)))
    if lo_exp == hi_exp:
        hi_exp += 1

    def x(v: float) -> float:
        return label_w + plot_w * (math.log10(max(v, 10.0 ** lo_exp)) - lo_exp) / (hi_exp - lo_exp)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + plot_w + 20}" height="{height}" '
           'font-family="sans-serif" font-size="10">',
           f'<text x="10" y="16" font-size="12">{_xml(_plot_title(report))}</text>',
           f'<text x="10" y="32">{_xml("ironaccel time / other time, log scale; < 1: ironaccel faster; whiskers: 95% CI")}</text>']
    for e in range(lo_exp, hi_exp + 1):
        xe = x(10.0 ** e)
        out.append(f'<line x1="{xe:.1f}" y1="{top - 4}" x2="{xe:.1f}" y2="{height - 30}" stroke="#ddd"/>')
        out.append(f'<text x="{xe:.1f}" y="{height - 18}" text-anchor="middle">{10.0 ** e:g}</text>')
    one = x(1.0)
    out.append(f'<line x1="{one:.1f}" y1="{top - 4}" x2="{one:.1f}" y2="{height - 30}" stroke="black"/>')
    for i, case in enumerate(cases):
        y0 = top + i * row_h
        out.append(f'<text x="{label_w - 6}" y="{y0 + row_h / 2 + 3:.1f}" text-anchor="end">{_xml(case["label"])}</text>')
        for j, other in enumerate(others):
            r = case["ratios"].get(other)
            if not r:
                continue
            y = y0 + j * bar
            x0, x1 = sorted((one, x(r["median"])))
            color = SVG_COLORS[j % len(SVG_COLORS)]
            out.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0, 1):.1f}" height="{bar - 1}" fill="{color}"/>')
            yc = y + (bar - 1) / 2
            out.append(f'<line x1="{x(r["ci_low"]):.1f}" y1="{yc:.1f}" x2="{x(r["ci_high"]):.1f}" y2="{yc:.1f}" stroke="black"/>')
    for j, other in enumerate(others):
        lx = label_w + 10 + j * 110
        out.append(f'<rect x="{lx}" y="{height - 12}" width="10" height="8" fill="{SVG_COLORS[j % len(SVG_COLORS)]}"/>')
        out.append(f'<text x="{lx + 14}" y="{height - 4}">{_xml("vs " + other)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """The three outputs: JSON (every sample), Markdown (the table) and the plot."""
    out_dir.mkdir(parents=True, exist_ok=True)
    t = report["target"]
    stem = out_dir / f"bench-{t['backend']}-{t['driver']}"
    json_path = stem.with_suffix(".json")
    json_path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    md_path = stem.with_suffix(".md")
    md_path.write_text(markdown(report), encoding="utf-8")
    return [json_path, md_path, plot(report, stem)]


def read_json(path: Path, op: str) -> Any:
    """The JSON in ``path``; InvalidArgument naming ``op`` and the file when it cannot be read as JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidArgument(op, f"cannot read {path} as JSON: {exc}") from None


def load(path: Path) -> dict[str, Any]:
    """A bench JSON written by ``write``; InvalidArgument naming the file when it is not one."""
    op = "bench --table"
    report = read_json(path, op)
    if not isinstance(report, dict) or report.get("tool") != "ironaccel bench" or "cases" not in report:
        raise InvalidArgument(op, f"{path} is not a report of ironaccel bench")
    return report
