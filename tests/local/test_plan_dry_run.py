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

from tests.unit.test_plan_dry_run import RunCli


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
    pytest.param(("--torch", "2.99.0+cu130"), (), 36, id="torch-release-the-index-lacks"),
    pytest.param(("--python", "3.8"), (), 11, id="python-no-torch-release-has"),
    pytest.param(("flash-attn", "--version", "9.9.9"), ("INDEX",), 37, id="recipe-version-not-on-the-index"),
    pytest.param(("--archs", "100,,120"), (), 38, id="empty-arch-entry"),
    pytest.param(("--torch", "cu999"), (), 11, id="unknown-cuda-tag"),
    pytest.param(("--cpus", "nan"), (), 35, id="cpus-not-a-number"),
    pytest.param(("--env", "HF_TOKEN=abc"), (), 34, id="credential-in-env"),
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


@pytest.mark.network  # flash-attn's sdist, from PyPI once per machine (tests/sdists.py)
@pytest.mark.usefixtures("flash_attn_sdist")
def test_a_predicted_peak_over_the_limit_is_a_warning_and_with_strict_an_error(run_cli: RunCli) -> None:
    args = ("plan", "flash-attn", "--memory", "8g", "--cpus", "2")
    warned = run_cli(*args, "-v")
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


def _sections(stdout: str) -> tuple[dict[str, str], list[list[str]]]:
    """The summary's rows, and the why lines of each labelled part, in order."""
    rows: dict[str, str] = {}
    parts: list[list[str]] = []
    for line in stdout.splitlines():
        if line.startswith("why"):
            parts.append([line])
        elif parts and line.startswith("  - "):
            parts[-1].append(line[4:])
        elif not parts and line.startswith("  "):
            key, _, value = line.strip().partition("  ")
            rows[key] = value.strip()
        elif parts and not line.startswith("  "):
            break
    return rows, parts


@pytest.mark.network  # flash-attn's sdist, from PyPI once per machine (tests/sdists.py)
@pytest.mark.usefixtures("flash_attn_sdist")
@pytest.mark.parametrize(
    ("resources", "runs"),
    [
        (("--memory", "64g", "--cpus", "128"), "the admission plan"),
        (("--memory", "432g", "--cpus", "128"), "the admission plan"),
        (("--memory", "8g", "--cpus", "2"), "the admission plan"),
        (("--memory", "24g", "--cpus", "16", "--no-admission"), "the static plan"),
        (("--memory", "20g", "--cpus", "2", "--dist", "http://scheduler:10600"), "the --dist plan"),
        (("--memory", "64g", "--cpus", "32", "--nvcc-threads", "1"), "the admission plan"),
    ],
    ids=["64g-128cpus", "432g-128cpus", "8g-2cpus", "static", "dist", "threads-given"],
)
def test_every_number_of_the_summary_is_said_in_a_why_line_of_the_plan_that_runs(
    run_cli: RunCli, resources: tuple[str, ...], runs: str
) -> None:
    result = run_cli("plan", "flash-attn", *resources, "-v")
    assert result.returncode == 0, result.stderr
    rows, parts = _sections(result.stdout)
    assert rows["runs"] == runs
    if runs == "the static plan":
        assert [p[0] for p in parts] == ["why (the static plan: MAX_JOBS alone bounds memory):"]
    else:
        governor = runs.removeprefix("the ").removesuffix(" plan")
        assert parts[0][0].startswith("why, 1 of 2 (the static plan: MAX_JOBS alone bounds memory")
        assert parts[1][0] == f"why, 2 of 2 (the {governor} plan: what runs, the summary above):"
    why = [line for part in parts for line in part[1:]]
    governing = parts[-1][1:]
    peak = " ".join(rows["predicted peak"].split()[:2])
    seconds = rows["predicted time"].split()[0]
    said = {
        "memory limit": (f"memory limit {rows['memory limit']}", why),
        "CPUs": (f"CPUs {rows['CPUs']}:", why),
        "MAX_JOBS": (f"MAX_JOBS={rows['MAX_JOBS']}", governing),
        "NVCC_THREADS": (f"NVCC_THREADS={rows['NVCC_THREADS']}", why),
        "predicted peak": (f"predicted peak {peak}", governing),
        "predicted time": (f"{seconds} s", governing),
    }
    for row, (text, lines) in said.items():
        assert any(text in line for line in lines), f"{row} {rows[row]}: no why line says {text!r}"
    assert any(
        f"predicted build: {seconds} s" in line or f"{seconds} s with the servers" in line
        for line in governing
    )
