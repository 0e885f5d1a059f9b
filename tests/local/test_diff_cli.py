"""`wheelbuild diff` through the installed command: two builds of one release with other local
labels (+cu130torch2.13, +cu130torch2.14) have their .dist-info folders paired and what differs
inside listed (METADATA's Version and Requires-Dist, RECORD's entries), not every file reported
as only in one wheel; diffoscope is named as there only when it is on PATH, else how to get it."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.indexkit import make_wheel

Run = Callable[..., subprocess.CompletedProcess[str]]


def _labelled(folder: Path, torch: str) -> Path:
    return make_wheel(
        folder / torch, version=f"0.1.0+cu130torch{torch}", requires_dist=(f"torch=={torch}.*",)
    )


def test_two_labels_of_one_release_have_their_dist_info_paired(run_cli: Run, tmp_path: Path) -> None:
    """It used to say only "wbtiny-0.1.0+cu130torch2.13.dist-info/METADATA: only in ..."."""
    first, second = _labelled(tmp_path, "2.13"), _labelled(tmp_path, "2.14")
    done = run_cli("diff", str(first), str(second))
    assert done.returncode == 70, done.stderr
    assert done.stdout.splitlines() == [
        "wbtiny-0.1.0+cu130torch2.13.dist-info and wbtiny-0.1.0+cu130torch2.14.dist-info paired; inside them:",
        "    METADATA: Version 0.1.0+cu130torch2.13 and 0.1.0+cu130torch2.14",
        "    METADATA: Requires-Dist torch==2.13.* and torch==2.14.*",
        "    RECORD: the entries of METADATA, wbtiny/__init__.py differ",  # its module holds VERSION
    ]
    cause = done.stderr.splitlines()[0]
    assert "only in" not in cause
    assert (
        cause
        == f"error: {first.name} and {second.name} differ: wbtiny/__init__.py: 46 and 46 bytes, first differing at byte 30"
    )


def test_the_same_release_rebuilt_pairs_nothing(run_cli: Run, tmp_path: Path) -> None:
    first = make_wheel(tmp_path / "a", version="0.1.0+cu130torch2.13")
    second = make_wheel(tmp_path / "b", version="0.1.0+cu130torch2.13", payload="other")
    done = run_cli("diff", str(first), str(second))
    assert done.returncode == 70, done.stderr
    assert done.stdout == ""  # one dist-info folder name: nothing to pair
    assert "differ: wbtiny/__init__.py" in done.stderr


@pytest.mark.parametrize("installed", [False, True], ids=["not-on-path", "on-path"])
def test_diffoscope_is_offered_as_installed_only_when_it_is_on_path(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: bool
) -> None:
    """A stand-in diffoscope on PATH: wheelbuild only looks it up, never runs it."""
    tools = tmp_path / "tools"
    tools.mkdir()
    if installed:
        stand_in = tools / "diffoscope"
        stand_in.write_text("#!/bin/sh\nexit 0\n")
        stand_in.chmod(0o755)
    path = [
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "diffoscope").exists()
    ]
    monkeypatch.setenv("PATH", os.pathsep.join([str(tools), *path]))
    assert (shutil.which("diffoscope") is not None) == installed
    first, second = _labelled(tmp_path, "2.13"), _labelled(tmp_path, "2.14")
    done = run_cli("diff", str(first), str(second))
    remedy = done.stderr.splitlines()[-1]
    assert remedy.startswith(f"remedy: diffoscope {first} {second} shows every difference")
    assert remedy.endswith("(not installed here: pip install diffoscope)") != installed
