"""Signed certificates: ``certify --sign KEY`` writes ``<stem>.cert.sig`` beside each certificate, an ed25519
signature (the ``cryptography`` package) over the sha256 of the certificate and of its results file, carrying
the signer's public key; ``verify --trust KEYS`` accepts a certificate only when that key is one of KEYS.

A hash proves a file unchanged, not who made it: anyone can edit a results file and write its certificate
anew. A signature binds both files to a key whose public half a reviewer got from the submitter, not from
the package.

Keys are PEM files and never enter the repository: a private key (PKCS#8, unencrypted)::

    openssl genpkey -algorithm ed25519 -out signer.pem
    openssl pkey -in signer.pem -pubout -out signer.pub     # the public key, to give reviewers

and KEYS, a file of one or more public keys (PEM blocks one after another). The signature file::

    {"signature": 1, "algorithm": "ed25519", "public_key": "<32 bytes, base64>",
     "signed": {"certificate": {"file": "cuda-fake.cert.json", "sha256": "..."},
                "results": {"file": "cuda-fake.json", "sha256": "..."}},
     "value": "<64 bytes, base64>"}

``value`` signs the canonical JSON (sorted keys, no spaces, ASCII) of the object without ``value``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import results
from .results import SIGNATURE_SUFFIX

SIGNATURE_SCHEMA = 1
ALGORITHM = "ed25519"
SIGNATURE_KEYS = {"signature", "algorithm", "public_key", "signed", "value"}


class BadSignature(ValueError):
    """A signature file that does not verify, or does not sign these files: evidence of tampering."""


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:
        raise ValueError("signing needs the `cryptography` package: pip install 'ironaccel[cts]'") from exc
    return ed25519


def _raw(public_key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(public_key: bytes) -> str:
    """A short name for a raw public key, for messages: ``ed25519:<16 hex digits of its sha256>``."""
    return f"{ALGORITHM}:{hashlib.sha256(public_key).hexdigest()[:16]}"


def load_private_key(path: Path) -> Any:
    """An unencrypted ed25519 private key from a PEM file; ValueError (one line) naming the file otherwise."""
    ed25519 = _crypto()
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_pem_private_key(results.read_bytes(Path(path), 1 << 16), password=None)
    except (TypeError, ValueError) as exc:  # TypeError: an encrypted key
        raise ValueError(f"{path}: not an unencrypted PEM private key ({str(exc).splitlines()[0]})") from exc
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ValueError(f"{path}: a {type(key).__name__}, not an ed25519 private key")
    return key


PEM_BLOCK = re.compile(rb"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", re.S)


def load_trusted_keys(path: Path) -> list[bytes]:
    """The raw ed25519 public keys of a KEYS file (PEM blocks); ValueError naming the file when it holds
    none, or a block that is not an ed25519 public key."""
    ed25519 = _crypto()
    from cryptography.hazmat.primitives import serialization

    keys = []
    for block in PEM_BLOCK.findall(results.read_bytes(Path(path), 1 << 20)):
        try:
            key = serialization.load_pem_public_key(block)
        except ValueError as exc:
            raise ValueError(f"{path}: a PEM block that is not a public key ({exc})") from exc
        if not isinstance(key, ed25519.Ed25519PublicKey):
            raise ValueError(f"{path}: a {type(key).__name__}, not an ed25519 public key")
        keys.append(_raw(key))
    if not keys:
        raise ValueError(f"{path}: no public key (-----BEGIN PUBLIC KEY----- blocks) in it")
    return keys


def signature_path(certificate: Path) -> Path:
    return Path(certificate).with_name(Path(certificate).name.removesuffix(results.CERTIFICATE_SUFFIX)
                                       + SIGNATURE_SUFFIX)


def _payload(doc: dict[str, Any]) -> bytes:
    return json.dumps({k: v for k, v in doc.items() if k != "value"}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True).encode()


def _signed(certificate: Path, results_file: Path) -> dict[str, Any]:
    from .certificates import sha256_file

    return {"certificate": {"file": certificate.name, "sha256": sha256_file(certificate)},
            "results": {"file": results_file.name, "sha256": sha256_file(results_file)}}


def sign(certificate: Path, key: Any) -> Path:
    """Sign a certificate and the results file it names with ``key`` (``load_private_key``); write and
    return ``<stem>.cert.sig`` beside it."""
    certificate = Path(certificate)
    results_file = certificate.with_name(results.read_json(certificate)["results"]["file"])
    doc = {"signature": SIGNATURE_SCHEMA, "algorithm": ALGORITHM,
           "public_key": base64.b64encode(_raw(key.public_key())).decode(),
           "signed": _signed(certificate, results_file)}
    doc["value"] = base64.b64encode(key.sign(_payload(doc))).decode()
    path = signature_path(certificate)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


@dataclass(frozen=True)
class Signer:
    public_key: bytes  # raw, 32 bytes

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)

    @property
    def base64(self) -> str:
        return base64.b64encode(self.public_key).decode()


def check(certificate: Path, results_file: Path) -> Signer | None:
    """The signer of a certificate and its results file; None when there is no signature file beside it.
    BadSignature (one line) when the file is not a signature of the schema, its value does not verify
    under its own public key, or it signs other bytes than these two files."""
    path = signature_path(certificate)
    if not path.exists() and not path.is_symlink():
        return None
    try:
        doc = results.read_json(path)
    except ValueError as exc:
        raise BadSignature(f"its signature {exc}") from exc

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise BadSignature(f"its signature {path.name}: {what}")

    need(isinstance(doc, dict) and set(doc) == SIGNATURE_KEYS, f"must hold exactly {', '.join(sorted(SIGNATURE_KEYS))}")
    need(type(doc["signature"]) is int and doc["signature"] == SIGNATURE_SCHEMA,
         f"signature must be {SIGNATURE_SCHEMA}")
    need(doc["algorithm"] == ALGORITHM, f"algorithm must be {ALGORITHM}")
    try:
        public_key = base64.b64decode(doc["public_key"], validate=True)
        value = base64.b64decode(doc["value"], validate=True)
    except (TypeError, binascii.Error) as exc:
        raise BadSignature(f"its signature {path.name}: public_key and value must be base64 strings") from exc
    need(len(public_key) == 32 and len(value) == 64, "public_key must be 32 bytes and value 64")
    ed25519 = _crypto()
    from cryptography.exceptions import InvalidSignature

    try:
        ed25519.Ed25519PublicKey.from_public_bytes(public_key).verify(value, _payload(doc))
    except (InvalidSignature, ValueError) as exc:
        raise BadSignature(f"its signature {path.name} does not verify: signed by another key, or edited "
                           "after signing") from exc
    need(doc["signed"] == _signed(Path(certificate), Path(results_file)),
         "signs other bytes than the certificate and results file beside it (changed after signing)")
    return Signer(public_key)
