"""The example's torch range, end to end: built for the newest CUDA 13.0 torch on PyPI, then each
neighbouring release (N minors older, every newer one: PyPI's CUDA 13.2 build among them) checked
against its exported symbols and installed beside the wheel in a fresh container, and imported.
Which releases those are is read from the index, as the build reads it. The failing side, a wheel
that calls what a later torch changed, is test_contract.py's wbcublas.

In CI the range is the example's own (`scripts/example`: one minor older); three minors (two
older) add a release the rest of the suite never downloads (~3 GB), so that one is `slow`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.version import Version
from wheelbuild.spec.torch_releases import read_torch_index
from wheelbuild.wheel.torch_range import neighbours

from tests.integration.conftest import TORCH_INDEX, Completed, newest_cu130, wheelbuild

EXAMPLE_RANGE_OLDER = 1  # scripts/example's --torch-range-older


@dataclass(frozen=True)
class RangeBuild:
    older: int
    result: Completed
    report: dict
    wheel: Path


def _build_with_range(out: Path, older: int) -> RangeBuild:
    """The example for cu130 and cp311 with its torch range (the compiles are the fixture
    build's, from the compiler cache: the range is what this costs)."""
    result = wheelbuild(
        "build", "wbdemo", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--archs", "100,120",
        "--python", "3.11", "--memory", "4g", "--output-dir", str(out),
        "--torch-range", "--torch-range-older", str(older),
        "--rebuild",  # the range runs after a build; a reused wheel keeps the range it had
        timeout=3600,  # each release is downloaded and installed once per machine (~3 GB each)
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    run_dir = out / "runs" / result.run_id
    (wheel,) = sorted(run_dir.glob("*.whl"))
    return RangeBuild(older, result, json.loads((run_dir / "build-report.json").read_text()), wheel)


@pytest.fixture(scope="module")
def example_range(cuda_image: str, tmp_path_factory: pytest.TempPathFactory) -> RangeBuild:
    return _build_with_range(tmp_path_factory.mktemp("range"), EXAMPLE_RANGE_OLDER)


def _tried_today(older: int) -> tuple[str, ...]:
    """The releases the range must try, from the index as it is today."""
    index = read_torch_index(TORCH_INDEX)
    releases = {Version(r.version).public: r for r in index.releases if "cp311" in r.pythons}
    return neighbours(tuple(releases), newest_cu130().version, lambda v: index.cuda_of(releases[v]), older)


def _loads_with_every_release_around_its_own(built: RangeBuild, minors_at_least: int) -> None:
    version = newest_cu130().version
    (found,) = built.report["torch_range"]
    assert found["wheel"] == built.wheel.name and found["python"] == "cp311"
    assert found["built_with"] == version
    trials = {t["torch"]: t for t in found["trials"]}
    tried = _tried_today(built.older)
    assert sorted(trials, key=Version) == sorted((*tried, version), key=Version)
    # Each one checked against that torch's symbols, then installed and imported.
    for release in tried:
        assert trials[release]["static"] == "" and trials[release]["imported"] is True, trials[release]
    assert len({Version(v).release[:2] for v in trials}) >= minors_at_least
    line = f"torch range: imports with torch {min(trials, key=Version)}-{max(trials, key=Version)}"
    assert line in built.result.stdout


def test_the_example_loads_with_every_torch_release_around_its_own(example_range: RangeBuild) -> None:
    # one older minor, the built one, and every newer release (PyPI's CUDA 13.2 build)
    _loads_with_every_release_around_its_own(example_range, minors_at_least=3)


@pytest.mark.slow  # what the test above proves, over one more (older) release
def test_the_example_loads_with_three_minors_of_cuda_13_0_releases(cuda_image: str, tmp_path: Path) -> None:
    _loads_with_every_release_around_its_own(_build_with_range(tmp_path, older=2), minors_at_least=4)


def test_inspect_shows_the_range_the_report_beside_the_wheel_holds(example_range: RangeBuild) -> None:
    shown = wheelbuild("inspect", str(example_range.wheel))
    assert shown.returncode == 0, shown.stderr
    (found,) = example_range.report["torch_range"]
    versions = sorted((t["torch"] for t in found["trials"]), key=Version)
    assert f"torch range under cp311: imports with torch {versions[0]}-{versions[-1]}" in shown.stdout
