"""wheelbuild calibrate on real flash-attn units: each compiled alone by the image's nvcc in its
own container (cgroup), measured, and written as the profile the planner then prefers.

The short variant measures flash-attn's cheapest kernel for one arch (`slow`: minutes); the full
one (`--sample 2`, both archs: about ten minutes here) is `hours`. The nightly test workflow runs
both."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from wheelbuild.plan.calibration import read_measurements

from tests.integration.conftest import REPO, TORCH_INDEX, WHEELBUILD, compiler_processes, poll_until

SHARED = REPO.parent / "shared" / "calibration" / "flash-attn-2.8.3-cuda13.0.tsv"
GIB = 1024**3


def _calibrate(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert compiler_processes() == [], "another build is running on this machine"
    compare = ["--compare", str(SHARED)] if SHARED.is_file() else []
    return subprocess.run(
        [WHEELBUILD, "calibrate", "flash-attn==2.8.3", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, *compare, *args],
        cwd=REPO, env={**os.environ, "WHEELBUILD_CACHE_DIR": str(cache)},
        capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip


@pytest.mark.slow  # a real flash-attn unit, 2-3 minutes; docs/testing.md says what covers it in CI
def test_calibrate_measures_the_cheapest_unit_and_the_planner_then_uses_it(
    cuda_image: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    done = _calibrate(tmp_path, "--sample", "1", "--archs", "100", "--threads", "1")
    ran_s = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    profile = tmp_path / "profiles" / "flash-attn-2.8.3-cuda13.1.tsv"
    (row,) = read_measurements(profile.with_suffix(".measured.tsv").read_text())
    assert row.unit.endswith("flash_fwd_hdim32_bf16_causal_sm80.cu") and row.archs == (100,) and not row.oom
    # A forward kernel for one arch: the shared table measured 4.0-4.8 GiB and ~110 s on 2 cores.
    # Its time depends on the machine and its load; it is measured within the command's own.
    assert 1 * GIB < row.peak < 10 * GIB and 0 < row.wall_s < ran_s, row
    assert f"profile: {profile}" in done.stdout

    plan = subprocess.run(
        [WHEELBUILD, "plan", "flash-attn==2.8.3", "--torch-index-url", TORCH_INDEX, "--memory", "64g", "--cpus", "128", "-v"],
        env={**os.environ, "WHEELBUILD_CACHE_DIR": str(tmp_path)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    assert "calibrated on CUDA 13.1 from 1 sampled unit" in plan.stdout
    assert poll_until(lambda: compiler_processes() == [], timeout_s=30), compiler_processes()


@pytest.mark.hours
def test_calibrate_sample_two_on_both_archs(cuda_image: str, tmp_path: Path) -> None:
    done = _calibrate(tmp_path, "--sample", "2", "--archs", "100,120", "--threads", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = read_measurements((tmp_path / "profiles" / "flash-attn-2.8.3-cuda13.1.measured.tsv").read_text())
    assert {r.unit.rsplit("/", 1)[-1].split("_hdim")[0] for r in rows} == {"flash_fwd", "flash_bwd"}
    print(done.stdout)
