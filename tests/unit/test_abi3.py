"""One wheel for every Python (abi3): what a wheel's name promises, which Pythons the gate loads it
under, how the build log and the report say that a later Python reused it, and how a verdict of
several gate records is read (wheelbuild.wheel.abi3 and the places that knew one wheel per Python)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from wheelbuild.attempt.buildlog import BuildLog
from wheelbuild.attempt.config import AttemptConfig, cibuildwheel_env
from wheelbuild.errors import ImportGateFailed
from wheelbuild.nightly.publish import report_verdict
from wheelbuild.pipeline.check import describe_gate, gate_verdict
from wheelbuild.report.attempt_records import AttemptRecord
from wheelbuild.report.build_report import (
    Abi3Record,
    BuildReport,
    read_report,
    report_from_json,
    write_report,
)
from wheelbuild.variants import parse_variant
from wheelbuild.wheel.abi3 import Abi3Use, StableAbi, abi3_uses, gate_pythons, stable_abi, unserved_problem
from wheelbuild.wheel.gate import GateResult, ImportCheck, summary_of

from tests.indexkit import make_wheel

ABI3 = "wbdemo-0.1.0+cu130torch2.11-cp310-abi3-manylinux_2_34_x86_64.whl"
# As cibuildwheel names it before the stamp (auditwheel's tags, the same label here).
ABI3_REPAIRED = "wbdemo-0.1.0+cu130torch2.11-cp310-abi3-manylinux_2_34_x86_64.whl"
CP311 = "wbdemo-0.1.0+cu130torch2.11-cp311-cp311-manylinux_2_34_x86_64.whl"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (ABI3, StableAbi("cp310-abi3", 10)),
        ("x-1.0-cp39-abi3-manylinux_2_28_x86_64.whl", StableAbi("cp39-abi3", 9)),
        ("x-1.0-cp312-abi3-manylinux1_x86_64.manylinux_2_5_x86_64.whl", StableAbi("cp312-abi3", 12)),
        (CP311, None),
        ("x-1.0-py3-none-any.whl", None),
        ("not a wheel.whl", None),
    ],
)
def test_a_wheel_name_says_whether_it_is_abi3_and_from_which_python_on(
    name: str, expected: StableAbi | None
) -> None:
    assert stable_abi(name) == expected


def test_an_abi3_wheel_serves_later_cpythons_but_not_older_or_free_threaded_ones() -> None:
    abi = StableAbi("cp310-abi3", 10)
    assert [abi.serves(p) for p in ("cp39", "cp310", "cp311", "cp313", "cp313t", "pp310")] == [
        False, True, True, True, False, False,
    ]  # fmt: skip


def test_the_gate_loads_an_abi3_wheel_under_each_python_and_any_other_under_its_own() -> None:
    assert gate_pythons(ABI3, ("cp311", "cp313")) == ("cp311", "cp313")
    assert gate_pythons(CP311, ("cp311", "cp313")) == ("cp311",)
    # A Python the wheel cannot serve is not gated; unserved_problem refuses the build instead.
    assert gate_pythons(ABI3, ("cp39", "cp311", "cp313t")) == ("cp311",)


def test_an_abi3_wheel_some_python_of_the_build_cannot_install_is_refused_saying_which() -> None:
    assert unserved_problem(ABI3, ("cp311", "cp313")) is None
    assert unserved_problem(CP311, ("cp39",)) is None  # one wheel per Python: nothing to judge
    problem = unserved_problem(ABI3, ("cp39", "cp311", "cp313t"))
    assert isinstance(problem, ImportGateFailed) and problem.exit_code == 48
    assert "cp39, cp313t of this build cannot install it" in problem.cause
    assert "3.10 or later" in problem.remedy


def test_the_python_that_built_an_abi3_wheel_and_those_that_reused_it() -> None:
    reused = {"cp313-manylinux_x86_64": ABI3_REPAIRED, "cp312-manylinux_x86_64": ABI3_REPAIRED}
    assert abi3_uses([ABI3], ("cp311", "cp312", "cp313"), reused) == (
        Abi3Use(ABI3, "cp310-abi3", "cp311", ("cp312", "cp313")),
    )
    # The stamp may give the wheel a new version; the tags still name the same wheel.
    stamped = ABI3.replace("0.1.0+cu130torch2.11", "0.1.0+cu130torch2.11.post1")
    assert abi3_uses([stamped], ("cp311", "cp313"), {"cp313-manylinux_x86_64": ABI3})[0].reused_under == (
        "cp313",
    )
    assert abi3_uses([CP311], ("cp311",), {}) == ()
    # A log that never said which Python reused it: every Python counts as building.
    assert abi3_uses([ABI3], ("cp311", "cp313"), {}) == (Abi3Use(ABI3, "cp310-abi3", "cp311", ()),)


# cibuildwheel 4.3.5's lines for an abi3 build over two Pythons (platforms/linux.py, logger.py).
ABI3_LOG = [
    (0.0, "Building cp311-manylinux_x86_64 wheel"),
    (20.0, "Building wheel..."),
    (50.0, "Repairing wheel..."),
    (55.0, "✓ cp311-manylinux_x86_64 finished in 55 seconds"),
    (56.0, "Building cp313-manylinux_x86_64 wheel"),
    (58.0, "Setting up build environment..."),
    (
        59.5,
        f"Found previously built wheel {ABI3_REPAIRED}, that's compatible with cp313-manylinux_x86_64. "
        "Skipping build step...",
    ),
    (60.0, "✓ cp313-manylinux_x86_64 finished in 4 seconds"),
    (61.0, "Copying wheels back to host..."),
]


def test_the_build_log_times_each_python_whole_and_names_the_one_that_reused_a_wheel() -> None:
    log = BuildLog()
    for now, line in ABI3_LOG:
        log.feed(line, now)
    assert log.python_seconds_by_identifier == {"cp311-manylinux_x86_64": 55.0, "cp313-manylinux_x86_64": 4.0}
    assert log.build_seconds_by_identifier == {"cp311-manylinux_x86_64": 30.0}  # the compile step
    assert log.reused_wheels == {"cp313-manylinux_x86_64": ABI3_REPAIRED}


def test_a_python_whose_build_never_finished_has_no_whole_time() -> None:
    log = BuildLog()
    for now, line in ABI3_LOG[:3]:
        log.feed(line, now)
    log.feed("cibuildwheel: error: Command ... failed with code 1", 70.0)
    # Another Python's end line does not end this one's.
    log.feed("✓ cp313-manylinux_x86_64 finished in 4 seconds", 71.0)
    assert log.python_seconds_by_identifier == {}
    # Without times (a log read again afterwards) the reuse is still read.
    replay = BuildLog()
    for _now, line in ABI3_LOG:
        replay.feed(line)
    assert replay.python_seconds_by_identifier == {} and replay.reused_wheels == {
        "cp313-manylinux_x86_64": ABI3_REPAIRED
    }


def _gate(python: str, ok: bool = True) -> GateResult:
    return GateResult(
        wheel=ABI3,
        python=python,
        install_error=None,
        torch="2.11.0 (CUDA 13.0)",
        imports=(ImportCheck("wbdemo._C", ok, "" if ok else "ImportError: boom"),),
        unresolved={},
        load_errors={},
        smoke={"status": "skipped", "reason": "no GPU"},
        abi_problems=(),
    )


def test_one_line_says_under_which_pythons_the_wheel_loaded_or_where_it_did_not() -> None:
    assert summary_of([_gate("cp311")]) == _gate("cp311").summary  # one Python: as before
    assert summary_of([_gate("cp311"), _gate("cp313")]).startswith(
        "under each of cp311, cp313: passed (imported wbdemo._C with torch 2.11.0 (CUDA 13.0))"
    )
    refused = summary_of([_gate("cp311"), _gate("cp313", ok=False)])
    assert refused.startswith("under cp313: REFUSED: ") and "boom" in refused


def _report(*passed: tuple[str, bool]) -> dict[str, Any]:
    return {
        "torch": {"variant": "2.11.0+cu130"},
        "archs": [100, 120],
        "checks": [],
        "gate": [{"wheel": ABI3, "python": python, "passed": ok} for python, ok in passed],
    }


def test_a_wheel_with_a_gate_record_per_python_passes_only_if_every_one_passed() -> None:
    both = report_from_json(_report(("cp311", True), ("cp313", True)))
    assert [g.python for g in both.gates_of(ABI3)] == ["cp311", "cp313"]
    gate = both.gate_of(ABI3)
    assert gate is not None and gate.passed
    one_refused = report_from_json(_report(("cp311", True), ("cp313", False)))
    refused = one_refused.gate_of(ABI3)
    assert refused is not None and refused.python == "cp313" and not refused.passed
    assert report_from_json(_report()).gate_of(ABI3) is None
    # The nightly publishes only what every record passed.
    assert report_verdict(_report(("cp311", True), ("cp313", True)), [ABI3]) is None
    assert f"did not pass {ABI3}" in str(report_verdict(_report(("cp311", True), ("cp313", False)), [ABI3]))


def test_publish_and_inspect_read_the_verdict_of_every_python(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "wbdemo", "0.1.0+cu130torch2.11", tag="cp310-abi3-manylinux_2_34_x86_64")
    imports = [{"module": "wbdemo._C", "ok": True}]
    report = _report(("cp311", True), ("cp313", True))
    report["gate"] = [{**g, "wheel": wheel.name, "imports": imports} for g in report["gate"]]
    (tmp_path / "build-report.json").write_text(json.dumps(report))
    assert gate_verdict(wheel) == ([], None)
    assert str(describe_gate(wheel)["detail"]).startswith("under each of cp311, cp313, imported wbdemo._C")
    report["gate"][1]["passed"] = False
    (tmp_path / "build-report.json").write_text(json.dumps(report))
    refused, _note = gate_verdict(wheel)
    assert len(refused) == 1 and "import gate refused it" in refused[0].cause


def test_the_report_keeps_which_python_built_the_abi3_wheel_and_which_reused_it(tmp_path: Path) -> None:
    record = Abi3Record(ABI3, "cp310-abi3", "cp311", ("cp313",), ("cp311", "cp313"))
    attempt = AttemptRecord(
        attempt=1, max_jobs=2, nvcc_threads=1, memory=4 << 30, returncode=0, duration_s=70.0, build_s=30.0,
        build_s_by_python={"cp311-manylinux_x86_64": 30.0}, memory_limit_seen=None, peak_memory=None,
        peak_memory_compile=None, predicted_peak=None, oom_evidence=(), oom_at_s=(), memory_series=None,
        units_finished=5, units=(), cache_hits=0, cache_misses=5, cache_by_python={},
        python_s_by_python={"cp311-manylinux_x86_64": 55.0, "cp313-manylinux_x86_64": 4.0},
        reused_by_python={"cp313-manylinux_x86_64": ABI3_REPAIRED},
    )  # fmt: skip
    path = tmp_path / "build-report.json"
    write_report(path, BuildReport(run_id="r", attempts=(attempt,), abi3=(record,)))
    back = read_report(path)
    assert back.abi3 == (record,)
    assert back.attempts[0].python_s_by_python == attempt.python_s_by_python
    assert back.attempts[0].reused_by_python == attempt.reused_by_python
    # A report of one wheel per Python (or an older one) has no abi3 key and reads as None.
    write_report(path, BuildReport(run_id="r"))
    assert "abi3" not in json.loads(path.read_text()) and read_report(path).abi3 is None


def test_cibuildwheel_does_not_audit_abi3_wheels_on_the_host(tmp_path: Path) -> None:
    # Its default abi3audit first downloads virtualenv from GitHub on the host: unreachable here,
    # where it waited with no end. The import gate loads the wheel under each Python instead.
    config = AttemptConfig(
        run_id="r", attempt=1, image="img", project_dir=tmp_path, package=".",
        identifiers=("cp311-manylinux_x86_64", "cp313-manylinux_x86_64"), memory=4 << 30, cpus=2.0,
        gpus=False, build_env={}, cuda_home="/usr/local/cuda", torch=parse_variant("cu130"),
        output_dir=tmp_path, log_path=tmp_path / "build.log",
    )  # fmt: skip
    assert cibuildwheel_env(config)["CIBW_AUDIT_COMMAND"] == ""
