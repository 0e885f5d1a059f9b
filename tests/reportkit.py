"""Build reports for the build-report.html tests: the real one of a real OOM-and-retry run
(tests/fixtures/reports/wbdemo-oom-retry.json, written by `wheelbuild build` of the fixture in
3 GiB before reports carried a memory series), and synthetic ones whose attempts are made by the
real code path (report_attempts.attempt_record over an attempt.AttemptResult, the series through
buildlog.MemorySeries), so the page is tested against what the engine really records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wheelbuild.plan.memory_model import GIB, MIB, wbdemo_model
from wheelbuild.plan.planner import Plan, plan_build
from wheelbuild.report_attempts import attempt_record
from wheelbuild.run.attempt import AttemptResult, OomEvidence
from wheelbuild.run.buildlog import MemorySeries

REAL_REPORT = Path(__file__).parent / "fixtures" / "reports" / "wbdemo-oom-retry.json"
IDENT = "cp311-manylinux_x86_64"
UNITS = ("reduce.o", "relu.o", "saxpy.o", "scale.o", "binding.o")


def real_report() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(REAL_REPORT.read_text())
    return loaded


def _series(seconds: int, shape: Any) -> MemorySeries:
    series = MemorySeries(cap=120)  # small, so the test sees it downsample
    for t in range(seconds):
        series.add(float(t), int(shape(t)))
    return series


def _result(
    attempt: int, seconds: int, shape: Any, finished: dict[str, float], killed_at: float | None
) -> AttemptResult:
    series = _series(seconds, shape)
    return AttemptResult(
        attempt=attempt,
        returncode=0 if killed_at is None else 1,
        duration_s=float(seconds),
        wheels=(),
        memory_limit_seen=3 * GIB,
        log_path=Path("build.log"),
        oom=OomEvidence(docker_oom_events=1, state_oom_killed=True, cgroup_oom_kills=1)
        if killed_at is not None
        else OomEvidence(),
        peak_memory=max(v for _, v in series.points),
        peak_memory_compile=max(v for _, v in series.points),
        finished_units=tuple(f"{IDENT}:{u}" for u in finished),
        units_total=len(UNITS),
        memory_series=tuple(series.points),
        memory_step_s=series.step_s,
        oom_at_s=() if killed_at is None else (killed_at,),
        unit_finished_s=tuple((f"{IDENT}:{u}", t) for u, t in finished.items()),
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
