"""Signed certificates (issue 29, item 4): ``certify --sign KEY``, ``package --sign KEY``, ``verify --trust
KEYS``. A signed certificate or package verifies only with the right key; a signature that does not verify,
or signs other bytes, is tampering (4); unsigned or signed by another key, with ``--trust``, is untrusted (5).
The keys are made here, in each test's folder: none is ever in the repository."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from ironaccel.cts import certificates, results, runs, signing, verifier
from ironaccel.cts.cli import main
from ironaccel.cts.testing.documents import passing_doc

VALID, TAMPERED, UNTRUSTED = verifier.VERIFY_VALID, verifier.VERIFY_TAMPERED, verifier.VERIFY_UNTRUSTED


def keypair(folder: Path, name: str) -> tuple[Path, Path]:
    """A new ed25519 key: (its private PEM file, its public PEM file)."""
    key = ed25519.Ed25519PrivateKey.generate()
    private, public = folder / f"{name}.pem", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def doc() -> dict:
    return passing_doc("cuda/fake", whole_suite=True)


@pytest.fixture
def signed(tmp_path, doc) -> tuple[Path, Path, Path]:
    """A certificate signed by the key "ours": (the certificate, our public key, another public key)."""
    ours, ours_pub = keypair(tmp_path, "ours")
    _, theirs_pub = keypair(tmp_path, "theirs")
    folder = tmp_path / "results"
    folder.mkdir()
    results.dump(doc, folder / "cuda-fake.json")
    certificates.write_junit_and_certificate(folder / "cuda-fake.json")
    cert = folder / "cuda-fake.cert.json"
    signing.sign(cert, signing.load_private_key(ours))
    return cert, ours_pub, theirs_pub


def verify(cert: Path, *trust: Path) -> int:
    return main(["verify", str(cert), *[arg for key in trust for arg in ("--trust", str(key))]])


def test_a_signed_certificate_verifies_only_with_the_right_key(signed, capsys):
    cert, ours, theirs = signed
    assert verify(cert, ours) == VALID
    assert "signed by ed25519:" in capsys.readouterr().out
    assert verify(cert, theirs) == UNTRUSTED
    assert "which is not a key of --trust" in capsys.readouterr().err
    assert verify(cert, theirs, ours) == VALID  # either of two trusted keys
    assert verify(cert) == VALID
    assert "not checked against trusted keys" in capsys.readouterr().out


def test_an_unsigned_certificate_is_untrusted_when_trust_is_asked_for(signed, capsys):
    cert, ours, _ = signed
    signing.signature_path(cert).unlink()
    assert verify(cert) == VALID
    assert verify(cert, ours) == UNTRUSTED
    assert capsys.readouterr().err.startswith("unsigned: cuda-fake.cert.json has no signature")


def _flip_value(sig: Path) -> None:
    doc = json.loads(sig.read_text())
    value = bytearray(base64.b64decode(doc["value"]))
    value[0] ^= 1
    doc["value"] = base64.b64encode(bytes(value)).decode()
    sig.write_text(json.dumps(doc))


def _edit_results_and_recertify(cert: Path) -> None:
    """The forger's whole job without the key: results edited, certificate written anew (re-hashed)."""
    path = cert.with_name("cuda-fake.json")
    doc = results.load(path)
    doc["target"]["driver_version"] = "9.9"
    results.dump(doc, path)
    certificates.write_junit_and_certificate(path)


def _resign_with(key_path: Path):
    return lambda cert: (_edit_results_and_recertify(cert), signing.sign(cert, signing.load_private_key(key_path)))


SIGNATURE_TAMPERING = {
    "the signature's value changed": (lambda cert: _flip_value(signing.signature_path(cert)), "does not verify"),
    "the results edited after signing, the certificate re-hashed": (_edit_results_and_recertify,
                                                                    "signs other bytes"),
    "the results edited after signing": (lambda cert: cert.with_name("cuda-fake.json").write_text(
        cert.with_name("cuda-fake.json").read_text().replace('"duration": 0.0', '"duration": 0.5', 1)),
                                         "changed since the certificate was written"),
    "the signed hashes edited to fit": (lambda cert: _edit_json(signing.signature_path(cert), lambda d: d["signed"][
        "results"].update(sha256="0" * 64)), "does not verify"),
    "an unknown key in the signature": (lambda cert: _edit_json(signing.signature_path(cert),
                                                                lambda d: d.update(trusted=True)), "must hold exactly"),
    "the signature not JSON": (lambda cert: signing.signature_path(cert).write_text("{"), "not JSON"),
    "a signature of another schema": (lambda cert: _edit_json(signing.signature_path(cert),
                                                              lambda d: d.update(signature=2)), "signature must be 1"),
    "a signature of another algorithm": (lambda cert: _edit_json(signing.signature_path(cert),
                                                                 lambda d: d.update(algorithm="rsa")),
                                         "algorithm must be"),
}


def _edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("case", sorted(SIGNATURE_TAMPERING))
def test_a_tampered_signature_is_tampered_with_or_without_trust(signed, capsys, case):
    cert, ours, _ = signed
    change, says = SIGNATURE_TAMPERING[case]
    change(cert)
    for trust in ((), (ours,)):
        assert verify(cert, *trust) == TAMPERED
        assert says in capsys.readouterr().err


def test_a_forger_who_signs_with_their_own_key_is_untrusted(signed, tmp_path, capsys):
    cert, ours, _ = signed
    forger, _ = keypair(tmp_path, "forger")
    _resign_with(forger)(cert)
    assert verify(cert, ours) == UNTRUSTED
    assert verify(cert) == VALID  # only a --trust says whose signature counts


def test_keys_that_are_not_ed25519_keys_exit_2(tmp_path, signed, capsys):
    cert, _, _ = signed
    (tmp_path / "empty.pub").write_text("no key here\n")
    assert verify(cert, tmp_path / "empty.pub") == 2
    assert "no public key" in capsys.readouterr().err
    from cryptography.hazmat.primitives.asymmetric import ec

    encrypted = tmp_path / "locked.pem"
    encrypted.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")))
    ecdsa = tmp_path / "ec.pem"
    ecdsa.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    for key, says in ((encrypted, "not an unencrypted PEM private key"), (ecdsa, "not an ed25519 private key")):
        assert main(["package", str(tmp_path / "pkg"), "--results", str(cert.parent), "--sign", str(key)]) == 2
        assert says in capsys.readouterr().err and not (tmp_path / "pkg").exists()


def test_a_signed_package_records_the_key_and_verifies_only_with_it(signed, tmp_path, capsys):
    cert, ours, theirs = signed
    pkg = tmp_path / "pkg"
    assert main(["package", str(pkg), "--results", str(cert.parent), "--sign", str(tmp_path / "ours.pem")]) == 0
    manifest = json.loads((pkg / "MANIFEST.json").read_text())
    assert manifest["signers"] == {"cuda/fake": signing.Signer(signing.load_trusted_keys(ours)[0]).base64}
    assert "results/cuda-fake.cert.sig" in manifest["files"]
    assert main(["verify", str(pkg), "--trust", str(ours)]) == VALID
    assert "signed by ed25519:" in capsys.readouterr().out
    assert main(["verify", str(pkg), "--trust", str(theirs)]) == UNTRUSTED

    forged = tmp_path / "forged"
    shutil.copytree(pkg, forged)
    _edit_results_and_recertify(forged / "results" / "cuda-fake.cert.json")
    m = json.loads((forged / "MANIFEST.json").read_text())
    for name in ("results/cuda-fake.json", "results/cuda-fake.junit.xml", "results/cuda-fake.cert.json",
                 "results/cuda-fake.cert.md"):
        m["files"][name] = certificates.sha256_file(forged / name)
    (forged / "MANIFEST.json").write_text(json.dumps(m))
    assert main(["verify", str(forged), "--trust", str(ours)]) == TAMPERED
    assert "signs other bytes" in capsys.readouterr().err

    relabelled = tmp_path / "relabelled"
    shutil.copytree(pkg, relabelled)
    _edit_json(relabelled / "MANIFEST.json", lambda d: d.update(signers={}))
    assert main(["verify", str(relabelled)]) == TAMPERED
    assert "the manifest's signers" in capsys.readouterr().err


def test_a_package_keeps_a_signature_that_still_signs_and_refuses_one_that_does_not(signed, tmp_path, capsys,
                                                                                     monkeypatch):
    """A package judges each certificate anew: a signature copied from the results folder must still sign it."""
    from ironaccel.cts import spec

    cert, ours, _ = signed
    assert main(["package", str(tmp_path / "kept"), "--results", str(cert.parent)]) == 0
    assert main(["verify", str(tmp_path / "kept"), "--trust", str(ours)]) == VALID
    monkeypatch.setattr(spec, "suite_hash", lambda: "0" * 16)  # the suite changed: the certificate now says stale
    assert main(["package", str(tmp_path / "refused"), "--results", str(cert.parent)]) == 2
    assert "no longer signs the certificate" in capsys.readouterr().err and not (tmp_path / "refused").exists()


def test_promoting_an_unsigned_run_removes_the_signature_it_replaces(signed, tmp_path):
    cert, _, _ = signed
    committed = tmp_path / "committed"
    shutil.copytree(cert.parent, committed)
    run = tmp_path / "run"
    shutil.copytree(cert.parent, run)
    signing.signature_path(run / cert.name).unlink()
    runs.promote(run / "cuda-fake.json", committed)
    assert not signing.signature_path(committed / cert.name).exists()
    shutil.copyfile(signing.signature_path(cert), signing.signature_path(run / cert.name))
    runs.promote(run / "cuda-fake.json", committed)
    assert signing.signature_path(committed / cert.name).read_bytes() == signing.signature_path(cert).read_bytes()


@pytest.mark.timeout(600)
def test_certify_sign_signs_what_it_promotes(tmp_path, capsys):
    """End to end: a real (weakened) cuda/fake run, signed, promoted, verified with and without the key."""
    ours, ours_pub = keypair(tmp_path, "ours")
    _, theirs_pub = keypair(tmp_path, "theirs")
    out = tmp_path / "results"
    assert main(["certify", "--target", "cuda/fake", "--only", "EVENT-1", "--results", str(out),
                 "--sign", str(ours)]) == 0
    cert = out / "cuda-fake.cert.json"
    (folder,) = (out / runs.RUNS).iterdir()
    assert signing.signature_path(cert).read_bytes() == signing.signature_path(folder / cert.name).read_bytes()
    capsys.readouterr()
    assert verify(cert, ours_pub) == VALID
    assert capsys.readouterr().out.startswith("valid, weakened (--only EVENT-1)")
    assert verify(cert, theirs_pub) == UNTRUSTED
    assert main(["certify", "--target", "cuda/fake", "--results", str(out), "--sign", str(tmp_path / "none.pem")]) == 2
    assert "none.pem: cannot be read" in capsys.readouterr().err


@pytest.mark.parametrize(("load", "cap", "which"), [(signing.load_trusted_keys, 1 << 20, 1),
                                                    (signing.load_private_key, 1 << 16, 0)])
def test_a_key_file_is_read_up_to_its_cap_and_refused_past_it(tmp_path, load, cap, which):
    """A KEYS file up to 1 MiB, a private key file up to 64 KiB (room for any real one; never a huge or endless
    file read whole); one byte more is refused naming the file."""
    key = keypair(tmp_path, "k")[which]
    pem = key.read_bytes()
    key.write_bytes(pem + b"\n" * (cap - len(pem)))
    assert load(key)
    key.write_bytes(pem + b"\n" * (cap + 1 - len(pem)))
    with pytest.raises(ValueError, match=f"{key}: {cap + 1} bytes, more than the {cap} this reads"):
        load(key)
