"""The nightly workflow file passes validation: GitHub's workflow schema (check-jsonschema's
vendored copy) and zizmor's offline audits (pinned actions, no persisted credentials, no
template injection). Both run as real tools on the real file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ruamel.yaml import YAML  # a dependency of check-jsonschema

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "nightly.yml"
BIN = Path(sys.executable).parent


def test_workflow_matches_githubs_schema() -> None:
    done = subprocess.run(
        [BIN / "check-jsonschema", "--builtin-schema", "vendor.github-workflows", WORKFLOW],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_workflow_passes_zizmors_audits() -> None:
    done = subprocess.run(
        [BIN / "zizmor", "--offline", "--no-progress", WORKFLOW], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_workflow_builds_the_cells_wheelbuild_matrix_prints_and_publishes_once() -> None:
    jobs = YAML(typ="safe").load(WORKFLOW.read_text())["jobs"]
    assert "wheelbuild matrix --format github" in jobs["matrix"]["steps"][-1]["run"]
    assert jobs["build"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.cells) }}"
    assert "wheelbuild build $CELL_ARGS" in jobs["build"]["steps"][1]["run"]
    assert jobs["publish"]["needs"] == "build"
    assert "wheelbuild publish" in jobs["publish"]["steps"][-1]["run"]
