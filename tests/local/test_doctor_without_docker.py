"""`wheelbuild doctor` run for real on this machine without a Docker engine: it fails with a
remedy, in text and JSON, and names PyTorch's own index when that cannot be reached."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.runkit import (
    TORCH_INDEX,
    WHEELBUILD,
    Completed,
    wheelbuild,
)

PYTORCH_INDEX = "https://download.pytorch.org/whl/cu130/torch/"  # doctor's default


def _doctor_without(names: tuple[str, ...], env: dict[str, str], cwd: Path) -> Completed:
    """Doctor without these variables, in a folder of no wheelbuild.toml: the checkout's may
    carry scripts/example's settings."""
    environ = {k: v for k, v in os.environ.items() if k not in names} | env
    proc = subprocess.run(
        [WHEELBUILD, "doctor"], env=environ, capture_output=True, text=True, timeout=60, cwd=cwd
    )
    return Completed(proc.returncode, proc.stdout, proc.stderr)


@pytest.mark.parametrize("with_json", [False, True])
def test_doctor_without_a_docker_daemon_fails_with_a_remedy(with_json: bool) -> None:
    env = {"DOCKER_HOST": "unix:///nonexistent.sock", "WHEELBUILD_TORCH_INDEX_URL": TORCH_INDEX}
    done = wheelbuild("doctor", *(["--json"] if with_json else []), env=env, timeout=60)
    assert done.returncode == 26, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "error: 1 check(s) would fail a build: docker",
        "remedy: do what each fail line's remedy says, then run wheelbuild doctor again",
    ]
    if with_json:
        docker_check = json.loads(done.stdout)[0]
        assert docker_check["status"] == "fail"
        assert "no Docker daemon answers at unix:///nonexistent.sock" in docker_check["found"]
        assert "DOCKER_HOST" in docker_check["remedy"]
    else:
        first = done.stdout.splitlines()[0]
        assert first.startswith("fail  docker         no Docker daemon answers at unix:///nonexistent.sock")
        assert "; remedy: start one" in first


def test_doctor_with_pytorchs_own_index_unreachable_here_fails_on_it(tmp_path: Path) -> None:
    try:
        urllib.request.urlopen(PYTORCH_INDEX, timeout=20).close()
        pytest.skip(f"{PYTORCH_INDEX} answers here: this test proves the failure where it does not")
    except (OSError, ValueError):
        pass
    done = _doctor_without(
        ("WHEELBUILD_TORCH_INDEX_URL",), {"DOCKER_HOST": "unix:///nonexistent.sock"}, tmp_path
    )
    assert done.returncode == 26
    line = next(line for line in done.stdout.splitlines() if line.split()[1] == "torch-index")
    assert line.startswith(f"fail  torch-index    {PYTORCH_INDEX} unreachable")
    assert "WHEELBUILD_TORCH_INDEX_URL" in line
