"""`wheelbuild doctor` run for real on this machine: the real Docker engine, a real container
whose memory limit is read back from inside, real requests to PyPI and NVIDIA.

This machine has no NVIDIA runtime and cannot reach NVIDIA's CUDA downloads or PyTorch's
index (facts.md); builds here take torch from PyPI (conftest.TORCH_INDEX).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import docker
import pytest
from wheelbuild.run import ownership

from tests.integration.conftest import REPO, TORCH_INDEX, WHEELBUILD, Completed, wheelbuild

STATUSES = ("ok", "warn", "fail")
CHECKS = [
    "docker", "memory-limit", "nvidia", "disk-docker", "disk-cache", "ca-bundle",
    "torch-index", "pypi", "cuda-downloads", "sccache", "base-image",
]  # fmt: skip


def _probe_containers(client: docker.DockerClient) -> list[str]:
    """Containers of doctor's memory probe (its command reads the cgroup's memory limit)."""
    found = []
    for container in client.containers.list(all=True, filters={"label": ownership.OWNER_LABEL}):
        command = " ".join(container.attrs.get("Config", {}).get("Cmd") or [])
        if "memory.limit_in_bytes" in command:
            found.append(container.name)
    return found


def test_doctor_here_checks_every_part_for_real(docker_client: docker.DockerClient, base_image: str) -> None:
    env = {"WHEELBUILD_TORCH_INDEX_URL": TORCH_INDEX, "WHEELBUILD_BASE_IMAGE": base_image}
    started = time.monotonic()
    text = wheelbuild("doctor", env=env, timeout=60)
    as_json = wheelbuild("doctor", "--json", env=env, timeout=60)
    assert time.monotonic() - started < 40  # each run is seconds, even with the probe container

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
    assert _probe_containers(docker_client) == []  # the probe is removed


def _doctor_without(names: tuple[str, ...], env: dict[str, str]) -> Completed:
    environ = {k: v for k, v in os.environ.items() if k not in names} | env
    proc = subprocess.run(
        [WHEELBUILD, "doctor"], env=environ, capture_output=True, text=True, timeout=60, cwd=REPO
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


def test_doctor_with_pytorchs_own_index_unreachable_here_fails_on_it() -> None:
    done = _doctor_without(("WHEELBUILD_TORCH_INDEX_URL",), {"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert done.returncode == 26
    line = next(line for line in done.stdout.splitlines() if line.split()[1] == "torch-index")
    assert line.startswith("fail  torch-index    https://download.pytorch.org/whl/cu130/torch/ unreachable")
    assert "WHEELBUILD_TORCH_INDEX_URL" in line
