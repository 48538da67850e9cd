"""A submission package, as the Khronos conformance process has one: everything a reviewer needs to check
a certification claim without trusting the submitter's machine (``ironaccel certify --package OUT``)::

    OUT/MANIFEST.json       what is inside: every file's sha256, the suite version and hashes, what each
                            target proves and each backend's level, and the git state of ironaccel's checkout
                            and of each backend's own repository (where its package lives: a plugin certified
                            from its repository records that repository's commit): commit, whether the tree
                            was dirty, its untracked files (listed, not diffed)
    OUT/results/            per target: results file, JUnit, certificate (.cert.json, .cert.md), and its
                            signature (.cert.sig) when signed (``package --sign KEY``, or a signature from
                            the results folder that still signs the certificate as judged now)
    OUT/environment.json    this machine: OS, Python, package versions (each results file has its device)
    OUT/git.diff            the uncommitted changes to ironaccel the run was made with (only when dirty)
    OUT/git-<backend>.diff  the same for a backend that lives in a repository of its own

The manifest records each signed target's public key (``signers``). ``verify`` (``ironaccel verify OUT
[--trust KEYS]``) checks it whole: nothing missing or added, every hash, each certificate as ``verifier`` does
(with ``--trust``, each must be signed by a trusted key), the signers the signatures name, JUnit and levels
recomputed from the results files.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

from .. import __version__
from . import judge, results, runs, spec, status, targets
from .results import CERTIFICATE_SUFFIX, JUNIT_SUFFIX

PACKAGE_SCHEMA = 2  # 2: "signers"
MANIFEST = "MANIFEST.json"
RESULTS = "results"
SUFFIXES = (".json", JUNIT_SUFFIX, CERTIFICATE_SUFFIX, ".cert.md")  # a target's files in results/ (and .cert.sig)


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_state(root: Path) -> dict[str, Any]:
    """The checkout at ``root``: commit, dirty flag (untracked files count), the untracked files (listed, not
    diffed) and the diff of tracked files against the commit."""
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return {"commit": "", "dirty": None, "untracked": [], "diff": "", "note": f"{root} is not a git checkout"}
    changes = [e for e in (_git(root, "status", "--porcelain", "-z", "--untracked-files=all") or "").split("\0") if e]
    untracked = sorted(entry[3:] for entry in changes if entry.startswith("?? "))
    diff = (_git(root, "diff", "HEAD") or "") if changes else ""
    return {"commit": commit.strip(), "dirty": bool(changes), "untracked": untracked, "diff": diff, "note": ""}


def repository_of(code: Path) -> Path | None:
    """The top of the git checkout that tracks ``code`` (a module file or a package folder); None when no
    checkout does (an installed wheel: a site-packages inside some repository's ignored venv is not its code)."""
    folder = code if code.is_dir() else code.parent
    top = _git(folder, "rev-parse", "--show-toplevel")
    if top is None or _git(folder, "ls-files", "--error-unmatch", "--", str(code)) is None:
        return None
    return Path(top.strip())


def _state_of(root: Path | None, what: str) -> dict[str, Any]:
    if root is None:
        return {"commit": "", "dirty": None, "untracked": [], "diff": "", "note": f"{what} is not in a git checkout"}
    return git_state(root)


def _backend_repositories(backends: list[str], ironaccel_root: Path | None) -> dict[str, dict[str, Any]]:
    """Backend -> the git state of the repository its package lives in (``spec.package_location``), or
    ``{"repository": "ironaccel"}`` for one that lives in ironaccel's own checkout."""
    out: dict[str, dict[str, Any]] = {}
    for backend in backends:
        code = spec.package_location(backend)
        root = None if code is None else repository_of(code)
        if root is not None and ironaccel_root is not None and root == ironaccel_root.resolve():
            out[backend] = {"repository": "ironaccel"}
        else:
            out[backend] = {**_state_of(root, f"the {backend} backend ({code or 'not found'})"),
                            "diff_file": f"git-{backend}.diff"}
    return out


def _judgement(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """What the package's results prove, as the judge says today: per target and per backend."""
    clauses = spec.load_clauses()
    current = spec.current([d["target"]["name"] for d in docs])
    runs, _ = judge.runs(docs, current, targets.TARGETS)
    infos = {b.name: b for b in status.registry_infos()}
    backends = sorted({r.backend for r in runs})
    return {
        "targets": {r.name: judge.target_level(r, clauses)[0] for r in runs},
        "backends": {b: judge.backend_level(infos.get(b), [r for r in runs if r.backend == b], clauses, b,
                                            targets.TARGETS)[0] for b in backends},
        "parts": {r.name: current.parts(r.name) for r in runs},
    }


def package(results_dir: Path, out: Path, root: Path | None = None, signer: Any = None) -> Path:
    """Bundle every results file of ``results_dir`` (with its JUnit and certificate) into ``out``, a new
    folder, made whole under a hidden name and renamed (a kill leaves no half package); ValueError when ``out``
    exists, a results file is bad or a target's files are incomplete. ``signer``: an ed25519 private key
    (``signing.load_private_key``) that signs every certificate of the package."""
    final = Path(out)
    if os.path.lexists(final):
        raise ValueError(f"{final}: already exists; a package is written into a new folder")
    if not final.parent.is_dir():
        raise ValueError(f"{final.parent}: no such folder to write the package into")
    docs = status.load_results(results_dir)
    if not docs:
        raise ValueError(f"{results_dir}: no results files to package")
    out = final.with_name(f".{final.name}.{os.getpid()}.partial")  # renamed to ``final`` once whole
    try:
        (out / RESULTS).mkdir(parents=True)
        _write(docs, Path(results_dir), out, root, signer)
        os.rename(out, final)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return final


def _write(docs: list[dict[str, Any]], results_dir: Path, out: Path, root: Path | None, signer: Any) -> None:
    """The package's files, into the (still hidden) folder ``out``: the manifest last."""
    from . import signing
    from .certificates import junit_xml, sha256_file, write_certificate

    signers = {}

    for doc in docs:
        stem = results.file_name(doc["target"]["name"])
        source = Path(results_dir) / stem
        if not source.is_file():
            raise ValueError(f"{results_dir}: the results of {doc['target']['name']} are not in {stem}")
        copy = out / RESULTS / stem
        shutil.copyfile(source, copy)
        results.sibling(copy, JUNIT_SUFFIX).write_text(junit_xml(doc), encoding="utf-8")
        cert = write_certificate(copy)  # judged now, by this suite: the certificates in results_dir may be older
        signature = signing.signature_path(source.with_name(cert.name))
        if signer is not None:
            signing.sign(cert, signer)
        elif signature.is_file():
            shutil.copyfile(signature, signing.signature_path(cert))
        try:
            found = signing.check(cert, copy)
        except signing.BadSignature as exc:
            raise ValueError(f"{signature}: it no longer signs the certificate of {doc['target']['name']} as "
                             f"judged now ({exc}); re-certify it, or package with --sign KEY") from exc
        if found is not None:
            signers[doc["target"]["name"]] = found.base64
    (out / "environment.json").write_text(json.dumps(results.host_environment(), indent=1, sort_keys=True) + "\n",
                                          encoding="utf-8")
    ironaccel_root = root or repository_of(Path(__file__).resolve().parents[1])
    git = _state_of(ironaccel_root, f"ironaccel ({Path(__file__).resolve().parents[1]})")
    if git["dirty"]:
        (out / "git.diff").write_text(git["diff"], encoding="utf-8")
    backends = _backend_repositories(sorted({d["target"]["backend"] for d in docs}), ironaccel_root)
    for state in backends.values():
        if state.get("dirty"):
            (out / state["diff_file"]).write_text(state["diff"], encoding="utf-8")
    files = sorted(p for p in out.rglob("*") if p.is_file())
    manifest = {
        "package": PACKAGE_SCHEMA,
        "suite": {"version": __version__, "hash": spec.suite_hash()},
        "git": {**{k: git[k] for k in ("commit", "dirty", "untracked", "note")},
                "backends": {b: {k: v for k, v in state.items() if k != "diff"} for b, state in backends.items()}},
        **_judgement(docs),
        "signers": signers,
        "files": {p.relative_to(out).as_posix(): sha256_file(p) for p in files},
    }
    runs.atomic_write(out / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n", "package")


SHA256 = re.compile(r"[0-9a-f]{64}")
COMMIT = re.compile(r"([0-9a-f]{40})?")


def _inside(name: Any) -> bool:
    """Is ``name`` a plain relative path inside a package (no "..", ".", absolute path or backslash)?"""
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        return False
    path = PurePosixPath(name)
    return not path.is_absolute() and path.as_posix() == name and not any(p in ("..", ".") for p in path.parts)


def check_manifest(manifest: Any, where: Path) -> dict[str, Any]:
    """The manifest, its every field of the type ``package`` writes (JSON ``true`` is not the number 1) and
    every file name inside the package; ValueError naming the field otherwise."""
    def need(cond: bool, what: str) -> None:
        if not cond:
            raise ValueError(f"{where}: not a package manifest (schema {PACKAGE_SCHEMA}): {what}")

    def strings(value: Any) -> bool:
        return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())

    need(isinstance(manifest, dict), "not a JSON object")
    need(type(manifest.get("package")) is int and manifest["package"] == PACKAGE_SCHEMA,
         f"package must be the number {PACKAGE_SCHEMA}, got {manifest.get('package')!r}")
    files = manifest.get("files")
    need(isinstance(files, dict), "files must map file names to sha256 strings")
    for name, sha in files.items():
        need(_inside(name), f"files names {name!r}, not a path inside the package")
        need(isinstance(sha, str) and SHA256.fullmatch(sha) is not None, f"files[{name!r}] must be a sha256 string")
    need(strings(manifest.get("suite")), "suite must map version and hash to strings")
    for key in ("targets", "backends"):
        need(strings(manifest.get(key)), f"{key} must map names to levels")
    need(strings(manifest.get("signers")), "signers must map target names to public keys (base64)")
    need(isinstance(manifest.get("parts"), dict) and all(strings(v) for v in manifest["parts"].values()),
         "parts must map target names to their hashes")
    git = manifest.get("git")
    need(isinstance(git, dict), "git must be a JSON object")

    def git_state_ok(state: Any, label: str) -> None:
        need(isinstance(state.get("commit"), str) and COMMIT.fullmatch(state["commit"]) is not None,
             f"{label}.commit must be a 40-hex-digit commit or empty")
        need(state.get("dirty") is None or isinstance(state["dirty"], bool), f"{label}.dirty must be true, false or null")
        need(isinstance(state.get("untracked"), list) and all(_inside(u) for u in state["untracked"]),
             f"{label}.untracked must list relative paths")
        need(isinstance(state.get("note"), str), f"{label}.note must be a string")

    git_state_ok(git, "git")
    need(isinstance(git.get("backends"), dict), "git.backends must be a JSON object")
    for backend, state in git["backends"].items():
        need(isinstance(state, dict), f"git.backends[{backend!r}] must be a JSON object")
        if state != {"repository": "ironaccel"}:
            git_state_ok(state, f"git.backends[{backend!r}]")
            need(state.get("diff_file") == f"git-{backend}.diff", f"git.backends[{backend!r}].diff_file must "
                 f"be git-{backend}.diff")
    return manifest


def verify(out: Path, trusted: list[bytes] | None = None) -> tuple[int, str]:
    """(exit code, why) for a whole package: verifier.VERIFY_VALID, VERIFY_STALE (the suite or a target's
    parts changed since), VERIFY_TAMPERED (a file missing, added or changed; a certificate, JUnit file,
    level or signer that the files do not give), VERIFY_UNTRUSTED (``trusted`` given, and a certificate is
    unsigned or signed by another key). ValueError for a folder that is not a readable package."""
    from . import signing
    from .certificates import junit_xml, sha256_file
    from .verifier import VERIFY_STALE, VERIFY_TAMPERED, VERIFY_UNTRUSTED, VERIFY_VALID
    from .verifier import verify as verify_certificate

    out = Path(out)
    if not (out / MANIFEST).exists() and not (out / MANIFEST).is_symlink():
        raise ValueError(f"{out}: a directory, not a certificate, nor a submission package (no {MANIFEST})")
    if (out / MANIFEST).is_symlink():
        raise ValueError(f"{out / MANIFEST}: a symbolic link; a package's manifest is a file of its own")
    manifest = check_manifest(results.read_json(out / MANIFEST), out / MANIFEST)
    listed = manifest["files"]
    present, odd = set(), []
    for folder, dirs, names in os.walk(out):  # symbolic links are listed, never followed
        for name in dirs + names:
            path = Path(folder) / name
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                odd.append(path.relative_to(out).as_posix())
            elif path.is_file():
                present.add(path.relative_to(out).as_posix())
    if odd:
        return VERIFY_TAMPERED, (f"tampered: not plain files or folders (symbolic links, FIFOs, devices): "
                                 f"{', '.join(sorted(odd))}")
    present -= {MANIFEST}
    if set(listed) - present:
        return VERIFY_TAMPERED, f"tampered: missing from the package: {', '.join(sorted(set(listed) - present))}"
    if present - set(listed):
        return VERIFY_TAMPERED, f"tampered: not in the manifest: {', '.join(sorted(present - set(listed)))}"
    for name, sha in sorted(listed.items()):
        if sha256_file(out / name) != sha:
            return VERIFY_TAMPERED, f"tampered: {name} changed since the package was made (sha256 differs)"
    git = manifest["git"]
    if bool(git["dirty"]) != ("git.diff" in listed):
        return VERIFY_TAMPERED, (f"tampered: git.dirty and git.diff disagree (dirty {git['dirty']}, git.diff "
                                 f"{'present' if 'git.diff' in listed else 'missing'})")
    for backend, state in sorted(git["backends"].items()):
        if state.get("dirty") and state.get("diff_file") not in listed:
            return VERIFY_TAMPERED, f"tampered: the {backend} backend's checkout was dirty but its diff is missing"
    result_files = sorted(n for n in listed if n.startswith(f"{RESULTS}/") and n.endswith(".json")
                          and not n.endswith(CERTIFICATE_SUFFIX))
    if not result_files:
        return VERIFY_TAMPERED, "tampered: the package holds no results files"
    docs, stale, proves, signers, untrusted = [], [], {}, {}, []
    for name in result_files:
        doc = results.load(out / name)
        docs.append(doc)
        for suffix in SUFFIXES[1:]:
            if results.sibling(Path(name), suffix).as_posix() not in listed:
                return VERIFY_TAMPERED, f"tampered: {name} has no {suffix} beside it"
        if (out / results.sibling(Path(name), JUNIT_SUFFIX)).read_text(encoding="utf-8") != junit_xml(doc):
            return VERIFY_TAMPERED, f"tampered: the JUnit file of {name} does not say what the results file says"
        cert_path = out / results.sibling(Path(name), CERTIFICATE_SUFFIX)
        code, why = verify_certificate(cert_path, trusted)
        if code == VERIFY_TAMPERED:
            return code, f"{name}: {why}"
        if code == VERIFY_STALE:
            stale.append(f"{name}: {why}")
        if code == VERIFY_UNTRUSTED:
            untrusted.append(f"{name}: {why}")
        try:
            found = signing.check(cert_path, out / name)
        except signing.BadSignature as exc:  # found by verify_certificate first, unless it was stale
            return VERIFY_TAMPERED, f"tampered: {name}: {exc}"
        if found is not None:
            signers[doc["target"]["name"]] = found.base64
        proves[doc["target"]["name"]] = results.read_json(cert_path).get("proves")
    if manifest.get("targets") != proves:  # the certificates are checked against their results files above
        return VERIFY_TAMPERED, (f"tampered: the manifest's targets ({manifest.get('targets')}) are not what the "
                                 f"certificates say ({proves})")
    if manifest["signers"] != signers:
        return VERIFY_TAMPERED, (f"tampered: the manifest's signers ({manifest['signers']}) are not the keys the "
                                 f"signatures carry ({signers})")
    if untrusted:
        return VERIFY_UNTRUSTED, "; ".join(untrusted)
    if manifest.get("suite", {}).get("version") != __version__:
        stale.append(f"made with ironaccel {manifest.get('suite', {}).get('version')}, this is {__version__}")
    if stale:
        return VERIFY_STALE, "stale: " + "; ".join(stale)
    recomputed = _judgement(docs)
    for key in ("targets", "backends", "parts"):
        if manifest.get(key) != recomputed[key]:
            return VERIFY_TAMPERED, (f"tampered: the manifest's {key} ({manifest.get(key)}) are not what the "
                                     f"results give ({recomputed[key]})")
    levels = ", ".join(f"{b} {level}" for b, level in sorted(recomputed["backends"].items()))
    elsewhere = "".join(f"; {b} at commit {state.get('commit') or '?'}"
                        + (f" (dirty, see {state.get('diff_file')})" if state.get("dirty") else "")
                        for b, state in sorted(git.get("backends", {}).items()) if "repository" not in state)
    keys = sorted({signing.fingerprint(base64.b64decode(k)) for k in signers.values()})
    signed = f"; signed by {', '.join(keys)}" if keys else "; unsigned"
    return VERIFY_VALID, (f"valid: {len(docs)} results files, {levels}; commit {git['commit'] or '?'}"
                          + (" (dirty, see git.diff)" if git["dirty"] else "") + elsewhere + signed)
