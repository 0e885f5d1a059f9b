"""The CLI's plan of the real flash-attn 2.8.3 sdist (downloaded once per machine from PyPI, then
cached: tests/sdists.py), run for real with Docker unreachable."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable

import pytest


def _planned(run_cli: Callable[..., subprocess.CompletedProcess[str]], *args: str) -> dict[str, str]:
    result = run_cli("plan", *args)
    assert result.returncode == 0, result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        key, _, value = line.strip().partition("  ")
        if key in {"MAX_JOBS", "NVCC_THREADS", "memory limit", "predicted peak"}:
            rows[key] = value.strip()
    return rows


def _gib(text: str) -> float:
    number, unit = text.split()[:2]
    return float(number) * {"GiB": 1.0, "MiB": 1 / 1024}[unit]


@pytest.mark.network  # flash-attn's sdist, from PyPI once per machine (tests/sdists.py)
@pytest.mark.usefixtures("flash_attn_sdist")
def test_plan_prints_a_plan_that_fits_its_budget(
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    rows = _planned(run_cli, "flash-attn", "--memory", "64g", "--cpus", "128", "--archs", "100,120")
    assert rows["memory limit"] == "64.0 GiB"
    assert int(rows["MAX_JOBS"]) >= 1
    assert 1 <= int(rows["NVCC_THREADS"]) <= 2
    assert _gib(rows["predicted peak"]) <= 64.0


@pytest.mark.network  # flash-attn's sdist, from PyPI once per machine (tests/sdists.py)
@pytest.mark.usefixtures("flash_attn_sdist")
def test_plan_with_dist_shows_the_distributed_plan_and_its_bound(
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    local = _planned(run_cli, "flash-attn", "--memory", "20g", "--cpus", "2")
    dist = _planned(
        run_cli, "flash-attn", "--memory", "20g", "--cpus", "2",
        "--dist", "http://scheduler:10600", "--dist-servers", "2x16x64g",
    )  # fmt: skip
    assert int(dist["MAX_JOBS"]) > int(local["MAX_JOBS"]) and dist["NVCC_THREADS"] == "1"
    assert _gib(dist["predicted peak"]) <= 20.0
    shown = run_cli(
        "plan", "flash-attn", "--memory", "20g", "--cpus", "2", "--dist", "http://scheduler:10600", "-v"
    )
    assert "--dist: MAX_JOBS=" in shown.stdout and "bound:" in shown.stdout and "assumed" in shown.stdout
    refused = run_cli("plan", "flash-attn", "--dist-servers", "2x16x64g")
    assert refused.returncode != 0 and "need --dist" in refused.stderr


@pytest.mark.network  # flash-attn's sdist, from PyPI once per machine (tests/sdists.py)
@pytest.mark.usefixtures("flash_attn_sdist")
def test_plan_never_gives_fewer_jobs_for_more_memory(
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    static = ("flash-attn", "--no-admission", "--cpus", "128", "--archs", "100,120")
    jobs = [
        int(_planned(run_cli, *static, "--memory", f"{gib}g")["MAX_JOBS"])
        for gib in (8, 16, 32, 64, 128, 400)
    ]
    assert jobs == sorted(jobs)
    assert jobs[0] >= 1 and jobs[-1] > jobs[0]


@pytest.mark.network  # flash-attn's sdist, from PyPI once per machine (tests/sdists.py)
@pytest.mark.usefixtures("flash_attn_sdist")
def test_plan_shows_the_plan_a_build_runs_admitted_by_default(
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    args = ("plan", "flash-attn", "--memory", "400g", "--cpus", "128", "--archs", "100,120", "-v")
    admitted, static = run_cli(*args), run_cli(*args, "--no-admission")
    assert admitted.returncode == 0 and static.returncode == 0, admitted.stderr + static.stderr
    assert "admission: ninja launches up to MAX_JOBS=" in admitted.stdout
    assert "NVCC_THREADS=2 behind admission" in admitted.stdout
    assert "admission:" not in static.stdout and "NVCC_THREADS    1" in static.stdout


@pytest.mark.network  # flash-attn's sdist, from PyPI once per machine (tests/sdists.py)
@pytest.mark.usefixtures("flash_attn_sdist")
def test_plan_takes_cicc_admission_unless_told_not_to(
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    args = ("plan", "flash-attn", "--memory", "64g", "--cpus", "64", "--archs", "100,120", "-v")
    gated, whole = run_cli(*args), run_cli(*args, "--no-cicc-admission")
    assert gated.returncode == 0 and whole.returncode == 0, gated.stderr + whole.stderr
    assert "(cicc admission;" in gated.stdout and "each cicc once its own predicted peak" in gated.stdout
    assert "(--no-cicc-admission)" in whole.stdout and "each cicc" not in whole.stdout
    # The options table says where the choice came from.
    assert re.search(r"cicc-admission\s+true\s+\(default\)", gated.stdout), gated.stdout
    assert re.search(r"cicc-admission\s+false\s+from --cicc-admission", whole.stdout), whole.stdout
    # Its old name, from when it was called the cicc gate, still turns it off.
    old = run_cli(*args, "--no-cicc-gate")
    assert old.returncode == 0 and old.stdout == whole.stdout, old.stderr


@pytest.mark.network  # flash-attn's sdist, from PyPI once per machine (tests/sdists.py)
@pytest.mark.usefixtures("flash_attn_sdist")
def test_plan_with_one_arch_never_uses_two_nvcc_threads(
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    rows = _planned(run_cli, "flash-attn", "--memory", "400g", "--cpus", "16", "--archs", "120")
    assert rows["NVCC_THREADS"] == "1"


@pytest.mark.network  # flash-attn's sdist, from PyPI once per machine (tests/sdists.py)
@pytest.mark.usefixtures("flash_attn_sdist")
def test_plan_reads_this_machine_when_no_resources_are_given(
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    result = run_cli("plan", "--example", "-v")
    assert result.returncode == 0, result.stderr
    assert "host available" in result.stdout and "kept for the host" in result.stdout
