"""Upload servers that refuse: one with a body echoing the credentials it was sent (as some do:
"rejected credentials ci:hunter2-secret"): the error wheelbuild prints names the status and what
the server said, with the password, the user:password pair and its base64 replaced by ***; and
one that asks for a user (401) and refuses a wrong one (403), as pypiserver does: the error says
what the server answered and names TWINE_USERNAME/TWINE_PASSWORD, never their values.

Real HTTP servers on 127.0.0.1 and twine's real upload, through wheelbuild's upload() and the
installed `wheelbuild publish`."""

from __future__ import annotations

import base64
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from wheelbuild.errors import UploadFailed
from wheelbuild.index.remote import UploadEndpoint, upload

from tests.indexkit import make_wheel
from tests.provenancekit import cuda_wheel

USER, PASSWORD = "ci", "hunter2-secret"


class _Echoing(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        sent = self.headers.get("Authorization", "")
        decoded = base64.b64decode(sent.removeprefix("Basic ")).decode() if sent.startswith("Basic ") else ""
        body = f"<html><body>rejected credentials {decoded} ({sent})</body></html>".encode()
        self.send_response(400)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def echoing_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echoing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()


def test_an_upload_error_never_prints_the_credentials_the_server_echoes(
    echoing_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TWINE_USERNAME", USER)
    monkeypatch.setenv("TWINE_PASSWORD", PASSWORD)
    with pytest.raises(UploadFailed) as refused:
        upload([make_wheel(tmp_path / "in")], UploadEndpoint(echoing_server))
    said = f"{refused.value.cause} {refused.value.remedy}"
    assert "HTTP 400: rejected credentials ***" in refused.value.cause, said
    for leaked in (PASSWORD, f"{USER}:{PASSWORD}", base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()):
        assert leaked not in said


READER = "reader"  # a user the server knows, who may read but not upload


class _AsksForAUser(BaseHTTPRequestHandler):
    """An index's answers: 401 with a challenge to a request without credentials or with ones it
    does not know, 403 to a user it knows who may not upload. Each Authorization header is kept."""

    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        sent = self.headers.get("Authorization")
        self.seen.append(sent or "")
        reader = "Basic " + base64.b64encode(f"{READER}:{PASSWORD}".encode()).decode()
        body = b"<html><body>Unauthorized</body></html>"
        self.send_response(403 if sent == reader else 401)
        self.send_header("WWW-Authenticate", 'Basic realm="pypi"')
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def asking_server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_AsksForAUser,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", seen
    finally:
        server.shutdown()


Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No TWINE_* variable, no ~/.pypirc and no keyring: nothing but the environment speaks."""
    for name in ("TWINE_USERNAME", "TWINE_PASSWORD", "TWINE_REPOSITORY_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TWINE_CONFIG_FILE", str(tmp_path / "no-pypirc"))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")


def test_an_upload_without_credentials_names_the_variables_to_set(
    asking_server: tuple[str, list[str]], tmp_path: Path, run_cli: Run, no_credentials: None
) -> None:
    """It used to say "check that the server is up" while the server was up and asked for a user."""
    url, seen = asking_server
    wheel = cuda_wheel(tmp_path / "in")
    done = run_cli("publish", str(wheel), "--archs", "120", "--to", url)
    assert done.returncode == 58, done.stderr
    cause, remedy = done.stderr.splitlines()[-2:]
    assert cause == (
        f"error: upload to {url} needs a user and password, and TWINE_USERNAME and TWINE_PASSWORD "
        "are not set (nor found in the keyring)"
    )
    assert remedy.startswith("remedy: export TWINE_USERNAME and TWINE_PASSWORD (read by name")
    assert "server is up" not in done.stderr
    assert seen == []  # twine asks for what it lacks before it sends a byte


@pytest.mark.parametrize(
    ("user", "status", "says"),
    [
        (USER, 401, "401 (not authenticated; it did not accept TWINE_USERNAME and TWINE_PASSWORD)"),
        (READER, 403, "403 (forbidden: the user may not upload there"),
    ],
    ids=["unknown-user", "user-without-rights"],
)
def test_an_upload_the_server_refuses_says_what_it_answered_and_names_the_variables(
    asking_server: tuple[str, list[str]],
    tmp_path: Path,
    run_cli: Run,
    no_credentials: None,
    monkeypatch: pytest.MonkeyPatch,
    user: str,
    status: int,
    says: str,
) -> None:
    url, seen = asking_server
    monkeypatch.setenv("TWINE_USERNAME", user)
    monkeypatch.setenv("TWINE_PASSWORD", PASSWORD)
    wheel = cuda_wheel(tmp_path / "in")
    done = run_cli("publish", str(wheel), "--archs", "120", "--to", url)
    assert done.returncode == 58, done.stderr
    cause, remedy = done.stderr.splitlines()[-2:]
    assert cause.startswith(f"error: upload to {url} refused: the server answered HTTP {says}"), cause
    assert remedy.startswith("remedy: check TWINE_USERNAME and TWINE_PASSWORD"), remedy
    assert seen and all(sent.startswith("Basic ") for sent in seen)  # the server was asked, with a user
    assert PASSWORD not in done.stdout + done.stderr
