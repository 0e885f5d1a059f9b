"""scripts/nightly: the workflow's commands on one machine. A 2-cell matrix (the fixture for two
Pythons), built cell by cell, published into one index, which pip then resolves both from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.indexkit import check_tree
from tests.integration.conftest import REPO, TORCH_INDEX
from tests.integration.serving import clean_env, read_log, run_ok, running_server


def test_nightly_builds_a_two_cell_matrix_and_publishes_both_into_one_index(
    cuda_image: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "WHEELBUILD_TORCH_INDEX_URL": TORCH_INDEX,
        "NIGHTLY_PUBLISH_TO": str(tmp_path / "wheelhouse" / "{variant}"),
    }
    done = subprocess.run(
        [REPO / "scripts" / "nightly", REPO / "tests" / "fixtures" / "nightly.toml", tmp_path / "out"],
        env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "nightly: [1/2] wbdemo-cu130-cp311-100.120" in done.stderr
    assert "nightly: [2/2] wbdemo-cu130-cp313-100.120" in done.stderr

    tree = tmp_path / "wheelhouse" / "cu130"
    (names,) = check_tree(tree).values()  # one project, every page valid
    assert sorted(n.split("-")[2] for n in names) == ["cp311", "cp313"]

    # pip finds each by name from the one index (a wheel per Python; no install, no torch).
    log = tmp_path / "access.log"
    with running_server(tree, access_log=log) as url:
        for python in ("3.11", "3.13"):
            run_ok(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                 "--python-version", python, "-d", str(tmp_path / "got"), "--index-url", url,
                 "wbdemo==0.1.0+cu130torch2.11"],
                clean_env(tmp_path), tmp_path,
            )  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "got").iterdir()) == sorted(names)
    assert len(read_log(log)) >= 4

    # The next night, nothing changed: no cell is left to build. A new cell (other archs) is.
    wider = tmp_path / "wider.toml"
    wider.write_text(
        (REPO / "tests" / "fixtures" / "nightly.toml")
        .read_text()
        .replace('archs = ["100,120"]', 'archs = ["100,120", "100"]')
    )
    for config, left in (
        (REPO / "tests" / "fixtures" / "nightly.toml", []),
        (wider, ["cp311-100", "cp313-100"]),
    ):
        again = subprocess.run(
            [Path(sys.executable).parent / "wheelbuild", "matrix", "--config", config, "--format", "lines",
             "--skip-published", tree],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert [line.split()[0].split("-", 2)[2] for line in again.stdout.splitlines()] == left, again.stdout
        assert f"2 of {2 + len(left)} cell(s) already published" in again.stderr


@pytest.mark.parametrize("config", ["wheelbuild.toml", "tests/fixtures/nightly.toml"])
def test_matrix_prints_the_cells_the_workflow_runs(config: str) -> None:
    done = subprocess.run(
        [Path(sys.executable).parent / "wheelbuild", "matrix", "--config", REPO / config, "--format", "lines"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert all(line.split()[1] in ("flash-attn", "wbdemo") for line in done.stdout.splitlines())
