"""The build command's refusals before any work, with no Docker engine to reach: none at the
address given, or a CA bundle that is not there."""

from __future__ import annotations

import pytest

from tests.runkit import (
    TORCH_INDEX,
    wheelbuild,
)

pytestmark = pytest.mark.network  # build reads torch's index (PyPI) before it reaches for Docker


@pytest.mark.parametrize("docker_host", ["unix:///nonexistent/docker.sock"])
def test_no_docker_daemon_is_a_clear_error(docker_host: str) -> None:
    # build's checks before a container read torch's index first (as plan does): a reachable one
    result = wheelbuild(
        "build",
        "wbdemo",
        "--torch",
        "cu130",
        "--torch-index-url",
        TORCH_INDEX,
        env={"DOCKER_HOST": docker_host},
    )
    assert result.returncode == 20, result.stdout + result.stderr
    assert f"no Docker daemon answers at {docker_host}" in result.stderr
    assert "remedy:" in result.stderr


def test_ca_bundle_path_missing_is_a_clear_error() -> None:
    result = wheelbuild("build", "wbdemo", "--ca-bundle", "/nonexistent/ca.pem")
    assert result.returncode == 14
    assert "CA bundle /nonexistent/ca.pem does not exist" in result.stderr
