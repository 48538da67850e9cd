"""Every bad input a clear error, exit 2 (or 4 for a tampered package), nothing written (issues 24, 29, 31):
hostile results files, certificates and packages given to status, package and verify; and verify and package
as verbs of their own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ironaccel.cts import certify
from ironaccel.cts.cli import main
from memruns import BAD_RESULTS_FILES, ROOT, committed_copy, committed_fake, edit_json, fifo


@pytest.mark.parametrize("case", sorted(BAD_RESULTS_FILES))
@pytest.mark.timeout(60)
def test_status_and_package_on_a_hostile_results_file_exit_2_and_write_nothing(tmp_path, capsys, case):
    """Issue 31 (7): whole-file reads on huge sparse files and /dev/zero, a FIFO hanging status; wrong types."""
    change, message = BAD_RESULTS_FILES[case]
    folder = committed_fake(tmp_path)
    change(folder / "cuda-fake.json")
    out = tmp_path / "STATUS.md"
    assert main(["status", "--results", str(folder), "--output", str(out)]) == 2
    assert message in capsys.readouterr().err and not out.exists()
    assert main(["certify", "--package", str(tmp_path / "pkg"), "--results", str(folder)]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "pkg").exists()


@pytest.mark.parametrize("where", ["no/S.md", "a-file/S.md"])
def test_status_into_a_missing_folder_exits_2(tmp_path, capsys, where):
    """Issue 24: `status --output /no/such/dir/S.md` ended in a traceback."""
    (tmp_path / "a-file").write_text("not a folder")
    assert main(["status", "--results", str(ROOT / "results"), "--output", str(tmp_path / where)]) == 2
    assert "cannot write" in capsys.readouterr().err and not (tmp_path / "no").exists()


@pytest.mark.parametrize("case", ["a FIFO", "/dev/zero", "a huge sparse file", "duplicate keys"])
@pytest.mark.timeout(60)
def test_verify_of_a_hostile_certificate_or_results_file_exits_2_or_4(tmp_path, capsys, case):
    """Not a certificate (2) when the certificate cannot be read; tampered (4) when a certificate has a
    duplicate key or names a results file that is no regular file (issue 29)."""
    change, message = BAD_RESULTS_FILES[case]
    for name in ("cuda-fake.cert.json", "cuda-fake.json")[:1 if case == "duplicate keys" else 2]:
        folder = committed_copy(tmp_path / name, "cuda/fake")
        change(folder / name)
        code = 2 if name.endswith(".cert.json") and case != "duplicate keys" else certify.VERIFY_TAMPERED
        assert main(["certify", "--verify", str(folder / "cuda-fake.cert.json")]) == code, name
        assert message in capsys.readouterr().err


def test_a_certificate_of_another_suite_version_is_stale_and_says_so(tmp_path, capsys):
    folder = committed_fake(tmp_path)
    edit_json(**{"suite.version": "0.0.1"})(folder / "cuda-fake.json")
    certify.write_certificate(folder / "cuda-fake.json")
    assert main(["certify", "--verify", str(folder / "cuda-fake.cert.json")]) == certify.VERIFY_STALE
    assert "ironaccel 0.0.1" in capsys.readouterr().err


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    from ironaccel.cts import submission

    tmp = tmp_path_factory.mktemp("pkg")
    return submission.package(committed_copy(tmp, "cuda/fake"), tmp / "pkg")


def _manifest(**changes):
    return lambda pkg: edit_json(**changes)(pkg / "MANIFEST.json")


def _name_outside(pkg: Path) -> None:
    m = json.loads((pkg / "MANIFEST.json").read_text())
    m["files"]["../outside.json"] = m["files"].pop("environment.json")
    (pkg / "MANIFEST.json").write_text(json.dumps(m))


BAD_PACKAGES = {  # change -> (exit code, message)
    '"package": true': (_manifest(package=True), 2, "package must be the number 2"),
    "files a list": (_manifest(files=["results/cuda-fake.json"]), 2, "files must map"),
    "targets a list": (_manifest(targets=["cuda/fake"]), 2, "targets must map"),
    "a path outside": (_name_outside, 2, "not a path inside the package"),
    "an absolute path": (_manifest(**{"files./etc/passwd": "0" * 64}), 2, "not a path inside the package"),
    "git.commit not a commit": (_manifest(**{"git.commit": "HEAD"}), 2, "git.commit"),
    "git.dirty a string": (_manifest(**{"git.dirty": "no"}), 2, "git.dirty"),
    "a symlinked manifest": (lambda p: (p.joinpath("M").write_bytes(p.joinpath("MANIFEST.json").read_bytes()),
                                        p.joinpath("MANIFEST.json").unlink(),
                                        p.joinpath("MANIFEST.json").symlink_to("M")), 2, "symbolic link"),
    "a missing file": (lambda p: (p / "environment.json").unlink(), 4, "missing from the package"),
    "an extra file": (lambda p: (p / "extra.txt").write_text("x"), 4, "not in the manifest"),
    "a symlinked file": (lambda p: ((p / "environment.json").rename(p / "e"),
                                    (p / "environment.json").symlink_to("e")), 4, "symbolic links"),
    "a FIFO": (lambda p: fifo(p / "results" / "extra.json"), 4, "FIFOs"),
    "git.dirty flipped": (lambda p: edit_json(**{"git.dirty": not json.loads(
        (p / "MANIFEST.json").read_text())["git"]["dirty"]})(p / "MANIFEST.json"), 4, "git.dirty and git.diff"),
}


@pytest.mark.parametrize("case", sorted(BAD_PACKAGES))
@pytest.mark.timeout(60)
def test_verify_of_a_hostile_package(tmp_path, capsys, package, case):
    """Issue 24 and 31 (7): missing, extra and symlinked files, paths outside, wrong types, FIFOs, git fields."""
    change, code, message = BAD_PACKAGES[case]
    copy = tmp_path / "copy"
    shutil.copytree(package, copy, symlinks=True)
    change(copy)
    assert main(["certify", "--verify", str(copy)]) == code
    assert message in capsys.readouterr().err



# -- one command per verb (issue 27, step 2) ---------------------------------------------------------------------

def test_verify_and_package_are_verbs_and_the_old_spellings_still_work(tmp_path, capsys):
    folder = committed_fake(tmp_path)
    cert = folder / "cuda-fake.cert.json"
    code = main(["verify", str(cert)])
    assert code in (certify.VERIFY_VALID, certify.VERIFY_STALE)
    assert main(["certify", "--verify", str(cert)]) == code
    assert "the new name: `ironaccel verify" in capsys.readouterr().err
    assert main(["package", str(tmp_path / "pkg"), "--results", str(folder)]) == 0
    assert main(["verify", str(tmp_path / "pkg")]) in (certify.VERIFY_VALID, certify.VERIFY_STALE)
    assert main(["certify", "--package", str(tmp_path / "pkg2"), "--results", str(folder)]) == 0
    assert "the new name: `ironaccel package" in capsys.readouterr().err
    assert main(["package", str(tmp_path / "no" / "pkg"), "--results", str(folder)]) == 2
    assert "no such folder" in capsys.readouterr().err and not (tmp_path / "no").exists()
