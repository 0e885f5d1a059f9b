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

import json
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


# --- the wheels it would make, and the whole dry run as JSON ---------------------------------------


def test_plan_lists_the_wheels_a_build_would_make_one_line_each(run_cli: RunCli) -> None:
    planned = run_cli("plan", "wbdemo", "--python", "3.11,3.13", "--archs", "100,120")
    assert planned.returncode == 0, planned.stderr
    lines = planned.stdout.splitlines()
    start = lines.index("wheels (2; Pythons as named):")
    torch = next(line for line in lines if line.startswith("torch: ")).split()[2].removesuffix(":")
    minor = ".".join(torch.split(".")[:2])
    # wbdemo's version is its setup.py's to say (an environment variable's default): '?' until built.
    assert lines[start + 1 : start + 3] == [
        f"  wbdemo ?+cu130torch{minor}  cp311  torch {torch}+cu130  sm_100 sm_120",
        f"  wbdemo ?+cu130torch{minor}  cp313  torch {torch}+cu130  sm_100 sm_120",
    ]


def test_plan_json_is_one_object_holding_what_plan_prints(run_cli: RunCli) -> None:
    planned = run_cli("plan", "wbdemo", "--python", "3.11", "--archs", "120", "--memory", "6g", "--json")
    assert planned.returncode == 0, planned.stderr
    document = json.loads(planned.stdout)  # the whole of stdout: one object, nothing else
    assert document["schema"] == 1
    assert document["package"]["name"] == "wbdemo" and document["package"]["version"] is None  # setup.py's
    assert document["torch"]["variant"].endswith("+cu130") and document["toolkit"]["cuda"] == "13.1"
    assert document["archs"] == [120] and document["pythons"] == {"tags": ["cp311"], "from": "as named"}
    (wheel,) = document["wheels"]
    assert wheel["python"] == "cp311" and wheel["archs"] == [120] and wheel["project"] == "wbdemo"
    assert document["plan"]["memory"] == 6 * 1024**3 and document["plan"]["max_jobs"] >= 1
    options = {o["key"]: o for o in document["options"]}
    assert options["memory"] == {"key": "memory", "value": "6g", "from": "--memory"}
    assert options["gate"]["from"] == ""  # the default
