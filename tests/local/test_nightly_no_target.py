"""`wheelbuild nightly schedule` with no publish target: it stops before any work (no Docker)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.runkit import REPO

WHEELBUILD = Path(sys.executable).parent / "wheelbuild"


def test_nightly_plan_without_a_target_stops_before_any_work(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NIGHTLY_PUBLISH_TO"}
    done = subprocess.run(
        [WHEELBUILD, "nightly", "schedule", "--config-file", REPO / "wheelbuild.toml"],
        env=env, capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 16, done.stderr
    assert "no publish target" in done.stderr and not (tmp_path / "wheelhouse").exists()
