"""The installed wheelbuild CLI run as a user runs it (tests/integration, tests/local): its
completed process and run id, and the small waits those tests share."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHEELBUILD = str(Path(sys.executable).parent / "wheelbuild")
# PyPI's torch 2.11-2.14 are CUDA 13.0 builds (2.15 is 13.2); PyTorch's own index is not
# reachable here.
TORCH_INDEX = "https://pypi.org/simple"


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str

    @property
    def run_id(self) -> str:
        match = re.search(r"\(run (\S+)\)", self.stdout)
        assert match, f"no run id in output:\n{self.stdout[-2000:]}"
        return match[1]


def wheelbuild(*args: str, env: dict[str, str] | None = None, timeout: float = 1200) -> Completed:
    """Run the real CLI as a user would."""
    proc = subprocess.run(
        [WHEELBUILD, *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    return Completed(proc.returncode, proc.stdout, proc.stderr)


def poll_until(condition: Callable[[], object], timeout_s: float, step_s: float = 0.2) -> bool:
    """The condition polled until it holds or the deadline passes: whether it held."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step_s)
    return True


def default_sigint() -> None:
    """preexec_fn for a build a test will stop with SIGINT, as a user's Ctrl-C: a shell without
    job control starts background commands with SIGINT ignored, and a CI runner may start the
    suite so; the child must get the signal whatever this process inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
