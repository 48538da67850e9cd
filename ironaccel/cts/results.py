"""The run vocabulary and the results file: one JSON document per target run — the only input STATUS.md is
made from. Outcomes, run statuses, clause ids, file names and the document itself are defined here once;
the plugin writes documents, certify and status read them.

Schema (``SCHEMA_VERSION``)::

    {
      "schema": 1,
      "suite": {"version": "0.1.0", "hash": "<spec.suite_hash()>",
                "parts": {"suite": "<same>", "backend": "...", "driver": "...", "expectations": "..."}},
      "target": {"name": "webgpu/lavapipe", "backend": "webgpu", "driver": "lavapipe",
                 "driver_version": "...", "device": "llvmpipe (LLVM 15...)", "vendor": "Mesa",
                 "simulated": true, "os": "Linux-6.1-x86_64", "python": "3.11.7",
                 "packages": {"wgpu": "0.32.0", "numpy": "2.4.6", ...},
                 "evidence": {"driver": "llvmpipe", "simulated": true,                    (driver_evidence)
                              "libraries": [{"path": "/usr/lib/.../libvulkan_lvp.so", "sha256": "..."}]}},
      "builds": {"compiled": "<source hash>" | null, "driver": "<source hash>" | null},
      "started": "2026-11-30T04:30:00Z", "finished": "2026-11-30T04:31:10Z",
      "run": {"status": "ok" | "error" | "crashed" | "timeout", "message": ""},
      "tests": [{"id": "test_mem.py::test_alloc_sizes[1]", "clauses": ["MEM-1"],
                 "outcome": "pass", "duration": 0.01, "message": "",
                 "outputs": {"sums": "<sha256 prefix>"},                              (outputs: optional)
                 "tries": 2, "passes": 1}],              (a re-run test only: attempts made, attempts passed)
      "summary": {"pass": 10, "fail": 0, ...every Outcome...},
      "selection": {"only": ["KERNEL-*"], "skip": [], "shard": "1/4"},    (only for part of the suite)
      "options": {"test_timeout": 120},                                     (the per-test limit; null: none)
      "forced": {"missing": "...", "by": "<command line>"}                  (only for a run with --force)
    }

``target.device`` etc. are empty, and ``evidence`` absent, when the run never reached a device (``run.status``
then says why). ``evidence`` is what the judge decides "hardware" from (``judge.hardware``), never ``simulated``.
``builds`` (absent in files from before it): the source hashes the C builds the run loaded report of
themselves — the compiled extension (null: pure Python) and the driver built here (the fake libcuda; null:
none) — which the judge compares with the sources the file claims.
``options`` (absent in files from before it): the run's options that are not its selection; a run with a
per-test limit other than ``DEFAULT_TEST_TIMEOUT_S`` (or none) is weakened (``judge.weakenings``).
No other key is allowed anywhere in the document (``validate``: a forger's extra field is refused, not ignored).
Files are named ``<backend>-<driver>.json`` (``file_name``); the run's other files lie beside it
(``sibling``).
"""

from __future__ import annotations

import json
import os
import platform
import re
import stat
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from .selection import parse_shard

SCHEMA_VERSION = 1
#: The per-test time limit of a standard run (``certify --test-timeout``' default); any other is a weakening.
DEFAULT_TEST_TIMEOUT_S = 120
#: The C builds a results file says it loaded (``builds``): the compiled extension, the driver built here.
BUILDS = ("compiled", "driver")


class _Word(str, Enum):
    """A word of the vocabulary: equal to, hashed, printed and serialized as its string."""

    __hash__ = str.__hash__
    __str__ = str.__str__
    __format__ = str.__format__


class Outcome(_Word):
    """One test's outcome on one target. not-supported comes only from Device.supports(); skip only from an
    expectations entry or a documented policy; not-run means the target produced no result for the test."""

    PASS = "pass"
    FAIL = "fail"
    XFAIL = "xfail"
    XPASS = "xpass"
    NOT_SUPPORTED = "not-supported"
    SKIP = "skip"
    FLAKY = "flaky"
    NOT_RUN = "not-run"

    @property
    def failure(self) -> bool:
        """Does this outcome make the run fail (an unexpected pass and a test never run do)?"""
        return self in (Outcome.FAIL, Outcome.XPASS, Outcome.NOT_RUN)

    @property
    def junit(self) -> str | None:
        """The JUnit element of a test case with this outcome (flakyFailure: Surefire's); None for a pass."""
        return _JUNIT[self]


_JUNIT = {Outcome.PASS: None, Outcome.FAIL: "failure", Outcome.XPASS: "failure", Outcome.NOT_RUN: "error",
          Outcome.FLAKY: "flakyFailure", Outcome.XFAIL: "skipped", Outcome.SKIP: "skipped",
          Outcome.NOT_SUPPORTED: "skipped"}

#: Outcome names in their fixed order (summaries and STATUS.md list outcomes in this order).
OUTCOMES = tuple(o.value for o in Outcome)


class RunStatus(_Word):
    """How a target's run ended: ok only when pytest ran every test to the end on the target's device."""

    OK = "ok"
    ERROR = "error"
    CRASHED = "crashed"
    TIMEOUT = "timeout"


RUN_STATUSES = tuple(s.value for s in RunStatus)

CLAUSE_ID = r"[A-Z]+-\d+"  # the one spelling of a clause id: SPEC.md's lines and ClauseId.parse use it


@dataclass(frozen=True, order=True)
class ClauseId:
    """A SPEC.md clause id, ``KERNEL-9``: its area (``KERNEL``) and number."""

    area: str
    number: int

    @classmethod
    def parse(cls, text: str) -> "ClauseId":
        if not isinstance(text, str) or not re.fullmatch(CLAUSE_ID, text):
            raise ValueError(f"{text!r} is not a clause id (AREA-N, e.g. MEM-1)")
        area, number = text.split("-")
        return cls(area, int(number))

    def __str__(self) -> str:
        return f"{self.area}-{self.number}"


#: A target name: ``backend/driver``, each part an identifier (no spaces, newlines or Markdown).
TARGET_NAME = r"[A-Za-z0-9][A-Za-z0-9._+-]*/[A-Za-z0-9][A-Za-z0-9._+-]*"

CERTIFICATE_SUFFIX = ".cert.json"  # certificates lie beside the results files; they are not results files
SIGNATURE_SUFFIX = ".cert.sig"  # the signature of a certificate and its results file (``ironaccel.cts.signing``)
JUNIT_SUFFIX = ".junit.xml"


def file_name(target: str) -> str:
    """results file name of a target: ``webgpu/lavapipe`` -> ``webgpu-lavapipe.json``."""
    return target.replace("/", "-") + ".json"


def sibling(results_file: Path, suffix: str) -> Path:
    """A file beside a results file: ``sibling(.../webgpu-lavapipe.json, ".junit.xml")``."""
    return Path(results_file).with_name(Path(results_file).stem + suffix)


def now() -> str:
    """The current UTC time as results files and certificates write it."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def without_failures(status: str, summary: dict[str, int] | None) -> bool:
    """The run finished and it has tests, none of them a failure (``Outcome.failure``)."""
    counts = summary or {}
    return status == RunStatus.OK and sum(counts.values()) > 0 and not any(
        counts.get(o) for o in Outcome if o.failure)


#: The target fields a run takes from its device: shards of one run agree on them, and a part of a run that
#: never reached the device takes them from one that did.
DEVICE_FIELDS = ("driver_version", "device", "vendor", "simulated", "evidence")

#: Packages whose versions a results file records.
PACKAGES = ("ironaccel", "numpy", "wgpu", "vulkan", "cuda-bindings", "nvidia-cuda-nvrtc", "hypothesis", "pytest")


def host_environment(names: Iterable[str] = PACKAGES) -> dict[str, Any]:
    """This machine as a results file records it: OS, Python and the installed versions of ``names``
    (``PACKAGES`` and a target's own, such as a plugin's distribution)."""
    packages = {}
    for name in names:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {"os": platform.platform(), "python": platform.python_version(), "packages": packages}


def loaded_libraries() -> list[str]:
    """Paths of the shared libraries mapped into this process (Linux's /proc/self/maps; none elsewhere)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return sorted({line.split(None, 5)[5].strip() for line in maps
                           if line.count(" ") >= 5 and ".so" in line.rsplit("/", 1)[-1]})
    except (OSError, IndexError):
        return []


def driver_evidence(device: Any, library_patterns: Iterable[str]) -> dict[str, Any]:
    """What a run saw of its device and driver, recorded for the judge: the DeviceInfo's own driver name and
    simulated flag, and each loaded library that is one of the backend's drivers (``Target.library``:
    ``library_patterns``) with its sha256. Asked while the device is open, so its driver is mapped."""
    import hashlib

    patterns = [re.compile(p) for p in library_patterns if p]
    libraries = []
    for path in loaded_libraries():
        if any(p.search(path) for p in patterns):
            try:
                with open(path, "rb") as f:
                    digest = hashlib.file_digest(f, "sha256").hexdigest()
            except OSError:
                digest = ""
            libraries.append({"path": path, "sha256": digest})
    return {"driver": device.driver, "simulated": bool(device.simulated), "libraries": libraries}


def document(target: Any, parts: dict[str, str], started: str, status: str, message: str = "",
             tests: Iterable[dict[str, Any]] = (), device: Any = None,
             host: dict[str, Any] | None = None, selection: dict[str, Any] | None = None,
             builds: dict[str, str | None] | None = None, evidence: dict[str, Any] | None = None,
             test_timeout: float | None = DEFAULT_TEST_TIMEOUT_S) -> dict[str, Any]:
    """A results document: ``target`` a ``targets.Target``, ``parts`` the hashes it ran at
    (``spec.Current.parts``: suite, backend, driver, expectations), ``device`` the DeviceInfo of the device the run
    used (None when it never got one: device fields are then empty and ``simulated`` is the target's),
    ``host`` as ``host_environment()`` (None: left empty, for a run that never started), ``selection``
    as ``Selection.record()`` for a run of part of the suite (None: the whole suite), ``builds`` the builds
    the run loaded (``BUILDS``; None: none), ``evidence`` as ``driver_evidence`` (None: the run never reached
    a device), ``test_timeout`` the per-test limit it ran under (None: none)."""
    from .. import __version__

    tests = sorted(tests, key=lambda t: t["id"])
    host = host or {"os": "", "python": "", "packages": {}}
    doc = {
        "schema": SCHEMA_VERSION,
        "suite": {"version": __version__, "hash": parts["suite"], "parts": dict(parts)},
        "target": {
            "name": target.name, "backend": target.backend, "driver": target.driver,
            "driver_version": device.driver_version if device else "", "device": device.name if device else "",
            "vendor": device.vendor if device else "",
            "simulated": device.simulated if device else target.simulated,
            "select": dict(target.select), **host,
        },
        "builds": {key: (builds or {}).get(key) for key in BUILDS},
        "started": started,
        "finished": now(),
        "run": {"status": RunStatus(status).value, "message": message},
        "tests": tests,
        "summary": summarize(tests),
        "options": {"test_timeout": test_timeout},
    }
    if evidence is not None:
        doc["target"]["evidence"] = evidence
    if selection is not None:
        doc["selection"] = selection
    return doc


def summarize(tests: list[dict[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(OUTCOMES, 0)
    for t in tests:
        counts[t["outcome"]] += 1
    return counts


def merge(docs: list[dict[str, Any]], sources: list[str]) -> dict[str, Any]:
    """One results document from the shard results files of one run (``--shard K/N``, K = 1..N, same
    ``--only``/``--skip``, same target, suite hash and device). The run is ok when every shard's was; the
    host fields (OS, Python, packages) are the first shard's. ValueError naming the file that does not fit."""
    if not docs:
        raise ValueError("merge: no results files given")
    first = docs[0]
    shards: dict[int, str] = {}
    n_shards = None
    for doc, source in zip(docs, sources):
        sel = doc.get("selection") or {}
        if not sel.get("shard"):
            raise ValueError(f"{source}: not a shard (its run had no --shard)")
        k, n = parse_shard(sel["shard"])
        if n_shards not in (None, n) or (sel["only"], sel["skip"]) != (first["selection"]["only"],
                                                                        first["selection"]["skip"]):
            raise ValueError(f"{source}: shard {sel['shard']} of another selection than {sources[0]}")
        n_shards = n
        if k in shards:
            raise ValueError(f"{source}: shard {k}/{n} is also {shards[k]}")
        shards[k] = source
        for key in DEVICE_FIELDS:
            if doc["target"].get(key) != first["target"].get(key):
                raise ValueError(f"{source}: target.{key} {doc['target'].get(key)!r} differs from "
                                 f"{sources[0]}'s {first['target'].get(key)!r}")
        if doc["suite"] != first["suite"]:
            raise ValueError(f"{source}: suite {doc['suite']} differs from {sources[0]}'s {first['suite']}")
    missing = sorted(set(range(1, n_shards + 1)) - set(shards))
    if missing:
        raise ValueError(f"merge: shard(s) {', '.join(f'{k}/{n_shards}' for k in missing)} missing")
    tests: dict[str, dict[str, Any]] = {}
    for doc, source in zip(docs, sources):
        for t in doc["tests"]:
            if t["id"] in tests:
                raise ValueError(f"{source}: test {t['id']} is in another shard too")
            tests[t["id"]] = t
    bad = [(doc, source) for doc, source in zip(docs, sources) if doc["run"]["status"] != RunStatus.OK]
    worst = min((doc["run"]["status"] for doc, _ in bad), key=RUN_STATUSES[::-1].index, default=RunStatus.OK)
    message = "; ".join(f"shard {doc['selection']['shard']}: {doc['run']['status']}"
                        + (f": {doc['run']['message']}" if doc["run"]["message"] else "") for doc, _ in bad)
    only, skip = first["selection"]["only"], first["selection"]["skip"]
    merged = dict(first, tests=sorted(tests.values(), key=lambda t: t["id"]),
                  started=min(d["started"] for d in docs), finished=max(d["finished"] for d in docs),
                  run={"status": str(worst), "message": message})
    merged["summary"] = summarize(merged["tests"])
    del merged["selection"]
    if only or skip:
        merged["selection"] = {"only": only, "skip": skip, "shard": ""}
    return validate(merged, "merged results")


JSON_TYPE_NAMES = {dict: "object", list: "array", str: "string"}

#: Every key a results document may hold, per object (``validate`` refuses any other: a field a forger adds
#: is refused, not ignored). A new field is added here, with its check in ``validate``.
DOCUMENT_KEYS = {
    "": {"schema", "suite", "target", "builds", "started", "finished", "run", "tests", "summary", "selection",
         "forced", "options"},
    "suite": {"version", "hash", "parts"},
    "target": {"name", "backend", "driver", "driver_version", "device", "vendor", "simulated", "select", "os",
               "python", "packages", "evidence"},
    "target.evidence": {"driver", "simulated", "libraries"},
    "target.evidence.libraries[]": {"path", "sha256"},
    "run": {"status", "message"},
    "tests[]": {"id", "clauses", "outcome", "duration", "message", "outputs", "tries", "passes"},
    "selection": {"only", "skip", "shard"},
    "forced": {"missing", "by"},
    "options": {"test_timeout"},
}


def _unknown_keys(doc: dict[str, Any]) -> list[str]:
    """The keys of ``doc`` that ``DOCUMENT_KEYS`` does not allow, as dotted paths (objects ``validate``
    has checked to be objects)."""
    target, evidence = doc["target"], doc["target"].get("evidence") or {}
    objects = [("", doc), ("suite", doc["suite"]), ("target", target), ("run", doc["run"]),
               ("target.evidence", evidence),
               *[("target.evidence.libraries[]", lib) for lib in evidence.get("libraries", [])],
               *[("tests[]", t) for t in doc["tests"]],
               *[(key, doc[key]) for key in ("selection", "forced", "options") if isinstance(doc.get(key), dict)]]
    return [f"{where}.{key}".lstrip(".") for where, obj in objects for key in sorted(obj)
            if key not in DOCUMENT_KEYS[where]]


def validate(doc: Any, source: str = "results") -> dict[str, Any]:
    """Check a loaded results document against the schema; ValueError naming the file and the field."""

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise ValueError(f"{source}: {what}")

    def clause_id(text: Any) -> bool:
        try:
            ClauseId.parse(text)
        except ValueError:
            return False
        return True

    need(isinstance(doc, dict), "not a JSON object")
    need(type(doc.get("schema")) is int and doc["schema"] == SCHEMA_VERSION, f"schema must be {SCHEMA_VERSION}, got {doc.get('schema')!r}")
    for key in ("suite", "target", "run", "tests", "summary", "started", "finished"):
        need(key in doc, f"missing {key!r}")
    for key, kind in (("suite", dict), ("target", dict), ("run", dict), ("tests", list), ("summary", dict),
                      ("started", str), ("finished", str)):
        need(isinstance(doc[key], kind), f"{key} must be a JSON {JSON_TYPE_NAMES[kind]}")
    need(isinstance(doc["suite"].get("hash"), str), "suite.hash must be a string")
    need(isinstance(doc["suite"].get("version", ""), str), "suite.version must be a string")
    parts = doc["suite"].get("parts", {"suite": doc["suite"]["hash"]})  # absent in files before per-part hashes
    need(isinstance(parts, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in parts.items())
         and parts.get("suite") == doc["suite"]["hash"],
         "suite.parts must map part names to hash strings, its suite the same as suite.hash")
    builds = doc.get("builds", {})  # absent in files before builds were recorded
    need(isinstance(builds, dict) and set(builds) <= set(BUILDS)
         and all(v is None or isinstance(v, str) for v in builds.values()),
         f"builds must map {' and '.join(BUILDS)} to a source hash string or null")
    for key in ("name", "backend", "driver", "simulated"):
        need(key in doc["target"], f"target.{key} missing")
    for key in ("name", "backend", "driver"):
        need(isinstance(doc["target"][key], str), f"target.{key} must be a string")
    target = doc["target"]
    need(re.fullmatch(TARGET_NAME, target["name"]) is not None,
         f"target.name {target['name']!r} is not backend/driver (letters, digits, '.', '_', '+', '-')")
    need(target["name"] == f"{target['backend']}/{target['driver']}",
         f"target.name {target['name']!r} is not target.backend/target.driver")
    need(isinstance(target["simulated"], bool), "target.simulated must be true or false")
    for key in ("driver_version", "device", "vendor", "os", "python"):
        need(isinstance(target.get(key, ""), str), f"target.{key} must be a string")
    evidence = target.get("evidence", {"driver": "", "simulated": True, "libraries": []})
    need(isinstance(evidence, dict) and isinstance(evidence.get("driver"), str)
         and isinstance(evidence.get("simulated"), bool) and isinstance(evidence.get("libraries"), list)
         and all(isinstance(lib, dict) and isinstance(lib.get("path"), str) and isinstance(lib.get("sha256"), str)
                 for lib in evidence["libraries"]),
         "target.evidence must be {driver: string, simulated: bool, libraries: [{path, sha256}]}")
    for key in ("packages", "select"):
        need(isinstance(target.get(key, {}), dict) and all(isinstance(k, str) and isinstance(v, str)
                                                           for k, v in target.get(key, {}).items()),
             f"target.{key} must map names to version strings")
    need(doc["run"].get("status") in RUN_STATUSES, f"run.status must be one of {RUN_STATUSES}")
    need(isinstance(doc["run"].get("message", ""), str), "run.message must be a string")
    for i, t in enumerate(doc["tests"]):
        need(isinstance(t, dict), f"tests[{i}] must be a JSON object")
        need(isinstance(t.get("id"), str), f"tests[{i}].id must be a string")
        need(isinstance(t.get("message", ""), str), f"tests[{i}].message must be a string")
        need(isinstance(t.get("duration", 0.0), (int, float)) and not isinstance(t.get("duration"), bool),
             f"tests[{i}].duration must be a number")
        need(isinstance(t.get("outputs", {}), dict) and all(isinstance(k, str) and isinstance(v, str)
                                                            for k, v in t.get("outputs", {}).items()),
             f"tests[{i}].outputs must map output names to digest strings")
        need(t.get("outcome") in OUTCOMES, f"tests[{i}].outcome {t.get('outcome')!r} is not one of {OUTCOMES}")
        need(("tries" in t) == ("passes" in t) and all(type(t.get(k, 1)) is int for k in ("tries", "passes"))
             and 0 <= t.get("passes", 0) <= t.get("tries", 1), f"tests[{i}]: tries and passes must be counts, "
             "both or neither, passes <= tries")
        need(isinstance(t.get("clauses"), list) and all(clause_id(c) for c in t["clauses"]),
             f"tests[{i}].clauses must be a list of clause id strings")
    need(doc["summary"] == summarize(doc["tests"]), "summary does not match the tests")
    forced = doc.get("forced", {"missing": "", "by": ""})
    need(isinstance(forced, dict) and all(isinstance(forced.get(k), str) for k in ("missing", "by")),
         "forced must be {\"missing\": string, \"by\": string}")
    options = doc.get("options", {"test_timeout": None})  # absent in files before options were recorded
    limit = options.get("test_timeout") if isinstance(options, dict) else "not an object"
    need(isinstance(options, dict) and "test_timeout" in options and (limit is None or (
        isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0)),
         "options must be {\"test_timeout\": seconds (a positive number) or null}")
    if "selection" in doc:
        sel = doc["selection"]
        need(isinstance(sel, dict) and all(isinstance(sel.get(k), list) and all(isinstance(p, str) for p in sel[k])
                                           for k in ("only", "skip")) and isinstance(sel.get("shard"), str),
             "selection must be {\"only\": [globs], \"skip\": [globs], \"shard\": \"K/N\" or \"\"}")
        try:
            if sel["shard"]:
                parse_shard(sel["shard"])
        except ValueError as exc:
            need(False, f"selection.shard: {exc}")
    unknown = _unknown_keys(doc)
    need(not unknown, f"unknown key(s) {', '.join(unknown)} (a results file holds only the fields of its schema)")
    return doc


class DuplicateKey(ValueError):
    """A JSON object with a key twice (``read_json``): a second ``"proves"`` must not win silently."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(f"duplicate key {key!r}")
        seen[key] = value
    return seen


#: The largest results file, certificate or manifest read (the suite's largest results file is under 1 MiB).
MAX_FILE_BYTES = 64 << 20


def read_bytes(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """A regular file's bytes, at most ``limit`` of them: never blocks on a FIFO, never reads /dev/zero or a
    huge sparse file whole. ValueError (one line) naming the file for anything else."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path}: not a regular file (a FIFO, device or socket)")
        if info.st_size > limit:
            raise ValueError(f"{path}: {info.st_size} bytes, more than the {limit} this reads")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError(f"{path}: more than the {limit} bytes this reads")
    return data


def read_json(path: Path) -> Any:
    """A results file or certificate as JSON, strictly: UTF-8 without a byte-order mark, no duplicate keys
    (a second ``"level"`` must not win silently). ValueError saying, on one line, which file and what is
    wrong with it (missing, a directory, a dangling link, empty, not UTF-8, not JSON, nested too deep)."""
    path = Path(path)
    if path.is_symlink() and not path.exists():
        raise ValueError(f"{path}: a symbolic link to {os.readlink(path)}, which does not exist")
    if path.is_dir():
        raise ValueError(f"{path}: a directory, not a file")
    data = read_bytes(path)
    if not data.strip():
        raise ValueError(f"{path}: empty file")
    if data.startswith(b"\xef\xbb\xbf"):
        raise ValueError(f"{path}: starts with a UTF-8 byte-order mark; write UTF-8 without one")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from exc
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    except RecursionError as exc:
        raise ValueError(f"{path}: JSON nested too deeply to read") from exc
    except DuplicateKey as exc:
        raise DuplicateKey(f"{path}: {exc}") from exc


def load(path: Path) -> dict[str, Any]:
    """A validated results file (``read_json``, then ``validate``)."""
    return validate(read_json(path), str(path))


def dump(doc: dict[str, Any], path: Path) -> None:
    validate(doc, str(path))
    Path(path).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
