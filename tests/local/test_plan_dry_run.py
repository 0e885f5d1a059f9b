"""`wheelbuild plan` as the dry run of `wheelbuild build` where it needs this machine: the real
flash-attn sdist (downloaded once from PyPI) and a simple index served on 127.0.0.1. The rest is in
tests/unit/test_plan_dry_run.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.unit.test_plan_dry_run import RunCli, _sections


class _SimpleIndex(BaseHTTPRequestHandler):
    """A PEP 691 index listing flash-attn 2.8.3's sdist only."""

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/simple/flash-attn":
            self.send_error(404)
            return
        sdist = "flash_attn-2.8.3.tar.gz"
        body = json.dumps(
            {
                "meta": {"api-version": "1.0"},
                "name": "flash-attn",
                "files": [{"filename": sdist, "url": f"/files/{sdist}", "hashes": {"sha256": "0" * 64}}],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def simple_index() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SimpleIndex)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()


# Each input build refuses before a container, and the code it refuses with.
REFUSED = [
    pytest.param(("flash-attn", "--archs", "70"), (), 22, id="arch-the-cu130-compiler-cannot-build"),
    pytest.param(
        ("--torch", "cu128"),
        ("WHEELBUILD_CUDA_REDIST_URL=http://127.0.0.1:9",),
        23,
        id="cu128-whose-compiler-layer-cannot-be-had",
    ),
    pytest.param(("--torch", "2.99.0+cu130"), (), 13, id="torch-release-the-index-lacks"),
    pytest.param(("--python", "3.8"), (), 11, id="python-no-torch-release-has"),
    pytest.param(("flash-attn", "--version", "9.9.9"), ("INDEX",), 13, id="recipe-version-not-on-the-index"),
    pytest.param(("--archs", "100,,120"), (), 13, id="empty-arch-entry"),
    pytest.param(("--torch", "cu999"), (), 11, id="unknown-cuda-tag"),
    pytest.param(("--cpus", "nan"), (), 13, id="cpus-not-a-number"),
    pytest.param(("--env", "HF_TOKEN=abc"), (), 13, id="credential-in-env"),
    pytest.param(("--memory", "100m"), (), 12, id="memory-below-the-floor"),
    pytest.param((), ("CONFIG",), 17, id="config-key-unknown"),
]


def _env(tmp_path: Path, needs: tuple[str, ...], index: str) -> tuple[str, ...]:
    """`env NAME=VALUE ...` for run_cli's prefix; CONFIG writes a config file with a typo."""
    pairs = []
    for need in needs:
        if need == "INDEX":
            pairs.append(f"WHEELBUILD_SIMPLE_INDEX={index}")
        elif need == "CONFIG":
            (tmp_path / "wheelbuild.toml").write_text('[tool.wheelbuild]\nmemroy = "8g"\n')
        else:
            pairs.append(need)
    return ("env", *pairs)


@pytest.mark.parametrize(("args", "needs", "code"), REFUSED)
def test_plan_refuses_what_build_refuses_before_a_container_with_builds_code(
    run_cli: RunCli,
    tmp_path: Path,
    simple_index: str,
    args: tuple[str, ...],
    needs: tuple[str, ...],
    code: int,
) -> None:
    prefix = _env(tmp_path, needs, simple_index)
    args = args if args[:1] == ("flash-attn",) else ("wbdemo", *args)  # tmp_path holds no project
    built = run_cli("build", *args, prefix=prefix)
    planned = run_cli("plan", *args, prefix=prefix)
    assert built.returncode == code, built.stderr
    assert planned.returncode == built.returncode, planned.stderr
    error = [line for line in planned.stderr.splitlines() if line.startswith("error: ")]
    assert error and error == [line for line in built.stderr.splitlines() if line.startswith("error: ")]
    assert "plan for" not in planned.stdout  # no plan is printed for what build would refuse


@pytest.mark.usefixtures("flash_attn_sdist")
def test_a_predicted_peak_over_the_limit_is_a_warning_and_with_strict_an_error(run_cli: RunCli) -> None:
    args = ("plan", "flash-attn", "--memory", "8g", "--cpus", "2")
    warned = run_cli(*args)
    assert warned.returncode == 0, warned.stderr
    rows, _ = _sections(warned.stdout)
    peak = " ".join(rows["predicted peak"].split()[:2])
    expected = f"warning: predicted peak {peak} is over the memory limit 8.0 GiB"
    assert any(line.startswith(expected) for line in warned.stderr.splitlines()), warned.stderr
    strict = run_cli(*args, "--strict")
    assert strict.returncode == 28, strict.stderr
    assert f"error: predicted peak {peak} is over the memory limit 8.0 GiB" in strict.stderr
    fits = run_cli("plan", "flash-attn", "--memory", "64g", "--cpus", "8", "--strict")
    assert fits.returncode == 0, fits.stderr
    assert "over the memory limit" not in fits.stderr
