"""Where a run's time went (report/timings.py): what scripts/example prints at its end, read from
the build report: the image, the build's attempts, the import gate and the torch range."""

from __future__ import annotations

from wheelbuild.report.build_report import report_from_json
from wheelbuild.report.timings import format_seconds, phase_lines, phase_seconds

from tests.reportkit import phased_report, real_report


def test_each_phase_is_read_from_the_report_and_the_image_time_goes_through_it_and_back() -> None:
    written = phased_report()  # one attempt of 622 s, then the gate 625-700 s and the range 700-930 s
    written["image"]["seconds"] = 95.4
    report = report_from_json(written)
    assert report.to_json()["image"] == written["image"]
    assert phase_seconds(report) == {"image": 95.4, "build": 622.0, "gate": 75.0, "range": 230.0}


def test_a_report_from_before_the_timings_reads_as_none_for_what_it_lacks() -> None:
    older = report_from_json(real_report())
    assert older.image is not None and older.image.seconds is None
    assert "seconds" not in older.image.to_json()  # written only when held
    seconds = phase_seconds(older)
    assert seconds["image"] is None and seconds["gate"] is None and seconds["range"] is None
    assert seconds["build"] is not None


def test_the_example_prints_setup_each_phase_the_rest_and_the_total() -> None:
    written = phased_report()
    written["image"]["seconds"] = 95.0
    lines = phase_lines(231.0, 1300.0, report_from_json(written))
    assert lines == [
        "setup  3 min 51 s",
        "image  1 min 35 s",
        "build  10 min 22 s",
        "gate   1 min 15 s",
        "range  3 min 50 s",
        "other  47 s (checks, downloads, report)",  # 1300 - 231 - 95 - 622 - 75 - 230
        "total  21 min 40 s",
    ]


def test_a_build_without_a_report_or_a_reused_one_shows_no_phase_as_this_runs() -> None:
    assert phase_lines(40.0, 45.0, None) == [
        "setup  40 s",
        "build  no times: the build wrote no report (it stopped before its end)",
        "total  45 s",
    ]
    reused = phased_report() | {"reused": {"key": "k" * 64, "from_run": "20261204-1"}}
    assert phase_lines(3.0, 9.0, report_from_json(reused)) == [
        "setup  3 s",
        "build  none: run 20261204-1's wheels reused (unchanged inputs)",
        "total  9 s",
    ]
    no_gate = phased_report()
    no_gate["attempts"][0]["phases"] = [p for p in no_gate["attempts"][0]["phases"] if p["python"]]
    assert [line for line in phase_lines(None, None, report_from_json(no_gate)) if "not timed" in line] == [
        "image  not timed",
        "gate   not timed",
        "range  not timed",
    ]


def test_seconds_read_as_a_person_would_say_them() -> None:
    assert [format_seconds(s) for s in (0.4, 37.0, 59.6, 60.0, 375.2)] == [
        "0 s",
        "37 s",
        "1 min 0 s",
        "1 min 0 s",
        "6 min 15 s",
    ]
