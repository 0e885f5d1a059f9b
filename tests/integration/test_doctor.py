"""`wheelbuild doctor` run for real on this machine: the real Docker engine, a real container
whose memory limit is read back from inside, real requests to PyPI and NVIDIA.

Where the machine lacks an NVIDIA runtime or cannot reach NVIDIA's CUDA downloads or PyTorch's
index (as these machines, facts.md), the checks that depend on it read the fact first; builds
here take torch from PyPI (conftest.TORCH_INDEX).
"""

from __future__ import annotations

import json

import docker

from tests.integration.conftest import (
    TORCH_INDEX,
    wheelbuild_watched,
)

STATUSES = ("ok", "warn", "fail")
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
