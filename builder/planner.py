"""Plan: the container's memory limit and CPUs, MAX_JOBS and NVCC_THREADS, and why. Pure.

This is the simple, safe planner: jobs = memory / (per-job cost x archs compiled at once),
capped by CPUs. The memory-planning issue replaces it with a calibrated model.
"""

from __future__ import annotations

from dataclasses import dataclass

from builder.spec import format_bytes

GIB = 1024**3
# Memory left to the host (sshd, dockerd) when the limit is derived rather than given.
HOST_RESERVE = 2 * GIB


@dataclass(frozen=True)
class Plan:
    memory: int
    cpus: float
    max_jobs: int
    nvcc_threads: int
    reasons: tuple[str, ...]


def default_memory(host_available: int) -> int:
    return max(GIB, (host_available - HOST_RESERVE) // 4096 * 4096)


def plan_build(
    *,
    memory: int,
    cpus: float,
    archs: int,
    job_memory_per_arch: int,
    max_jobs: int | None = None,
    nvcc_threads: int | None = None,
) -> Plan:
    reasons: list[str] = []
    if nvcc_threads is None:
        nvcc_threads = max(1, min(archs, 2))
        reasons.append(f"NVCC_THREADS={nvcc_threads}: min(archs={archs}, 2)")
    else:
        reasons.append(f"NVCC_THREADS={nvcc_threads}: given")
    if max_jobs is None:
        per_job = job_memory_per_arch * min(nvcc_threads, archs)
        by_memory = memory // per_job
        max_jobs = max(1, min(int(cpus) or 1, by_memory))
        reasons.append(
            f"MAX_JOBS={max_jobs}: min(cpus={cpus:g}, memory {format_bytes(memory)} / "
            f"{format_bytes(per_job)} per job = {by_memory}), at least 1"
        )
    else:
        reasons.append(f"MAX_JOBS={max_jobs}: given")
    return Plan(
        memory=memory,
        cpus=cpus,
        max_jobs=max_jobs,
        nvcc_threads=nvcc_threads,
        reasons=tuple(reasons),
    )
