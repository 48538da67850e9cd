"""Expectations files: what a target is known to fail, on which drivers, and where the bug is filed.

One file per target, ``conformance/expectations/<backend>-<driver>.txt`` (``Target.expectations_file``), one
entry a line; ``#`` comments and blank lines are ignored::

    ID  OUTCOME  [OPTION ...]  | BUG | REASON

* ID: a clause id (``SEM-6``) or a test-id prefix (``test_oom.py::``, ``test_mem.py::test_alloc[1]``).
* OUTCOME: ``xfail`` (expected to fail), ``skip`` (not run) or ``flaky`` (a failure is recorded as flaky).
* OPTIONs, in any order:
  - tags, ``KEY OP VALUE``: the entry applies only where every tag holds for the run's device and host.
    KEY is ``device`` (the device's name), ``vendor``, ``os`` (``linux``, ``windows``, ``darwin``),
    ``driver`` (the device's driver version string) or ``driver:LABEL`` (the version that follows the word
    LABEL in that string: ``driver:mesa>=24.2`` on "4.5 (Core Profile) Mesa 22.3.6"). OP is ``=``/``!=``
    (the same text, case aside), ``~=`` (a case-insensitive regular-expression search) or ``>=``, ``>``,
    ``<=``, ``<`` (versions; ``driver`` then takes the first version number in the string). ``driver:LABEL``
    always compares versions (``=`` too). A tag that cannot be decided (no version found) does not hold.
  - ``expires=YYYY-MM-DD``: the entry no longer applies after that day (a warning says so).
  - ``clean-runs=K/N`` (flaky entries): ``ironaccel expectations update`` counts runs in which the test
    passed at its first try, sets K back to 0 when it was flaky again, and removes the entry at N.
* BUG: where the bug is: a URL, ``upstream: TEXT`` (a driver bug not filed yet, or filed where no URL
  reaches), or ``ours: TEXT`` (a limit of ironaccel or of the suite, not a driver's bug). An entry without
  one is accepted and warned about; ``expectations update`` writes new entries without one.
* REASON: what happens and why, for people (may contain ``|``).

A line without ``|`` is the first format, ``ID  OUTCOME  REASON``: read as an entry without a bug reference.
"""

from __future__ import annotations

import operator
import platform
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from .results import Outcome

#: What an entry can say of a test (the outcome the test then gets).
KINDS = (Outcome.XFAIL, Outcome.SKIP, Outcome.FLAKY)
FORMAT = "ID  xfail|skip|flaky  [KEY OP VALUE ...] [expires=YYYY-MM-DD] [clean-runs=K/N]  | BUG | REASON"
HEADER = f"""\
# {FORMAT}
# BUG: a URL, `upstream: text` or `ours: text` (format: README, "Expectations files")
"""
FIELDS = ("device", "vendor", "os", "driver")
OPS = ("~=", "!=", ">=", "<=", "=", ">", "<")  # two-character operators first
TAG = re.compile(rf"(?P<key>driver:[A-Za-z0-9_.+-]+|{'|'.join(FIELDS)})(?P<op>{'|'.join(OPS)})(?P<value>\S+)")
BUG_PREFIXES = ("https://", "http://", "upstream:", "ours:")
VERSION_NUMBER = r"\d+(?:\.\d+)+|\d+"
VERSION_OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "=": operator.eq,
               "!=": operator.ne}
ORDERING = (">=", ">", "<=", "<")
NEEDS_A_REASON = "new, needs a reason"


class ExpectationsError(ValueError):
    """An expectations file that cannot be read, or a line that is not an entry (``file:line: ...``)."""


@dataclass(frozen=True)
class Tag:
    key: str
    op: str
    value: str

    def __str__(self) -> str:
        return f"{self.key}{self.op}{self.value}"

    @property
    def versioned(self) -> bool:
        """Compares versions (``driver:LABEL``, or an ordering), not text."""
        return ":" in self.key or self.op in ORDERING

    def holds(self, facts: dict[str, str]) -> bool:
        """Does the tag hold for a run whose device and host are ``facts`` (``facts()``)?"""
        field_, _, label = self.key.partition(":")
        text = facts.get(field_, "")
        if not self.versioned:
            if self.op == "~=":
                return re.search(self.value, text, re.IGNORECASE) is not None
            return (text.casefold() == self.value.casefold()) == (self.op == "=")
        found = re.search(rf"{re.escape(label)}\W*({VERSION_NUMBER})" if label else f"({VERSION_NUMBER})", text,
                          re.IGNORECASE)
        return found is not None and VERSION_OPS[self.op](Version(found[1]), Version(self.value))


@dataclass
class Expectation:
    key: str
    kind: Outcome  # one of KINDS
    reason: str
    bug: str = ""
    tags: tuple[Tag, ...] = ()
    expires: date | None = None
    clean_runs: tuple[int, int] | None = None  # (clean runs counted, runs that retire the entry)
    line: int = 0  # 1-based line in its file (0: not from a file)
    used: bool = False  # matched a test of the run

    def matches(self, test_id: str, clauses: Iterable[str]) -> bool:
        return self.key in clauses or test_id.startswith(self.key)

    @property
    def needs_device(self) -> bool:
        """Whether a tag reads the device (so the plugin opens it before applying the entry)."""
        return any(t.key.split(":")[0] in ("device", "vendor", "driver") for t in self.tags)

    def expired(self, today: date) -> bool:
        return self.expires is not None and today > self.expires

    def applies(self, facts: dict[str, str], today: date) -> bool:
        return not self.expired(today) and all(t.holds(facts) for t in self.tags)

    def format(self) -> str:
        """The entry as a line of the current format."""
        options = [str(t) for t in self.tags]
        if self.expires:
            options.append(f"expires={self.expires.isoformat()}")
        if self.clean_runs:
            options.append(f"clean-runs={self.clean_runs[0]}/{self.clean_runs[1]}")
        bug = f" {self.bug} " if self.bug else " "
        return "  ".join([self.key, self.kind.value, *options]) + f"  |{bug}| {self.reason}"


def parse_line(line: str, where: str = "") -> Expectation:
    """One entry (``FORMAT``, or the first format ``ID OUTCOME REASON``); ExpectationsError naming ``where``."""
    head, bar, rest = line.partition("|")
    if bar:
        bug, bar2, reason = rest.partition("|")
        if not bar2:
            raise ExpectationsError(f"{where}: a `| BUG |` needs a second `|` before the reason: expected `{FORMAT}`")
        words, bug, reason = head.split(), bug.strip(), reason.strip()
    else:
        words = line.split(None, 2)
        bug, reason = "", words.pop() if len(words) == 3 else ""
    if len(words) < 2 or words[1] not in KINDS or not reason:
        raise ExpectationsError(f"{where}: expected `{FORMAT}`, got {line.strip()!r}")
    if bug and not bug.startswith(BUG_PREFIXES):
        raise ExpectationsError(f"{where}: bug {bug!r} is not a URL, `upstream: ...` or `ours: ...`")
    entry = Expectation(words[0], Outcome(words[1]), reason, bug)
    for option in words[2:]:
        entry = _with_option(entry, option, where)
    return entry


def _with_option(entry: Expectation, option: str, where: str) -> Expectation:
    name, _, value = option.partition("=")
    try:
        if name == "expires":
            return replace(entry, expires=date.fromisoformat(value))
        if name == "clean-runs":
            done, _, need = value.partition("/")
            if entry.kind != Outcome.FLAKY or not (0 <= int(done) < int(need)):
                raise ValueError("clean-runs=K/N, 0 <= K < N, is for flaky entries")
            return replace(entry, clean_runs=(int(done), int(need)))
        tag = TAG.fullmatch(option)
        if tag is None:
            raise ValueError(f"not a tag (KEY OP VALUE, KEY one of {', '.join(FIELDS)}, driver:LABEL), "
                             "expires=YYYY-MM-DD or clean-runs=K/N")
        made = Tag(tag["key"], tag["op"], tag["value"])
        if made.versioned and made.op == "~=":
            raise ValueError("driver:LABEL compares versions: =, !=, >=, >, <=, <")
        if made.versioned:
            Version(made.value)
        elif made.op == "~=":
            re.compile(made.value)
        return replace(entry, tags=(*entry.tags, made))
    except (ValueError, InvalidVersion, re.error) as exc:
        raise ExpectationsError(f"{where}: option {option!r}: {exc}") from None


def parse(text: str, source: str = "expectations") -> list[Expectation]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(replace(parse_line(line, f"{source}:{n}"), line=n))
    return out


def read_text(path: Path) -> str:
    """The file's text ("" when there is none); ExpectationsError naming the file otherwise."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return ""
    try:
        return path.read_bytes().decode("utf-8")
    except IsADirectoryError:
        raise ExpectationsError(f"expectations {path}: a directory, not a file") from None
    except OSError as exc:
        raise ExpectationsError(f"expectations {path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ExpectationsError(f"expectations {path}: not UTF-8 text (offset {exc.start})") from None


def load(path: Path) -> list[Expectation]:
    """The entries of an expectations file (none when there is no file)."""
    return parse(read_text(path), str(path))


def facts(driver_version: str = "", device: str = "", vendor: str = "", os: str | None = None) -> dict[str, str]:
    """What tags are evaluated against. ``os``: ``platform.platform()``'s form (``Linux-6.1-x86_64``; default:
    this machine's), of which the system name, lower case, is kept."""
    system = (platform.platform() if os is None else os).split("-")[0].lower()
    return {"driver": driver_version, "device": device, "vendor": vendor, "os": system}


def facts_of_results(doc: dict[str, Any]) -> dict[str, str]:
    """``facts`` of the run a results document records."""
    t = doc["target"]
    return facts(t.get("driver_version", ""), t.get("device", ""), t.get("vendor", ""), t.get("os", ""))


def warnings_for(entries: Iterable[Expectation], source: str, today: date) -> list[str]:
    """Entries without a bug reference, and expired ones: said on every run that loads them."""
    out = []
    for e in entries:
        if not e.bug:
            out.append(f"{source}:{e.line}: {e.key} has no bug reference (a URL, `upstream: ...` or `ours: ...`)")
        if e.expired(today):
            out.append(f"{source}:{e.line}: {e.key} expired on {e.expires}: it no longer applies")
    return out


def expected_to_fail_required(doc: dict[str, Any], required: Iterable[str]) -> list[str]:
    """The required clauses that a test of this run is expected to fail (outcome xfail), in ``required``'s order."""
    xfail = {c for t in doc["tests"] if t["outcome"] == Outcome.XFAIL for c in t["clauses"]}
    return [c for c in required if c in xfail]


# -- expectations update --from RUN ---------------------------------------------------------------------

@dataclass
class Update:
    """What ``update`` changed in one expectations file (each item a line for people)."""

    path: Path
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    counted: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.counted)

    def report(self) -> list[str]:
        return [f"{self.path}: {verb} {item}" for verb, items in (("added", self.added), ("removed", self.removed),
                                                               ("counted", self.counted)) for item in items]


def update(text: str, doc: dict[str, Any], source: str = "expectations", today: date | None = None) -> tuple[str, Update]:
    """The expectations file ``text`` brought up to date with one run (a results document): entries whose
    tests all passed removed (xfail), flaky entries' clean runs counted (``clean-runs``); every test that
    failed or was flaky with no entry for it added, marked as needing a reason and a bug reference. Entries
    whose tags do not hold for the run, skip entries and entries matching no test of the run stay as they are.
    Returns the new text and what changed; comments and the order of lines are kept."""
    today = today or date.today()
    run_facts = facts_of_results(doc)
    lines = text.splitlines()
    entries = parse(text, source)
    change = Update(Path(source))
    covered: set[str] = set()
    for e in entries:
        mine = [t for t in doc["tests"] if e.matches(t["id"], t["clauses"]) and t["outcome"] != Outcome.NOT_RUN]
        if not e.applies(run_facts, today) or not mine:
            continue
        covered.update(t["id"] for t in mine)
        outcomes = {t["outcome"] for t in mine}
        if e.kind == Outcome.XFAIL and outcomes <= {Outcome.PASS, Outcome.XPASS}:
            lines[e.line - 1] = None  # type: ignore[call-overload]
            change.removed.append(f"{e.key} (xfail): its {len(mine)} test(s) passed")
        elif e.kind == Outcome.FLAKY and e.clean_runs:
            clean = outcomes == {Outcome.PASS} and all(t.get("tries", 1) == 1 for t in mine)
            done = e.clean_runs[0] + 1 if clean else 0
            if done >= e.clean_runs[1]:
                lines[e.line - 1] = None  # type: ignore[call-overload]
                change.removed.append(f"{e.key} (flaky): {done} clean runs")
            else:
                lines[e.line - 1] = replace(e, clean_runs=(done, e.clean_runs[1])).format()
                change.counted.append(f"{e.key}: {done}/{e.clean_runs[1]} clean runs")
    for t in doc["tests"]:
        if t["id"] in covered or t["outcome"] not in (Outcome.FAIL, Outcome.FLAKY):
            continue
        kind = Outcome.XFAIL if t["outcome"] == Outcome.FAIL else Outcome.FLAKY
        tries = f" ({t['passes']}/{t['tries']} tries passed)" if "tries" in t else ""
        first = (t["message"].strip().splitlines() or ["no message"])[0][:200]
        new = Expectation(t["id"], kind, f"{NEEDS_A_REASON}: {t['outcome']}{tries} on {doc['target']['name']}, "
                          f"{doc['finished']}: {first}")
        lines.append(new.format())
        change.added.append(f"{t['id']} ({kind})")
    kept = [ln for ln in lines if ln is not None]
    if change.added and not text.strip():
        kept = HEADER.splitlines() + kept
    return "\n".join(kept) + "\n" if kept else "", change


# -- the command ----------------------------------------------------------------------------------------

def results_files(run: Path) -> list[Path]:
    """The results files of RUN: the file itself, or those a folder holds (a run folder, a results folder):
    ``<backend>-<driver>.json``, not certificates nor ``RUN.json``. ValueError when there is none."""
    from .results import CERTIFICATE_SUFFIX

    run = Path(run)
    found = [run] if run.is_file() else sorted(
        p for p in run.glob("*.json") if not p.name.endswith(CERTIFICATE_SUFFIX) and p.name != "RUN.json")
    if not found:
        raise ValueError(f"{run}: no results file there")
    return found


def add_arguments(p: Any) -> None:
    sub = p.add_subparsers(dest="expectations_command", required=True, metavar="ACTION")
    u = sub.add_parser("update", help="bring each target's expectations file up to date with a run: add its new "
                       f"failures and flakes (marked \"{NEEDS_A_REASON}\"), remove xfail entries whose tests now "
                       "pass, count flaky entries' clean runs")
    u.add_argument("--from", dest="run", required=True, metavar="RUN",
                   help="a results file, or a folder of them (a run folder under results/runs/, a results folder)")
    u.add_argument("--expectations", metavar="FILE", help="the file to update (default: each target's own, "
                   "Target.expectations_file); with one results file only")
    u.add_argument("--dry-run", action="store_true", help="say what would change; write nothing")
    u.set_defaults(func=command_update)


def command_update(args: Any) -> int:
    """``ironaccel expectations update --from RUN``: exit 0 (changed or not), 2 for a RUN or file that cannot
    be read."""
    import sys

    from ..errors import IronAccelError
    from . import results, targets

    try:
        files = results_files(Path(args.run))
        if args.expectations and len(files) > 1:
            raise ValueError(f"--expectations names one file, but {args.run} holds {len(files)} results files")
        for path in files:
            doc = results.load(path)
            target = Path(args.expectations) if args.expectations else targets.get(doc["target"]["name"]).expectations_file
            text, change = update(read_text(target), doc, str(target))
            print("\n".join(change.report()) or f"{target}: up to date with {path}")
            if change.changed and not args.dry_run:
                target.write_text(text, encoding="utf-8")
    except (ValueError, IronAccelError) as exc:  # ExpectationsError, a results file's, an unknown target
        print(f"ironaccel expectations update: {exc}", file=sys.stderr)
        return 2
    return 0
