"""The plan of a --dist build: MAX_JOBS no longer bounded by local memory for the part of each
compile that runs on a build server. Pure.

Each unit is cut along the memory model's own lines (plan/fleet.py has the measured proportions
and the simulation): its fixed part (host preprocessing, cudafe++, the host compile) stays
local; its per-arch part (cicc and ptxas for one arch) is a remote job, its memory the server's.
MAX_JOBS is then what fleet.plan_dist_jobs finds: no more than the local parts of the J heaviest
units fit the container, and no more than is predicted to help. The plan says which bound
decided. Admission is off: the wrapper's costs are whole units, most of whose memory is now on
the servers, and the servers admit their own jobs.
"""

from __future__ import annotations

from dataclasses import replace

from ..units import format_bytes
from .dist import ServerShape
from .fleet import DistUnit, Fleet, RemoteJob, plan_dist_jobs
from .memory_model import MemoryModel, UnitCost
from .planner import Plan, governed_by

# Without --dist-servers: servers that hold every job, this many slots per local CPU. A guess,
# and the plan says so; the servers' real size only moves the point where they become the bound.
ASSUMED_SLOTS_PER_CPU = 4
_ANY_MEMORY = 1 << 50


def dist_units(model: MemoryModel, archs: int) -> tuple[DistUnit, ...]:
    """The model's units as local and remote parts: fixed memory and time local, one remote job
    per arch with the per-arch memory and time."""
    return tuple(_split(u, max(1, archs)) for u in model.units)


def _split(unit: UnitCost, archs: int) -> DistUnit:
    jobs = (RemoteJob(unit.per_arch_s, unit.per_arch),) * archs if unit.per_arch or unit.per_arch_s else ()
    return DistUnit(unit.name, before_s=unit.front_s, after_s=0.0, local_memory=unit.fixed, jobs=jobs)


def with_distribution(plan: Plan, servers: ServerShape | None) -> Plan:
    """`plan` for a --dist build on `servers` (None: unknown, see ASSUMED_SLOTS_PER_CPU)."""
    assumed = servers is None
    if servers is None:
        fleet = Fleet.of(1, max(1, int(plan.cpus)) * ASSUMED_SLOTS_PER_CPU, _ANY_MEMORY)
    else:
        fleet = Fleet.of(servers.count, servers.cores, servers.memory)
    units = dist_units(plan.model, plan.archs)
    chosen = plan_dist_jobs(
        units,
        budget=plan.memory,
        cores=plan.cpus,
        fleet=fleet,
        reserve=plan.model.reserve,
        margin=plan.model.margin,
    )
    fleet_line = (
        f"servers assumed to hold every job with {fleet.servers[0].cores} slots (--dist-servers gives the real ones)"
        if assumed
        else f"{len(fleet.servers)} server(s) of {fleet.servers[0].cores} cores"
    )
    why = f"--dist: {chosen.reason}; bound: {chosen.bound}; {fleet_line}; NVCC_THREADS=1, each arch is a job of its own"
    peak = plan.model.reserve + chosen.predicted.local_peak
    numbers = (
        f"--dist: MAX_JOBS={chosen.max_jobs} at NVCC_THREADS=1; predicted peak {format_bytes(peak)} here "
        f"(the reserve and the local parts), predicted build: {chosen.predicted.seconds:.0f} s with the servers"
    )
    distributed = replace(
        plan,
        max_jobs=chosen.max_jobs,
        nvcc_threads=1,
        admission_budget=None,
        predicted_peak=peak,
        predicted_seconds=chosen.predicted.seconds,
        reasons=(*plan.reasons, why, numbers),
    )
    return governed_by(plan, "--dist", distributed)
