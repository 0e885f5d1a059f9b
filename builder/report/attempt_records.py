"""An attempt as build-report.json keeps it (report.AttemptRecord): the plan it ran with, what
the engine measured, and each unit against the model's prediction and its measurement."""

from __future__ import annotations

from collections.abc import Sequence

from ..plan.dist import remote_share
from ..plan.learned import SAMPLE_S
from ..plan.planner import Plan
from ..run.attempt import AttemptResult
from .build_report import AttemptRecord, CacheStats, MemorySeriesRecord, PhaseRecord, UnitRecord

__all__ = ["attempt_record"]


def attempt_record(
    plan: Plan, result: AttemptResult, before: Sequence[tuple[Plan, AttemptResult]]
) -> AttemptRecord:
    """An attempt as the report keeps it: the plan it ran with, what the engine measured, and
    each unit that finished against the model's prediction."""
    retried = bool(before) and result.returncode == 0
    units = _unit_records(plan, result)
    finished_before: set[str] = set().union(*(r.finished_units for _, r in before)) if retried else set()
    return AttemptRecord(
        attempt=result.attempt,
        max_jobs=plan.max_jobs,
        nvcc_threads=plan.nvcc_threads,
        memory=plan.memory,
        returncode=result.returncode,
        duration_s=round(result.duration_s, 1),
        build_s=round(result.build_seconds, 1),
        build_s_by_python={identifier: round(s, 1) for identifier, s in result.build_seconds_by_identifier},
        memory_limit_seen=result.memory_limit_seen,
        peak_memory=result.peak_memory,
        peak_memory_compile=result.peak_memory_compile,
        predicted_peak=plan.predicted_peak,
        oom_evidence=tuple(result.oom.fired),
        oom_at_s=tuple(result.oom_at_s),
        memory_series=MemorySeriesRecord(result.memory_step_s, tuple(result.memory_series)),
        units_finished=len(result.finished_units),
        units=units,
        cache_hits=result.cache_hits,
        cache_misses=result.cache_misses,
        cache_by_python={i: CacheStats(hits, misses) for i, hits, misses in result.cache_by_identifier},
        units_finished_before=len(finished_before) if retried else None,
        units_recompiled=_units_recompiled(result, finished_before) if retried else None,
        peak_error=round(plan.predicted_peak / result.peak_memory_compile - 1, 3)
        if result.peak_memory_compile
        else None,
        unit_error=_unit_error(units),
        overhead_at_peak=result.overhead_at_peak,
        dist_by_server=dict(result.dist_by_server) if result.dist_by_server is not None else None,
        dist_local=result.dist_local if result.dist_by_server is not None else None,
        dist_remote_share=_remote_share(result),
        python_s_by_python={identifier: round(s, 1) for identifier, s in result.python_seconds_by_identifier},
        reused_by_python=dict(result.reused_wheels),
        phases=tuple(PhaseRecord(s.step, s.identifier, s.start, s.end) for s in result.steps),
    )


def _remote_share(result: AttemptResult) -> float | None:
    """--dist: the build servers' share (dist.remote_share), rounded for the report."""
    if result.dist_by_server is None:
        return None
    share = remote_share(result.dist_by_server, result.dist_local)
    return round(share, 3) if share is not None else None


def _units_recompiled(result: AttemptResult, finished_before: set[str]) -> int | None:
    """Units that had finished in an earlier attempt and were compiled again here, unit by unit
    from sccache's compile log (wheelbuild-cache-log); None where that log is missing."""
    if not result.unit_cache:
        return None
    return sum(1 for unit, compiled in result.unit_cache if compiled and unit in finished_before)


def _unit_error(units: Sequence[UnitRecord]) -> float | None:
    """Mean |predicted / measured - 1| over the units both know; None where none is."""
    errors = [
        abs(u.predicted_peak / u.measured_peak - 1) for u in units if u.predicted_peak and u.measured_peak
    ]
    return round(sum(errors) / len(errors), 3) if errors else None


def _unit_records(plan: Plan, result: AttemptResult) -> tuple[UnitRecord, ...]:
    """Each unit that finished, when, and what the model predicted for it (matched by the
    output's stem, reduce.o <- csrc/reduce.cu; None where the model does not know the unit)."""
    known = {u.name.rsplit("/", 1)[-1].split(".")[0]: u for u in plan.model.units}
    measured = {m.unit: m for m in result.unit_memory}  # "identifier:stem"
    records = []
    for unit, finished_s in result.unit_finished_s:
        identifier, _, output = unit.rpartition(":")
        stem = output.split(".")[0]
        cost = known.get(stem)
        seen = measured.get(f"{identifier}:{stem}")
        seen = seen if seen is not None and seen.compiled else None  # a cache hit compiled nothing
        records.append(
            UnitRecord(
                unit=unit,
                finished_s=finished_s,
                predicted_peak=None
                if cost is None
                else plan.model.unit_peak(cost, plan.nvcc_threads, plan.archs),
                predicted_s=None if cost is None else round(cost.wall(plan.nvcc_threads, plan.archs), 1),
                measured_peak=None if seen is None else seen.peak,
                measured_s=None if seen is None else round(seen.seen_s + SAMPLE_S, 1),
            )
        )
    return tuple(records)
