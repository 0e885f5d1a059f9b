"""Build reports for the build-report.html tests: the real one of a real OOM-and-retry run
(tests/fixtures/reports/wbdemo-oom-retry.json, written by `wheelbuild build` of the fixture in
3 GiB before reports carried a memory series), the real one of the example built for torch 2.14.1
with its import gate and torch range (wbdemo-torch-range.json, `scripts/example`'s run
20261202-075903-8e0e04, before reports carried phases), and synthetic ones whose attempts are
made by the real code path (report.attempt_records.attempt_record over an outcome.AttemptResult, the
series through buildlog.MemorySeries, the phases through buildlog.BuildLog fed cibuildwheel's
lines), so the page is tested against what the engine really records.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from wheelbuild.attempt.buildlog import COMPILE_STEP, BuildLog, MemorySeries
from wheelbuild.attempt.outcome import AttemptResult, OomEvidence
from wheelbuild.plan.memory_model import GIB, MIB, wbdemo_model
from wheelbuild.plan.planner import Plan, plan_build
from wheelbuild.report.attempt_records import GATE_PHASE, TORCH_RANGE_PHASE, PhaseRecord, attempt_record

REAL_REPORT = Path(__file__).parent / "fixtures" / "reports" / "wbdemo-oom-retry.json"
RANGE_REPORT = Path(__file__).parent / "fixtures" / "reports" / "wbdemo-torch-range.json"
IDENT = "cp311-manylinux_x86_64"
UNITS = ("reduce.o", "relu.o", "saxpy.o", "scale.o", "binding.o")


def real_report() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(REAL_REPORT.read_text())
    return loaded


def range_report() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(RANGE_REPORT.read_text())
    return loaded


def _series(seconds: int, shape: Any) -> MemorySeries:
    series = MemorySeries(cap=120)  # small, so the test sees it downsample
    for t in range(seconds):
        series.add(float(t), int(shape(t)))
    return series


def _result(
    attempt: int,
    seconds: int,
    shape: Any,
    finished: dict[str, float],
    killed_at: float | None,
    log: BuildLog | None = None,
    limit: int = 3 * GIB,
) -> AttemptResult:
    series = _series(seconds, shape)
    return AttemptResult(
        attempt=attempt,
        returncode=0 if killed_at is None else 1,
        duration_s=float(seconds),
        wheels=(),
        memory_limit_seen=limit,
        log_path=Path("build.log"),
        oom=OomEvidence(docker_oom_events=1, state_oom_killed=True, cgroup_oom_kills=1)
        if killed_at is not None
        else OomEvidence(),
        peak_memory=max(v for _, v in series.points),
        peak_memory_compile=max(v for _, v in series.points) if log is None else _compile_peak(log, shape),
        finished_units=tuple(f"{IDENT}:{u}" for u in finished),
        units_total=len(UNITS),
        memory_series=tuple(series.points),
        memory_step_s=series.step_s,
        oom_at_s=() if killed_at is None else (killed_at,),
        unit_finished_s=tuple((f"{IDENT}:{u}", t) for u, t in finished.items()),
        steps=tuple(log.steps) if log is not None else (),
    )


def _compile_peak(log: BuildLog, shape: Any) -> int:
    """What the watcher keeps as the compile's peak: its highest sample in "Building wheel" steps."""
    return max(
        int(shape(t))
        for step in log.steps
        if step.step == COMPILE_STEP and step.end is not None
        for t in range(int(step.start), int(step.end))
    )


def plans() -> tuple[Plan, Plan]:
    first = plan_build(budget=3 * GIB, cpus=2.0, archs=2, model=wbdemo_model(), max_jobs=2, nvcc_threads=2)
    second = first.halved()
    assert second is not None
    return first, second


def synthetic_report(name: str = "wbdemo") -> dict[str, Any]:
    """Two attempts: the first OOM-killed at 300 s with two units done, the second finishing all
    five at half the jobs; the series long enough (900 samples) to be downsampled."""
    first, second = plans()
    killed = _result(
        1,
        300,
        lambda t: 0.4 * GIB + min(t, 290) * 9.5 * MIB,
        {"reduce.o": 80.0, "relu.o": 160.0},
        killed_at=299.0,
    )
    done = _result(
        2,
        900,
        lambda t: 0.4 * GIB + (t % 180) * 8 * MIB,
        {u: 170.0 * (i + 1) for i, u in enumerate(UNITS)},
        killed_at=None,
    )
    report = real_report()
    report["recipe"]["name"] = name
    report["plan"] = second.as_dict()
    report["attempts"] = [
        attempt_record(first, killed, []).to_json(),
        attempt_record(second, done, [(first, killed)]).to_json(),
    ]
    return report


# Two Pythons, as cibuildwheel prints them (lines from a real build.log), at these seconds.
PYTHONS = ("cp311-manylinux_x86_64", "cp313-manylinux_x86_64")
TORCH_SPIKE = int(5.9 * GIB)  # the working set while cp313's torch installed (its page cache)


def step_done(seconds: float) -> str:
    """cibuildwheel's line at the end of a step that took *seconds*, as it prints it."""
    return f"✓ {seconds:.2f}s".rjust(78)


def two_python_log() -> BuildLog:
    """cibuildwheel's steps for cp311 then cp313, fed with their times: torch installs at 6-90 s
    and 316-400 s, compiles at 90-300 s and 400-610 s, repairs to 310 s and 620 s."""
    log = BuildLog()
    log.feed("Copying project into container...", 0.0)
    log.feed(step_done(0.19), 1.0)
    log.feed("Running before_all...", 1.0)
    log.feed("wheelbuild: container memory limit: 8589934592 (asked 8589934592)", 1.5)
    log.feed(step_done(0.11), 2.0)
    for i, identifier in enumerate(PYTHONS):
        at = 310.0 * i
        log.feed(f"Building {identifier} wheel", at + 2)
        log.feed("Setting up build environment...", at + 2)
        log.feed(step_done(4.0), at + 6)
        log.feed("Running before_build...", at + 6)
        log.feed("wheelbuild: torch 2.14.1+cu130 CUDA 13.0", at + 80)
        log.feed(step_done(84.0), at + 90)
        log.feed("Building wheel...", at + 90)
        log.feed(step_done(210.0), at + 300)
        log.feed("Repairing wheel...", at + 300)
        log.feed(step_done(10.0), at + 310)
        log.feed(f"✓ {identifier} finished in 5 minutes", at + 310)
    log.feed("Copying wheels back to host...", 620.0)
    log.end_step(622.0)  # the attempt's end, as attempt_run ends a step the log left open
    return log


def _two_python_memory(t: float) -> float:
    """Low while setting up, 5.9 GiB at the end of cp313's torch install, about 2 GiB compiling."""
    if 380 <= t < 390:
        return TORCH_SPIKE
    if 90 <= t < 300 or 400 <= t < 610:
        return 0.6 * GIB + (t % 30) * 48 * MIB
    return 0.5 * GIB


def phased_report() -> dict[str, Any]:
    """The real torch-range report of the example with its attempt replaced by one of two
    Pythons whose steps were timed (the peak taken during cp313's torch install, well above the
    compile's), then the import gate and the torch range after it, as build.py records them."""
    plan = plan_build(budget=8 * GIB, cpus=2.0, archs=1, model=wbdemo_model(), max_jobs=2, nvcc_threads=1)
    log = two_python_log()
    done = _result(1, 622, _two_python_memory, {"reduce.o": 150.0, "relu.o": 450.0}, None, log, 8 * GIB)
    record = attempt_record(plan, done, [])
    after = (PhaseRecord(GATE_PHASE, None, 625.0, 700.0), PhaseRecord(TORCH_RANGE_PHASE, None, 700.0, 930.0))
    report = range_report()
    report["plan"] = plan.as_dict()
    report["pythons"] = ["cp311", "cp313"]
    report["attempts"] = [replace(record, phases=(*record.phases, *after)).to_json()]
    return report
