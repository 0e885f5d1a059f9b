"""build-report.html: a build report as one self-contained page (inline SVG and CSS, no script,
nothing fetched), what a user opens to see why an attempt was killed.

The run: which torch it built for and why, the pin mode, links to its build.log and gate.log.
For every attempt: its chart (chart.py: memory over time against its limit, its phases,
the predicted peak over the compiles, OOM kills and units finished), its peak and the phase it
was taken in, the model's prediction against the compile's peak, and its phases' times; then
the units (when each finished, what the model predicted) and the attempts as tables; the wheels
with their gate verdicts, torch pins and torch ranges (wheel_evidence.py); the build's contract.

:func:`render` is pure: a report (the JSON object build.py writes) in, the page out. A report is
read as untrusted (package names, evidence lines and paths come from the build): every value is
checked for its type before use and escaped, and one without a field (an older report, one from
before the memory series) is drawn with what it has.
"""

from __future__ import annotations

import html
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import ReportUnreadable
from .build_report import read_report_json
from .chart import ChartedAttempt, chart, charted_attempt
from .values import (
    MAX_ROWS,
    escaped,
    fmt_num,
    html_table,
    items_of,
    mapping_of,
    number_of,
    seconds_text,
    size_text,
    text_of,
)
from .wheel_evidence import (
    LOGS,
    WHEEL_COLUMNS,
    Evidence,
    evidence_of,
    gate_section,
    pin_mode,
    range_section,
    torch_line,
    wheel_rows,
)

__all__ = ["HTML_NAME", "LOGS", "WHEEL_COLUMNS", "load_report", "render", "write_beside"]

HTML_NAME = "build-report.html"


def _model_facts(a: ChartedAttempt, record: Mapping[str, object]) -> list[str]:
    """The model against the attempt, like with like: its predicted peak beside the peak measured
    while compiling (what it predicts, and what peak_error compares), never beside a peak taken
    while torch installed; and its error on the units, where the report has one."""
    predicted = a.size("predicted_peak", a.predicted)
    if a.compile_peak is not None or "peak_memory_compile" in a.left_out:
        line = f"compile's peak {a.size('peak_memory_compile', a.compile_peak)}, predicted {predicted}"
    else:
        line = f"predicted {predicted} (no peak measured while compiling)"
    # A ratio past a thousandfold is a damaged report, not a model's error: left unprinted.
    if (error := number_of(record.get("peak_error"))) is not None and abs(error) < 1000:
        line += f": model off by {error:+.0%}"
    found = [line]
    if (units := number_of(record.get("unit_error"))) is not None and abs(units) < 1000:
        found.append(f"{units:.0%} per unit on average")
    return [html.escape(f) for f in found]


def _peak_fact(a: ChartedAttempt) -> str:
    """The attempt's peak, of its limit, and the phase it was taken in where the report says."""
    where = a.peak_phase
    during = f", during {where.label}" if where is not None else ""
    return html.escape(f"peak {a.size('peak_memory', a.peak)} of {a.limit_text}{during}")


def _attempt_section(a: ChartedAttempt, record: Mapping[str, object]) -> str:
    facts = [
        f'<strong class="outcome {"bad" if a.outcome != "succeeded" else "good"}">{html.escape(a.outcome)}</strong>',
        f"MAX_JOBS={escaped(record.get('max_jobs'))}, NVCC_THREADS={escaped(record.get('nvcc_threads'))}",
        _peak_fact(a),
        *_model_facts(a, record),
        f"units finished {escaped(a.units_finished) if a.units_finished is not None else '—'}",
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
    left_out = [
        *a.left_out,
        *([f"{a.samples_left_out} memory sample(s)"] if a.samples_left_out else []),
        *([f"{a.phases_left_out} phase(s)"] if a.phases_left_out else []),
    ]
    if left_out:
        note += (
            '<p class="note out-of-range">Not drawn, out of any real range (a damaged report?): '
            f"{html.escape(', '.join(left_out))}.</p>"
        )
    return (
        f'<section class="attempt" id="attempt-{html.escape(a.number)}">\n'
        f"<h3>Attempt {html.escape(a.number)}</h3>\n"
        f'<p class="facts">{" · ".join(facts)}</p>\n{why}{note}\n{chart(a)}\n{_phase_table(a)}</section>'
    )


def _phase_table(a: ChartedAttempt) -> str:
    """The chart's phases as rows: when each ran, and its highest memory sample."""
    if not a.phases:
        return ""
    rows = [
        [
            html.escape(p.python or "—"),
            html.escape(p.name),
            seconds_text(p.start),
            seconds_text(p.end),
            seconds_text(p.end - p.start),
            size_text(p.peak[1]) if p.peak else "in its own container" if not p.sampled else "—",
        ]
        for p in a.phases
    ]
    header = ["Python", "phase", "from", "to", "took", "highest memory sample"]
    table = html_table(header, rows, "phases", "")
    return f"<details><summary>phases of attempt {html.escape(a.number)}</summary>{table}</details>\n"


def _unit_rows(records: Sequence[Mapping[str, object]]) -> list[list[str]]:
    rows = []
    for record in records:
        for unit in items_of(record.get("units"))[:MAX_ROWS]:
            u = mapping_of(unit)
            python, _, name = text_of(u.get("unit")).rpartition(":")
            rows.append(
                [
                    html.escape(name),
                    html.escape(python.removesuffix("-manylinux_x86_64")),
                    escaped(record.get("attempt")),
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
                escaped(r.get("max_jobs")),
                escaped(r.get("nvcc_threads")),
                a.limit_text,
                a.size("peak_memory", a.peak),
                size_text(r.get("peak_memory_compile")),
                a.size("predicted_peak", a.predicted),
                escaped(a.units_finished) if a.units_finished is not None else "—",
                f"{escaped(r.get('cache_hits'))} / {escaped(r.get('cache_misses'))}",
                a.duration_text,
                seconds_text(r.get("build_s")),
                "; ".join(html.escape(e) for e in a.oom_evidence) or "—",
            ]
        )
    return rows


def _contract_rows(report: Mapping[str, object]) -> list[list[str]]:
    """The report's contract: the archs compiled, the switches set, what nvcc rewrote, the link
    checks and the network, one row each that the report holds."""
    contract = mapping_of(report.get("contract"))
    if not contract:
        return []
    archs = ", ".join(f"sm_{text_of(a)}" for a in items_of(report.get("archs")))
    ptx = ", ".join(f"compute_{text_of(a)}" for a in items_of(contract.get("ptx")))
    kept = "the package's own arch list (--keep-package-archs)" if contract.get("keep_package_archs") else ""
    rows = [
        ("archs", kept or f"exactly {archs}" + (f", with PTX for {ptx}" if ptx else "")),
        ("switches set", "; ".join(text_of(s) for s in items_of(contract.get("switches"))) or "none"),
        ("nvcc rewrote", "; ".join(text_of(s) for s in items_of(contract.get("nvcc_rewrites"))) or "nothing"),
        (
            "C++ standard",
            "; ".join(text_of(s) for s in items_of(contract.get("std_raised")))
            or (
                "the package's own (--keep-package-std)" if contract.get("keep_package_std") else "not raised"
            ),
        ),
        (
            "link check",
            "; ".join(text_of(s) for s in items_of(contract.get("link_checks"))) or "not recorded",
        ),
        ("network while building", text_of(contract.get("network")) or "not recorded"),
    ]
    return [[escaped(what), escaped(detail)] for what, detail in rows]


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
.compile-peak { fill: none; stroke: #d97706; stroke-width: 2.5; }
.phase-torch { fill: #ece3fa; } .phase-compile { fill: #dfeafc; } .phase-repair { fill: #def2e3; }
.phase-gate { fill: #fbf0d4; } .phase-range { fill: #f6e3d9; } .phase-other { fill: #eef0f3; }
.phase-label { fill: #5a6273; font-size: 11px; }
.scroll { overflow-x: auto; }
.label { font-size: 12px; } .limit-label, .oom-label { fill: #b3261e; } .predicted-label { fill: #d97706; }
.peak-only-label { fill: #2463eb; }
.legend span { margin-right: 14px; } .legend i { display: inline-block; width: 18px; height: 3px;
  vertical-align: middle; margin-right: 4px; }
table { border-collapse: collapse; margin: 4px 0 12px; font-size: 13px; }
th, td { border: 1px solid #d6dae2; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f1f3f7; } td { font-variant-numeric: tabular-nums; }
code { font-family: ui-monospace, monospace; font-size: 12px; }
table.wheels code { overflow-wrap: anywhere; }  /* a full sha256 wraps, whole when copied */
"""


_LEGEND = (
    '<p class="legend"><span><i style="background:#2463eb"></i>working set (highest sample per interval)</span>'
    '<span><i style="background:#b3261e"></i>memory limit</span>'
    '<span><i style="background:#d97706"></i>plan\'s predicted peak</span>'
    '<span><i style="background:#b3261e;height:10px;width:2px"></i>OOM kill</span>'
    '<span><i style="background:#1e7b34;height:8px;width:2px"></i>a unit finished</span>'
    '<span><i style="border:2px solid #d97706;border-radius:50%;width:8px;height:8px;background:none"></i>'
    "highest sample while compiling (what the plan predicts)</span></p>"
    '<p class="legend">phases: '
    '<span><i style="background:#ece3fa;height:10px"></i>torch install</span>'
    '<span><i style="background:#dfeafc;height:10px"></i>compile</span>'
    '<span><i style="background:#def2e3;height:10px"></i>repair</span>'
    '<span><i style="background:#fbf0d4;height:10px"></i>import gate</span>'
    '<span><i style="background:#f6e3d9;height:10px"></i>torch range (these two in containers of their own)</span>'
    '<span><i style="background:#eef0f3;height:10px"></i>setup and the rest</span></p>'
)


def render(report: object, logs: Sequence[str] = ()) -> str:
    """The page for one build report (the parsed build-report.json); *logs* are the run folder's
    logs it links to (of LOGS, those beside it)."""
    r = mapping_of(report)
    evidence = evidence_of(r, logs)
    recipe, torch, plan = mapping_of(r.get("recipe")), mapping_of(r.get("torch")), mapping_of(r.get("plan"))
    records = [mapping_of(a) for a in items_of(r.get("attempts"))]
    attempts = [charted_attempt(rec, plan, i == len(records) - 1) for i, rec in enumerate(records)]
    name = text_of(recipe.get("name")) or "unknown package"
    version = text_of(recipe.get("version"))
    title = f"{name} {version}".strip() + (
        f" for torch {text_of(torch.get('variant'))}" if torch.get("variant") else ""
    )
    body = _heading(r, plan, attempts, title, evidence)
    body.append("<h2>Memory over time, per attempt</h2>")
    body.append(_LEGEND)
    body += [_attempt_section(a, rec) for a, rec in zip(attempts, records, strict=True)]
    if not attempts:
        body.append('<p class="note">This report records no attempt.</p>')
    body.append("<h2>Units</h2>")
    body.append(
        html_table(
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
        html_table(_ATTEMPT_COLUMNS, _attempt_rows(attempts, records), "attempts", "No attempts recorded.")
    )
    body += _wheels(r, evidence)
    body.append("<h2>Built here, for the archs asked</h2>")
    body.append(
        html_table(["", "what the build did"], _contract_rows(r), "contract", "Not recorded in this report.")
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


def _wheels(r: Mapping[str, object], evidence: Evidence) -> list[str]:
    """The wheels, the import gate's verdicts and their torch ranges."""
    body = ["<h2>Wheels</h2>", html_table(WHEEL_COLUMNS, wheel_rows(r, evidence), "wheels", "No wheels.")]
    body += gate_section(evidence)
    body += range_section(evidence, pin_mode(mapping_of(r.get("torch"))))
    if evidence.unreadable:
        body.append(
            f'<p class="note out-of-range">Not shown, unreadable (a damaged report?): {evidence.unreadable} '
            "gate or torch range record(s).</p>"
        )
    return body


_ATTEMPT_COLUMNS = [
    "#",
    "result",
    "MAX_JOBS",
    "NVCC_THREADS",
    "limit",
    "peak (whole attempt)",
    "peak (compile)",
    "predicted",
    "units finished",
    "cache hits / misses",
    "duration",
    "compile",
    "OOM evidence",
]


def _heading(
    r: Mapping[str, object],
    plan: Mapping[str, object],
    attempts: Sequence[ChartedAttempt],
    title: str,
    evidence: Evidence,
) -> list[str]:
    """The title, the run's one-line facts and plan, the torch and why, the logs, the summary,
    and why this plan (folded)."""
    archs = ", ".join(f"sm_{fmt_num(a)}" for a in map(number_of, items_of(r.get("archs"))) if a is not None)
    pythons = ", ".join(text_of(p) for p in items_of(r.get("pythons")))
    killed = sum(a.killed for a in attempts)
    summary = f"{len(attempts)} attempt(s), {killed} OOM-killed; " + (
        f"the last {attempts[-1].outcome}" if attempts else "no attempt recorded"
    )
    reused = mapping_of(r.get("reused"))
    reasons = "".join(f"<li>{html.escape(text_of(x))}</li>" for x in items_of(plan.get("reasons"))[:50])
    body = [
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">run {escaped(r.get("run_id"))} · archs {html.escape(archs or "—")} · '
        f"Pythons {html.escape(pythons or '—')} · plan: {size_text(plan.get('memory'))} memory, "
        f"{escaped(plan.get('cpus'))} CPUs, MAX_JOBS={escaped(plan.get('max_jobs'))}, "
        f"NVCC_THREADS={escaped(plan.get('nvcc_threads'))}, predicted peak {size_text(plan.get('predicted_peak'))}</p>",
        torch_line(mapping_of(r.get("torch"))),
        f'<p class="logs">logs: {" · ".join(filter(None, map(evidence.link, LOGS))) or "none beside this page"}</p>',
        f'<p class="summary">{html.escape(summary)}</p>',
    ]
    if reused:
        body.append(
            f'<p class="note">Wheels reused from run {escaped(reused.get("from_run"))}: '
            "the attempts below are that run's.</p>"
        )
    if reasons:
        body.append(f"<details><summary>why this plan</summary><ul>{reasons}</ul></details>")
    return body


def load_report(path: Path) -> object:
    """The parsed build-report.json at *path* (a run folder or the file itself), from build_report.py's
    one reader (size capped, schema checked); the page draws whatever fields it holds."""
    return read_report_json(path)


def write_beside(report_json: Path) -> Path:
    """Write build-report.html beside *report_json*, linking the logs beside it; its path."""
    page = report_json.with_name(HTML_NAME)
    logs = [log for log in LOGS if _regular_file(report_json.with_name(log))]
    text = render(load_report(report_json), logs)
    # Written beside it and renamed over it: a link there (an unpacked artifact can hold one) is
    # replaced, never written through to the file it points at.
    if page.is_dir() and not page.is_symlink():
        raise ReportUnreadable(
            f"{page} is a directory, so the page cannot be written there",
            f"move it away, or run wheelbuild report on a copy of {report_json.parent}",
        )
    scratch = page.with_name(f".{HTML_NAME}.{os.getpid()}")
    try:
        scratch.write_text(text, encoding="utf-8")
        os.replace(scratch, page)
    except OSError as error:
        scratch.unlink(missing_ok=True)
        raise ReportUnreadable(
            f"{page} cannot be written: {error.strerror or error}",
            f"run wheelbuild report where it can write, on a copy of {report_json.parent}",
        ) from None
    return page


def _regular_file(path: Path) -> bool:
    """A regular file, not a link to one (the page links only what the run wrote)."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False
