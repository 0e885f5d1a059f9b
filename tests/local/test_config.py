"""A checkout's committed wheelbuild.toml, read through git, sets nothing a build reads."""

from __future__ import annotations

import subprocess
from pathlib import Path

from wheelbuild.spec.config import FileConfig, load_config

from tests.unit.test_config import _write


def test_no_file_and_a_file_without_the_table_set_nothing(tmp_path: Path) -> None:
    assert load_config(None, None, cwd=tmp_path) == FileConfig()
    # The repository's file as committed: a checkout's copy may carry scripts/example's table.
    repo = Path(__file__).resolve().parents[2]
    committed = subprocess.run(
        ["git", "-C", repo, "show", "HEAD:wheelbuild.toml"], capture_output=True, text=True, check=False
    )
    nightly = _write(
        tmp_path / "nightly" / "wheelbuild.toml",
        committed.stdout if committed.returncode == 0 else (repo / "wheelbuild.toml").read_text(),
    )
    assert (
        load_config(None, None, cwd=nightly.parent).values == {}
    )  # the nightly's [[build]] and [publish] only
