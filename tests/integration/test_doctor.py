"""`wheelbuild doctor` run for real on this machine: the real Docker engine, a real container
whose memory limit is read back from inside, real requests to PyPI and NVIDIA.

Where the machine lacks an NVIDIA runtime or cannot reach NVIDIA's CUDA downloads or PyTorch's
index (as these machines, facts.md), the checks that depend on it read the fact first; builds
here take torch from PyPI (conftest.TORCH_INDEX).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import (
    TORCH_INDEX,
    WHEELBUILD,
    Completed,
    wheelbuild,
    wheelbuild_watched,
)

STATUSES = ("ok", "warn", "fail")
PYTORCH_INDEX = "https://download.pytorch.org/whl/cu130/torch/"  # doctor's default
CHECKS = [
    "docker", "memory-limit", "nvidia", "disk-docker", "disk-cache", "ca-bundle",
    "torch-index", "pypi", "cuda-downloads", "sccache", "base-image",
]  # fmt: skip


def test_doctor_here_checks_every_part_for_real(docker_client: docker.DockerClient, base_image: str) -> None:
    env = {"WHEELBUILD_TORCH_INDEX_URL": TORCH_INDEX, "WHEELBUILD_BASE_IMAGE": base_image}
    watched = [
        wheelbuild_watched(
            docker_client, base_image, "doctor", *json_flag, env=env, timeout=300
        )  # a hang guard
        for json_flag in ((), ("--json",))
    ]
    text, as_json = (w.result for w in watched)

    lines = text.stdout.splitlines()
    assert [line.split()[1] for line in lines] == CHECKS, text.stdout
    for line in lines:
        status = line.split()[0]
        assert status in STATUSES
        assert ("; remedy: " in line) == (status != "ok"), line

    checks = json.loads(as_json.stdout)
    assert [c["check"] for c in checks] == CHECKS
    assert all(set(c) == {"check", "status", "found", "remedy"} for c in checks)
    by_name = {c["check"]: c for c in checks}

    assert by_name["docker"]["status"] == "ok" and "rootful" in by_name["docker"]["found"]
    memory = by_name["memory-limit"]
    assert memory["status"] == "ok", memory
    assert f"reads 64.0 MiB back inside ({base_image})" in memory["found"]
    assert "cgroup v1" in memory["found"] or "cgroup v2" in memory["found"]
    if "nvidia" not in docker_client.info().get("Runtimes", {}):
        assert by_name["nvidia"]["status"] == "warn"
        assert "no NVIDIA runtime" in by_name["nvidia"]["found"]
    assert by_name["pypi"]["status"] == "ok"
    assert by_name["torch-index"]["status"] == "ok"  # PyPI, standing in for the torch index here
    cuda = by_name["cuda-downloads"]
    assert cuda["status"] in ("ok", "warn"), cuda  # never a fail: only cu12x builds need them
    if cuda["status"] == "warn":  # unreachable, as on these machines (facts.md)
        assert "WHEELBUILD_CUDA_REDIST_URL" in cuda["remedy"] and "--cuda12-image" in cuda["remedy"]
    assert by_name["base-image"]["status"] in ("ok", "warn")

    failing = [c["check"] for c in checks if c["status"] == "fail"]
    for done in (text, as_json):
        assert done.returncode == (26 if failing else 0), done.stderr
    for run in watched:  # each ran its memory probe in a container of its own, and removed it
        assert len(run.created) == 1 and run.left(docker_client) == [], run.created


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
