"""build-report.html: a build report as one self-contained page (inline SVG and CSS, no script,
nothing fetched), what a user opens to see why an attempt was killed.

For every attempt: the container's memory over time against its limit and the plan's predicted
peak, OOM kills marked, units finished ticked along the time axis; then the units (when each
finished, what the model predicted), the attempts and the wheels as tables.

:func:`render` is pure: a report (the JSON object build.py writes) in, the page out. A report is
read as untrusted (package names, evidence lines and paths come from the build): every value is
checked for its type before use and escaped, and one without a field (an older report, one from
before the memory series) is drawn with what it has.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .report import read_report_json
from .report_chart import (
    MAX_BYTES,
    MAX_SECONDS,
    OUT_OF_RANGE,
    chart,
    number_of,
    out_of_range,
    seconds_text,
    size_text,
    within,
)
from .wheel.abi3 import python_tag

__all__ = ["HTML_NAME", "load_report", "render", "write_beside"]

HTML_NAME = "build-report.html"
MAX_POINTS = 5000  # drawn per attempt; a report holds at most ~600, a hostile one may hold more
MAX_ROWS = 5000  # unit rows in the table


def _text(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else json.dumps(value)[:200]


def _plain(value: object) -> str:
    """A number as written (1, not 1.0), anything else as text."""
    n = number_of(value)
    return _fmt_num(int(n) if n is not None and n.is_integer() else n) if n is not None else _text(value)


def _dict(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> Sequence[object]:
    return value if isinstance(value, list) else []


def _e(value: object) -> str:
    return html.escape(_plain(value))


def _fmt_num(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class ChartedAttempt:
    """What the chart of one attempt needs, read and checked."""

    number: str
    limit: float | None
    predicted: float | None
    peak: float | None
    duration: float | None
    points: tuple[tuple[float, float], ...]
    oom_at: tuple[float, ...]
    oom_evidence: tuple[str, ...]
    unit_times: tuple[float, ...]
    units_finished: float | None
    returncode: float | None
    unlimited: bool = False  # the container saw no memory limit (cgroup v1's 2**63 - 4096)
    left_out: tuple[str, ...] = ()  # the fields out of range, not drawn: "peak_memory"
    samples_left_out: int = 0  # memory samples out of range, not drawn

    @property
    def killed(self) -> bool:
        return bool(self.oom_evidence)

    @property
    def limit_text(self) -> str:
        return "no limit" if self.unlimited else self.size("limit", self.limit)

    @property
    def duration_text(self) -> str:
        return OUT_OF_RANGE if "duration_s" in self.left_out else seconds_text(self.duration)

    def size(self, key: str, value: float | None) -> str:
        """The size read from the report's *key*, or that it was out of range."""
        return OUT_OF_RANGE if key in self.left_out else size_text(value)

    @property
    def outcome(self) -> str:
        if self.killed:
            return "OOM-killed"
        if self.returncode == 0:
            return "succeeded"
        return "failed" if self.returncode is None else f"failed (exit {self.returncode:g})"


def _attempt(record: Mapping[str, object], plan: Mapping[str, object], last: bool) -> ChartedAttempt:
    series = _dict(record.get("memory_series"))
    points = []
    dropped = 0
    for point in _list(series.get("points"))[:MAX_POINTS]:
        pair = _list(point)
        if len(pair) != 2:
            continue
        t, v = number_of(pair[0]), number_of(pair[1])
        if t is not None and v is not None and t <= MAX_SECONDS and v <= MAX_BYTES:
            points.append((max(0.0, t), max(0.0, v)))
        elif (t is not None or out_of_range(pair[0], MAX_SECONDS)) and (
            v is not None or out_of_range(pair[1], MAX_BYTES)
        ):
            dropped += 1  # numbers, but past what a clock or a machine reaches; junk goes unmentioned
    points.sort()
    units = [_dict(u) for u in _list(record.get("units"))[:MAX_ROWS]]
    # Reports from before attempts carried their own prediction: the plan's is the last attempt's.
    predicted = record.get("predicted_peak")
    if number_of(predicted) is None and last:
        predicted = plan.get("predicted_peak")
    seen = number_of(record.get("memory_limit_seen"))
    unlimited = seen is not None and seen > MAX_BYTES  # cgroup v1 writes "no limit" as 2**63 - 4096
    limit = None if unlimited else (record.get("memory_limit_seen") if seen else record.get("memory"))
    sizes = {"limit": limit, "peak_memory": record.get("peak_memory"), "predicted_peak": predicted}
    left_out = [key for key, value in sizes.items() if out_of_range(value, MAX_BYTES)]
    left_out += ["duration_s"] if out_of_range(record.get("duration_s"), MAX_SECONDS) else []
    return ChartedAttempt(
        number=_plain(record.get("attempt")),
        limit=within(limit, MAX_BYTES),
        predicted=within(predicted, MAX_BYTES),
        peak=within(record.get("peak_memory"), MAX_BYTES),
        duration=within(record.get("duration_s"), MAX_SECONDS),
        points=tuple(points),
        oom_at=_times(_list(record.get("oom_at_s"))[:100]),
        oom_evidence=tuple(_text(e) for e in _list(record.get("oom_evidence"))[:20]),
        unit_times=_times([u.get("finished_s") for u in units]),
        units_finished=number_of(record.get("units_finished")),
        returncode=number_of(record.get("returncode")),
        unlimited=unlimited,
        left_out=tuple(left_out),
        samples_left_out=dropped,
    )


def _times(values: Sequence[object]) -> tuple[float, ...]:
    """The times among *values* that can be drawn: seconds from 0 to MAX_SECONDS."""
    return tuple(t for t in (within(v, MAX_SECONDS) for v in values) if t is not None)


def _model_error(record: Mapping[str, object]) -> list[str]:
    """The model against the attempt, where the report has it: the peak's error and the units'."""
    found = []
    if (peak := number_of(record.get("peak_error"))) is not None:
        found.append(f"model off by {peak:+.0%} on the peak")
    if (units := number_of(record.get("unit_error"))) is not None:
        found.append(f"{units:.0%} per unit on average")
    return found


def _attempt_section(a: ChartedAttempt, record: Mapping[str, object]) -> str:
    facts = [
        f'<strong class="outcome {"bad" if a.outcome != "succeeded" else "good"}">{html.escape(a.outcome)}</strong>',
        f"MAX_JOBS={_e(record.get('max_jobs'))}, NVCC_THREADS={_e(record.get('nvcc_threads'))}",
        f"peak {a.size('peak_memory', a.peak)} of {a.limit_text}",
        f"predicted {a.size('predicted_peak', a.predicted)}",
        *_model_error(record),
        f"units finished {_e(a.units_finished) if a.units_finished is not None else '—'}",
        f"{a.duration_text}",
    ]
    why = ""
    if a.killed:
        why = (
            '<p class="evidence">OOM evidence: ' + "; ".join(html.escape(e) for e in a.oom_evidence) + "</p>"
        )
    note = (
        ""
        if a.points or a.samples_left_out
        else (
            '<p class="note">No memory series in this report (written before wheelbuild recorded one): '
            "only the sampled peak is drawn.</p>"
        )
    )
    left_out = [*a.left_out, *([f"{a.samples_left_out} memory sample(s)"] if a.samples_left_out else [])]
    if left_out:
        note += (
            '<p class="note out-of-range">Not drawn, out of any real range (a damaged report?): '
            f"{html.escape(', '.join(left_out))}.</p>"
        )
    return (
        f'<section class="attempt" id="attempt-{html.escape(a.number)}">\n'
        f"<h3>Attempt {html.escape(a.number)}</h3>\n"
        f'<p class="facts">{" · ".join(facts)}</p>\n{why}{note}\n{chart(a)}\n</section>'
    )


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], cls: str, empty: str) -> str:
    """A table whose cells are already escaped HTML."""
    if not rows:
        return f'<p class="note">{html.escape(empty)}</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "\n".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead>\n'
        f"<tbody>\n{body}\n</tbody></table></div>"
    )


def _unit_rows(records: Sequence[Mapping[str, object]]) -> list[list[str]]:
    rows = []
    for record in records:
        for unit in _list(record.get("units"))[:MAX_ROWS]:
            u = _dict(unit)
            python, _, name = _text(u.get("unit")).rpartition(":")
            rows.append(
                [
                    html.escape(name),
                    html.escape(python.removesuffix("-manylinux_x86_64")),
                    _e(record.get("attempt")),
                    seconds_text(u.get("finished_s")),
                    size_text(u.get("predicted_peak")),
                    size_text(u.get("measured_peak")),
                    seconds_text(u.get("predicted_s")),
                    seconds_text(u.get("measured_s")),
                ]
            )
    return rows[:MAX_ROWS]


def _attempt_rows(
    attempts: Sequence[ChartedAttempt], records: Sequence[Mapping[str, object]]
) -> list[list[str]]:
    rows = []
    for a, r in zip(attempts, records, strict=True):
        rows.append(
            [
                html.escape(a.number),
                html.escape(a.outcome),
                _e(r.get("max_jobs")),
                _e(r.get("nvcc_threads")),
                a.limit_text,
                a.size("peak_memory", a.peak),
                size_text(r.get("peak_memory_compile")),
                a.size("predicted_peak", a.predicted),
                _e(a.units_finished) if a.units_finished is not None else "—",
                f"{_e(r.get('cache_hits'))} / {_e(r.get('cache_misses'))}",
                a.duration_text,
                seconds_text(r.get("build_s")),
                "; ".join(html.escape(e) for e in a.oom_evidence) or "—",
            ]
        )
    return rows


def _contract_rows(report: Mapping[str, object]) -> list[list[str]]:
    """The report's contract: the archs compiled, the switches set, what nvcc rewrote, the link
    checks and the network, one row each that the report holds."""
    contract = _dict(report.get("contract"))
    if not contract:
        return []
    archs = ", ".join(f"sm_{_text(a)}" for a in _list(report.get("archs")))
    ptx = ", ".join(f"compute_{_text(a)}" for a in _list(contract.get("ptx")))
    kept = "the package's own arch list (--keep-package-archs)" if contract.get("keep_package_archs") else ""
    rows = [
        ("archs", kept or f"exactly {archs}" + (f", with PTX for {ptx}" if ptx else "")),
        ("switches set", "; ".join(_text(s) for s in _list(contract.get("switches"))) or "none"),
        ("nvcc rewrote", "; ".join(_text(s) for s in _list(contract.get("nvcc_rewrites"))) or "nothing"),
        ("link check", "; ".join(_text(s) for s in _list(contract.get("link_checks"))) or "not recorded"),
        ("network while building", _text(contract.get("network")) or "not recorded"),
    ]
    return [[_e(what), _e(detail)] for what, detail in rows]


def _pythons(report: Mapping[str, object], wheel: str) -> str:
    """Which Pythons a wheel serves: for an abi3 wheel (the report's `abi3` entries), the Python
    that built it, those that reused it and those the gate loaded it under; else its own tag."""
    for entry in _list(report.get("abi3"))[:MAX_ROWS]:
        use = _dict(entry)
        if _text(use.get("wheel")) != wheel:
            continue
        parts = [f"{_text(use.get('tag'))}: one wheel for every Python"]
        for key, label in (
            ("built_under", "built under"),
            ("reused_under", "reused under"),
            ("gated_under", "gated under"),
        ):
            value = use.get(key)
            names = (
                [_text(v) for v in _list(value)]
                if isinstance(value, list)
                else [_text(value)]
                if value
                else []
            )
            if names:
                parts.append(f"{label} {', '.join(names)}")
        return html.escape("; ".join(parts))
    return html.escape(python_tag(wheel) or "")


def _wheel_rows(report: Mapping[str, object]) -> list[list[str]]:
    rows = []
    for wheel in _list(report.get("wheels"))[:MAX_ROWS]:
        w = _dict(wheel)
        sass = sorted(
            {
                int(a)
                for module in _dict(w.get("extension_modules")).values()
                for a in _list(_dict(module).get("sass"))
                if isinstance(a, int | float) and number_of(a) is not None
            }
        )
        rows.append(
            [
                html.escape(_text(w.get("file"))),
                _pythons(report, _text(w.get("file"))),
                size_text(w.get("size")),
                html.escape(", ".join(f"sm_{a}" for a in sass) or "none"),
                f"<code>{html.escape(_text(w.get('sha256'))[:16])}…</code>",
            ]
        )
    return rows


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1d2330; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
h3 { font-size: 15px; margin: 18px 0 4px; }
.meta, .note { color: #5a6273; } .facts { margin: 2px 0 6px; }
.outcome.bad { color: #b3261e; } .outcome.good { color: #1e7b34; }
.evidence { color: #b3261e; margin: 0 0 6px; font-family: ui-monospace, monospace; font-size: 12px; }
svg.memory-chart { display: block; width: 100%; max-width: 860px; height: auto; }
.plot { fill: #fafbfd; stroke: #c9ced8; }
.grid { stroke: #e3e6ec; } .axis { fill: #5a6273; font-size: 11px; }
.series { fill: none; stroke: #2463eb; stroke-width: 2; stroke-linejoin: round; }
.peak-only { stroke: #2463eb; stroke-width: 2; stroke-dasharray: 2 3; }
.limit { stroke: #b3261e; stroke-width: 2; } .predicted { stroke: #d97706; stroke-width: 2; stroke-dasharray: 7 4; }
.oom { stroke: #b3261e; stroke-width: 2; stroke-dasharray: 3 3; }
.unit-tick { stroke: #1e7b34; stroke-width: 2; } .peak-dot { fill: #2463eb; }
.scroll { overflow-x: auto; }
.label { font-size: 12px; } .limit-label, .oom-label { fill: #b3261e; } .predicted-label { fill: #d97706; }
.peak-only-label { fill: #2463eb; }
.legend span { margin-right: 14px; } .legend i { display: inline-block; width: 18px; height: 3px;
  vertical-align: middle; margin-right: 4px; }
table { border-collapse: collapse; margin: 4px 0 12px; font-size: 13px; }
th, td { border: 1px solid #d6dae2; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f1f3f7; } td { font-variant-numeric: tabular-nums; }
code { font-family: ui-monospace, monospace; font-size: 12px; }
"""

_LEGEND = (
    '<p class="legend"><span><i style="background:#2463eb"></i>working set (highest sample per interval)</span>'
    '<span><i style="background:#b3261e"></i>memory limit</span>'
    '<span><i style="background:#d97706"></i>plan\'s predicted peak</span>'
    '<span><i style="background:#b3261e;height:10px;width:2px"></i>OOM kill</span>'
    '<span><i style="background:#1e7b34;height:8px;width:2px"></i>a unit finished</span></p>'
)


def render(report: object) -> str:
    """The page for one build report (the parsed build-report.json)."""
    r = _dict(report)
    recipe, torch, plan = _dict(r.get("recipe")), _dict(r.get("torch")), _dict(r.get("plan"))
    records = [_dict(a) for a in _list(r.get("attempts"))]
    attempts = [_attempt(rec, plan, i == len(records) - 1) for i, rec in enumerate(records)]
    name = _text(recipe.get("name")) or "unknown package"
    version = _text(recipe.get("version"))
    title = f"{name} {version}".strip() + (
        f" for torch {_text(torch.get('variant'))}" if torch.get("variant") else ""
    )
    body = _heading(r, plan, attempts, title)
    body.append("<h2>Memory over time, per attempt</h2>")
    body.append(_LEGEND)
    body += [_attempt_section(a, rec) for a, rec in zip(attempts, records, strict=True)]
    if not attempts:
        body.append('<p class="note">This report records no attempt.</p>')
    body.append("<h2>Units</h2>")
    body.append(
        _table(
            [
                "unit",
                "Python",
                "attempt",
                "finished at",
                "predicted peak",
                "measured peak",
                "predicted time",
                "measured time",
            ],
            _unit_rows(records),
            "units",
            "No per-unit times in this report (only counts, in the attempts table).",
        )
    )
    body.append("<h2>Attempts</h2>")
    body.append(
        _table(_ATTEMPT_COLUMNS, _attempt_rows(attempts, records), "attempts", "No attempts recorded.")
    )
    body.append("<h2>Wheels</h2>")
    body.append(_table(["file", "Pythons", "size", "SASS", "sha256"], _wheel_rows(r), "wheels", "No wheels."))
    body.append("<h2>Built here, for the archs asked</h2>")
    body.append(
        _table(["", "what the build did"], _contract_rows(r), "contract", "Not recorded in this report.")
    )
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        # Nothing is fetched at view time: no script, and no resource from anywhere.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
        f"<title>{html.escape(title)} · wheelbuild report</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n</body>\n</html>\n"
    )


_ATTEMPT_COLUMNS = [
    "#",
    "result",
    "MAX_JOBS",
    "NVCC_THREADS",
    "limit",
    "peak",
    "peak (compile)",
    "predicted",
    "units finished",
    "cache hits / misses",
    "duration",
    "compile",
    "OOM evidence",
]


def _heading(
    r: Mapping[str, object], plan: Mapping[str, object], attempts: Sequence[ChartedAttempt], title: str
) -> list[str]:
    """The title, the run's one-line facts and plan, the summary, and why this plan (folded)."""
    archs = ", ".join(f"sm_{_fmt_num(a)}" for a in map(number_of, _list(r.get("archs"))) if a is not None)
    pythons = ", ".join(_text(p) for p in _list(r.get("pythons")))
    killed = sum(a.killed for a in attempts)
    summary = f"{len(attempts)} attempt(s), {killed} OOM-killed; " + (
        f"the last {attempts[-1].outcome}" if attempts else "no attempt recorded"
    )
    reused = _dict(r.get("reused"))
    reasons = "".join(f"<li>{html.escape(_text(x))}</li>" for x in _list(plan.get("reasons"))[:50])
    body = [
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">run {_e(r.get("run_id"))} · archs {html.escape(archs or "—")} · '
        f"Pythons {html.escape(pythons or '—')} · plan: {size_text(plan.get('memory'))} memory, "
        f"{_e(plan.get('cpus'))} CPUs, MAX_JOBS={_e(plan.get('max_jobs'))}, "
        f"NVCC_THREADS={_e(plan.get('nvcc_threads'))}, predicted peak {size_text(plan.get('predicted_peak'))}</p>",
        f'<p class="summary">{html.escape(summary)}</p>',
    ]
    if reused:
        body.append(
            f'<p class="note">Wheels reused from run {_e(reused.get("from_run"))}: '
            "the attempts below are that run's.</p>"
        )
    if reasons:
        body.append(f"<details><summary>why this plan</summary><ul>{reasons}</ul></details>")
    return body


def load_report(path: Path) -> object:
    """The parsed build-report.json at *path* (a run folder or the file itself), from report.py's
    one reader (size capped, schema checked); the page draws whatever fields it holds."""
    return read_report_json(path)


def write_beside(report_json: Path) -> Path:
    """Write build-report.html beside *report_json*; its path."""
    page = report_json.with_name(HTML_NAME)
    page.write_text(render(load_report(report_json)), encoding="utf-8")
    return page
