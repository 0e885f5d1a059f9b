"""`wheelbuild publish` of a wheel copied out of its run folder (no build report beside it):
the variant comes from the wheel's local version label (+cu130torch2.11), and a label that its
METADATA's torch pin contradicts is refused in one line with its own exit code (64). Run for
real: the installed command, wheels with a real sm_120 extension module (host nvcc)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.provenancekit import cuda_wheel

Run = Callable[..., subprocess.CompletedProcess[str]]


def _tree_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_a_copied_wheel_is_published_under_the_variant_its_label_names(run_cli: Run, tmp_path: Path) -> None:
    wheel = cuda_wheel(tmp_path / "copied")
    assert not (wheel.parent / "build-report.json").exists()
    done = run_cli("publish", str(wheel), "--archs", "120", "--to", str(tmp_path / "wh" / "{variant}"))
    assert done.returncode == 0, done.stderr
    assert f"added {wheel.name}" in done.stdout
    assert (tmp_path / "wh" / "cu130" / "files" / wheel.name).is_file()
    assert (tmp_path / "wh" / "cu130" / "simple" / "wbtiny" / "index.html").is_file()


def test_a_copied_wheel_with_a_proven_range_admitting_its_label_is_published(
    run_cli: Run, tmp_path: Path
) -> None:
    wheel = cuda_wheel(tmp_path / "copied", requires=("torch<2.13,>=2.10",))  # --pin proven's shape
    done = run_cli("publish", str(wheel), "--archs", "120", "--to", str(tmp_path / "tree"))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tree" / "files" / wheel.name).is_file()


@pytest.mark.parametrize(
    ("version", "requires", "says"),
    [
        (
            "0.1.0+cu130torch2.14",
            ("torch==2.11.*",),
            "says torch 2.14, but its METADATA requires torch==2.11.*",
        ),
        (
            "0.1.0+cu130torch2.11",
            ("torch<2.16,>=2.12",),
            "says torch 2.11, but its METADATA requires torch<2.16,>=2.12",
        ),
    ],
    ids=["exact-pin-of-another-minor", "range-without-the-label"],
)
def test_a_label_its_torch_pin_contradicts_is_refused_with_64(
    run_cli: Run, tmp_path: Path, version: str, requires: tuple[str, ...], says: str
) -> None:
    wheel = cuda_wheel(tmp_path / "copied", version=version, requires=requires)
    done = run_cli("publish", str(wheel), "--archs", "120", "--to", str(tmp_path / "tree"))
    assert done.returncode == 64, done.stderr
    cause, remedy = done.stderr.splitlines()
    assert cause == f"error: {wheel.name}: its label +{version.partition('+')[2]} {says}"
    assert remedy.startswith("remedy: rebuild it")
    assert _tree_files(tmp_path / "tree") == []


def test_a_copied_wheel_without_a_variant_label_still_needs_torch(run_cli: Run, tmp_path: Path) -> None:
    wheel = cuda_wheel(tmp_path / "copied", version="0.1.0")
    done = run_cli("publish", str(wheel), "--archs", "120", "--to", str(tmp_path / "tree"))
    assert done.returncode == 13, done.stderr
    cause, remedy = done.stderr.splitlines()
    assert cause.endswith("and its version's local label (none) names none")
    assert remedy == "remedy: pass --torch (e.g. --torch cu130), or publish from the build's run directory"
    assert _tree_files(tmp_path / "tree") == []


def test_archs_given_twice_to_publish_add_up(run_cli: Run, tmp_path: Path) -> None:
    """The wheel holds sm_120 only: `--archs 100 --archs 120` asks for both, so it is refused
    (44); the last --archs alone (120) would have let it through."""
    wheel = cuda_wheel(tmp_path / "copied")
    done = run_cli("publish", str(wheel), "--archs", "100", "--archs", "120", "--to", str(tmp_path / "tree"))
    assert done.returncode == 44, done.stderr
    assert "has no SASS for sm_100 (it has sm_120)" in done.stderr
    assert _tree_files(tmp_path / "tree") == []
