"""Which conformance tests a run runs: ``--only`` / ``--skip`` globs and ``--shard K/N``, the same for
``pytest --target`` (plugin options) and ``ironaccel certify`` (which passes them to pytest).

A pattern matches a test when it equals or globs (``fnmatch``, case-sensitive) the test id
(``test_copy.py::*``) or one of the clause ids the test cites (``KERNEL-*``). A test runs when no
``--only`` is given or one matches it, and no ``--skip`` matches it. Sharding comes last: the selected
tests sorted by id, shard K of N takes every N-th from the K-th (interleaved, so each shard gets a
share of every area; deterministic, so a farm's machines split one target without talking).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> (2, 4); ValueError for anything but K/N with 1 <= K <= N."""
    m = re.fullmatch(r"(\d+)/(\d+)", text.strip()) if isinstance(text, str) else None
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise ValueError(f"--shard {text!r}: expected K/N with 1 <= K <= N, e.g. 2/4")
    return int(m[1]), int(m[2])


@dataclass(frozen=True)
class Selection:
    only: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    shard: str = ""  # "K/N", "" for the whole selection

    def __post_init__(self) -> None:
        if self.shard:
            parse_shard(self.shard)

    @property
    def everything(self) -> bool:
        return not (self.only or self.skip or self.shard)

    def pytest_args(self) -> list[str]:
        """The plugin options that make a pytest run this selection."""
        args = [arg for p in self.only for arg in ("--only", p)] + [arg for p in self.skip for arg in ("--skip", p)]
        return args + (["--shard", self.shard] if self.shard else [])

    def record(self) -> dict[str, Any]:
        """The selection as a results file records it (``selection``; absent for a whole run)."""
        return {"only": list(self.only), "skip": list(self.skip), "shard": self.shard}

    def chosen(self, tests: Iterable[tuple[str, Sequence[str]]]) -> set[str]:
        """The ids of the tests this selection runs, from (test id, clause ids) pairs."""
        picked = sorted(tid for tid, clauses in tests if (not self.only or _matches(self.only, tid, clauses))
                        and not _matches(self.skip, tid, clauses))
        if self.shard:
            k, n = parse_shard(self.shard)
            picked = picked[k - 1::n]
        return set(picked)


def _matches(patterns: Iterable[str], tid: str, clauses: Sequence[str]) -> bool:
    names = [tid, *clauses]
    return any(p == name or fnmatch.fnmatchcase(name, p) for p in patterns for name in names)
