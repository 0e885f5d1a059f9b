"""An upload server that refuses with a body echoing the credentials it was sent (as some do:
"rejected credentials ci:hunter2-secret"): the error wheelbuild prints names the status and what
the server said, with the password, the user:password pair and its base64 replaced by ***.

A real HTTP server on 127.0.0.1 and twine's real upload, through wheelbuild's upload()."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from wheelbuild.errors import UploadFailed
from wheelbuild.index.remote import UploadEndpoint, upload

from tests.indexkit import make_wheel

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


def test_an_upload_without_credentials_names_the_variables_to_set(
    echoing_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to say "check that the server is up" while the server was up and asked for a user."""
    for name in ("TWINE_USERNAME", "TWINE_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TWINE_CONFIG_FILE", str(tmp_path / "no-pypirc"))
    with pytest.raises(UploadFailed) as refused:
        upload([make_wheel(tmp_path / "in")], UploadEndpoint(echoing_server))
    assert refused.value.remedy.startswith("TWINE_USERNAME and TWINE_PASSWORD are not set: set them")
