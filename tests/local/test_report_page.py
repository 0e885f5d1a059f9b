"""build-report.html in real headless Chromium: the plot is really drawn (each attempt's SVG has a
size on the page, its series path spans the time axis, the limit, prediction and OOM kill are
there), the screenshot is not blank, and the page fetches nothing.

Screenshots stay in the test's tmp dir (printed with -s): build-report.png (the whole page) and
chart-1.png (the killed attempt's chart)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wheelbuild.report import page as report_html

from tests.browser import chromium, count_near, distinct_colors, read_png
from tests.reportkit import phased_report, real_report, synthetic_report

BLUE, RED, ORANGE = (0x24, 0x63, 0xEB), (0xB3, 0x26, 0x1E), (0xD9, 0x77, 0x06)

MEASURE = """JSON.stringify({
  charts: [...document.querySelectorAll('svg.memory-chart')].map(svg => {
    const box = svg.getBoundingClientRect(), plot = svg.querySelector('rect.plot').getBoundingClientRect();
    const series = [...svg.querySelectorAll('path.series')];
    return {
      attempt: svg.dataset.attempt, x: box.x + scrollX, y: box.y + scrollY, width: box.width, height: box.height,
      plotWidth: plot.width, series: series.length,
      seriesWidth: series.map(p => p.getBoundingClientRect().width),
      seriesLength: series.map(p => p.getTotalLength()),
      limit: svg.querySelectorAll('line.limit').length, predicted: svg.querySelectorAll('line.predicted').length,
      oom: svg.querySelectorAll('line.oom').length, ticks: svg.querySelectorAll('line.unit-tick').length,
      peakOnly: svg.querySelectorAll('line.peak-only').length,
    };
  }),
  unitRows: document.querySelectorAll('table.units tbody tr').length,
  attemptRows: document.querySelectorAll('table.attempts tbody tr').length,
  resources: performance.getEntriesByType('resource').length,
  scripts: document.scripts.length,
})"""


def _run_with(tmp_path: Path, name: str, report: dict[str, Any]) -> Path:
    run = tmp_path / "runs" / name
    run.mkdir(parents=True)
    (run / "build-report.json").write_text(json.dumps(report, indent=2))
    return report_html.write_beside(run / "build-report.json")


def test_the_report_page_draws_every_attempt_in_chromium(tmp_path: Path) -> None:
    page_path = _run_with(tmp_path, "synthetic", synthetic_report())
    with chromium() as page:
        page.goto(page_path.as_uri())
        found = json.loads(page.evaluate(MEASURE))
        full = page.screenshot(tmp_path / "build-report.png")
        first = found["charts"][0]
        chart = page.screenshot(
            tmp_path / "chart-1.png",
            {"x": first["x"], "y": first["y"], "width": first["width"], "height": first["height"]},
        )
    print(f"\nscreenshots: {full} {chart}")
    charts = found["charts"]
    assert [c["attempt"] for c in charts] == ["1", "2"]
    for c in charts:
        assert c["width"] >= 600 and c["height"] >= 200, c  # laid out, not collapsed
        assert c["series"] == 1 and c["seriesLength"][0] > c["plotWidth"], c
        assert c["seriesWidth"][0] > 0.9 * c["plotWidth"], c  # the series spans the attempt
        assert c["limit"] == 1 and c["predicted"] == 1, c
    assert [c["oom"] for c in charts] == [1, 0]
    assert [c["ticks"] for c in charts] == [2, 5]
    assert found["unitRows"] == 7 and found["attemptRows"] == 2
    assert found["resources"] == 0 and found["scripts"] == 0  # self-contained: nothing fetched, no script
    width, height, _rows = read_png(full)
    assert width >= 1000 and height > 1000
    assert count_near(chart, BLUE) > 300  # the working set's line
    assert count_near(chart, RED) > 300  # the limit and the OOM kill
    assert count_near(chart, ORANGE) > 150  # the predicted peak, dashed
    assert distinct_colors(chart) > 50


def test_the_real_report_of_an_oom_and_retry_renders_in_chromium(tmp_path: Path) -> None:
    page_path = _run_with(tmp_path, "real", real_report())
    with chromium() as page:
        page.goto(page_path.as_uri())
        found = json.loads(page.evaluate(MEASURE))
        shot = page.screenshot(tmp_path / "build-report-real.png")
    print(f"\nscreenshot: {shot}")
    charts = found["charts"]
    assert len(charts) == 2 and all(c["width"] >= 600 and c["height"] >= 200 for c in charts)
    assert [c["peakOnly"] for c in charts] == [1, 1] and [c["oom"] for c in charts] == [1, 0]
    assert found["unitRows"] == 0 and found["attemptRows"] == 2
    assert count_near(shot, RED) > 300 and distinct_colors(shot) > 50


PHASES = """JSON.stringify({
  bands: [...document.querySelectorAll('svg.memory-chart rect.phase')].map(r => {
    const box = r.getBoundingClientRect();
    return {phase: r.dataset.phase, cls: r.getAttribute('class'), x: box.x, width: box.width, height: box.height,
            fill: getComputedStyle(r).fill};
  }),
  predicted: [...document.querySelectorAll('svg.memory-chart line.predicted')].map(l => {
    const box = l.getBoundingClientRect(); return {x: box.x, width: box.width};
  }),
  ring: (() => { const b = document.querySelector('circle.compile-peak').getBoundingClientRect(); return b.y + b.height / 2; })(),
  dot: (() => { const b = document.querySelector('circle.peak-dot').getBoundingClientRect(); return b.y + b.height / 2; })(),
  links: [...document.querySelectorAll('a')].map(a => a.getAttribute('href')),
  wheelCells: [...document.querySelectorAll('table.wheels tbody td')].map(td => td.innerText),
  resources: performance.getEntriesByType('resource').length,
  scripts: document.scripts.length,
})"""


def test_the_phases_and_the_wheels_proof_render_in_chromium(tmp_path: Path) -> None:
    """A two-Python attempt whose peak came while cp313's torch installed (made by the real code
    path: cibuildwheel's lines through BuildLog, AttemptResult and attempt_record), then the gate
    and the torch range; with its build.log and gate.log beside the page."""
    page_path = _run_with(tmp_path, "phased", phased_report())
    (page_path.parent / "build.log").write_text("=== attempt 1\n")
    (page_path.parent / "gate.log").write_text("=== import gate\n")
    page_path = report_html.write_beside(page_path.with_name("build-report.json"))
    with chromium() as page:
        page.goto(page_path.as_uri())
        found = json.loads(page.evaluate(PHASES))
        shot = page.screenshot(tmp_path / "build-report-phased.png")
    print(f"\nscreenshot: {shot}")
    bands = {b["phase"]: b for b in found["bands"]}
    assert len(bands) == 13 and all(b["height"] > 150 for b in bands.values())  # laid out, full height
    for name in (
        "cp311 torch install",
        "cp311 compile",
        "cp313 torch install",
        "cp313 compile",
        "torch range",
    ):
        assert bands[name]["width"] > 20, bands[name]
    # Each kind its own shade; the plot's background is none of them.
    fills = {
        bands[name]["fill"]
        for name in ("cp311 torch install", "cp311 compile", "cp311 repair", "import gate")
    }
    assert len(fills) == 4
    # The prediction is drawn over the two compiles, and only there.
    compiles = [bands["cp311 compile"], bands["cp313 compile"]]
    assert len(found["predicted"]) == 2
    for line, band in zip(found["predicted"], compiles, strict=True):
        assert abs(line["x"] - band["x"]) < 1.5 and abs(line["width"] - band["width"]) < 1.5
    assert found["ring"] > found["dot"]  # the compile's peak sits below the torch install's
    assert found["links"].count("build.log") == 1 and set(found["links"]) == {"build.log", "gate.log"}
    assert "torch==2.14.*" in found["wheelCells"]
    assert found["resources"] == 0 and found["scripts"] == 0  # the links are not fetched; nothing is
    assert count_near(shot, (0xEC, 0xE3, 0xFA), tolerance=6) > 2000  # the torch installs' shade
    assert distinct_colors(shot) > 50
