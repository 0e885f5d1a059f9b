"""Signing a wheel's provenance statement, and checking a signature, with Ed25519 keys: a PEM
(PKCS#8 or SubjectPublicKeyInfo), a raw 32-byte key (binary or 64 hex digits), or the user's
SSH key (OpenSSH private key, `ssh-ed25519 AAAA...` public line). The cryptography is the
`cryptography` package's; this module only loads keys and signs DSSE's encoding
(provenance.pae) of the statement.

A key with a passphrase is opened with the passphrase read by name from the environment
(WHEELBUILD_SIGN_KEY_PASSPHRASE), never from a command line; without it, the key is refused
with that remedy. A key id is the key's SSH fingerprint (`SHA256:...`, what `ssh-keygen -lf`
prints), a hint of which key signed, never trusted by itself.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shlex
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ..bounded import FileRefused, read_bounded
from ..errors import SigningKeyUnusable
from .statement import Envelope, Signature, pae

__all__ = [
    "PASSPHRASE_ENV",
    "SigningKey",
    "VerifyingKey",
    "key_id",
    "load_signing_key",
    "load_verifying_key",
    "signed",
    "signed_by",
]

PASSPHRASE_ENV = "WHEELBUILD_SIGN_KEY_PASSPHRASE"
MAX_KEY = 64 * 1024  # a key file is a few hundred bytes
_HEX_KEY = re.compile(rb"\s*([0-9a-fA-F]{64})\s*")
_KINDS = "an Ed25519 key: PEM, raw (32 bytes or 64 hex digits), or OpenSSH (ssh-ed25519)"


@dataclass(frozen=True)
class VerifyingKey:
    public: Ed25519PublicKey
    keyid: str  # SHA256:<base64>, the key's SSH fingerprint

    def verifies(self, envelope: Envelope) -> bool:
        """Whether a signature on *envelope* is this key's, over its type and payload."""
        message = pae(envelope.payload_type, envelope.payload)
        for signature in envelope.signatures:
            try:
                self.public.verify(signature.sig, message)
            except InvalidSignature:
                continue
            return True
        return False


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey
    keyid: str

    @property
    def verifying(self) -> VerifyingKey:
        return VerifyingKey(self.private.public_key(), self.keyid)


def key_id(public: Ed25519PublicKey) -> str:
    """The key's SSH fingerprint: sha256 of its OpenSSH wire form, as `ssh-keygen -lf` prints it."""
    line = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    blob = base64.b64decode(line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def _read(path: Path, what: str) -> bytes:
    try:
        return read_bounded(path, MAX_KEY)
    except FileRefused as refused:
        why = f"over {MAX_KEY} bytes" if refused.too_big else "not a regular file"
        raise SigningKeyUnusable(f"{what} {path} is {why}", f"name a key file: {_KINDS}") from None
    except OSError as error:
        raise SigningKeyUnusable(
            f"{what} {path} cannot be read: {error.strerror or error}", f"name a key file: {_KINDS}"
        ) from None


def _raw(data: bytes) -> bytes | None:
    """A raw key's 32 bytes: the file is those bytes, or their 64 hex digits."""
    if len(data) == 32:
        return data
    found = _HEX_KEY.fullmatch(data)
    return bytes.fromhex(found[1].decode()) if found else None


class _WrongPassphrase(ValueError):
    pass


def _private(data: bytes, passphrase: bytes | None) -> object:
    """The private key in *data* (PEM or OpenSSH): TypeError when it needs a passphrase and
    none was given, _WrongPassphrase when the one given does not open it. A passphrase given
    for a key without one is not used (the variable may be set for another key)."""
    ssh = b"BEGIN OPENSSH PRIVATE KEY" in data
    load = serialization.load_ssh_private_key if ssh else serialization.load_pem_private_key
    try:
        return load(data, passphrase)
    except TypeError:
        if passphrase is None:
            raise
        return load(data, None)  # not encrypted: the passphrase was for another key
    except ValueError as error:
        text = str(error).lower()
        if passphrase is None and ssh and "password" in text:
            raise TypeError(str(error)) from None
        # cryptography's words for a wrong passphrase: PEM's "incorrect password", OpenSSH's
        # "broken checksum" (the decrypted check bytes disagree)
        if passphrase is not None and any(w in text for w in ("password", "checksum", "decrypt")):
            raise _WrongPassphrase(str(error)) from None
        raise


def load_signing_key(path: Path, environ: Mapping[str, str]) -> SigningKey:
    """The Ed25519 private key at *path*; SigningKeyUnusable with a remedy for anything else,
    and for a key others may read (as ssh refuses one)."""
    data = _read(path, "the signing key")
    raw = _raw(data)
    if raw is not None:
        private: object = Ed25519PrivateKey.from_private_bytes(raw)
    else:
        given = environ.get(PASSPHRASE_ENV)
        passphrase = given.encode() if given else None
        try:
            private = _private(data, passphrase)
        except TypeError:
            raise SigningKeyUnusable(
                f"the signing key {path} is protected by a passphrase",
                f"export {PASSPHRASE_ENV} with it (read by name, never from the command line), "
                "or use a key without one kept where only you can read it",
            ) from None
        except _WrongPassphrase:
            raise SigningKeyUnusable(
                f"the signing key {path} does not open with the passphrase in {PASSPHRASE_ENV}",
                f"set {PASSPHRASE_ENV} to this key's passphrase",
            ) from None
        except (ValueError, UnsupportedAlgorithm):
            raise SigningKeyUnusable(
                f"the signing key {path} is not a private key", f"give {_KINDS}"
            ) from None
    if not isinstance(private, Ed25519PrivateKey):
        raise _not_ed25519(f"the signing key {path}", private)
    _only_owner_reads(path)
    return SigningKey(private, key_id(private.public_key()))


def _only_owner_reads(path: Path) -> None:
    """A private key its group or others can read is refused, as ssh refuses it: whoever else
    reads it signs as you."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # _read said what was wrong with it already
    if stat.S_ISREG(mode) and mode & 0o077:
        raise SigningKeyUnusable(
            f"the signing key {path} is readable by its group or others (mode {stat.S_IMODE(mode):04o})",
            f"chmod 600 {shlex.quote(str(path))}, as ssh requires of a private key",
        )


def _not_ed25519(what: str, found: object) -> SigningKeyUnusable:
    return SigningKeyUnusable(
        f"{what} is a {type(found).__name__.removeprefix('_')}, not an Ed25519 key",
        "sign and check with an Ed25519 key: ssh-keygen -t ed25519, or openssl genpkey -algorithm ed25519",
    )


def load_verifying_key(path: Path, environ: Mapping[str, str] | None = None) -> VerifyingKey:
    """The Ed25519 public key at *path*: a PEM public key, an `ssh-ed25519 AAAA...` line (an
    id_ed25519.pub or an authorized_keys line), 32 raw bytes or 64 hex digits, or a private
    key (its public half)."""
    data = _read(path, "the key")
    raw = _raw(data)
    try:
        if raw is not None:
            public: object = Ed25519PublicKey.from_public_bytes(raw)
        elif b"PRIVATE KEY" in data:
            return load_signing_key(path, environ or {}).verifying
        elif data.lstrip().startswith(b"-----BEGIN"):
            public = serialization.load_pem_public_key(data)
        else:
            line = next((ln for ln in data.splitlines() if b"ssh-" in ln), data).strip()
            start = line.find(b"ssh-")  # an authorized_keys line may have options first
            public = serialization.load_ssh_public_key(line[max(start, 0) :])
    except (ValueError, UnsupportedAlgorithm, IndexError):
        raise SigningKeyUnusable(
            f"the key {path} is not a public key wheelbuild reads", f"give {_KINDS}"
        ) from None
    if not isinstance(public, Ed25519PublicKey):
        raise _not_ed25519(f"the key {path}", public)
    return VerifyingKey(public, key_id(public))


def signed(envelope: Envelope, key: SigningKey) -> Envelope:
    """*envelope* with *key*'s signature over its type and payload (in place of one it had)."""
    signature = Signature(key.keyid, key.private.sign(pae(envelope.payload_type, envelope.payload)))
    others = tuple(s for s in envelope.signatures if s.keyid != key.keyid)
    return replace(envelope, signatures=(*others, signature))


def signed_by(envelope: Envelope, keys: Iterable[VerifyingKey]) -> VerifyingKey | None:
    """The first of *keys* whose signature *envelope* carries; None when none does."""
    return next((key for key in keys if key.verifies(envelope)), None)
