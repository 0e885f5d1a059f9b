"""Where a run's time went, phase by phase, read from its build report: the image (built or
reused), the build (every attempt), the import gate and the torch range. scripts/example prints
these at the end of its run, after its own setup's time and before the whole run's.

Pure: `phase_seconds(report)` reads the report's records (image.seconds; the attempts'
duration_s; the gate's and the range's phases on the last attempt's clock, as build.py records
them); `phase_lines(...)` words them, a phase the report does not hold as "not timed".
"""

from __future__ import annotations

from .attempt_records import GATE_PHASE, TORCH_RANGE_PHASE
from .build_report import BuildReport

__all__ = ["PHASES", "format_seconds", "phase_lines", "phase_seconds"]

PHASES = ("image", "build", "gate", "range")


def phase_seconds(report: BuildReport) -> dict[str, float | None]:
    """Each of PHASES' seconds in this report; None where it holds none (a phase that did not
    run, or a report from before it was timed)."""
    durations = [a.duration_s for a in report.attempts if a.duration_s is not None]
    last = report.attempts[-1].phases if report.attempts else ()

    def span(step: str) -> float | None:
        spans = [
            p.end_s - p.start_s
            for p in last
            if p.step == step and p.python is None and p.start_s is not None and p.end_s is not None
        ]
        return round(sum(spans), 1) if spans else None

    return {
        "image": report.image.seconds if report.image else None,
        "build": round(sum(durations), 1) if durations else None,
        "gate": span(GATE_PHASE),
        "range": span(TORCH_RANGE_PHASE),
    }


def format_seconds(seconds: float) -> str:
    """37 s, 6 min 15 s."""
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s" if whole >= 60 else f"{whole} s"


def phase_lines(setup_s: float | None, total_s: float | None, report: BuildReport | None) -> list[str]:
    """The table scripts/example prints: setup, each build phase, the rest, the total. A reused
    run's phases are an earlier run's and are not shown as this one's."""
    rows: list[tuple[str, str]] = []
    if setup_s is not None:
        rows.append(("setup", format_seconds(setup_s)))
    counted = setup_s or 0.0
    if report is None:
        rows.append(("build", "no times: the build wrote no report (it stopped before its end)"))
    elif report.reused is not None:
        rows.append(("build", f"none: run {report.reused.from_run}'s wheels reused (unchanged inputs)"))
    else:
        for phase, seconds in phase_seconds(report).items():
            rows.append((phase, "not timed" if seconds is None else format_seconds(seconds)))
            counted += seconds or 0.0
    if total_s is not None:
        if report is not None and report.reused is None:
            rows.append(
                ("other", f"{format_seconds(max(total_s - counted, 0.0))} (checks, downloads, report)")
            )
        rows.append(("total", format_seconds(total_s)))
    width = max(len(name) for name, _ in rows) if rows else 0
    return [f"{name:<{width}}  {said}" for name, said in rows]
