"""wheelbuild.spec.sources.lookup_sdist against the real PyPI (its PEP 691 JSON; no Docker): a flash-attn release
wheelbuild does not pin is found, pinned by the sha256 PyPI lists, and downloads to that hash."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from packaging.version import Version
from wheelbuild.errors import BadArgument, BadVariant
from wheelbuild.index.publish import publish
from wheelbuild.recipes import RemoteSdist, resolve_recipe
from wheelbuild.spec.sources import lookup_sdist, resolve_lookup
from wheelbuild.spec.sources import newest_release as newest_sdist
from wheelbuild.spec.torch_choice import newest_release
from wheelbuild.spec.torch_releases import read_torch_index
from wheelbuild.variants import parse_variant

from tests.indexkit import make_wheel
from tests.serving import running_server

pytestmark = pytest.mark.network  # PyPI's JSON API and simple index, for real


def test_an_unpinned_release_is_looked_up_and_pinned_by_pypis_sha256() -> None:
    said: list[str] = []
    recipe = resolve_lookup(resolve_recipe("flash-attn", version="2.8.1"), said.append)
    assert isinstance(recipe.source, RemoteSdist)
    assert recipe.source.url.endswith("/flash_attn-2.8.1.tar.gz")
    assert recipe.source.sha256 is not None and re.fullmatch(r"[0-9a-f]{64}", recipe.source.sha256)
    assert "flash-attn 2.8.1 (2.8.1 on the index): " in said[0] and recipe.source.sha256 in said[0]
    # Not calibrated: planned with 2.8.3's, its nearest calibrated release, and the model says so.
    assert "2.8.3 being the nearest calibrated release" in recipe.memory_model.source
    with urllib.request.urlopen(recipe.source.url, timeout=120) as response:
        assert hashlib.sha256(response.read()).hexdigest() == recipe.source.sha256


def test_a_pinned_release_is_not_looked_up() -> None:
    recipe = resolve_recipe("flash-attn", version="2.8.3")
    assert resolve_lookup(recipe, pytest.fail) is recipe


def test_a_release_pypi_does_not_have_is_a_bad_argument() -> None:
    with pytest.raises(BadArgument) as caught:
        lookup_sdist("flash-attn", "0.0.1.dev999")
    assert "has no sdist with a sha256 on the index" in caught.value.cause


def test_track_latest_adds_pypis_newest_flash_attn_to_the_matrix(tmp_path: Path) -> None:
    newest = newest_sdist("flash-attn")
    assert Version(newest) >= Version("2.8.3.post2")
    config = tmp_path / "wheelbuild.toml"
    config.write_text(
        '[[build]]\npackage = "flash-attn"\nversions = ["2.8.1"]\ntorch = ["cu130"]\npython = ["3.12"]\n'
    )
    done = subprocess.run(
        [Path(sys.executable).parent / "wheelbuild", "matrix", "--config-file", config, "--format", "lines", "--track", "latest"],
        env={**os.environ, "WHEELBUILD_TORCH_INDEX_URL": "https://pypi.org/simple"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # --track latest also names the torch release that `cu130` means on that index today.
    pypi = "https://pypi.org/simple"
    torch = newest_release(read_torch_index(pypi), parse_variant("cu130", pypi), ("cp312",)).version
    assert [line.split()[0] for line in done.stdout.splitlines()] == [
        f"flash-attn-2.8.1-{torch}-cu130-cp312-100.120",
        f"flash-attn-{newest}-{torch}-cu130-cp312-100.120",
    ]


def test_a_release_pypi_lacks_fails_before_docker_is_touched() -> None:
    done = subprocess.run(
        [Path(sys.executable).parent / "wheelbuild", "build", "flash-attn", "--version", "0.0.1.dev999"],
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 37, done.stdout + done.stderr
    assert "flash-attn 0.0.1.dev999 has no sdist with a sha256 on the index" in done.stderr


def test_newest_torch_per_cuda_tag_from_a_real_index(tmp_path: Path) -> None:
    """A PyTorch-style index (local labels per CUDA tag), served by wheelbuild serve: what
    --track latest adds for each tag (no request for METADATA: the labels say the CUDA)."""
    wheels = [
        make_wheel(tmp_path / "in", "torch", version, tag="cp311-cp311-manylinux_2_28_x86_64")
        for version in ("2.11.0+cu130", "2.12.0+cu130", "2.13.0+cu128", "2.14.0.dev20261101+cu130")
    ]
    publish(wheels, tmp_path / "tree")
    with running_server(tmp_path / "tree") as url:
        index = read_torch_index(url, cache=tmp_path / "cache")
        newest = {
            tag: newest_release(index, parse_variant(tag, url), None).version for tag in ("cu130", "cu128")
        }
        assert newest == {"cu130": "2.12.0", "cu128": "2.13.0"}  # not the pre-release, not cu128's
        with pytest.raises(BadVariant):
            newest_release(index, parse_variant("cu126", url), None)


def test_plan_of_a_package_named_with_its_release_pins_pypis_sdist_and_plans_for_the_newest_torch(
    tmp_path: Path,
) -> None:
    """`wheelbuild plan causal-conv1d==1.7.0 --torch cu130`, named as pip names it: the sdist PyPI
    lists, by its sha256 (downloaded and verified), the newest cu130 torch, and the -std=c++17
    of its setup.py said to be raised to what that torch requires."""
    done = subprocess.run(
        [Path(sys.executable).parent / "wheelbuild", "plan", "causal-conv1d==1.7.0", "--torch", "cu130",
         "--torch-index-url", "https://pypi.org/simple", "--archs", "120", "--python", "3.11", "-v"],
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock", "XDG_CACHE_HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    pin = "3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b"
    assert "causal-conv1d 1.7.0 (==1.7.0 on the index): https://files.pythonhosted.org/" in done.stderr
    assert f"causal_conv1d-1.7.0.tar.gz sha256 {pin}" in done.stderr
    assert "source causal_conv1d-1.7.0.tar.gz, sha256 3202758494eaa7b5... verified" in done.stderr
    assert "C++ standard: the package's build files give -std=c++17: raised where torch 2." in done.stdout


def _plan(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [Path(sys.executable).parent / "wheelbuild", "plan", *args, "--torch-index-url", "https://pypi.org/simple", "-v"],
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock", "XDG_CACHE_HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_plan_of_flash_attn_names_its_newest_release_the_newest_cu130_torch_and_the_raised_standard(
    tmp_path: Path,
) -> None:
    """`wheelbuild plan flash-attn --torch cu130`: the recipe's newest release on PyPI, pinned by
    wheelbuild's table, with 2.8.3's calibrated model (the same units); torch's newest CUDA 13.0
    release; its -std=c++17 said to be raised; the 13.1 toolkit, a newer minor, said to be fine."""
    done = _plan(tmp_path, "flash-attn", "--torch", "cu130")
    assert done.returncode == 0, done.stdout + done.stderr
    newest = newest_sdist("flash-attn")
    assert f"flash-attn {newest} (the newest on the index): " in done.stderr
    assert done.stdout.startswith(f"plan for flash-attn {newest}\n")
    assert f"  model           flash-attn-{newest} (73 units;" in done.stdout or Version(newest) > Version(
        "2.8.3.post2"
    )
    torch = newest_release(read_torch_index("https://pypi.org/simple"), parse_variant("cu130"), None).version
    assert f"torch: torch {torch}: newest on https://pypi.org/simple built with CUDA 13.0" in done.stdout
    assert "C++ standard: the package's build files give -std=c++17: raised where torch" in done.stdout
    assert (
        "toolkit: CUDA 13.1, in the " in done.stdout
        and "a newer CUDA 13 minor compiles for it" in done.stdout
    )


def test_plan_of_the_example_for_cu132_names_torch_2_15_and_the_13_2_toolkit(tmp_path: Path) -> None:
    done = _plan(tmp_path, "--example", "--torch", "cu132")
    assert done.returncode == 0, done.stdout + done.stderr
    torch = newest_release(read_torch_index("https://pypi.org/simple"), parse_variant("cu132"), None).version
    assert f"torch: torch {torch}: newest on https://pypi.org/simple built with CUDA 13.2" in done.stdout
    assert (
        "toolkit: CUDA 13.2, in the " in done.stdout and f"torch {torch} is a CUDA 13.2 build" in done.stdout
    )
