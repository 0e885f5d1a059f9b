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
from wheelbuild.attempt.buildlog import BuildLog, MemorySeries
from wheelbuild.attempt.config import AttemptConfig
from wheelbuild.engine import attempt_run
from wheelbuild.engine.watcher import AttemptWatcher
from wheelbuild.errors import ReportUnreadable
from wheelbuild.plan.memory_model import MIB
from wheelbuild.report import page as report_html
from wheelbuild.report.chart import MAX_PHASES
from wheelbuild.report.values import MAX_TEXT, size_text

from tests.clikit import WHEELBUILD
from tests.reportkit import REAL_REPORT, phased_report, range_report, real_report, step_done, synthetic_report


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


def test_an_attempt_keeps_its_steps_in_seconds_since_its_watch_began(
    make_config: Callable[..., AttemptConfig],
) -> None:
    """attempt_run reads the log with the monotonic clock; the memory series, the kills and the
    units are in seconds since the watcher began, and so are the steps (the chart's one axis)."""
    watcher = AttemptWatcher(client=None, attempt_id="run.1")  # never entered: no Docker here
    log = BuildLog()
    began = watcher.started
    log.feed("Building cp311-manylinux_x86_64 wheel", began + 2.0)
    log.feed("Running before_build...", began + 2.5)
    log.feed(step_done(80.0), began + 82.5)
    log.feed("Building wheel...", began + 82.5)
    log.end_step(began + 95.04)  # OOM-killed while compiling: attempt_run ends the step with the log
    result = attempt_run._attempt_result(make_config(), 1, 96.0, (), log, watcher)
    assert [(s.identifier, s.step, s.start, s.end) for s in result.steps] == [
        ("cp311-manylinux_x86_64", "Running before_build", 2.5, 82.5),
        ("cp311-manylinux_x86_64", "Building wheel", 82.5, 95.0),
    ]


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


# -- the torch, the gate, the range and the logs -------------------------------------------------


def _para(page: str, cls: str) -> str:
    """The text of the first <p> of class `cls`."""
    found = re.search(rf'<p class="{cls}">(.*?)</p>', page, re.S)
    assert found, f"no <p class={cls}>"
    return html.unescape(re.sub(r"<[^>]+>", "", found[1]))


def _wheel_cells(page: str) -> dict[str, str]:
    """The wheels table's first row, by column."""
    return dict(zip(report_html.WHEEL_COLUMNS, _rows(page, "wheels")[0], strict=True))


def test_the_page_says_which_torch_the_build_used_why_and_the_pin_mode() -> None:
    report = range_report()  # a real report: scripts/example's build for the newest cu130 torch
    page = report_html.render(report)
    torch = _para(page, "torch")
    assert torch.startswith(f"torch 2.14.1+cu130: {report['torch']['chosen']}. Pin: built")
    assert "2.15.0 is CUDA 13.2" in torch  # why the newest release on the index was not taken
    report["torch"]["pin"] = "proven"
    assert "Pin: proven (each wheel requires the torch releases it was proven to load with)" in _para(
        report_html.render(report), "torch"
    )


def test_each_wheel_shows_its_gate_verdict_torch_pin_range_and_full_sha256() -> None:
    report = range_report()
    (wheel,) = report["wheels"]
    cells = _wheel_cells(report_html.render(report, ["gate.log"]))
    assert cells["file"] == wheel["file"]
    assert cells["torch pin"] == "torch==2.14.*"  # METADATA's torch requirement
    assert cells["import gate"] == "passed under cp311 (gate.log)"
    assert cells["torch range"] == "cp311: imports with torch 2.13.0-2.15.0"
    assert cells["sha256"] == wheel["sha256"] and len(cells["sha256"]) == 64


def test_the_torch_range_section_lists_every_trial_and_the_pin_proven_would_write() -> None:
    report = range_report()
    report["torch_range"][0]["trials"].append(
        {"torch": "2.12.1", "static": "at::Tensor::foo() const", "imported": None, "detail": "not installed"}
    )
    page = report_html.render(report)
    section = page[page.index("<h2>Torch range</h2>") :]
    assert "imports with torch 2.13.0-2.15.0; fails on 2.12.1: at::Tensor::foo() const" in html.unescape(
        section
    )
    assert "--pin proven writes torch&gt;=2.13,&lt;2.16" in section
    assert [row[0] for row in _rows(section, "trials")] == [
        "2.12.1",
        "2.13.0",
        "2.14.1 (built with)",
        "2.15.0",
    ]
    assert _rows(section, "trials")[0][1:] == [
        "missing at::Tensor::foo() const",
        "import not run: not installed",
        "does not load",
    ]


def test_a_refused_wheel_shows_why_and_under_which_python() -> None:
    report = range_report()
    gate = report["gate"][0]
    gate["passed"] = False
    gate["imports"][0].update(
        ok=False,
        error="ImportError: /x/_C.so: undefined symbol: _ZN2at3fooEv",
        undefined_symbol="_ZN2at3fooEv",
        demangled="at::foo()",
    )
    page = report_html.render(report)
    assert _wheel_cells(page)["import gate"] == "refused under cp311: import wbdemo._C failed: at::foo()"
    (row,) = _rows(page, "gate")
    assert row[:3] == [gate["wheel"], "cp311", "refused: import wbdemo._C failed: at::foo()"]


def test_a_wheel_that_could_not_be_installed_for_the_gate_says_the_cause_in_one_line() -> None:
    report = range_report()
    report["gate"][0].update(
        passed=False,
        imports=[],
        install_error="Collecting torch\n\nERROR: No matching distribution found for torch==9.9",
    )
    assert _wheel_cells(report_html.render(report))["import gate"] == (
        "refused under cp311: it could not be installed: ERROR: No matching distribution found for torch==9.9"
    )


def test_a_build_without_the_gate_says_it_did_not_run() -> None:
    report = range_report()
    report["gate"] = {"skipped": "--no-gate: the wheels were not loaded; publish checks them statically only"}
    del report["torch_range"]
    page = report_html.render(report)
    cells = _wheel_cells(page)
    assert (
        cells["import gate"]
        == "not run: --no-gate: the wheels were not loaded; publish checks them statically only"
    )
    assert cells["torch range"] == "not tried (no torch range in this report)"
    assert "No torch range in this report: not tried." in page


def test_a_report_from_an_older_wheelbuild_renders_saying_what_it_does_not_record() -> None:
    """The real report of an OOM and retry, from before the torch choice, the pin mode, the
    torch range and the phases: the page draws what it has and says what is missing."""
    page = report_html.render(real_report())
    assert _para(page, "torch") == (
        "torch 2.11.0+cu130: why this release was not recorded (a report from before wheelbuild "
        "chose the newest). Pin mode not recorded (a report from before --pin: each wheel requires "
        "the torch minor it was built with)."
    )
    cells = _wheel_cells(page)
    assert cells["torch pin"] == "torch==2.11.*"
    assert cells["import gate"] == "passed under cp311"
    assert cells["torch range"] == "not tried (no torch range in this report)"
    parsed = dom(page)
    assert parsed.having("rect", "phase") == [] and parsed.having("circle", "compile-peak") == []
    predicted = parsed.having("line", "predicted")  # the plan's prediction, across each attempt
    assert predicted and {(line["x1"], line["x2"]) for line in predicted} == {("64", "710")}
    report = real_report()
    del report["gate"]  # from before the import gate
    assert _wheel_cells(report_html.render(report))["import gate"] == (
        "not recorded (a report from before the import gate)"
    )


def test_the_logs_are_linked_relatively_and_only_when_they_are_in_the_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "build-report.json").write_text(json.dumps(range_report()))
    page = report_html.write_beside(run / "build-report.json").read_text()
    assert dom(page).having("a") == [] and "logs: none beside this page" in _para(page, "logs")
    (run / "build.log").write_text("=== attempt 1\n")
    (tmp_path / "elsewhere.log").write_text("not this run's")
    (run / "gate.log").symlink_to(tmp_path / "elsewhere.log")  # a link is not what the run wrote
    page = report_html.write_beside(run / "build-report.json").read_text()
    assert [a["href"] for a in dom(page).having("a")] == ["build.log"]
    (run / "gate.log").unlink()
    (run / "gate.log").write_text("=== import gate\n")
    page = report_html.write_beside(run / "build-report.json").read_text()
    assert _para(page, "logs") == "logs: build.log · gate.log"
    assert {a["href"] for a in dom(page).having("a")} == {"build.log", "gate.log"}
    # Only the page's own names are ever linked, whatever a caller passes.
    assert dom(report_html.render(range_report(), ["../../etc/passwd", "http://x/"])).having("a") == []


CSP = "default-src 'none'; style-src 'unsafe-inline'"


def test_the_page_keeps_its_strict_csp_and_fetches_nothing() -> None:
    page = report_html.render(phased_report(), report_html.LOGS)
    parsed = dom(page)
    (policy,) = [m for m in parsed.having("meta") if m.get("http-equiv") == "Content-Security-Policy"]
    assert policy["content"] == CSP
    assert "<script" not in page and not any("src" in attrs for _, attrs in parsed.elements)
    assert {a["href"] for a in parsed.having("a")} == {"build.log", "gate.log"}  # relative, in the run


# -- phases on the chart, like with like ---------------------------------------------------------


def test_the_chart_shades_each_phase_of_each_python_and_the_gate_after_the_attempt() -> None:
    parsed = dom(report_html.render(phased_report()))
    bands = parsed.having("rect", "phase")
    assert [b["data-phase"] for b in bands] == [
        "copy in", "before all",
        "cp311 setup", "cp311 torch install", "cp311 compile", "cp311 repair",
        "cp313 setup", "cp313 torch install", "cp313 compile", "cp313 repair",
        "copy out", "import gate", "torch range",
    ]  # fmt: skip
    kinds = {b["data-phase"]: b["class"] for b in bands}
    assert (
        kinds["cp313 torch install"] == "phase phase-torch"
        and kinds["cp311 compile"] == "phase phase-compile"
    )
    assert kinds["cp311 repair"] == "phase phase-repair" and kinds["import gate"] == "phase phase-gate"
    # The bands follow each other along the time axis, the gate's after the attempt's end.
    xs = [float(b["x"] or 0) for b in bands]
    assert xs == sorted(xs)
    plot = parsed.having("rect", "plot")[0]
    right = float(plot["x"] or 0) + float(plot["width"] or 0)
    torch_range = bands[-1]
    assert float(torch_range["x"] or 0) + float(torch_range["width"] or 0) == pytest.approx(right, abs=0.2)


def test_the_model_is_compared_with_the_compiles_peak_not_with_torchs_install() -> None:
    report = phased_report()
    (attempt,) = report["attempts"]
    page = report_html.render(report)
    facts = _para(page, "facts")
    # The attempt's peak was taken while cp313's torch installed; the model predicts the compile's.
    assert "peak 5.9 GiB of 8.0 GiB, during cp313 torch install" in facts
    compiled = attempt["peak_memory_compile"]
    assert attempt["peak_error"] == round(attempt["predicted_peak"] / compiled - 1, 3) == -0.244
    assert (
        f"compile's peak {size_text(compiled)}, predicted "
        f"{size_text(attempt['predicted_peak'])}: model off by -24%"
    ) in facts
    parsed = dom(page)
    # The predicted peak is drawn over the two compiles only, and the compile's highest sample marked.
    compiles = [b for b in parsed.having("rect", "phase-compile")]
    spans = [(float(b["x"] or 0), float(b["x"] or 0) + float(b["width"] or 0)) for b in compiles]
    predicted = [
        (float(line["x1"] or 0), float(line["x2"] or 0)) for line in parsed.having("line", "predicted")
    ]
    assert len(predicted) == len(spans) == 2
    for drawn, band in zip(predicted, spans, strict=True):
        assert drawn == pytest.approx(band, abs=0.2)
    (ring,) = parsed.having("circle", "compile-peak")
    (dot,) = parsed.having("circle", "peak-dot")
    assert float(ring["cy"] or 0) > float(dot["cy"] or 0)  # lower on the chart: less memory
    assert f"highest sample while compiling: {size_text(compiled)}" in page


def test_the_phase_table_gives_each_phases_times_and_highest_sample() -> None:
    rows = _rows(report_html.render(phased_report()), "phases")
    by_phase = {(row[0], row[1]): row[2:] for row in rows}
    assert by_phase[("cp313", "torch install")] == ["5 min 16 s", "6 min 40 s", "84.0 s", "5.9 GiB"]
    assert by_phase[("cp311", "compile")][:3] == ["90.0 s", "5 min 0 s", "3 min 30 s"]
    assert by_phase[("—", "import gate")][3] == "in its own container"


def test_hostile_values_in_the_torch_gate_range_and_phases_are_escaped_and_bounded() -> None:
    report = phased_report()
    report["torch"]["chosen"] = HOSTILE
    report["torch"]["variant"] = HOSTILE
    report["wheels"][0]["torch_requirement"] = [HOSTILE]
    report["wheels"][0]["sha256"] = HOSTILE
    gate = report["gate"][0]
    gate.update(passed=False, python=HOSTILE, torch=HOSTILE, install_error=HOSTILE * 1000, imports=[])
    gate["smoke"] = {"status": HOSTILE, "reason": HOSTILE}
    report["torch_range"][0]["python"] = HOSTILE
    report["torch_range"][0]["trials"][1]["static"] = HOSTILE
    report["torch_range"].append({"wheel": "w", "built_with": "9" * 5000, "trials": [{"torch": "9" * 5000}]})
    report["torch_range"].append(
        {"wheel": "w", "built_with": "2", "trials": [{"torch": "2", "imported": True}]}
    )
    report["torch_range"].append({"wheel": 7, "trials": "x"})
    phases = report["attempts"][0]["phases"]
    phases[3]["step"] = HOSTILE
    phases[4]["python"] = HOSTILE
    phases.append({"step": "Building wheel", "start_s": 10.0**300, "end_s": 10.0**301})
    phases += [{"step": "Building wheel", "start_s": 1.0, "end_s": 2.0}] * 10_000
    page = report_html.render(report)
    parsed = dom(page)
    assert "<script" not in page and "<img" not in page
    assert not any(k.startswith("on") for _, attrs in parsed.elements for k in attrs)
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 10
    assert len(parsed.having("rect", "phase")) <= MAX_PHASES
    assert "1 phase(s)" in _para(page, "note out-of-range")  # the one past any real time
    assert "2 gate or torch range record(s)" in page  # the 5000-digit release and the junk entry
    assert "under cp311: imports with torch 2" not in page and ">=2.0,<2.1" in html.unescape(page)
    longest = max(len(t) for t in dom(page.split("<body>", 1)[1]).text)
    assert longest < 2 * MAX_TEXT + 200  # a 57 KB install error is one short line


def test_a_page_that_is_a_link_is_replaced_never_written_through(tmp_path: Path) -> None:
    """An unpacked CI artifact whose build-report.html links to a file of the user's: the page
    replaces the link, and the file it pointed at is untouched; a directory there is one line."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "build-report.json").write_text(json.dumps(range_report()))
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's own file\n")
    (run / "build-report.html").symlink_to(precious)
    page = report_html.write_beside(run / "build-report.json")
    assert not page.is_symlink() and page.read_text().startswith("<!DOCTYPE html>")
    assert precious.read_text() == "the user's own file\n"
    page.unlink()
    page.mkdir()
    with pytest.raises(ReportUnreadable, match="is a directory, so the page cannot be written there"):
        report_html.write_beside(run / "build-report.json")
    assert sorted(p.name for p in run.iterdir()) == [
        "build-report.html",
        "build-report.json",
    ]  # no scratch left
