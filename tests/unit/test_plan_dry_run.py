"""`wheelbuild plan` is the dry run of `wheelbuild build` (issue 30, item 2): it refuses what
build refuses before its first container, with build's exit code (both resolve the request in resolve.py); its
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

RunCli = Callable[..., subprocess.CompletedProcess[str]]


def test_control_what_build_takes_plan_plans(run_cli: RunCli) -> None:
    built = run_cli("build", "wbdemo", "--memory", "6g")
    assert built.returncode == 20, built.stderr  # past every check: it needed Docker
    planned = run_cli("plan", "wbdemo", "--memory", "6g")
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.startswith("plan for wbdemo")


# --- the summary is the plan that runs, and every number of it is said -------------------------


# --- a peak over the limit: a warning, and with --strict an error -----------------------------
