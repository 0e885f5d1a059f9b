"""The survey of a package's build files (builder/recipes/survey.py): what real sdists from PyPI
say about building here (switches and their values, the archs they name, prebuilt downloads,
GPU-gated CUDA, missing sources), the patterns one at a time, and hostile archives, each
refused or ignored without a crash, without extracting or running anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from wheelbuild.recipes.survey import Switch, survey_source

from tests.sdists import SDISTS, fetch

CONV_ARCHS = (75, 80, 87, 90, 100, 103, 110, 120, 121)

pytestmark = pytest.mark.network  # real sdists, from PyPI once per machine (tests/sdists.py)


# project==version -> (switches, package_archs, downloads_prebuilt, cuda_needs_gpu, missing_sources)
REAL: dict[str, tuple[dict[str, str], tuple[int, ...], bool, bool, tuple[str, ...]]] = {
    "causal-conv1d==1.7.0": ({"CAUSAL_CONV1D_FORCE_BUILD": "TRUE"}, CONV_ARCHS, True, False, ()),
    "mamba-ssm==2.3.2.post1": ({"MAMBA_FORCE_BUILD": "TRUE"}, CONV_ARCHS, True, False, ()),
    "fast-hadamard-transform==1.1.0": (
        {"FAST_HADAMARD_TRANSFORM_FORCE_BUILD": "TRUE"},
        CONV_ARCHS,
        True,
        False,
        ("csrc/fast_hadamard_transform.cpp", "csrc/fast_hadamard_transform_cuda.cu"),
    ),
    # Its gencode list is gated on FLASH_ATTN_CUDA_ARCHS; the ROCm branch's .cu files are
    # copies the build makes of .cpp files the sdist holds, so they are not missing.
    "flash-attn==2.8.3": ({"FLASH_ATTENTION_FORCE_BUILD": "TRUE"}, (80, 90, 100, 120), True, False, ()),
    # FORCE_ONLY_CUDA is read too, and left alone: it would drop the CPU kernels.
    "torch-cluster==1.6.3": ({"FORCE_CUDA": "1"}, (), False, True, ()),
    "torch-scatter==2.1.2": ({"FORCE_CUDA": "1"}, (), False, True, ()),
    # No GPU switch: without TORCH_CUDA_ARCH_LIST it asks the GPU for its capability instead.
    "grouped-gemm==0.3.0": ({}, (), False, False, ()),
    "mmcv==2.2.0": ({"MMCV_WITH_OPS": "1", "FORCE_CUDA": "1"}, (), False, True, ()),
    "xformers==0.0.35": ({"FORCE_CUDA": "1"}, (), False, True, ()),
    # Read through its helper get_env_if_set and int(); without it the ops compile at first use.
    "deepspeed==0.19.8": ({"DS_BUILD_OPS": "1"}, (), False, False, ()),
    # The qigen extension (off unless DISABLE_QIGEN=0) names a source its sdist does not ship.
    "auto-gptq==0.7.1": (
        {"BUILD_CUDA_EXT": "1"},
        (),
        False,
        False,
        ("autogptq_extension/qigen/backend.cpp",),
    ),
}


@pytest.mark.parametrize("key", sorted(REAL))
def test_a_real_sdist_says_what_it_needs_to_build_here(key: str) -> None:
    path = fetch(key)
    found = survey_source(path.parent, path.name)
    switches, archs, downloads, gpu, missing = REAL[key]
    assert {s.name: s.value for s in found.switches} == switches
    assert found.package_archs == archs
    assert found.downloads_prebuilt is downloads
    assert found.cuda_needs_gpu is gpu
    assert found.missing_sources == missing
    assert found.files_read[0] == "setup.py" and found.refused == ()


def test_natten_real_sdist_names_its_arch_and_worker_variables_in_their_forms() -> None:
    """natten 0.21.7, a CMake build driven from setup.py: it reads NATTEN_CUDA_ARCH as dotted
    archs (9.0;10.0;12.0; without it no CUDA library at all) and NATTEN_N_WORKERS as its
    parallelism. Read from the real sdist's text: nothing of it runs, not even its setup.py."""
    path = fetch("natten==0.21.7")
    found = survey_source(path.parent, path.name)
    arch = {v.name: v for v in found.arch_vars}
    assert set(arch) == {"NATTEN_CUDA_ARCH"}
    form = arch["NATTEN_CUDA_ARCH"].form
    assert form is not None and form.spell((90, 100, 120)) == "9.0;10.0;12.0"
    assert {v.name for v in found.jobs_vars} >= {"NATTEN_N_WORKERS"}
    assert found.refused == ()


def test_natten_is_planned_by_name_with_its_variables_set_as_the_plan_says(tmp_path: Path) -> None:
    """`wheelbuild plan natten==0.21.7`, named as pip names it: the sdist PyPI lists, checked by
    its sha256, and the plan sets natten's own variables from the archs and MAX_JOBS it plans."""
    env = {
        **os.environ,
        "WHEELBUILD_CACHE_DIR": str(tmp_path / "cache"),
        "DOCKER_HOST": "unix:///nonexistent.sock",
    }
    done = subprocess.run(
        [Path(sys.executable).parent / "wheelbuild", "plan", "natten==0.21.7", "--torch", "cu130",
         "--torch-index-url", "https://pypi.org/simple", "--python", "3.11", "--archs", "90,100,120", "--max-jobs", "2", "--json"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode != 0 and "could not read" in done.stderr:
        pytest.skip(f"PyPI or the torch index is not reachable: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["package"]["source"]["sha256"] == SDISTS["natten==0.21.7"].sha256
    assert plan["plan"]["max_jobs"] == 2
    switches = plan["notes"]["switches"]
    assert any(line.startswith("NATTEN_CUDA_ARCH=9.0;10.0;12.0: ") for line in switches), switches
    assert any(line.startswith("NATTEN_N_WORKERS=2: ") for line in switches), switches


def test_each_switch_says_why_in_one_line() -> None:
    conv = fetch("causal-conv1d==1.7.0")
    cluster = fetch("torch-cluster==1.6.3")
    assert survey_source(conv.parent, conv.name).switches == (
        Switch("CAUSAL_CONV1D_FORCE_BUILD", "TRUE", "setup.py downloads a prebuilt wheel unless it is TRUE"),
    )
    assert survey_source(cluster.parent, cluster.name).switches == (
        Switch(
            "FORCE_CUDA",
            "1",
            "setup.py builds its CUDA extension only on a machine with a GPU unless it is 1",
        ),
    )


def test_a_project_directory_reads_as_its_sdist_does(tmp_path: Path) -> None:
    for key in ("causal-conv1d==1.7.0", "fast-hadamard-transform==1.1.0"):
        path = fetch(key)
        with tarfile.open(path) as archive:
            archive.extractall(tmp_path / key, filter="data")  # a pinned file, unpacked to compare
        (root,) = (tmp_path / key).iterdir()
        assert survey_source(root, ".") == survey_source(path.parent, path.name)


@pytest.mark.parametrize(
    ("key", "requires"),
    [
        ("causal-conv1d==1.7.0", ("setuptools", "wheel")),
        # Its own torch bound (torch>=2.7.0,<2.8) would replace the variant's torch: left out.
        ("grouped-gemm==0.3.0", ("setuptools<81.0.0", "packaging>=21.0.0")),
        ("mamba-ssm==2.3.2.post1", ("setuptools>=61.0.0", "wheel", "packaging", "ninja")),
        ("torch-cluster==1.6.3", ()),  # no pyproject.toml
    ],
)
def test_the_build_requirements_are_read_without_torch(key: str, requires: tuple[str, ...]) -> None:
    path = fetch(key)
    assert survey_source(path.parent, path.name).build_requires == requires


def test_plan_of_an_sdist_published_without_its_sources_exits_as_build_does(tmp_path: Path) -> None:
    """fast-hadamard-transform 1.1.0's sdist lacks the csrc/ its setup.py compiles: plan and build
    both refuse it before any container, with SourceUnavailable's exit code (15)."""
    key = "fast-hadamard-transform==1.1.0"
    source = f"{fetch(key)}#sha256={SDISTS[key].sha256}"
    for command in ("plan", "build"):
        done = subprocess.run(
            [Path(sys.executable).parent / "wheelbuild", command, source, "--torch", "cu130"],
            env={**os.environ, "DOCKER_HOST": "unix:///nonexistent.sock", "XDG_CACHE_HOME": str(tmp_path)},
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 15, done.stdout + done.stderr
        assert "error: the source lacks files its setup.py names: csrc/fast_hadamard_transform" in done.stderr
