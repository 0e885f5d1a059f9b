"""The example's torch range, end to end (the session's fixture build, tests/integration/conftest.py):
built for the newest CUDA 13.0 torch on PyPI, then each neighbouring release of the same CUDA major
(two minors older, every newer one: three minors of CUDA 13.0 releases and PyPI's CUDA 13.2 one)
checked against its exported symbols and installed beside the wheel in a fresh container, and
imported. Which releases those are is read from the index, as the build reads it. The failing side,
a wheel that calls what a later torch changed, is test_contract.py's wbcublas."""

from __future__ import annotations

from packaging.version import Version
from wheelbuild.spec.torch_releases import read_torch_index
from wheelbuild.wheel.torch_range import neighbours

from tests.integration.conftest import (
    FIXTURE_RANGE_OLDER,
    TORCH_INDEX,
    FixtureBuild,
    newest_cu130,
    wheelbuild,
)


def _tried_today() -> tuple[str, ...]:
    """The releases the range must try, from the index as it is today."""
    index = read_torch_index(TORCH_INDEX)
    releases = {Version(r.version).public: r for r in index.releases if "cp311" in r.pythons}
    return neighbours(
        tuple(releases), newest_cu130().version, lambda v: index.cuda_of(releases[v]), FIXTURE_RANGE_OLDER
    )


def test_the_example_loads_with_every_torch_release_around_its_own(fixture_build: FixtureBuild) -> None:
    built = newest_cu130().version
    (found,) = fixture_build.report["torch_range"]
    assert found["wheel"] == fixture_build.wheel.name and found["python"] == "cp311"
    assert found["built_with"] == built
    trials = {t["torch"]: t for t in found["trials"]}
    tried = _tried_today()
    assert sorted(trials, key=Version) == sorted((*tried, built), key=Version)
    # Each one checked against that torch's symbols, then installed and imported.
    for version in tried:
        assert trials[version]["static"] == "" and trials[version]["imported"] is True, trials[version]
    minors = {Version(v).release[:2] for v in trials}
    assert len(minors) >= 3
    line = f"torch range: imports with torch {min(trials, key=Version)}-{max(trials, key=Version)}"
    assert line in fixture_build.result.stdout


def test_inspect_shows_the_range_the_report_beside_the_wheel_holds(fixture_build: FixtureBuild) -> None:
    shown = wheelbuild("inspect", str(fixture_build.wheel))
    assert shown.returncode == 0, shown.stderr
    (found,) = fixture_build.report["torch_range"]
    versions = sorted((t["torch"] for t in found["trials"]), key=Version)
    assert f"torch range under cp311: imports with torch {versions[0]}-{versions[-1]}" in shown.stdout
