"""``ironaccel report --out DIR``: a static results site (plain files: it works from ``file://`` and from
GitHub Pages, no server). ``model.build`` derives what is shown (with the judge's and STATUS.md's own
functions); the Jinja2 templates in ``templates/`` lay it out; ``site.json`` is all of it as JSON (the
download) and ``search-index.js`` the index the search page's script filters (a script, not a JSON file,
because browsers do not let a page fetch a file:// JSON)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

from . import model
from ..bench import report as bench_report
from ..bench.units import format_ns

SEARCH_INDEX = "search-index.js"


def _environment():
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("ironaccel.cts.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["ns"] = format_ns
    env.filters["ratio"] = lambda r: f"{r['median']:.2f}× [{r['ci_low']:.2f}–{r['ci_high']:.2f}]" if r else "—"
    env.filters["slug"] = model.slug
    return env


def _search_index(site: dict[str, Any]) -> list[list[str]]:
    """[kind, title, url] per page and per client test (those link into their client's page)."""
    entries = [["target", t["name"], f"targets/{t['slug']}.html"] for t in site["targets"]]
    entries += [["clause", f"{c['id']} {c['text']}", f"clauses/{c['slug']}.html"] for c in site["clauses"]]
    entries += [["test", t["id"], f"tests/{t['slug']}.html"] for t in site["tests"]]
    entries += [["diff", f"{d['old']} → {d['new']}", f"diffs/{d['key']}.html"] for d in site["diffs"]]
    entries += [["bench", b["report"]["target"]["name"], f"bench.html#{b['name']}"] for b in site["bench"]]
    entries += [[f"{c['name']} test", e["id"], f"clients/{c['name']}.html#{model.slug(e['id'])}"]
                for c in site["clients"]["clients"] for e in c["tests"]]
    return entries


def write(site: dict[str, Any], out: Path) -> int:
    """Write the site into ``out`` (created; pages already there are replaced); the number of pages."""
    env = _environment()
    out.mkdir(parents=True, exist_ok=True)
    tests_by_id = {t["id"]: t for t in site["tests"]}
    common = {"site": site, "tests_by_id": tests_by_id, "clauses_by_id": {c["id"]: c for c in site["clauses"]},
              "runs_by_key": {r["key"]: r for r in site["runs"]}}
    pages = 0

    def page(template: str, path: str, title: str, **extra: Any) -> None:
        nonlocal pages
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        root = "../" * path.count("/")
        target.write_text(env.get_template(template).render(title=title, root=root, **common, **extra),
                          encoding="utf-8")
        pages += 1

    targets = site["targets"]
    page("index.html", "index.html", "ironaccel results: targets × clauses",
         hardware=[t for t in targets if not t["simulated"]], simulated=[t for t in targets if t["simulated"]],
         clauses_by_area={a: [c for c in site["clauses"] if c["area"] == a] for a in site["areas"]})
    for t in targets:
        page("target.html", f"targets/{t['slug']}.html", f"Target {t['name']}", t=t)
    for c in site["clauses"]:
        page("clause.html", f"clauses/{c['slug']}.html", f"Clause {c['id']}", c=c)
    for e in site["tests"]:
        page("test.html", f"tests/{e['slug']}.html", f"Test {e['id']}", e=e)
    page("runs.html", "runs.html", "Runs and diffs")
    for d in site["diffs"]:
        page("diff.html", f"diffs/{d['key']}.html", f"Diff {d['old']} → {d['new']}", d=d)
    (out / "bench").mkdir(exist_ok=True)
    for b in site["bench"]:
        (out / "bench" / f"{b['name']}.svg").write_text(bench_report.svg_plot(b["report"]), encoding="utf-8")
    page("bench.html", "bench.html", "Bench: ironaccel against the floor and its peers",
         simulated_label=bench_report.SIMULATED_LABEL)
    page("clients.html", "clients.html", "Client suites on the fake and on hardware")
    for cl in site["clients"]["clients"]:
        page("client.html", f"clients/{cl['name']}.html", f"Client suite {cl['name']}", cl=cl,
             comparisons=[c for c in site["clients"]["comparisons"] if c["client"] == cl["name"]])
    page("search.html", "search.html", "Search")

    static = out / "static"
    static.mkdir(exist_ok=True)
    for item in resources.files("ironaccel.cts.report").joinpath("static").iterdir():
        (static / item.name).write_bytes(item.read_bytes())
    (out / SEARCH_INDEX).write_text("window.SEARCH_INDEX = " + json.dumps(_search_index(site), ensure_ascii=False)
                                    + ";\n", encoding="utf-8")
    (out / "site.json").write_text(json.dumps(site, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    return pages


def add_arguments(p) -> None:
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write the site into (created)")
    p.add_argument("--results", default="results", metavar="DIR",
                   help="the results folder that is the first run (default: results)")
    p.add_argument("--runs", nargs="*", default=[], metavar="RUN_DIR",
                   help="more runs, each a folder of results files: history, flake rates and a diff page between "
                        "any two runs")
    p.add_argument("--clients-results", default="clients/results", metavar="DIR",
                   help="client suites' results (default: clients/results)")
    p.add_argument("--bench-results", default="benchmarks/results", metavar="DIR",
                   help="bench reports, their history in sub-folders (default: benchmarks/results)")
    p.set_defaults(func=command)


def command(args) -> int:
    """0 written; 2 a results folder or file that cannot be read (one line naming it; nothing is written)."""
    began = time.monotonic()
    try:
        site = model.build(Path(args.results), [Path(d) for d in args.runs], Path(args.clients_results),
                           Path(args.bench_results))
    except ValueError as exc:
        print(f"ironaccel report: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    pages = write(site, out)
    print(f"wrote {pages} pages into {out} from {len(site['runs'])} run(s) in {time.monotonic() - began:.1f} s; "
          f"open {out / 'index.html'}")
    return 0
