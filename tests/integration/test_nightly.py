"""scripts/nightly: the workflow's three commands on one machine. The fixture's matrix (wbdemo for
the default Pythons: the test base has 3.11 and 3.13, so 2 cells), each cell built and gated,
published into one tree that `wheelbuild serve` serves and pip resolves both wheels from; the
next night plans 0 cells, read from the tree and from the served index over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.indexkit import check_tree
from tests.integration.conftest import REPO, TORCH_INDEX, newest_cu130
from tests.serving import clean_env, read_log, request, run_ok, running_server

FIXTURE = REPO / "tests" / "fixtures" / "nightly.toml"
WHEELBUILD = Path(sys.executable).parent / "wheelbuild"


def _plan(config: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [WHEELBUILD, "nightly", "plan", "--config-file", config, "--format", "lines"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def test_nightly_builds_the_fixture_publishes_both_cells_and_a_second_night_builds_nothing(
    cuda_image: str, base_image: str, tmp_path: Path
) -> None:
    summary = tmp_path / "summary.md"
    env = {
        **os.environ,
        "WHEELBUILD_TORCH_INDEX_URL": TORCH_INDEX,
        "NIGHTLY_PUBLISH_TO": str(tmp_path / "wheelhouse" / "{variant}"),
        # The test base, named by the nightly's own variable: WHEELBUILD_BASE_IMAGE alone is ignored.
        "WHEELBUILD_NIGHTLY_BASE_IMAGE": base_image,
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    done = subprocess.run(
        [REPO / "scripts" / "nightly", FIXTURE, tmp_path / "out"],
        env=env, capture_output=True, text=True, timeout=2400, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    torch = newest_cu130()  # the fixture's cu130 is the index's newest CUDA 13.0 release tonight
    assert f"nightly: [1/2] wbdemo-{torch.version}-cu130-cp311-100.120" in done.stderr
    assert f"nightly: [2/2] wbdemo-{torch.version}-cu130-cp313-100.120" in done.stderr

    tree = tmp_path / "wheelhouse" / "cu130"
    (names,) = check_tree(tree).values()  # one project, every page valid
    assert sorted(n.split("-")[2] for n in names) == ["cp311", "cp313"]
    # Built on the base named, every wheel gated: each cell's report says so.
    (night,) = (tmp_path / "out").iterdir()
    for cell in (
        f"wbdemo-{torch.version}-cu130-cp311-100.120",
        f"wbdemo-{torch.version}-cu130-cp313-100.120",
    ):
        record = json.loads((night / "cells" / cell / "cell.json").read_text())
        assert record["status"] == "passed"
        report = json.loads((night / "cells" / cell / record["run"] / "build-report.json").read_text())
        assert report["gate"] and all(g["passed"] for g in report["gate"])
        assert report["image"]["labels"]["org.opencontainers.image.base.name"] == base_image
    assert "## wheelbuild nightly: 2 published, 0 failed, 0 skipped" in summary.read_text()

    # pip finds each by name from the served tree (a wheel per Python; no install, no torch);
    # the coverage page and each wheel's inputs key are served too.
    log = tmp_path / "access.log"
    with running_server(tree, access_log=log) as url:
        for python in ("3.11", "3.13"):
            run_ok(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                 "--python-version", python, "-d", str(tmp_path / "got"), "--index-url", url,
                 f"wbdemo==0.1.0+{torch.label}"],
                clean_env(tmp_path), tmp_path,
            )  # fmt: skip
        page = request(url, "/coverage.html")
        assert page.status == 200 and f"wbdemo-{torch.version}-cu130-cp311-100.120".encode() in page.body

        # The next night, nothing changed: no cell is left to build, whether the tree is read
        # directly or, for a remote target, its index over HTTP.
        again = _plan(FIXTURE, env)
        assert again.stdout == "" and "0 cell(s) to build, 2 already published" in again.stderr
        remote = {**env, "NIGHTLY_PUBLISH_TO": "ci@wheels.example:/srv/{variant}", "NIGHTLY_INDEX_URL": url}
        again = _plan(FIXTURE, {**remote, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})
        assert again.stdout == "" and "0 cell(s) to build, 2 already published" in again.stderr
    assert sorted(p.name for p in (tmp_path / "got").iterdir()) == sorted(names)
    assert len(read_log(log)) >= 4

    # A new cell (other archs) is planned; the published ones are not.
    wider = tmp_path / "wider.toml"
    wider.write_text(FIXTURE.read_text().replace('archs = ["100,120"]', 'archs = ["100,120", "100"]'))
    left = _plan(wider, env)
    assert [line.split()[0] for line in left.stdout.splitlines()] == [
        f"wbdemo-{torch.version}-cu130-cp311-100",
        f"wbdemo-{torch.version}-cu130-cp313-100",
    ]
