"""An attempt as build-report.json keeps it: its records (AttemptRecord, its units, phases,
memory series and cache counts, and the plan it ran with) and `attempt_record`, which makes one
from the plan, what the engine measured, and each unit against the model's prediction and its
measurement. build_report.py holds them in the report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..attempt.outcome import AttemptResult
from ..plan.dist import remote_share
from ..plan.learned import SAMPLE_S
from ..plan.planner import Plan
from ..records import OMIT, REQUIRED, Record, read_record

__all__ = [
    "GATE_PHASE",
    "TORCH_RANGE_PHASE",
    "AttemptRecord",
    "CacheStats",
    "MemorySeriesRecord",
    "PhaseRecord",
    "PlanRecord",
    "UnitRecord",
    "attempt_record",
]


@dataclass(frozen=True)
class PlanRecord(Record):
    """Plan.as_dict(): the numbers the build ran with and why (the model by name only)."""

    memory: int | None
    cpus: float | None
    max_jobs: int | None
    nvcc_threads: int | None
    archs: int | None
    predicted_peak: int | None
    predicted_seconds: float | None
    model: Mapping[str, object]
    admission_budget: int | None
    reasons: tuple[str, ...]
    cicc_admission: bool = False  # reports from before 2026-12-01 have none (_plan reads older names)
    admission_slots: int | None = None  # nor this

    @classmethod
    def of(cls, plan: Plan) -> PlanRecord:
        return read_record(cls, plan.as_dict(), "plan")


@dataclass(frozen=True)
class UnitRecord(Record):
    unit: str  # cp311-manylinux_x86_64:reduce.o
    finished_s: float | None
    predicted_peak: int | None  # None where the model does not know the unit
    predicted_s: float | None
    # Its processes' memory at its worst sample, and how long it was seen compiling (the
    # watcher samples once a second); None where no sample caught it.
    measured_peak: int | None = field(default=None, metadata=OMIT)
    measured_s: float | None = field(default=None, metadata=OMIT)


# The phases wheelbuild itself runs after the last attempt, named beside cibuildwheel's steps.
GATE_PHASE = "import gate"
TORCH_RANGE_PHASE = "torch range"


@dataclass(frozen=True)
class PhaseRecord(Record):
    """A stretch of an attempt, in seconds since it began: one of cibuildwheel's steps for one
    Python ("Running before_build", torch's install; "Building wheel", the compile; "Repairing
    wheel"), or, after the last attempt, the import gate or the torch range (in containers of
    their own, outside the attempt's memory series)."""

    step: str = field(metadata=REQUIRED)
    python: str | None = None  # cp311-manylinux_x86_64; None for the steps around the Pythons'
    start_s: float | None = None
    end_s: float | None = None


@dataclass(frozen=True)
class CacheStats(Record):
    hits: int
    misses: int


@dataclass(frozen=True)
class MemorySeriesRecord(Record):
    step_s: float | None
    points: tuple[tuple[float, int], ...]  # (seconds since the attempt began, working set)


@dataclass(frozen=True)
class AttemptRecord(Record):
    attempt: int | None
    max_jobs: int | None
    nvcc_threads: int | None
    memory: int | None
    returncode: int | None
    duration_s: float | None
    build_s: float | None
    build_s_by_python: Mapping[str, float]
    memory_limit_seen: int | None
    peak_memory: int | None
    peak_memory_compile: int | None
    predicted_peak: int | None
    oom_evidence: tuple[str, ...]
    oom_at_s: tuple[float, ...]
    memory_series: MemorySeriesRecord | None
    units_finished: int | None
    units: tuple[UnitRecord, ...]
    cache_hits: int | None
    cache_misses: int | None
    cache_by_python: Mapping[str, CacheStats]
    # Only on a successful retry: units an earlier attempt finished, and how many of them were
    # compiled again here (unit by unit, from sccache's compile log; goal 0).
    units_finished_before: int | None = field(default=None, metadata=OMIT)
    units_recompiled: int | None = field(default=None, metadata=OMIT)
    # The model against this attempt: predicted / measured - 1, for the compile's peak and, on
    # average (absolute), for each unit measured; what the build held outside the units at its peak.
    peak_error: float | None = field(default=None, metadata=OMIT)
    unit_error: float | None = field(default=None, metadata=OMIT)
    overhead_at_peak: int | None = field(default=None, metadata=OMIT)
    # --dist: compiles each build server ran ("ip:port": count), those that ran locally instead,
    # and the servers' share of the two.
    dist_by_server: Mapping[str, int] | None = field(default=None, metadata=OMIT)
    dist_local: int | None = field(default=None, metadata=OMIT)
    dist_remote_share: float | None = field(default=None, metadata=OMIT)
    # Each Python's whole time in cibuildwheel (setup, torch, compile, repair; for a Python that
    # reused an earlier one's abi3 wheel, setup alone), and those that reused one: identifier ->
    # that wheel's file name as cibuildwheel named it.
    python_s_by_python: Mapping[str, float] = field(default_factory=dict)
    reused_by_python: Mapping[str, str] = field(default_factory=dict)
    # Where the time went, for the chart's phases (reports from before 2026-12-03 have none).
    phases: tuple[PhaseRecord, ...] = ()


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
