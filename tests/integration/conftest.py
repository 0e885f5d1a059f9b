"""The Docker suite's fixtures: a real Docker engine, the local base image, the real CUDA image.

Nothing here is mocked. scripts/test starts the engine and exports WHEELBUILD_BASE_IMAGE; run
alone, these fixtures make the base image themselves (reused when present).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
from wheelbuild.attempt import ownership
from wheelbuild.spec.torch_choice import newest_release
from wheelbuild.spec.torch_releases import read_torch_index
from wheelbuild.variants import parse_variant

from tests.runkit import REPO, TORCH_INDEX, WHEELBUILD, Completed, default_sigint, poll_until, wheelbuild
from tests.serving import clean_env, run_ok, uv_binary

__all__ = ["REPO", "TORCH_INDEX", "WHEELBUILD", "Completed", "default_sigint", "poll_until", "wheelbuild"]


# A build tries its wheels against the torch releases around its own by default, installing each
# (~3 GB with its CUDA wheels): only the tests of that range run it (their --torch-range wins).
os.environ.setdefault("WHEELBUILD_TORCH_RANGE", "false")


@dataclass(frozen=True)
class TorchRelease:
    """A torch release with CUDA 13.0 wheels on TORCH_INDEX: the newest (what `--torch cu130`
    means today, read as a build reads it), or the fixture build's."""

    version: str  # 2.14.1

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def label(self) -> str:
        return f"cu130torch{self.minor}"

    @property
    def variant(self) -> str:
        """As --torch takes it: 2.13.0+cu130."""
        return f"{self.version}+cu130"


@functools.cache
def newest_cu130() -> TorchRelease:
    index = read_torch_index(TORCH_INDEX)
    return TorchRelease(newest_release(index, parse_variant("cu130", TORCH_INDEX), ("cp311",)).version)


HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/integration/ is `docker` (a conftest's pytestmark marks only the
    conftest), so `-m 'not docker'` is every test that runs without an engine."""
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.docker)


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    client = docker.from_env()
    client.ping()  # fails loudly: scripts/test starts the engine, so absence is a real failure
    return client


@pytest.fixture(scope="session")
def base_image(docker_client: docker.DockerClient) -> str:
    base = os.environ.get("WHEELBUILD_BASE_IMAGE")
    if not base:
        out = subprocess.run(
            [str(REPO / "scripts" / "make-base-image")], check=True, capture_output=True, text=True
        )
        base = out.stdout.strip().splitlines()[-1]
        os.environ["WHEELBUILD_BASE_IMAGE"] = base
    docker_client.images.get(base)
    return base


@pytest.fixture(scope="session")
def cuda_image(base_image: str) -> str:
    result = wheelbuild("image", "build", "--base-image", base_image)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    return result.stdout.strip().splitlines()[-1]


# The torch of the environment the fixture build is made --like: a CUDA 13.0 release older than
# the newest, so that building for it shows --like followed the venv, not the default.
FIXTURE_TORCH = TorchRelease("2.13.0")
# uv's cache for the tests that install real torch on this machine (~3 GB with its CUDA wheels,
# downloaded once, then linked from the cache).
UV_CACHE = Path.home() / ".cache" / "wheelbuild-tests" / "uv"


@pytest.fixture(scope="session")
def like_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's venv: CPython 3.11 with the real torch FIXTURE_TORCH from PyPI (and pip)."""
    venv = tmp_path_factory.mktemp("like") / "venv"
    env = clean_env(venv.parent, uv_cache=UV_CACHE)
    run_ok([shutil.which("python3.11") or "python3", "-m", "venv", str(venv)], env, venv.parent)
    python = str(venv / "bin" / "python")
    run_ok(
        [uv_binary(), "pip", "install", "--python", python, f"torch=={FIXTURE_TORCH.version}"],
        env,
        venv.parent,
        timeout=1200,
    )
    return venv


@dataclass(frozen=True)
class FixtureBuild:
    result: Completed
    run_dir: Path
    report: dict
    wheel: Path


@pytest.fixture(scope="session")
def fixture_build(cuda_image: str, like_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> FixtureBuild:
    """One real build of the bundled example made --like a user's venv (CPython 3.11, torch
    FIXTURE_TORCH, no GPU visible: the default archs, sm_100 + sm_120), in a 4 GiB container,
    shared by every test that needs "a built wheel of the example". Without its torch range: the
    range's own tests build with it (test_torch_range.py)."""
    out = tmp_path_factory.mktemp("wheelhouse")
    result = wheelbuild(
        "build", "wbdemo",
        "--like", str(like_venv),
        "--torch-index-url", TORCH_INDEX,
        "--memory", "4g",
        "--output-dir", str(out),
        "--no-torch-range",
        "--rebuild",  # a real build, even when an earlier run left one with the same inputs
        timeout=3600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    run_dir = out / "runs" / result.run_id
    report = json.loads((run_dir / "build-report.json").read_text())
    wheels = sorted(run_dir.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return FixtureBuild(result=result, run_dir=run_dir, report=report, wheel=wheels[0])


def containers_of_run(client: docker.DockerClient, run_id: str) -> list[str]:
    return [
        c.name
        for c in client.containers.list(
            all=True, filters={"label": f"{ownership.RUN_LABEL}={run_id}"}, ignore_removed=True
        )
    ]


@dataclass(frozen=True)
class Created:
    """A container the engine reported created: its id, and its labels with the image and name."""

    id: str
    attributes: dict[str, str]


@dataclass(frozen=True)
class Watched:
    """A wheelbuild run as a user would, and every container that process created while it ran,
    read from the engine's events (each carries ownership.OWNER_LABEL naming its pid)."""

    result: Completed
    created: tuple[Created, ...]

    def of_a_run(self) -> list[Created]:
        """Those labelled with a run (attempts, gates, calibration compiles)."""
        return [c for c in self.created if ownership.RUN_LABEL in c.attributes]

    def left(self, client: docker.DockerClient) -> list[str]:
        """Those still there."""
        return [
            c.id[:12]
            for c in self.created
            if client.containers.list(all=True, filters={"id": c.id}, ignore_removed=True)
        ]


def wheelbuild_watched(
    client: docker.DockerClient,
    marker_image: str,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 1200,
) -> Watched:
    """wheelbuild(*args), with the engine's container events followed meanwhile. The events end
    with a marker container this test creates and removes after the command: the engine sends
    events in order, so once the marker's arrives, every earlier one has."""
    # Subscribed once this returns (the engine has answered), before the command starts.
    events = client.events(decode=True, filters={"type": "container", "label": ownership.OWNER_LABEL})
    seen: list[dict[str, Any]] = []
    threading.Thread(target=_follow, args=(events, seen), daemon=True).start()
    try:
        proc = subprocess.Popen(
            [WHEELBUILD, *args], env={**os.environ, **(env or {})}, cwd=REPO, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        stdout, stderr = proc.communicate(timeout=timeout)
        marker = client.containers.create(
            marker_image, ["true"], labels={ownership.OWNER_LABEL: ownership.owner_token()}
        )
        marker.remove()
        deadline = time.monotonic() + 60
        while not any(_created(e) and e["id"] == marker.id for e in list(seen)):
            assert time.monotonic() < deadline, "the engine never reported the marker container"
            time.sleep(0.05)
    finally:
        events.close()
    created = tuple(
        Created(e["id"], dict(e["Actor"]["Attributes"]))
        for e in seen
        if _created(e) and _owner_pid(e["Actor"]["Attributes"].get(ownership.OWNER_LABEL, "")) == proc.pid
    )
    return Watched(Completed(proc.returncode, stdout, stderr), created)


def _follow(events: Any, seen: list[dict[str, Any]]) -> None:
    try:
        for event in events:
            seen.append(event)
    except Exception:  # the stream ends with an error when closed: that is how it stops
        return


def _created(event: dict[str, Any]) -> bool:
    return event.get("Type") == "container" and event.get("Action") == "create"


def _owner_pid(token: str) -> int | None:
    """The pid in an owner token (host/boot/pidns:pid:start)."""
    pid = token.partition(":")[2].partition(":")[0]
    return int(pid) if pid.isdigit() else None


def compiler_processes() -> list[str]:
    """Compiler processes on this machine (those inside containers show up here too)."""
    names = {"nvcc", "cicc", "ptxas", "cc1plus", "ninja", "fatbinary", "cudafe++", "sccache"}
    out = subprocess.run(["ps", "-eo", "pid=,comm="], capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if line.split()[-1] in names]


@pytest.fixture
def no_leftovers(docker_client: docker.DockerClient) -> Iterator[None]:
    yield
    assert compiler_processes() == []
