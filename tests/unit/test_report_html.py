"""build-report.html: the memory series the engine records for it, and the pure renderer."""

from __future__ import annotations

import html
import itertools
import json
import re
import subprocess
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from wheelbuild import report_html
from wheelbuild.plan.memory_model import MIB
from wheelbuild.run.buildlog import BuildLog, MemorySeries

from tests.reportkit import REAL_REPORT, real_report, synthetic_report

from .conftest import WHEELBUILD


class _Dom(HTMLParser):
    """Every element's tag and attributes, in order, and the text, for assertions."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, tag: str, cls: str = "") -> list[dict[str, str | None]]:
        return [a for t, a in self.elements if t == tag and cls in [*(a.get("class") or "").split(), ""]]


def dom(page: str) -> _Dom:
    parsed = _Dom()
    parsed.feed(page)
    return parsed


def test_the_memory_series_stays_under_its_cap_and_keeps_every_peak() -> None:
    series = MemorySeries(cap=100, step_s=2.0)
    for t in range(8280):  # a 2.3 h flash-attn attempt, sampled once a second
        series.add(float(t), 1000 + (50_000 if t == 4321 else t % 7))
    assert len(series.points) <= 100
    assert series.step_s == 2.0 * 2**6  # doubled until 8280 s fit in 100 points
    assert max(v for _, v in series.points) == 51_000  # a one-second spike survives downsampling
    times = [t for t, _ in series.points]
    assert times == sorted(times) and times[0] == 0.0
    assert all(b - a == series.step_s for a, b in itertools.pairwise(times))


def test_the_build_log_notes_when_each_unit_finished() -> None:
    log = BuildLog()
    log.feed("Building cp311-manylinux_x86_64 wheel", 100.0)
    log.feed("  [1/2] nvcc -c csrc/saxpy.cu -o /project/build/csrc/saxpy.o", 112.5)
    log.feed("  [2/2] c++ -c csrc/binding.cpp -o /project/build/csrc/binding.o")  # no time: not noted
    assert log.finished_at == {"cp311-manylinux_x86_64:saxpy.o": 112.5}
    assert log.units_finished == 2


def test_an_attempt_record_carries_its_series_kills_units_and_prediction() -> None:
    killed, done = synthetic_report()["attempts"]
    assert killed["oom_at_s"] == [299.0] and done["oom_at_s"] == []
    assert killed["predicted_peak"] > done["predicted_peak"]  # the halved plan predicts less
    assert 0 < len(done["memory_series"]["points"]) <= 120  # 900 samples, bounded
    assert done["memory_series"]["step_s"] == 8.0
    assert [u["unit"] for u in killed["units"]] == [
        "cp311-manylinux_x86_64:reduce.o",
        "cp311-manylinux_x86_64:relu.o",
    ]
    reduce = killed["units"][0]
    # reduce.o is csrc/reduce.cu in the wbdemo profile: 100 MiB + 100 MiB per arch at 2 threads, +5%.
    assert reduce["finished_s"] == 80.0 and reduce["predicted_peak"] == 315 * MIB
    json.dumps(killed)  # the record is plain JSON


def test_each_attempt_is_a_chart_with_its_limit_prediction_series_and_kills() -> None:
    page = report_html.render(synthetic_report())
    parsed = dom(page)
    charts = parsed.having("svg", "memory-chart")
    assert [c["data-attempt"] for c in charts] == ["1", "2"]
    assert len(parsed.having("path", "series")) == 2
    assert len(parsed.having("line", "limit")) == 2
    assert len(parsed.having("line", "predicted")) == 2
    assert len(parsed.having("line", "oom")) == 1  # only the first attempt was killed
    assert len(parsed.having("line", "unit-tick")) == 2 + 5
    text = " ".join(parsed.text)
    assert "OOM-killed" in text and "succeeded" in text and "OOM kill" in text
    assert "docker oom event x1; State.OOMKilled; cgroup oom_kill +1" in text
    # The units table: one row per finished unit, with the model's prediction.
    units = page.split('<table class="units">')[1].split("</table>")[0]
    assert units.count("<tr>") == 1 + 7 and "reduce.o" in units and "315.0 MiB" in units
    attempts = page.split('<table class="attempts">')[1].split("</table>")[0]
    assert attempts.count("<tr>") == 1 + 2
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")  # nothing fetched


def test_the_real_report_of_an_oom_and_retry_renders_what_it_has() -> None:
    page = report_html.render(real_report())
    parsed = dom(page)
    assert len(parsed.having("svg", "memory-chart")) == 2
    assert parsed.having("path", "series") == []  # written before reports carried a series
    assert len(parsed.having("line", "peak-only")) == 2
    assert len(parsed.having("line", "oom")) == 1
    text = " ".join(parsed.text)
    assert "OOM kill (time not recorded)" in text and "No memory series in this report" in text
    assert "wbdemo-0.1.0+cu130torch2.11-cp311-cp311-manylinux_2_34_x86_64.whl" in text


@pytest.mark.parametrize("report", [{}, [], None, "text", {"attempts": "no", "plan": 3, "recipe": []}])
def test_an_empty_or_malformed_report_still_renders_a_page(report: Any) -> None:
    page = report_html.render(report)
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    assert "This report records no attempt." in page and "unknown package" in page


def test_junk_values_are_skipped_not_drawn() -> None:
    report = synthetic_report()
    attempt = report["attempts"][0]
    attempt["memory_series"]["points"] = [
        [0, 1],
        ["x", 2],
        [float("nan"), 3],
        [1, float("inf")],
        [2],
        7,
        [3, True],
    ]
    attempt["oom_at_s"] = ["soon", None, 12]
    attempt["units"] = [{"unit": 5, "finished_s": "late"}, "junk"]
    attempt["duration_s"] = float("nan")
    page = report_html.render(report)
    path = dom(page).having("path", "series")[0]["d"] or ""
    assert path.count("L") == 0 and path.startswith("M")  # one good point out of seven
    assert "nan" not in page.lower().replace("nanoseconds", "") and "inf" not in page.split("<style>")[0]


HOSTILE = '"><script>alert(1)</script><img src=x onerror=alert(2)>'


def test_hostile_names_and_log_lines_are_escaped_everywhere() -> None:
    report = synthetic_report(name=HOSTILE)
    report["run_id"] = HOSTILE
    report["torch"]["variant"] = HOSTILE
    report["pythons"] = [HOSTILE]
    report["plan"]["reasons"] = [HOSTILE]
    attempt = report["attempts"][0]
    attempt["attempt"] = HOSTILE
    attempt["oom_evidence"] = [f"log: {HOSTILE}"]
    attempt["units"][0]["unit"] = f"{HOSTILE}:{HOSTILE}"
    report["wheels"][0]["file"] = HOSTILE
    page = report_html.render(report)
    parsed = dom(page)
    assert {t for t, _ in parsed.elements} <= {
        "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "details", "summary",
        "ul", "li", "span", "i", "section", "strong", "svg", "rect", "line", "text", "path", "circle",
        "div", "table", "thead", "tbody", "tr", "th", "td", "code",
    }  # fmt: skip
    assert not any(k.startswith("on") for _, attrs in parsed.elements for k in attrs)
    assert "<script" not in page and "<img" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 8


def test_wheelbuild_report_writes_the_page_of_an_existing_run(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "20261130-070214-35ee08"
    run.mkdir(parents=True)
    (run / "build-report.json").write_bytes(REAL_REPORT.read_bytes())
    done = subprocess.run([WHEELBUILD, "report", str(run)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(run / "build-report.html")
    assert (run / "build-report.html").read_text() == report_html.render(real_report())
    missing = subprocess.run(
        [WHEELBUILD, "report", str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert missing.returncode != 0 and "cannot read a build report" in missing.stderr


def _rows(page: str, cls: str) -> list[list[str]]:
    """The text of each body row's cells in the table of class `cls`."""
    table = page.split(f'<table class="{cls}">', 1)[1].split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    return [
        [html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<td>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", body)
    ]


def test_the_wheel_table_says_which_pythons_each_wheel_serves() -> None:
    """An abi3 wheel (the report's `abi3` entry, as tests/integration/test_abi3.py's build wrote
    it) names the Python that built it, those that reused it and those the gate loaded it under;
    a one-Python wheel its own tag."""
    report = synthetic_report()
    abi3 = "wbdemo-0.1.0+cu130torch2.11-cp310-abi3-manylinux1_x86_64.manylinux_2_5_x86_64.whl"
    one = "wbdemo-0.1.0+cu130torch2.11-cp311-cp311-manylinux_2_34_x86_64.whl"
    report["wheels"] = [{"file": abi3, "size": 1000, "sha256": "ab" * 32}, {"file": one, "size": 900}]
    report["abi3"] = [
        {"wheel": abi3, "tag": "cp310-abi3", "built_under": "cp311", "reused_under": ["cp313"],
         "gated_under": ["cp311", "cp313"]},
        {"wheel": "<b>junk</b>", "tag": 5},
    ]  # fmt: skip
    rows = [" ".join(row) for row in _rows(report_html.render(report), "wheels")]
    assert rows[0].startswith(f"{abi3} cp310-abi3: one wheel for every Python; built under cp311; ")
    assert "reused under cp313; gated under cp311, cp313" in rows[0]
    assert rows[1].startswith(f"{one} cp311 ")


def test_the_contract_shows_what_the_build_set_rewrote_linked_and_kept_off_escaped() -> None:
    report = synthetic_report()
    report["archs"] = [120]
    report["contract"] = {
        "keep_package_archs": False,
        "ptx": [120],
        "switches": ["EVIL=<script>alert(1)</script>: setup.py builds from source only when it is that"],
        "nvcc_rewrites": ["rewrote archs sm_80 -> sm_120"],
        "link_checks": ["cp311-manylinux_x86_64: linked here: 1 of 1 shared objects (_k.so)"],
        "network": "off",
    }
    page = report_html.render(report)
    section = page[page.index("Built here, for the archs asked") :]
    assert "<tr><td>archs</td><td>exactly sm_120, with PTX for compute_120</td></tr>" in section
    assert "<script>" not in section and "EVIL=&lt;script&gt;alert(1)&lt;/script&gt;" in section
    assert "<tr><td>nvcc rewrote</td><td>rewrote archs sm_80 -&gt; sm_120</td></tr>" in section
    assert "<tr><td>network while building</td><td>off</td></tr>" in section


def test_a_report_from_before_the_contract_says_it_was_not_recorded() -> None:
    page = report_html.render(synthetic_report())
    assert "Not recorded in this report." in page[page.index("Built here, for the archs asked") :]


# -- numbers no machine measures ----------------------------------------------------------------

CGROUP_V1_NO_LIMIT = 9223372036854771712  # memory.limit_in_bytes of a v1 cgroup without a limit


def test_a_cgroup_without_a_limit_is_drawn_as_no_limit_and_absurd_sizes_are_left_out(
    tmp_path: Path, run_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    report = synthetic_report()
    killed = report["attempts"][0]
    killed["memory_limit_seen"] = CGROUP_V1_NO_LIMIT
    killed["peak_memory"] = 2**64 - 1  # a JSON number the reader takes, but no machine's size
    killed["duration_s"] = 10.0**15
    killed["memory_series"]["points"].append([5.0, 2**63])
    (tmp_path / "build-report.json").write_text(json.dumps(report))
    done = run_cli("report", str(tmp_path), capped=True)  # a renderer sized by a number fails
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "build-report.html").read_text()
    first, second = (
        section.split("</section>")[0] for section in page.split('<section class="attempt"')[1:3]
    )
    assert "no limit" in first and "no limit" not in second  # the second attempt ran in 3 GiB
    assert 'class="limit"' not in first and 'class="limit"' in second  # no line drawn for it
    for chart in (first, second):
        assert 1 < chart.count('class="grid"') <= 7  # gridlines bounded whatever the top
    note = dom(first).having("p", "out-of-range")
    assert note and "peak_memory, duration_s, 1 memory sample(s)" in first
    killed_row = _rows(page, "attempts")[0]
    assert killed_row[4:6] == ["no limit", "out of range"]  # the limit and peak cells


@pytest.mark.parametrize(
    "number",
    ["1e308", "1e400", str(10**400), "9" * 5000, "NaN", "-Infinity", str(2**64 + 1)],
    ids=["1e308", "inf-by-exponent", "10**400", "5000-digits", "nan", "minus-infinity", "2**64+1"],
)
def test_a_report_with_a_number_past_any_real_range_is_refused_in_one_line(
    tmp_path: Path, run_cli: Callable[..., subprocess.CompletedProcess[str]], number: str
) -> None:
    report = synthetic_report()
    text = json.dumps(report).replace('"memory_limit_seen": 3221225472', f'"memory_limit_seen": {number}', 1)
    assert number in text
    (tmp_path / "build-report.json").write_text(text)
    done = run_cli("report", str(tmp_path), capped=True)  # a renderer sized by a number fails
    assert done.returncode == 19, done.stderr
    cause, remedy = done.stderr.splitlines()  # one line of cause, one of remedy, no traceback
    assert cause.startswith("error: cannot read a build report") and remedy.startswith("remedy:")
    assert "range" in cause or "not a number" in cause
    assert not (tmp_path / "build-report.html").exists()


def test_numbers_past_a_floats_range_given_to_the_renderer_are_left_out() -> None:
    """render() draws any object it is handed (not only what the reader let through)."""
    report = synthetic_report()
    attempt = report["attempts"][0]
    attempt["peak_memory"] = 10**400
    attempt["predicted_peak"] = -(10**400)
    attempt["memory_series"]["points"] = [[0, 10**400], [1, 1024**3]]
    page = report_html.render(report)
    first = page.split('<section class="attempt"')[1]
    assert "peak_memory, predicted_peak, 1 memory sample(s)" in first
    assert (dom(first).having("path", "series")[0]["d"] or "").count("L") == 0  # the one good sample
