"""The nightly workflow file passes validation: GitHub's workflow schema (check-jsonschema's
vendored copy) and zizmor's offline audits (pinned actions, no persisted credentials, no
template injection). Both run as real tools on the real file."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML  # a dependency of check-jsonschema

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "nightly.yml"
TESTS_WORKFLOW = REPO / ".github" / "workflows" / "tests-nightly.yml"
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("workflow", [WORKFLOW, TESTS_WORKFLOW], ids=lambda p: p.name)
def test_workflow_matches_githubs_schema(workflow: Path) -> None:
    done = subprocess.run(
        [BIN / "check-jsonschema", "--builtin-schema", "vendor.github-workflows", workflow],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("workflow", [WORKFLOW, TESTS_WORKFLOW], ids=lambda p: p.name)
def test_workflow_passes_zizmors_audits(workflow: Path) -> None:
    done = subprocess.run(
        [BIN / "zizmor", "--offline", "--no-progress", workflow], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_nightly_tests_run_what_ci_leaves_out_with_cis_setup_command() -> None:
    """The tests workflow runs the README's test command (what .ci/run execs), selecting exactly
    the markers pyproject's addopts leaves out of CI, on a schedule and by hand."""
    loaded = YAML(typ="safe").load(TESTS_WORKFLOW.read_text())
    triggers = loaded.get("on") or loaded.get(True)  # YAML 1.1 reads a bare `on` as True
    assert set(triggers) == {"schedule", "workflow_dispatch"}
    runs = [step["run"] for job in loaded["jobs"].values() for step in job["steps"] if "run" in step]
    assert runs[0] == 'scripts/test -m "hours or slow"'
    assert "exec scripts/test" in (REPO / ".ci" / "run").read_text()
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-m 'not hours and not slow'" in pyproject["addopts"]
    declared = {marker.split(":")[0] for marker in pyproject["markers"]}
    assert {"hours", "slow"} <= declared


# The setup step of every job: wheelbuild in a venv of the checkout, nothing else (no test
# extras, no test base, no browser); build jobs use their runner's Docker engine.
SETUP_STEP = "python3 -m venv .venv && .venv/bin/pip install -q -e ."
# The publish job signs keyless with Sigstore, so it installs that extra as well.
SETUP_STEPS = {
    "schedule": SETUP_STEP,
    "build": SETUP_STEP,
    "publish": "python3 -m venv .venv && .venv/bin/pip install -q -e '.[sigstore]'",
}
ONE_COMMAND = re.compile(
    r'^\.venv/bin/wheelbuild nightly [\w-]+(?: [^;&|`$<>()\\]*| "\$CELL_ID"| "out/\$CELL_ID")*(?: >> "\$GITHUB_OUTPUT")?$'
)


def _jobs() -> dict[str, Any]:
    return dict(YAML(typ="safe").load(WORKFLOW.read_text())["jobs"])


def _runs(job: dict[str, Any]) -> list[str]:
    return [step["run"].strip() for step in job["steps"] if "run" in step]


def test_every_run_step_is_one_wheelbuild_command_or_the_setup_step() -> None:
    for name, job in _jobs().items():
        for run in _runs(job):
            assert run == SETUP_STEPS[name] or ONE_COMMAND.fullmatch(run), (name, run)
            assert "eval" not in run and "\n" not in run, (name, run)
        for step in job["steps"]:
            assert "run" in step or step["uses"].split("@")[0] in (
                "actions/checkout", "actions/upload-artifact", "actions/download-artifact",
            ), step  # fmt: skip
    commands = {
        name: [r.split()[2] for r in _runs(job) if r != SETUP_STEPS[name]] for name, job in _jobs().items()
    }
    assert commands == {"schedule": ["schedule"], "build": ["build-cell"], "publish": ["publish-night"]}


def test_every_job_installs_wheelbuild_alone_and_the_build_job_makes_no_test_base() -> None:
    """scripts/setup makes the debootstrap test base and, for tests, installs a browser and
    compilers: a build runner needs none of it, and builds on the production base."""
    for name, job in _jobs().items():
        runs = _runs(job)
        assert [r for r in runs if not r.startswith(".venv/bin/wheelbuild ")] == [SETUP_STEPS[name]], name
        assert runs.index(SETUP_STEPS[name]) == 0, name  # before any wheelbuild command
    assert "scripts/" not in _code(WORKFLOW.read_text())  # no scripts/setup, make-base-image


def test_the_plan_job_needs_no_root_no_docker_and_no_secret() -> None:
    jobs = _jobs()
    for name in ("schedule", "publish"):  # scripts/setup installs Docker as root: only builds need it
        assert "docker" not in jobs[name]["runs-on"] and "scripts/setup >/dev/null" not in _runs(jobs[name])
    assert "secrets." not in json.dumps(jobs["schedule"])
    assert jobs["build"]["strategy"]["matrix"] == "${{ fromJSON(needs.schedule.outputs.cells) }}"
    assert (
        jobs["build"]["if"] == "${{ needs.schedule.outputs.count != '0' }}"
    )  # an empty night builds nothing


def test_secrets_live_only_in_the_steps_that_need_them() -> None:
    document = YAML(typ="safe").load(WORKFLOW.read_text())
    assert "env" not in document  # nothing at workflow level
    for name, job in document["jobs"].items():
        assert "env" not in job, name
        for step in job["steps"]:
            text = json.dumps({k: v for k, v in step.items() if k != "env"})
            assert "secrets." not in text, (name, step)
            found = sorted(
                v.split("secrets.")[1].rstrip(" }") for v in step.get("env", {}).values() if "secrets." in v
            )
            if found:
                assert (name, found) in (
                    ("build", ["SCCACHE_AWS_ACCESS_KEY_ID", "SCCACHE_AWS_SECRET_ACCESS_KEY"]),
                    ("publish", ["WHEELS_UPLOAD_PASSWORD", "WHEELS_UPLOAD_USER"]),
                ), (name, found)
                assert "run" in step, "a secret never reaches a third-party action"


def test_only_a_passed_cells_wheels_are_uploaded() -> None:
    steps = _jobs()["build"]["steps"]
    assert "always()" not in WORKFLOW.read_text()
    uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
    wheels = [s for s in uploads if ".whl" in s["with"]["path"]]
    assert len(wheels) == 1 and "if" not in wheels[0]  # runs only after build-cell succeeded
    failed = [s for s in uploads if s not in wheels]
    assert len(failed) == 1 and failed[0]["if"] == "${{ failure() }}"
    assert steps.index(wheels[0]) > next(i for i, s in enumerate(steps) if "build-cell" in s.get("run", ""))


def test_the_workflow_and_scripts_nightly_cannot_reach_the_test_base() -> None:
    script = (REPO / "scripts" / "nightly").read_text()
    for text in (WORKFLOW.read_text(), script):
        for word in (
            "WHEELBUILD_BASE_IMAGE",
            "WHEELBUILD_NIGHTLY_BASE_IMAGE",
            "--base-image",
            "eval",
            "CUDA12_IMAGE",
        ):
            assert word not in _code(text), word
    assert "scripts/setup >/dev/null" in _code(script)


def _code(text: str) -> str:
    """Shell or YAML without its comments."""
    return "\n".join(line.split(" #")[0] for line in text.splitlines() if not line.lstrip().startswith("#"))


def test_scripts_nightly_runs_plan_build_cell_and_publish_night_and_takes_nothing_from_setup(
    tmp_path: Path,
) -> None:
    """scripts/nightly with a stand-in scripts/setup (it prints the test base's export, as the
    real one does) and a stand-in wheelbuild that records what it was run with."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "nightly", tmp_path / "scripts" / "nightly")
    setup = tmp_path / "scripts" / "setup"
    setup.write_text("#!/bin/sh\necho 'export WHEELBUILD_BASE_IMAGE=wheelbuild-base:test'\n")
    log = tmp_path / "calls.jsonl"
    fake = tmp_path / ".venv" / "bin" / "wheelbuild"
    fake.parent.mkdir(parents=True)
    fake.write_text(
        f"""#!{sys.executable}
import json, os, sys
with open({str(log)!r}, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "base": os.environ.get("WHEELBUILD_BASE_IMAGE"),
                        "test_base": os.environ.get("WHEELBUILD_NIGHTLY_BASE_IMAGE")}}) + "\\n")
if sys.argv[2] == "schedule":
    print('a-cu130-cp311 ["a", "--python", "cp311"]')
    print('b$(touch${{IFS}}pwned)-cu130-cp313 ["b"]')
if sys.argv[2] == "build-cell" and sys.argv[3].startswith("a"):
    sys.exit(40)  # a failed cell: the next one still builds, then publish-night runs
"""
    )
    for path in (setup, fake, tmp_path / "scripts" / "nightly"):
        path.chmod(0o755)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("WHEELBUILD_BASE_IMAGE", "WHEELBUILD_NIGHTLY_BASE_IMAGE")
    }
    done = subprocess.run(
        [tmp_path / "scripts" / "nightly", "cfg.toml", "out"], cwd=tmp_path, env=env,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["argv"][:3] for c in calls] == [
        ["nightly", "schedule", "--config-file"],
        ["nightly", "build-cell", "a-cu130-cp311"],
        ["nightly", "build-cell", "b$(touch${IFS}pwned)-cu130-cp313"],
        ["nightly", "publish-night", calls[-1]["argv"][2]],
    ]
    assert all(c["base"] is None and c["test_base"] is None for c in calls)
    assert not (tmp_path / "pwned").exists()
    assert "nightly: a-cu130-cp311 failed (exit 40)" in done.stderr


def test_only_the_publish_job_holds_an_oidc_identity_and_it_signs_keyless() -> None:
    """id-token: write lets a job's steps ask GitHub for a token naming the workflow: only the job
    that signs the statements with Sigstore gets it, and that job passes --sigstore."""
    jobs = _jobs()
    assert jobs["publish"]["permissions"] == {"contents": "read", "id-token": "write"}
    assert [name for name, job in jobs.items() if "id-token" in json.dumps(job.get("permissions", {}))] == [
        "publish"
    ]
    assert "id-token" not in json.dumps(YAML(typ="safe").load(WORKFLOW.read_text())["permissions"])
    assert _runs(jobs["publish"])[-1].endswith("publish-night artifacts --sigstore")
