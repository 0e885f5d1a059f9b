"""`publish --sigstore` with the real sigstore package and no way to reach Sigstore: without an
OIDC identity (this machine is no CI job) it is refused with its own exit code before anything is
published, and an upload URL, which keeps no files beside its wheels, is refused as for
--sign-key. Signing itself needs Fulcio and Rekor, which cannot be reached from here: the stand-in
signer of tests/unit/test_keyless.py covers what surrounds it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument, KeylessSigningFailed

from tests.indexkit import make_wheel

AMBIENT = ("GITHUB_ACTIONS", "ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
           "GOOGLE_SERVICE_ACCOUNT_NAME", "BUILDKITE", "GITLAB_CI", "CIRCLECI", "SIGSTORE_ID_TOKEN")  # fmt: skip

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def no_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AMBIENT:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_identity")
def test_without_an_oidc_identity_publish_sigstore_is_refused_before_the_tree_is_touched(
    tmp_path: Path, run_cli: Run
) -> None:
    wheel = make_wheel(tmp_path / "run")
    done = run_cli("publish", str(wheel), "--to", str(tmp_path / "tree"), "--sigstore")
    assert done.returncode == KeylessSigningFailed.exit_code, done.stderr
    assert "no ambient OIDC identity for Sigstore" in done.stderr
    assert "id-token: write" in done.stderr
    assert not (tmp_path / "tree").exists()


@pytest.mark.usefixtures("no_identity")
def test_a_github_job_without_id_token_permission_is_told_what_it_lacks(
    tmp_path: Path, run_cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")  # as a job without `permissions: id-token: write` has it
    wheel = make_wheel(tmp_path / "run")
    done = run_cli("publish", str(wheel), "--to", str(tmp_path / "tree"), "--sigstore")
    assert done.returncode == KeylessSigningFailed.exit_code, done.stderr
    assert "no OIDC identity for Sigstore" in done.stderr and "id-token" in done.stderr
    assert not (tmp_path / "tree").exists()


def test_an_upload_url_takes_no_keyless_bundle(tmp_path: Path, run_cli: Run) -> None:
    wheel = make_wheel(tmp_path / "run")
    done = run_cli("publish", str(wheel), "--to", "http://127.0.0.1:9/", "--sigstore")
    assert done.returncode == BadArgument.exit_code, done.stderr
    assert "--sigstore signs the statements a tree serves" in done.stderr
