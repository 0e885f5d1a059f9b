"""A wheel's provenance statement (provenance.py, statements.py) and its signature (signing.py):
the in-toto and DSSE formats as their specs write them, no secret in a statement, and keys as
ssh-keygen and openssl make them, each refused with its own remedy when it cannot be used."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from wheelbuild.errors import SigningKeyUnusable
from wheelbuild.pipeline.statements import run_redactor
from wheelbuild.provenance.signing import (
    PASSPHRASE_ENV,
    load_signing_key,
    load_verifying_key,
    signed,
    signed_by,
)
from wheelbuild.provenance.statement import (
    PAYLOAD_TYPE,
    Envelope,
    StatementRefused,
    envelope_bytes,
    pae,
    read_envelope,
    read_statement_or_envelope,
    statement,
    statement_bytes,
)
from wheelbuild.recipes import resolve_recipe
from wheelbuild.spec.build_spec import BuildSpec
from wheelbuild.variants import parse_variant

from tests.integration.test_secrets import CANARIES, INDEX, INDEX_PASSWORD, INDEX_USER, SECRETS
from tests.provenancekit import KEY, TORCH_FILE, TORCH_SHA256, facts, pem_key, project, ssh_key

SHA = "c" * 64


def test_pae_is_the_dsse_specs_own_test_vector() -> None:
    # secure-systems-lab/dsse protocol.md, "Test Vectors"
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    # LEN counts bytes, not characters
    assert pae("t", "é".encode()) == b"DSSEv1 1 t 2 \xc3\xa9"


def test_the_statement_is_an_in_toto_statement_with_a_slsa_provenance_predicate(tmp_path: Path) -> None:
    found = statement(
        "wbtiny-0.1.0-py3-none-any.whl", SHA, facts(resolve_recipe(str(project(tmp_path)))), str
    )
    assert found["_type"] == "https://in-toto.io/Statement/v1"
    assert found["subject"] == [{"name": "wbtiny-0.1.0-py3-none-any.whl", "digest": {"sha256": SHA}}]
    assert found["predicateType"] == "https://slsa.dev/provenance/v1"
    predicate = found["predicate"]
    assert isinstance(predicate, dict)
    definition = predicate["buildDefinition"]
    assert set(definition) == {
        "buildType",
        "externalParameters",
        "internalParameters",
        "resolvedDependencies",
    }
    materials = {m["name"]: m for m in definition["resolvedDependencies"]}
    assert materials[TORCH_FILE]["digest"] == {"sha256": TORCH_SHA256}
    assert materials["image/base"]["digest"] == {"sha256": "1" * 64}  # a local base: its image ID
    assert materials["source"]["uri"] == tmp_path.as_uri()
    internal = definition["internalParameters"]
    assert internal["inputsKey"] == KEY and internal["SOURCE_DATE_EPOCH"] == 1767225600
    assert internal["doesNotChangeOutput"] == {"MAX_JOBS": "4", "NVCC_THREADS": "2", "compilerCache": True}
    assert set(predicate["runDetails"]["builder"]["version"]) == {
        "wheelbuild",
        "wheelbuild-code",
        "cibuildwheel",
    }


def test_no_secret_reaches_the_statement_and_its_urls_carry_no_credentials(tmp_path: Path) -> None:
    """The canaries of the secrets test: a credentialed torch index and sdist URL, the shared
    cache's credentials in the environment, and an --env value that is one of them (a recipe
    can be given any env; the CLI already refuses a credential-shaped one)."""
    sdist = f"https://{INDEX_USER}:{INDEX_PASSWORD}@files.example/p/wbtiny-0.1.tar.gz?token={CANARIES['TWINE_PASSWORD']}"
    recipe = resolve_recipe(f"{sdist}#sha256={SHA}").with_env(
        {
            "WBTINY_NOTE": CANARIES["AWS_SECRET_ACCESS_KEY"],  # a secret value under a plain name
            "HF_TOKEN": "hf_" + "x" * 24,  # a credential's name and shape
            "WBTINY_FLAG": "on",
        }
    )
    made = facts(recipe, index_url=INDEX)
    redactor = run_redactor(BuildSpec(recipe=recipe, variant=parse_variant("cu130", INDEX)), CANARIES)
    text = statement_bytes(statement("wbtiny-0.1-py3-none-any.whl", SHA, made, redactor)).decode()
    assert [s for s in SECRETS if s in text] == []
    assert "hf_xxxx" not in text
    found = json.loads(text)
    external = found["predicate"]["buildDefinition"]["externalParameters"]
    assert external["torchIndexUrl"] == "https://pypi.org/simple"
    assert external["package"] == f"https://files.example/p/wbtiny-0.1.tar.gz?token=***#sha256={SHA}"
    assert external["env"] == {"HF_TOKEN": "***", "WBTINY_FLAG": "on", "WBTINY_NOTE": "***"}
    source = next(
        m for m in found["predicate"]["buildDefinition"]["resolvedDependencies"] if m["name"] == "source"
    )
    assert source == {
        "name": "source",
        "digest": {"sha256": SHA},
        "uri": "https://files.example/p/wbtiny-0.1.tar.gz?token=***",
    }


def test_a_statement_reads_back_bare_or_in_its_envelope(tmp_path: Path) -> None:
    data = statement_bytes(
        statement("w-1-py3-none-any.whl", SHA, facts(resolve_recipe(str(project(tmp_path)))), str)
    )
    bare, none = read_statement_or_envelope(data)
    assert none is None and bare.subjects == (("w-1-py3-none-any.whl", SHA),)
    line = envelope_bytes(Envelope(PAYLOAD_TYPE, data))
    assert line.count(b"\n") == 1 and line.endswith(b"\n")  # one line: the .intoto.jsonl form
    wrapped, envelope = read_statement_or_envelope(line)
    assert envelope is not None and wrapped.raw == data and envelope.payload == data
    assert json.loads(line)["payload"] == base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"payloadType": "text/plain", "payload": "", "signatures": []}', "payloadType"),
        (b'{"payloadType": "application/vnd.in-toto+json", "payload": "!!", "signatures": []}', "base64"),
        (
            b'{"_type": "https://in-toto.io/Statement/v1", "subject": [], "predicateType": "x"}',
            "predicateType",
        ),
        (b" " * (4 << 20) + b"{}", "over"),
    ],
)
def test_what_is_not_a_statement_wheelbuild_writes_is_refused_with_why(data: bytes, why: str) -> None:
    with pytest.raises(StatementRefused, match=why):
        read_statement_or_envelope(data)


def _envelope() -> Envelope:
    return Envelope(PAYLOAD_TYPE, b'{"_type": "a statement"}')


@pytest.mark.parametrize("kind", ["openssh", "openssh with a passphrase", "pem", "raw", "hex"])
def test_each_kind_of_ed25519_key_signs_and_its_public_half_verifies(tmp_path: Path, kind: str) -> None:
    environ = {}
    if kind.startswith("openssh"):
        passphrase = "correct horse" if "passphrase" in kind else ""
        private = ssh_key(tmp_path, "id_ed25519", passphrase)
        public = private.with_suffix(".pub")
        environ = {PASSPHRASE_ENV: passphrase} if passphrase else {}
    elif kind == "pem":
        private, public = pem_key(tmp_path, "key")
    else:
        seed = bytes(range(32))
        key = load_signing_key(_write(tmp_path / "seed", seed), {})
        raw = key.verifying.public.public_bytes_raw()
        private = _write(tmp_path / "private", seed if kind == "raw" else seed.hex().encode() + b"\n")
        public = _write(tmp_path / "public", raw if kind == "raw" else raw.hex().encode() + b"\n")
    key = load_signing_key(private, environ)
    envelope = signed(_envelope(), key)
    verifying = load_verifying_key(public)
    assert verifying.keyid == key.keyid and signed_by(envelope, [verifying]) == verifying
    assert read_envelope(envelope_bytes(envelope)) == envelope  # survives its own encoding


def test_a_signature_holds_only_for_its_key_its_payload_and_its_type(tmp_path: Path) -> None:
    mine, other = ssh_key(tmp_path, "mine"), ssh_key(tmp_path, "other")
    envelope = signed(_envelope(), load_signing_key(mine, {}))
    public = load_verifying_key(mine.with_suffix(".pub"))
    assert signed_by(envelope, [load_verifying_key(other.with_suffix(".pub"))]) is None
    changed = Envelope(envelope.payload_type, envelope.payload + b" ", envelope.signatures)
    assert signed_by(changed, [public]) is None
    retyped = Envelope("application/json", envelope.payload, envelope.signatures)
    assert signed_by(retyped, [public]) is None
    assert signed_by(_envelope(), [public]) is None  # not signed at all


def _write(path: Path, data: bytes) -> Path:
    """A key file as a careful user keeps one: only its owner reads it."""
    path.write_bytes(data)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_private_key_its_group_or_others_can_read_is_refused_as_ssh_refuses_it(
    tmp_path: Path, mode: int
) -> None:
    key = _write(tmp_path / "seed", bytes(range(32)))
    key.chmod(mode)
    with pytest.raises(SigningKeyUnusable) as refused:
        load_signing_key(key, {})
    assert f"readable by its group or others (mode {mode:04o})" in refused.value.cause
    assert refused.value.remedy.startswith(f"chmod 600 {key}")
    key.chmod(0o600)
    assert load_signing_key(key, {}).verifying  # the same key, kept as ssh wants it, signs


def test_a_key_with_a_passphrase_is_opened_only_by_the_passphrase_named_in_the_environment(
    tmp_path: Path,
) -> None:
    private = ssh_key(tmp_path, "id_ed25519", "s3cret phrase")
    with pytest.raises(SigningKeyUnusable, match="protected by a passphrase") as missing:
        load_signing_key(private, {})
    assert PASSPHRASE_ENV in missing.value.remedy and "never from the command line" in missing.value.remedy
    with pytest.raises(SigningKeyUnusable, match=f"does not open with the passphrase in {PASSPHRASE_ENV}"):
        load_signing_key(private, {PASSPHRASE_ENV: "wrong"})
    pem, _public = pem_key(tmp_path, "plain")
    assert load_signing_key(pem, {PASSPHRASE_ENV: "for another key"}).keyid  # not encrypted: not used
