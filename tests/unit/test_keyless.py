"""Keyless signing (provenance/keyless.py) around Sigstore: each published statement signed and kept
beside its wheel as <wheel>.sigstore.json, linked from the index page. Sigstore's servers (Fulcio,
Rekor) cannot be reached from this machine, so a stand-in signer takes their place here: it
returns a bundle naming the statement it was given. The real package's refusal without an OIDC
identity is tests/local/test_keyless_cli.py's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from wheelbuild.index.publish import Sidecars, publish
from wheelbuild.nightly.matrix import parse_matrix
from wheelbuild.nightly.publish import publish_night
from wheelbuild.pipeline import check
from wheelbuild.pipeline.statements import for_publish, write_statements
from wheelbuild.provenance.keyless import envelope_statement, keyless_bundles
from wheelbuild.recipes import resolve_recipe
from wheelbuild.secrets import Redactor
from wheelbuild.wheel.contents import inspect_wheel

from tests.indexkit import make_wheel
from tests.provenancekit import facts
from tests.unit.test_nightly import _cell_dir


class StandIn:
    """Sigstore's place: a bundle that names the sha256 of the statement it signed."""

    def __init__(self) -> None:
        self.signed: list[bytes] = []

    def __call__(self, statement: bytes) -> bytes:
        self.signed.append(statement)
        return json.dumps({"signed": hashlib.sha256(statement).hexdigest()}).encode()


def _with_statement(folder: Path, payload: str = "") -> Path:
    wheel = make_wheel(folder, payload=payload)
    write_statements([inspect_wheel(wheel)], facts(resolve_recipe("wbdemo")), Redactor(()))
    return wheel


def test_each_statement_is_signed_keyless_and_kept_beside_its_wheel_once(tmp_path: Path) -> None:
    wheel = _with_statement(tmp_path / "run")
    envelopes = for_publish([wheel], None, (), False)
    signer = StandIn()
    bundles = keyless_bundles(envelopes, signer)
    (statement,) = signer.signed
    assert statement == envelope_statement(envelopes[wheel.name])
    assert json.loads(statement)["subject"][0]["name"] == wheel.name
    tree = tmp_path / "tree"
    publish([wheel], tree, sidecars=Sidecars(statements=envelopes, sigstore_bundles=bundles))
    beside = tree / "files" / f"{wheel.name}.sigstore.json"
    assert json.loads(beside.read_bytes()) == {"signed": hashlib.sha256(statement).hexdigest()}
    page = (tree / "index.html").read_text()
    assert f'<a class="sigstore" href="files/{wheel.name.replace("+", "%2B")}.sigstore.json">' in page
    # A wheel already there keeps its bundle: files in a tree are never replaced.
    publish([wheel], tree, sidecars=Sidecars(statements=envelopes, sigstore_bundles={wheel.name: b"{}"}))
    assert json.loads(beside.read_bytes()) == {"signed": hashlib.sha256(statement).hexdigest()}


def test_a_wheel_published_without_keyless_has_no_bundle_and_no_link(tmp_path: Path) -> None:
    wheel = _with_statement(tmp_path / "run")
    publish([wheel], tmp_path / "tree", sidecars=Sidecars(statements=for_publish([wheel], None, (), False)))
    assert not (tmp_path / "tree" / "files" / f"{wheel.name}.sigstore.json").exists()
    assert 'class="sigstore"' not in (tmp_path / "tree" / "index.html").read_text()


def test_the_nightly_signs_keyless_what_it_publishes_into_a_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The cell's re-check wants SASS in real wheels (the integration test's); this wheel has none.
    monkeypatch.setattr(check, "check_wheels", lambda *_args, **_kwargs: {})
    night = tmp_path / "night"
    cell = _cell_dir(night, "wbdemo-cu130-cp311-100.120", tag="py3-none-any")
    (wheel,) = (cell / "runs" / "r1").glob("*.whl")
    write_statements([inspect_wheel(wheel)], facts(resolve_recipe("wbdemo")), Redactor(()))
    signer = StandIn()
    publish_night(
        [night],
        parse_matrix({"build": [{"package": "wbdemo", "torch": ["cu130"]}]}),
        {},
        to=str(tmp_path / "wheelhouse" / "{variant}"),
        say=lambda _line: None,
        keyless=signer,
    )
    (statement,) = signer.signed
    assert json.loads(statement)["subject"][0]["name"] == wheel.name
    bundle = tmp_path / "wheelhouse" / "cu130" / "files" / f"{wheel.name}.sigstore.json"
    assert json.loads(bundle.read_bytes()) == {"signed": hashlib.sha256(statement).hexdigest()}
