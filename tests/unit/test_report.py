"""build-report.json through report/build_report.py, its one writer and reader: every key survives a read and
a write, older reports (no schema field) still read, and a newer schema, an oversized file or a
field of the wrong type is refused with ReportUnreadable (exit 19)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from wheelbuild.errors import ReportUnreadable
from wheelbuild.records import read_record
from wheelbuild.report.build_report import (
    MAX_REPORT_SIZE,
    SCHEMA,
    BuildReport,
    GateRecord,
    GateSkipped,
    Reused,
    read_report,
    read_report_json,
    report_from_json,
    write_report,
)

from tests.reportkit import phased_report, range_report, real_report, synthetic_report


def _holds(expected: Any, found: Any, where: str = "") -> None:
    """Every key and value of *expected* is in *found*, with the same JSON type."""
    if isinstance(expected, dict):
        for key, value in expected.items():
            assert key in found, f"{where}{key} lost"
            _holds(value, found[key], f"{where}{key}.")
    elif isinstance(expected, list):
        assert len(expected) == len(found), where
        for i, (a, b) in enumerate(zip(expected, found, strict=True)):
            _holds(a, b, f"{where}{i}.")
    else:
        assert (expected, type(expected)) == (found, type(found)), where


@pytest.mark.parametrize("original", [real_report(), synthetic_report()], ids=["real-v1", "synthetic"])
def test_a_report_read_and_written_keeps_every_key_and_adds_only_its_schema(
    original: dict[str, Any], tmp_path: Path
) -> None:
    assert "schema" not in original  # written before the field: version 1
    path = tmp_path / "build-report.json"
    path.write_text(json.dumps(original))
    report = read_report(path)
    assert report.schema == 1 == SCHEMA
    write_report(path, report)
    written = json.loads(path.read_text())
    _holds(original, written)
    assert set(written) - set(original) == {"schema"}
    assert written["schema"] == 1
    assert read_report(tmp_path) == report  # a run folder names its report


def test_the_typed_record_reads_what_check_gc_and_the_nightly_need() -> None:
    report = report_from_json(real_report())
    assert report.torch is not None and report.torch.variant
    assert report.archs and all(isinstance(a, int) for a in report.archs)
    assert report.attempts and report.attempts[0].max_jobs is not None
    assert report.wheels and report.wheels[0].sha256
    reused = BuildReport(run_id="b", gate=GateSkipped(), reused=Reused("k", "a")).to_json()
    assert reused["gate"] == {"skipped": GateSkipped().skipped}
    assert reused["reused"] == {"key": "k", "from_run": "a"}


def test_a_report_from_before_the_rename_reads_its_cicc_admission() -> None:
    """Reports written before 2026-12-03 call cicc admission `cicc_gate`; the range report is one."""
    data = range_report()
    assert data["plan"]["cicc_gate"] is True and "cicc_admission" not in data["plan"]
    report = report_from_json(data)
    assert report.plan is not None and report.plan.cicc_admission is True
    written = report.to_json()["plan"]
    assert isinstance(written, dict) and written["cicc_admission"] is True  # written back under its name


def test_a_newer_schema_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "build-report.json"
    path.write_text(json.dumps({**real_report(), "schema": SCHEMA + 1}))
    for read in (read_report, read_report_json):
        with pytest.raises(ReportUnreadable) as refused:
            read(path)
        assert refused.value.exit_code == 19
        assert f"schema {SCHEMA + 1}" in refused.value.cause and str(path) in refused.value.cause


def test_an_oversized_report_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "build-report.json"
    with path.open("wb") as file:
        file.truncate(MAX_REPORT_SIZE + 1)  # sparse: nothing to parse, only a size
    with pytest.raises(ReportUnreadable, match="over 64 MiB"):
        read_report(path)


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"archs": "100"},
        {"archs": [True]},
        {"schema": "1"},
        {"torch": "cu130"},
        {"attempts": [{"max_jobs": "4"}]},
        {"attempts": [{"memory_series": {"points": [[1]]}}]},
        {"wheels": [{"sha256": 3}]},
        {"gate": "passed"},
        {"gate": [{"wheel": "a.whl", "passed": "yes"}]},
    ],
)
def test_a_field_of_the_wrong_type_is_refused_naming_it(data: object) -> None:
    with pytest.raises(ReportUnreadable) as refused:
        report_from_json(data)
    assert refused.value.why and refused.value.remedy


def test_a_missing_or_unparsable_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ReportUnreadable, match="cannot read a build report"):
        read_report(tmp_path / "nope.json")
    (tmp_path / "build-report.json").write_text("{not json")
    with pytest.raises(ReportUnreadable, match="not readable JSON"):
        read_report(tmp_path)


def test_an_attempts_phases_go_through_the_report_and_back() -> None:
    written = phased_report()
    read = report_from_json(written)
    (attempt,) = read.attempts
    assert [(p.step, p.python) for p in attempt.phases][-2:] == [("import gate", None), ("torch range", None)]
    assert read.to_json()["attempts"] == written["attempts"]
    older = report_from_json(real_report())  # from before phases: none, and still read
    assert all(a.phases == () for a in older.attempts)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"passed": True}, None),
        (
            {
                "imports": [
                    {"module": "wbx._C", "ok": False, "error": "Traceback ...\nImportError: x.so: bad ELF"}
                ]
            },
            "import wbx._C failed: ImportError: x.so: bad ELF",
        ),
        (
            {"imports": [{"module": "wbx._C", "ok": False, "error": "...", "demangled": "at::foo()"}]},
            "import wbx._C failed: at::foo()",
        ),
        (
            {"install_error": "Collecting torch\nERROR: No matching distribution found for torch==9.9\n\n"},
            "it could not be installed: ERROR: No matching distribution found for torch==9.9",
        ),
        ({"unresolved": {"wbx/_C.so": [{"symbol": "_Z3foov"}]}}, "wbx/_C.so has symbols nothing provides"),
        ({"load_errors": {"wbx/_C.so": "wrong ELF class"}}, "wbx/_C.so does not load"),
        (
            {"smoke": {"status": "failed", "reason": "max error 3.0"}},
            "its GPU smoke test failed: max error 3.0",
        ),
        ({}, "see the report"),
    ],
    ids=[
        "passed",
        "import-error",
        "undefined-symbol",
        "install",
        "unresolved",
        "load-error",
        "smoke",
        "unknown",
    ],
)
def test_a_gate_record_says_why_it_refused_in_one_line(change: dict[str, Any], why: str | None) -> None:
    record = read_record(
        GateRecord, {"wheel": "wbx.whl", "python": "cp311", "passed": False, **change}, "gate"
    )
    assert record.refusal == why
