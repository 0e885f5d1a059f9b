"""`wheelbuild plan` is the dry run of `wheelbuild build` (issue 30, item 2): it refuses what
build refuses before its first container, with build's exit code (both run prebuild.py); its
summary is the plan that runs, each number of which a "why" line states; the static and the
admission plan are labelled; and a predicted peak over the limit is a warning, or with --strict
an error (exit 28).

Build runs with Docker unreachable (run_cli's DOCKER_HOST), so a valid build stops at exit 20:
any other code is a check of its own that came before Docker. torch's pages come from run_cli's
cache (FAKE_TORCH); a release lookup goes to a local PEP 691 index; no test reaches the network,
except tests/sdists.py's one download of flash-attn's sdist per machine.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

RunCli = Callable[..., subprocess.CompletedProcess[str]]


def test_control_what_build_takes_plan_plans(run_cli: RunCli) -> None:
    built = run_cli("build", "wbdemo", "--memory", "6g")
    assert built.returncode == 20, built.stderr  # past every check: it needed Docker
    planned = run_cli("plan", "wbdemo", "--memory", "6g")
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.startswith("plan for wbdemo")


# --- the summary is the plan that runs, and every number of it is said -------------------------


def _sections(stdout: str) -> tuple[dict[str, str], list[list[str]]]:
    """The summary's rows, and the why lines of each labelled part, in order."""
    rows: dict[str, str] = {}
    parts: list[list[str]] = []
    for line in stdout.splitlines():
        if line.startswith("why"):
            parts.append([line])
        elif parts and line.startswith("  - "):
            parts[-1].append(line[4:])
        elif not parts and line.startswith("  "):
            key, _, value = line.strip().partition("  ")
            rows[key] = value.strip()
        elif parts and not line.startswith("  "):
            break
    return rows, parts


@pytest.mark.usefixtures("flash_attn_sdist")
@pytest.mark.parametrize(
    ("resources", "runs"),
    [
        (("--memory", "64g", "--cpus", "128"), "the admission plan"),
        (("--memory", "432g", "--cpus", "128"), "the admission plan"),
        (("--memory", "8g", "--cpus", "2"), "the admission plan"),
        (("--memory", "24g", "--cpus", "16", "--no-admission"), "the static plan"),
        (("--memory", "20g", "--cpus", "2", "--dist", "http://scheduler:10600"), "the --dist plan"),
        (("--memory", "64g", "--cpus", "32", "--nvcc-threads", "1"), "the admission plan"),
    ],
    ids=["64g-128cpus", "432g-128cpus", "8g-2cpus", "static", "dist", "threads-given"],
)
def test_every_number_of_the_summary_is_said_in_a_why_line_of_the_plan_that_runs(
    run_cli: RunCli, resources: tuple[str, ...], runs: str
) -> None:
    result = run_cli("plan", "flash-attn", *resources)
    assert result.returncode == 0, result.stderr
    rows, parts = _sections(result.stdout)
    assert rows["runs"] == runs
    if runs == "the static plan":
        assert [p[0] for p in parts] == ["why (the static plan: MAX_JOBS alone bounds memory):"]
    else:
        governor = runs.removeprefix("the ").removesuffix(" plan")
        assert parts[0][0].startswith("why, 1 of 2 (the static plan: MAX_JOBS alone bounds memory")
        assert parts[1][0] == f"why, 2 of 2 (the {governor} plan: what runs, the summary above):"
    why = [line for part in parts for line in part[1:]]
    governing = parts[-1][1:]
    peak = " ".join(rows["predicted peak"].split()[:2])
    seconds = rows["predicted time"].split()[0]
    said = {
        "memory limit": (f"memory limit {rows['memory limit']}", why),
        "CPUs": (f"CPUs {rows['CPUs']}:", why),
        "MAX_JOBS": (f"MAX_JOBS={rows['MAX_JOBS']}", governing),
        "NVCC_THREADS": (f"NVCC_THREADS={rows['NVCC_THREADS']}", why),
        "predicted peak": (f"predicted peak {peak}", governing),
        "predicted time": (f"{seconds} s", governing),
    }
    for row, (text, lines) in said.items():
        assert any(text in line for line in lines), f"{row} {rows[row]}: no why line says {text!r}"
    assert any(
        f"predicted build: {seconds} s" in line or f"{seconds} s with the servers" in line
        for line in governing
    )


# --- a peak over the limit: a warning, and with --strict an error -----------------------------
