"""The fixtures of the suites that run wheelbuild in process or its CLI with Docker unreachable
(tests/unit, tests/local): realistic attempt values, the installed CLI run for real, and each
test's own cache with PyPI's torch pages seeded, so that nothing reaches Docker or an index.
Each suite's conftest takes them from here."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from wheelbuild.attempt.config import AttemptConfig
from wheelbuild.attempt.outcome import AttemptResult, OomEvidence
from wheelbuild.variants import parse_variant

REPO = Path(__file__).resolve().parents[1]
# The entry point installed beside the interpreter under test, whichever venv or copy that is.
WHEELBUILD = Path(sys.executable).parent / "wheelbuild"
# A Docker endpoint that cannot answer: anything that reaches Docker fails with exit code 20.
NO_DOCKER = "unix:///nonexistent.sock"
# The address space a capped command runs in: the CLI needs a few hundred MiB; a reader that sizes
# a buffer by a hostile header fails under it (MemoryError) instead of filling the machine.
ADDRESS_SPACE_CAP = 1024**3


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., AttemptConfig]:
    """An AttemptConfig with realistic values; keyword arguments replace fields."""

    def make(**overrides: Any) -> AttemptConfig:
        values: dict[str, Any] = {
            "run_id": "20260101-000000-abcdef",
            "attempt": 2,
            "image": "wheelbuild-cuda131:0123456789abcdef",
            "project_dir": tmp_path / "project",
            "package": ".",
            "identifiers": ("cp311-manylinux_x86_64", "cp312-manylinux_x86_64"),
            "memory": 6 * 1024**3,
            "cpus": 7.5,
            "gpus": False,
            "build_env": {
                "MAX_JOBS": "4",
                "NVCC_THREADS": "2",
                "TORCH_CUDA_ARCH_LIST": "10.0;12.0",
                "FLASH_ATTN_CUDA_ARCHS": "100;120",
            },
            "cuda_home": "/usr/local/cuda-13.1/nvidia/cu13",
            "torch": parse_variant("2.11.0+cu130", "https://user:secret@example.invalid/simple"),
            "output_dir": tmp_path / "out",
            "log_path": tmp_path / "build.log",
        }
        values.update(overrides)
        return AttemptConfig(**values)

    return make


@pytest.fixture
def make_result(tmp_path: Path) -> Callable[..., AttemptResult]:
    """An AttemptResult whose log tail is the given text, one entry per line."""

    def make(
        log: str,
        *,
        returncode: int = 1,
        wheels: tuple[Path, ...] = (),
        memory_seen: int | None = None,
        oom: OomEvidence | None = None,
    ) -> AttemptResult:
        return AttemptResult(
            oom=oom or OomEvidence(),
            attempt=1,
            returncode=returncode,
            duration_s=12.5,
            wheels=wheels,
            memory_limit_seen=memory_seen,
            log_path=tmp_path / "build.log",
            log_tail=tuple(log.splitlines()),
        )

    return make


# torch's pages as a fake PyTorch index lists them (labelled releases: no METADATA is read), put
# in a cache as an earlier read would have: the CLI reads them without a request.
FAKE_TORCH: dict[str, dict[str, tuple[str, ...]]] = {
    "cu130": {"2.14.1+cu130": ("cp310", "cp311", "cp312", "cp313"), "2.13.0+cu130": ("cp311", "cp312")},
    "cu128": {"2.10.0+cu128": ("cp310", "cp311", "cp312", "cp313")},
}


def seed_torch_index(cache: Path, url: str, releases: dict[str, tuple[str, ...]]) -> None:
    """torch's page on *url* in *cache* (a WHEELBUILD_CACHE_DIR), read a minute ago."""
    key = url.rstrip("/")
    path = cache / "torch-index" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    files = [
        [
            f"torch-{version}-{py}-{py}-manylinux_2_28_x86_64.whl",
            False,
            "",
            hashlib.sha256(version.encode() + py.encode()).hexdigest(),
            False,
        ]
        for version, pythons in releases.items()
        for py in pythons
    ]
    path.write_text(json.dumps({"index": key, "fetched": time.time() - 60, "files": files}))


@pytest.fixture
def run_cli(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the installed `wheelbuild` console script for real, with Docker unreachable; with
    capped=True, in an address space of ADDRESS_SPACE_CAP. PyTorch's cu130 and cu128 pages are
    in its cache (FAKE_TORCH), so a command reads no index over the network."""
    for tag, releases in FAKE_TORCH.items():
        seed_torch_index(tmp_path / "cache", f"https://download.pytorch.org/whl/{tag}", releases)

    def run(
        *args: str, capped: bool = False, prefix: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WHEELBUILD_", "CIBW_"))}
        env["DOCKER_HOST"] = NO_DOCKER
        env["NO_COLOR"] = "1"
        env["WHEELBUILD_CACHE_DIR"] = str(tmp_path / "cache")
        return subprocess.run(
            [*prefix, str(WHEELBUILD), *args],  # prefix: e.g. unshare -n, a network namespace of its own
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            preexec_fn=_cap_address_space if capped else None,
        )

    return run


@pytest.fixture(autouse=True)
def own_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test its own wheelbuild cache: a profile `wheelbuild calibrate` left on this machine
    must not change what a planner test sees."""
    cache = tmp_path / "wheelbuild-cache"
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def fake_torch_index(own_cache_dir: Path) -> Path:
    """PyTorch's cu130 and cu128 pages (FAKE_TORCH) in own_cache_dir, so that build or plan run
    in process reads no index over the network."""
    for tag, releases in FAKE_TORCH.items():
        seed_torch_index(own_cache_dir, f"https://download.pytorch.org/whl/{tag}", releases)
    return own_cache_dir


@pytest.fixture
def flash_attn_sdist(tmp_path: Path) -> Path:
    """flash-attn 2.8.3's sdist in the test's caches, where a plan or build of the recipe finds it
    (downloaded once per machine by tests/sdists.py; linked, not copied)."""
    from tests.sdists import SDISTS, fetch

    pinned = SDISTS["flash-attn==2.8.3"]
    found = fetch("flash-attn==2.8.3")
    for cache in ("cache", "wheelbuild-cache"):  # run_cli's, and own_cache_dir's (in process)
        kept = tmp_path / cache / "sdists" / pinned.sha256 / pinned.filename
        kept.parent.mkdir(parents=True, exist_ok=True)
        if not kept.exists():
            kept.symlink_to(found)
    return found


Invoke = Callable[..., Result]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary current directory and an environment without WHEELBUILD_* settings."""
    for name in list(os.environ):
        if name.startswith("WHEELBUILD_") and name != "WHEELBUILD_CACHE_DIR":
            monkeypatch.delenv(name)
    monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


@pytest.fixture
def invoke(here: Path) -> Invoke:
    """The CLI in this process (click's runner), from `here`."""
    from wheelbuild.cli.main import main

    def run(*args: str, **env: str) -> Result:
        return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)

    return run
