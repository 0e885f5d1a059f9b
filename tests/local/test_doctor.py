"""wheelbuild.doctor.checks's HTTP reach against a real server on 127.0.0.1: credentials sent as a
header and never shown, a deadline on a server that never answers, and no sccache value shown.
The checks from plain facts are in tests/unit/test_doctor.py."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from wheelbuild.doctor import checks as doctor
from wheelbuild.doctor import facts
from wheelbuild.doctor.facts import Reach

from tests.unit.test_doctor import HEALTHY


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []  # noqa: RUF012 (one server per test)

    def do_GET(self) -> None:
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        code = 200 if self.path.startswith("/ok") else 404
        self.send_response(code)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"hi")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Recorder.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_reach_sends_credentials_as_a_header_and_never_shows_them(server: str) -> None:
    found = facts.reach(f"http://doc:s3cr3t-token@{server}/ok/torch/")
    assert found == Reach(f"http://***@{server}/ok/torch/", status=200)
    path, authorization = _Recorder.seen[-1]
    assert path == "/ok/torch/" and authorization is not None and authorization.startswith("Basic ")
    assert facts.reach(f"http://{server}/missing/").status == 404


def test_reach_all_gives_up_at_its_deadline_on_a_server_that_never_answers(server: str) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections (the kernel does), never answers
    try:
        found = facts.reach_all(
            {"a": f"http://127.0.0.1:{silent.getsockname()[1]}/", "b": f"http://{server}/ok/"}, deadline_s=1.0
        )
    finally:
        silent.close()
    # Only the deadline says this: a request that waited out its own timeout (5 s) would say "timed out".
    assert found["a"].status is None and found["a"].error == "no answer within 1 s"
    assert found["b"].status == 200


def test_diagnose_never_shows_sccache_values(
    tmp_path: Path, server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(doctor, "PYPI_URL", f"http://{server}/ok/pip/")
    environ = {
        "SCCACHE_BUCKET": "bucket-name-secret",
        "AWS_ACCESS_KEY_ID": "AKIA-very-secret",
        "WHEELBUILD_TORCH_INDEX_URL": f"http://u:index-pass@{server}/ok",
        "WHEELBUILD_CUDA_REDIST_URL": f"http://{server}/nv",
    }
    checks = doctor.diagnose(
        lambda: HEALTHY, environ, shared_cache_env=("SCCACHE_BUCKET", "AWS_ACCESS_KEY_ID"), cache=tmp_path
    )
    text = "\n".join(c.line() for c in checks)
    for secret in ("bucket-name-secret", "AKIA-very-secret", "index-pass"):
        assert secret not in text
    by_name = {c.check: c for c in checks}
    assert [c.check for c in checks] == [
        "docker", "memory-limit", "nvidia", "disk-docker", "disk-cache", "ca-bundle",
        "torch-index", "pypi", "cuda-downloads", "sccache", "base-image",
    ]  # fmt: skip
    assert by_name["torch-index"].status == "ok" and by_name["pypi"].status == "ok"
    assert by_name["cuda-downloads"].status == "warn"  # 404 from the stand-in mirror
    assert by_name["sccache"].status == "warn" and "SCCACHE_BUCKET" in by_name["sccache"].found
