"""A wheel's torch range without Docker: which releases are tried around the build's, the
contiguous range a set of trials proves and the pin it writes, the line a person reads, and the
static check on real shared objects: stand-in "torch" wheels whose libtorch_cpu.so and libc10.so
are compiled here with g++, one of them lacking a function the extension module calls (the way
torch 2.14 changed c10_cuda_check_implementation's arguments). The import gate under each torch
is tests/integration/test_torch_range.py's."""

from __future__ import annotations

from collections.abc import Callable

from wheelbuild.pipeline.range_gate import other_requirements
from wheelbuild.records import read_record
from wheelbuild.report.build_report import BuildReport, report_from_json
from wheelbuild.wheel.torch_range import TorchRange, TorchTrial, neighbours, written_pin

# PyPI's releases on 2026-12-02 and the CUDA each is built with.
PYPI = {
    "2.15.0": "13.2",
    "2.14.1": "13.0",
    "2.14.0": "13.0",
    "2.13.0": "13.0",
    "2.12.1": "13.0",
    "2.12.0": "13.0",
    "2.11.0": "13.0",
    "2.10.0": "12.8",
    "2.9.1": "12.8",
}


def _asked(table: dict[str, str]) -> tuple[list[str], Callable[[str], str]]:
    asked: list[str] = []

    def cuda_of(version: str) -> str:
        asked.append(version)
        return table[version]

    return asked, cuda_of


def test_the_neighbours_are_each_minors_newest_patch_of_the_same_cuda_major() -> None:
    cuda_of = _asked(PYPI)[1]
    assert neighbours(list(PYPI), "2.14.1", cuda_of, 3) == ("2.11.0", "2.12.1", "2.13.0", "2.15.0")
    # 2.10 is CUDA 12.8: another major, skipped, and nothing older than three minors asked about.
    assert neighbours(list(PYPI), "2.14.1", _asked(PYPI)[1], 1) == ("2.13.0", "2.15.0")
    assert neighbours(list(PYPI), "2.11.0", cuda_of, 3) == ("2.12.1", "2.13.0", "2.14.1", "2.15.0")
    # The build's own minor's newer patch is tried too.
    assert neighbours(list(PYPI), "2.14.0", cuda_of, 0) == ("2.14.1", "2.15.0")
    assert neighbours(list(PYPI), "2.10.0", cuda_of, 3) == ("2.9.1",)


def test_older_releases_past_the_limit_are_not_even_read() -> None:
    asked, cuda_of = _asked(PYPI)
    neighbours(list(PYPI), "2.14.1", cuda_of, 1)
    assert "2.12.1" not in asked and "2.11.0" not in asked and "2.10.0" not in asked


def _range(*trials: TorchTrial, built: str = "2.13.0") -> TorchRange:
    return TorchRange("w.whl", "cp311", built, (TorchTrial(built, imported=True), *trials))


MISSING = "undefined symbol c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, unsigned int, bool)"


def test_the_proven_range_is_the_run_of_loads_around_the_build() -> None:
    found = _range(
        TorchTrial("2.11.0", imported=False, detail="import wbx._C fails with undefined symbol foo"),
        TorchTrial("2.12.1", imported=True),
        TorchTrial("2.14.1", static=MISSING, detail="not installed: a symbol it needs is missing"),
        TorchTrial("2.15.0", imported=True),  # loads, but not contiguous with the build's
    )
    assert found.proven == ("2.12.1", "2.13.0")
    assert found.pin == ">=2.12,<2.14"
    assert found.summary == (
        "imports with torch 2.12.1-2.13.0; fails on 2.11.0: import wbx._C fails with undefined symbol foo; "
        f"fails on 2.14.1: {MISSING}; also imports with 2.15.0, apart from that range"
    )
    alone = _range(TorchTrial("2.14.1", detail="its symbols could not be read: HTTP 503"))
    assert alone.proven == ("2.13.0",) and alone.pin == ">=2.13,<2.14"
    assert (
        alone.summary
        == "imports with torch 2.13.0; not tried on 2.14.1: its symbols could not be read: HTTP 503"
    )


def test_a_release_of_one_number_pins_as_minor_zero_of_its_major() -> None:
    """A report read back may hold "2" (a damaged or hand-written one): the pin still says something."""
    found = TorchRange(
        "w.whl", "cp311", "2", (TorchTrial("2", imported=True), TorchTrial("2.1.0", imported=True))
    )
    assert found.proven == ("2", "2.1.0") and found.pin == ">=2.0,<2.2"


def test_an_abi3_wheel_pins_what_every_python_proved() -> None:
    cp311 = _range(TorchTrial("2.12.1", imported=True), TorchTrial("2.14.1", imported=True))
    cp313 = TorchRange(
        "w.whl", "cp313", "2.13.0", (TorchTrial("2.13.0", imported=True), TorchTrial("2.14.1", imported=True))
    )
    assert written_pin([cp311]) == ">=2.12,<2.15"
    assert written_pin([cp311, cp313]) == ">=2.13,<2.15"


def test_a_range_goes_through_the_report_and_back() -> None:
    found = _range(TorchTrial("2.14.1", static=MISSING, detail="not installed"))
    report = report_from_json(
        {"torch": {"variant": "2.13.0+cu130", "pin": "proven"}, "torch_range": [found.to_json()]}
    )
    assert report.ranges_of("w.whl") == (found,)
    assert report.torch is not None and report.torch.pin == "proven"
    assert read_record(TorchRange, found.to_json(), "") == found
    assert BuildReport().torch_range is None  # an older report has none


def test_the_gate_under_another_torch_installs_what_the_wheel_needs_but_torch() -> None:
    assert other_requirements(
        ("torch==2.13.*", "einops", 'ninja; platform_system == "Linux"', 'pytest; extra == "test"', "((")
    ) == ("einops", 'ninja; platform_system == "Linux"')


# ---------------------------------------------------------------------------------------------
# The symbol check, on shared objects compiled here
