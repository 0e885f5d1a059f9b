"""A torch index that cannot be read (nothing listens on its port): `build` and `plan` go ahead
only for a torch and Pythons the machine's wheel cache holds from that index, by the record a
build writes from its containers' lock lines (spec/held_torch.py), and otherwise refuse with exit
25 before any container, naming what the cache does hold. No Docker: the engine's socket is
absent.
A real build from the held torch, its container installing it without the index, is
tests/integration/test_build.py's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from wheelbuild.spec import held_torch
from wheelbuild.variants import parse_variant

DEAD_INDEX = "http://127.0.0.1:1/simple"


def _run(command: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            Path(sys.executable).parent / "wheelbuild",
            command,
            "--example",
            "--torch-index-url",
            DEAD_INDEX,
            *args,
        ],
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _hold(cache: Path, torch: str, python: str) -> None:
    variant = parse_variant(f"{torch}+cu130", DEAD_INDEX)
    lock = f"{variant.cache_key}-{python}"
    wheel = f"torch-{torch}+cu130-{python}-{python}-manylinux_2_28_x86_64.whl"
    assert held_torch.record(cache, variant, [(lock, "a" * 64, wheel)], "20261206-000000-abcdef") == (python,)


def test_nothing_held_from_the_index_is_the_index_error_alone(own_cache: Path) -> None:
    done = _run("plan", "--torch", "2.13.0+cu130")
    assert done.returncode == 25, done.stdout + done.stderr
    assert "could not read torch's page on the torch index" in done.stderr
    assert "wheel cache" not in done.stderr.splitlines()[-2]  # the cause line
    assert "but for a torch an earlier build here installed from it" in done.stderr  # the remedy


def test_a_held_torch_is_planned_for_the_pythons_held_without_the_index(own_cache: Path) -> None:
    _hold(own_cache, "2.13.0", "cp311")
    done = _run("plan", "--torch", "2.13.0+cu130")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "building for torch 2.13.0 from this machine's wheel cache, which holds it "
        "(cp311 by run 20261206-000000-abcdef), without reading the index"
    ) in done.stderr
    assert "wbdemo 0.1.0+cu130torch2.13  cp311  torch 2.13.0+cu130" in done.stdout


def test_a_release_or_python_the_cache_lacks_is_refused_naming_what_it_holds(own_cache: Path) -> None:
    _hold(own_cache, "2.13.0", "cp311")
    # build: plan with the Pythons named plans without the index, with a warning.
    other = _run(
        "build", "--torch", "2.12.1+cu130", "--python", "3.11", "--output-dir", str(own_cache / "out")
    )
    assert other.returncode == 25, other.stdout + other.stderr
    assert (
        "has no torch 2.12.1 from it for cp311; it holds 2.13.0 from it (--torch 2.13.0+cu130)"
    ) in other.stderr
    python = _run(
        "build", "--torch", "2.13.0+cu130", "--python", "3.12", "--output-dir", str(own_cache / "out")
    )
    assert python.returncode == 25, python.stdout + python.stderr
    assert "has no torch 2.13.0 from it for cp312" in python.stderr
