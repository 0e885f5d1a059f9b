"""What a real build prints while a step stays silent: a status line at least every 15 s naming
the Python and the step, judged by the timestamps the output itself carries (never by the test's
own clock); cibuildwheel's log only with -v; and one sha256 per wheel, the stamped wheel's."""

from __future__ import annotations

import hashlib
import itertools
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from wheelbuild.progress.console import STATUS_EVERY_S

from tests.integration.conftest import REPO, TORCH_INDEX, wheelbuild
from tests.runkit import Completed

SILENT_S = 40  # the build step prints nothing this long: what a long cicc looks like from outside
# "==> 1:02 step" and "--- 1:16 status": every line that carries the time it was printed.
TIMED = re.compile(r"^(?:==>|---) (?:(\d+):)?(\d+):(\d\d) (.*)$")


def _timed(stdout: str) -> list[tuple[int, str]]:
    found = []
    for line in stdout.splitlines():
        if matched := TIMED.match(line):
            hours, minutes, seconds, rest = matched.groups()
            found.append((int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds), rest))
    return found


@pytest.fixture(scope="module")
def silent_builds(
    cuda_image: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[bool, tuple[Completed, Path]]:
    """The two builds, without and with -v, run at the same time (most of each is the silent
    step's sleep): {verbose: (what the build printed, its output folder)}."""
    project = tmp_path_factory.mktemp("silent") / "silent"
    shutil.copytree(REPO / "tests" / "fixtures" / "wbdemo", project)
    setup = project / "setup.py"
    setup.write_text(f"import time\n\ntime.sleep({SILENT_S})\n" + setup.read_text())

    def build(verbose: bool) -> tuple[Completed, Path]:
        out = tmp_path_factory.mktemp("verbose" if verbose else "default")
        result = wheelbuild(
            "build", str(project), "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--archs", "120",
            "--python", "3.11", "--memory", "4g", "--output-dir", str(out), "--rebuild",
            *(["-v"] if verbose else []),
        )  # fmt: skip
        return result, out

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip((False, True), pool.map(build, (False, True)), strict=True))


@pytest.mark.parametrize("verbose", [False, True], ids=["default", "verbose"])
def test_a_build_step_silent_for_40_s_still_gets_a_status_line_every_15_s_and_one_sha256(
    verbose: bool, silent_builds: dict[bool, tuple[Completed, Path]]
) -> None:
    result, out = silent_builds[verbose]
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    timed = _timed(result.stdout)
    # From the first step to the last, no gap longer than 15 s between two timed lines: one
    # second more for the whole seconds they show.
    gaps = [(later - earlier, line) for (earlier, _), (later, line) in itertools.pairwise(timed)]
    assert max(gap for gap, _ in gaps) <= STATUS_EVERY_S + 1, gaps
    # The silent step is named with its Python, and its time so far grows line by line.
    silent = [line for _, line in timed if line.startswith("cp311 compiling (")]
    assert len(silent) >= SILENT_S // STATUS_EVERY_S, timed
    so_far = [line.split("(", 1)[1].split(" so far", 1)[0] for line in silent]
    assert so_far == sorted(so_far, key=lambda t: [int(p) for p in t.split(":")]) and len(set(so_far)) == len(
        so_far
    )
    # cibuildwheel's log on the terminal only with -v; build.log has it either way.
    run_dir = next((out / "runs").iterdir())
    assert "Running before_build..." in (run_dir / "build.log").read_text()
    assert ("Running before_build..." in result.stdout) is verbose
    # One sha256 for the wheel: the stamped wheel's, said to be. (Image digests, "@sha256:...",
    # and the container id docker prints are no wheel's.)
    (wheel,) = run_dir.glob("*.whl")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    hashes = re.findall(r"(?i)(?<!@)sha256[=: ]\s*([0-9a-f]{64})", result.stdout)
    assert hashes == [digest], hashes
    assert (
        f"sha256 {digest}, " in result.stdout
        and "(the wheel as wheelbuild stamped it after cibuildwheel)" in (result.stdout)
    )
    # build.log keeps cibuildwheel's own summary, with its hash of the wheel before the stamp.
    assert re.search(r"SHA256=[0-9a-f]{64}", (run_dir / "build.log").read_text())
