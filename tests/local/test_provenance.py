"""A wheel's provenance statement (provenance.py, statements.py) and its signature (signing.py):
the in-toto and DSSE formats as their specs write them, no secret in a statement, and keys as
ssh-keygen and openssl make them, each refused with its own remedy when it cannot be used."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from wheelbuild.errors import SigningKeyUnusable
from wheelbuild.provenance.signing import (
    load_signing_key,
    load_verifying_key,
)

from tests.provenancekit import ssh_key
from tests.unit.test_provenance import _write


def test_an_ssh_key_id_is_the_fingerprint_ssh_keygen_prints(tmp_path: Path) -> None:
    private = ssh_key(tmp_path, "id_ed25519")
    printed = subprocess.run(
        ["ssh-keygen", "-lf", str(private.with_suffix(".pub"))], capture_output=True, text=True
    )
    assert load_verifying_key(private.with_suffix(".pub")).keyid == printed.stdout.split()[1]


def test_keys_that_are_not_ed25519_or_not_keys_are_refused_with_exit_76(tmp_path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(tmp_path / "rsa")], check=True
    )
    cases: list[tuple[Callable[[Path, dict[str, str]], object], Path, str]] = [
        (load_signing_key, tmp_path / "rsa", "not an Ed25519 key"),
        (load_verifying_key, tmp_path / "rsa.pub", "not an Ed25519 key"),
        (load_signing_key, _write(tmp_path / "junk", b"hello"), "not a private key"),
        (load_verifying_key, _write(tmp_path / "junk.pub", b"hello"), "not a public key"),
        (load_verifying_key, tmp_path / "missing", "cannot be read"),
        (load_verifying_key, tmp_path, "not a regular file"),
    ]
    for load, path, why in cases:
        with pytest.raises(SigningKeyUnusable, match=why) as refused:
            load(path, {})
        assert refused.value.exit_code == 76
