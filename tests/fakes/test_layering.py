"""The fake's source files depend on each other one way, as fakes/cuda/README.md's Layout says: each file
compiled on its own, the global symbols it defines and the ones it needs (``nm``) give the real dependency
graph, what macros and the X-macro tables expand to included, and that graph has no cycle."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ironaccel import cbuild, fakes


def _dependencies(tmp: Path) -> dict[str, set[str]]:
    """file -> the files defining the symbols it uses."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    compiler = cbuild.find_compiler()
    defined: dict[str, str] = {}
    needed: dict[str, set[str]] = {}
    for source in sorted(fakes.source_dir().glob("*.c")):
        obj = tmp / f"{source.stem}.o"
        subprocess.run([compiler, "-std=gnu11", "-O0", "-fPIC", "-c", str(source), "-o", str(obj)], check=True)
        needed[source.name] = set()
        for line in subprocess.run([nm, "-P", str(obj)], check=True, capture_output=True, text=True).stdout.splitlines():
            name, kind = line.split()[:2]
            if kind == "U":
                needed[source.name].add(name)
            elif kind.isupper():
                defined[name] = source.name
    return {f: {defined[s] for s in symbols if s in defined} - {f} for f, symbols in needed.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """A cycle of ``graph`` as the files along it, or [] when there is none."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(f: str) -> list[str]:
        state[f] = 1
        path.append(f)
        for d in sorted(graph[f]):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        state[f] = 2
        path.pop()
        return []

    for f in sorted(graph):
        if f not in state and (found := visit(f)):
            return found
    return []


def test_the_fakes_files_depend_on_each_other_one_way(tmp_path):
    graph = _dependencies(tmp_path)
    cycle = _cycle(graph)
    assert not cycle, "a dependency cycle among the fake's files: " + " -> ".join(cycle)
    assert not [f for f, deps in graph.items() if "proc_address.c" in deps], "proc_address.c is the top"
    assert graph["process.c"] == set(), "process.c is the bottom: it calls none of the others"
    assert len(graph["proc_address.c"]) > 10  # the graph is real: the address table refers to every entry point


def test_a_call_no_header_declares_fails_the_fakes_build(tmp_path):
    """A successful build's warnings are never shown, so C's implicit declaration (the callee taken to return
    int and accept any arguments; export_tables.c called six entry points so) must fail the build itself."""
    source = tmp_path / "undeclared.c"
    source.write_text("int caller(void) { return undeclared_entry_point(1); }\n")
    proc = subprocess.run([cbuild.find_compiler(), *fakes.CFLAGS, "-o", str(tmp_path / "undeclared.so"), str(source)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "undeclared_entry_point" in proc.stderr, proc.stderr
