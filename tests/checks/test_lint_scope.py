"""ruff reads every Python file of the repository, also the scripts without a .py suffix
(bench/, images/, scripts/), which it finds only through pyproject's extend-include."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _python_scripts() -> set[Path]:
    """Files in bench/, images/ and scripts/ whose first line runs python, whatever their name."""
    found = set()
    for folder in ("bench", "images", "scripts"):
        for path in (REPO / folder).rglob("*"):
            if path.is_file() and path.suffix != ".py":
                with path.open("rb") as handle:
                    if b"python" in handle.readline():
                        found.add(path)
    return found


def test_ruff_checks_every_python_script() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--show-files", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen = {Path(line.strip()) for line in listed.stdout.splitlines() if line.strip()}
    scripts = _python_scripts()
    assert len(scripts) >= 10, scripts  # bench's and the image's scripts are there to find
    assert sorted(str(p.relative_to(REPO)) for p in scripts - seen) == []
