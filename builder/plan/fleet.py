"""One build spread over sccache-dist build servers: what of each compile stays local, and a
simulation of the build on a local machine plus a fleet of servers. Pure.

sccache (>= 0.9) runs `nvcc --dryrun` and runs the steps it lists itself. For one unit and one
arch they are, in order: host preprocessing (gcc -E), cudafe++, device preprocessing (gcc -E
with __CUDA_ARCH__), cicc, ptxas, fatbinary, the host compile (gcc -c). Here, as in --dist's
plan, cicc and ptxas (one chain per arch) go to a build server chosen by the
scheduler; the rest runs on the local machine. (sccache's own diagram also marks cudafe++ and
the host compile as distributable; this split keeps them local, the conservative reading.)

So a unit becomes a DistUnit: a local part before its remote jobs, one remote job per arch
(cicc + ptxas, its memory moving to the server), and a local part after them. split_unit cuts a
whole unit's cost (a UnitCost, from measurement or a profile) in the proportions of a measured
StepProfile: one unit's steps timed one by one. The proportions are the measured ones; the
totals stay the UnitCost's.

simulate_fleet runs a build like ninja -j MAX_JOBS: a unit starts when a slot frees and holds it
until its local after-part ends, also while its jobs run on servers. Local work shares the local
CPUs in proportion (as memory_model.simulate) and is admitted by memory like the admission
wrapper: when it fits beside what runs, or when nothing runs. A server runs at most one job per
core and admits a job only when it fits the server's memory beside its running jobs; a job no
server could ever hold runs locally instead (counted). Each interval of the build is charged to
what held it back, in this order: jobs queued for a server (servers), local work waiting for
memory (local memory), local CPUs all busy (local CPU), all MAX_JOBS slots taken while units
wait (MAX_JOBS), else nothing saturated (unit latency: the build waits on units' own chains of
steps, such as the last units' single-threaded cicc, and on the link). The bound is the one
charged longest. Not modelled: moving inputs and outputs (a flash-attn .ii is ~13 MB, its .ptx
~10 MB: 0.1 s at 1 Gbit/s against a minute of cicc), sending the toolchain to a server once,
sccache's own local fallback when the scheduler is overloaded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from .memory_model import MemoryModel, UnitCost

REMOTE_STEPS = frozenset({"cicc", "ptxas"})
PER_ARCH_STEPS = frozenset({"device preprocess", "cicc", "ptxas"})


@dataclass(frozen=True)
class Step:
    """One nvcc step of one unit for one arch, as measured alone."""

    name: str  # host preprocess, cudafe++, device preprocess, cicc, ptxas, fatbinary, host compile
    cpu_s: float
    peak: int  # bytes

    @property
    def remote(self) -> bool:
        return self.name in REMOTE_STEPS

    @property
    def per_arch(self) -> bool:
        return self.name in PER_ARCH_STEPS


@dataclass(frozen=True)
class StepProfile:
    """A measured unit's nvcc steps for one arch, in the order nvcc runs them."""

    unit: str
    steps: tuple[Step, ...]

    def seconds(self, archs: int, *, remote: bool | None = None) -> float:
        """CPU seconds of the steps for `archs` archs (per-arch steps once per arch); only the
        remote or only the local ones when `remote` says which."""
        return sum(
            s.cpu_s * (max(1, archs) if s.per_arch else 1)
            for s in self.steps
            if remote is None or s.remote == remote
        )

    def remote_share(self, archs: int) -> float:
        return self.seconds(archs, remote=True) / self.seconds(archs)


@dataclass(frozen=True)
class RemoteJob:
    """One arch's cicc + ptxas of one unit."""

    seconds: float
    memory: int  # bytes


@dataclass(frozen=True)
class DistUnit:
    """One unit under sccache-dist: local before its jobs, its remote jobs, local after them."""

    name: str
    before_s: float  # host preprocessing, cudafe++, each arch's device preprocessing
    after_s: float  # fatbinary, the host compile
    local_memory: int  # the peak of its local steps
    jobs: tuple[RemoteJob, ...]

    @property
    def local_seconds(self) -> float:
        return self.before_s + self.after_s

    @property
    def remote_seconds(self) -> float:
        return sum(j.seconds for j in self.jobs)


def split_unit(unit: UnitCost, profile: StepProfile | None, archs: int) -> DistUnit:
    """`unit`'s whole cost at `archs` archs and one nvcc thread, cut in `profile`'s measured
    proportions: time by CPU seconds, memory by each side's peak over the whole's. Without a
    profile, or for host code (no per-arch part), everything stays local."""
    archs = max(1, archs)
    whole_s, whole_peak = unit.cpu_seconds(archs), unit.peak(1, archs)
    remote = [s for s in profile.steps if s.remote] if profile is not None else []
    if profile is None or not remote or (unit.per_arch == 0 and unit.per_arch_s == 0):
        return DistUnit(unit.name, before_s=whole_s, after_s=0.0, local_memory=whole_peak, jobs=())
    time_scale = whole_s / profile.seconds(archs)
    memory_scale = whole_peak / max(s.peak for s in profile.steps)
    first = profile.steps.index(remote[0])
    before = StepProfile(profile.unit, profile.steps[:first]).seconds(archs, remote=False)
    after = StepProfile(profile.unit, profile.steps[first:]).seconds(archs, remote=False)
    local_peak = max((s.peak for s in profile.steps if not s.remote), default=0)
    job = RemoteJob(
        seconds=sum(s.cpu_s for s in remote) * time_scale,
        memory=round(max(s.peak for s in remote) * memory_scale),
    )
    return DistUnit(
        unit.name,
        before_s=before * time_scale,
        after_s=after * time_scale,
        local_memory=round(local_peak * memory_scale),
        jobs=(job,) * archs,
    )


def split_units(
    units: Sequence[UnitCost], profile_of: Callable[[str], StepProfile | None], archs: int
) -> tuple[DistUnit, ...]:
    return tuple(split_unit(u, profile_of(u.name), archs) for u in units)


@dataclass(frozen=True)
class Server:
    """One sccache-dist build server: one job per core, admitted while it fits `memory`."""

    cores: int
    memory: int  # bytes its jobs may hold together (its container's limit)


@dataclass(frozen=True)
class Fleet:
    servers: tuple[Server, ...] = ()

    @staticmethod
    def of(count: int, cores: int, memory: int) -> Fleet:
        return Fleet(tuple(Server(cores, memory) for _ in range(max(0, count))))

    def holds(self, job: RemoteJob) -> bool:
        """Whether some server could ever run `job` (it fits that server's memory alone)."""
        return any(s.cores > 0 and job.memory <= s.memory for s in self.servers)

    def slots_for(self, job: RemoteJob) -> int:
        """Jobs like `job` the fleet runs at once: per server, its cores or what its memory holds."""
        return sum(min(s.cores, s.memory // max(1, job.memory)) for s in self.servers)


@dataclass(frozen=True)
class Local:
    """The machine ninja runs on: its CPUs, the memory local work may hold, and MAX_JOBS."""

    cores: float
    memory: int  # bytes; admission budget for local steps (and jobs no server holds)
    max_jobs: int


class Bound(StrEnum):
    SERVERS = "servers"
    LOCAL_MEMORY = "local memory"
    LOCAL_CPU = "local CPU"
    MAX_JOBS = "MAX_JOBS"
    LATENCY = "unit latency"


@dataclass(frozen=True)
class FleetResult:
    seconds: float  # makespan, the link included
    bound: Bound  # what held the build back longest
    time_by_bound: tuple[tuple[Bound, float], ...]  # seconds charged to each, in Bound's order
    remote_jobs: int
    local_jobs: int  # jobs run locally because no server could ever hold them
    jobs_per_server: tuple[int, ...]
    local_peak: int  # highest memory held by admitted local work (bytes)

    def share(self, bound: Bound) -> float:
        return dict(self.time_by_bound).get(bound, 0.0) / self.seconds if self.seconds > 0 else 0.0


def admits(in_use: int, cost: int, budget: int, running: int) -> bool:
    """The admission wrapper's rule, locally: it fits beside the running ones, or nothing runs
    (one job larger than the budget runs alone rather than never)."""
    return in_use + cost <= budget or running == 0


def simulate_fleet(
    units: Sequence[DistUnit], local: Local, fleet: Fleet = Fleet(), *, link_s: float = 0.0
) -> FleetResult:
    """One build of `units` (see the module doc); `link_s`: the local link after the last unit."""
    return _FleetBuild(units, local, fleet, link_s).run()


class _Task:
    """Local work: a unit's before or after part, a job no server holds, or the link."""

    def __init__(self, unit: int, kind: str, seconds: float, memory: int) -> None:
        self.unit, self.kind, self.left, self.memory = unit, kind, seconds, memory


class _Running:
    """A job on a server."""

    def __init__(self, unit: int, job: RemoteJob) -> None:
        self.unit, self.left, self.memory = unit, job.seconds, job.memory


class _FleetBuild:
    def __init__(self, units: Sequence[DistUnit], local: Local, fleet: Fleet, link_s: float) -> None:
        self.units, self.local, self.fleet, self.link_s = units, local, fleet, link_s
        self.pending = list(range(len(units)))[::-1]  # pop() takes the next in build order
        self.in_flight = 0
        self.waiting: list[_Task] = []  # launched local work not yet admitted, in order
        self.running: list[_Task] = []
        self.queue: list[tuple[int, RemoteJob]] = []  # jobs waiting for a server
        self.on_server: list[list[_Running]] = [[] for _ in fleet.servers]
        self.jobs_left = [0] * len(units)
        self.local_chain: list[list[RemoteJob]] = [[] for _ in units]
        self.done_units, self.linked = 0, link_s <= 0
        self.now, self.local_peak, self.local_jobs = 0.0, 0, 0
        self.per_server = [0] * len(fleet.servers)
        self.charged = dict.fromkeys(Bound, 0.0)

    def run(self) -> FleetResult:
        while True:
            self._launch()
            self._admit()
            self._dispatch()
            if not self.running and not any(self.on_server):
                break
            self._advance()
        return FleetResult(
            seconds=self.now,
            bound=max(Bound, key=lambda b: (self.charged[b], -list(Bound).index(b))),
            time_by_bound=tuple((b, self.charged[b]) for b in Bound),
            remote_jobs=sum(self.per_server),
            local_jobs=self.local_jobs,
            jobs_per_server=tuple(self.per_server),
            local_peak=self.local_peak,
        )

    def _launch(self) -> None:
        while self.pending and self.in_flight < self.local.max_jobs:
            i = self.pending.pop()
            self.in_flight += 1
            u = self.units[i]
            self.waiting.append(_Task(i, "before", u.before_s, u.local_memory))
        if not self.pending and self.in_flight == 0 and not self.linked:
            self.linked = True
            self.waiting.append(_Task(-1, "link", self.link_s, 0))

    def _admit(self) -> None:
        """Local work in launch order, by the admission wrapper's rule; none passes a waiter."""
        while self.waiting:
            task, in_use = self.waiting[0], sum(t.memory for t in self.running)
            if not admits(in_use, task.memory, self.local.memory, len(self.running)):
                break
            self.running.append(self.waiting.pop(0))
            self.local_peak = max(self.local_peak, in_use + task.memory)

    def _dispatch(self) -> None:
        """Each queued job, in order, to the least loaded server it fits now; others wait."""
        still: list[tuple[int, RemoteJob]] = []
        for unit, job in self.queue:
            fits = [
                k
                for k, s in enumerate(self.fleet.servers)
                if len(self.on_server[k]) < s.cores
                and sum(r.memory for r in self.on_server[k]) + job.memory <= s.memory
            ]
            if not fits:
                still.append((unit, job))
                continue
            k = min(fits, key=lambda k: (len(self.on_server[k]) / self.fleet.servers[k].cores, k))
            self.on_server[k].append(_Running(unit, job))
            self.per_server[k] += 1
        self.queue = still

    def _holding_back(self) -> Bound:
        if self.queue:
            return Bound.SERVERS
        if self.waiting:
            return Bound.LOCAL_MEMORY
        if len(self.running) >= self.local.cores:
            return Bound.LOCAL_CPU
        if self.pending and self.in_flight >= self.local.max_jobs:
            return Bound.MAX_JOBS
        return Bound.LATENCY

    def _advance(self) -> None:
        """To the next end of local work or of a server's job."""
        speed = min(1.0, self.local.cores / len(self.running)) if self.running else 1.0
        ends = [t.left / speed for t in self.running]
        ends += [r.left for jobs in self.on_server for r in jobs]
        step = max(0.0, min(ends))
        self.charged[self._holding_back()] += step
        self.now += step
        for task in list(self.running):
            task.left -= step * speed
            if task.left <= 1e-9:
                self.running.remove(task)
                self._local_done(task)
        for jobs in self.on_server:
            for r in list(jobs):
                r.left -= step
                if r.left <= 1e-9:
                    jobs.remove(r)
                    self._job_done(r.unit)

    def _local_done(self, task: _Task) -> None:
        if task.kind == "before":
            u = self.units[task.unit]
            self.jobs_left[task.unit] = len(u.jobs)
            for job in u.jobs:
                if self.fleet.holds(job):
                    self.queue.append((task.unit, job))
                else:
                    self.local_chain[task.unit].append(job)
            self._next_local_job(task.unit)
            if not u.jobs:
                self._after(task.unit)
        elif task.kind == "job":
            self._job_done(task.unit)
            self._next_local_job(task.unit)
        elif task.kind == "after":
            self.in_flight -= 1
            self.done_units += 1

    def _next_local_job(self, unit: int) -> None:
        """A unit's jobs that no server holds run locally one after another (nvcc --threads 1)."""
        if self.local_chain[unit]:
            job = self.local_chain[unit].pop(0)
            self.local_jobs += 1
            self.waiting.append(_Task(unit, "job", job.seconds, job.memory))

    def _job_done(self, unit: int) -> None:
        self.jobs_left[unit] -= 1
        if self.jobs_left[unit] == 0:
            self._after(unit)

    def _after(self, unit: int) -> None:
        u = self.units[unit]
        self.waiting.append(_Task(unit, "after", u.after_s, u.local_memory))


# --- the --dist plan: MAX_JOBS when the servers take the device compiles -----------------------


@dataclass(frozen=True)
class DistJobs:
    max_jobs: int
    bound: str  # which bound chose MAX_JOBS: "local memory", "units", or the predicted build's
    reason: str
    predicted: FleetResult


def local_memory_model(
    units: Sequence[DistUnit], fleet: Fleet, *, reserve: int, margin: float
) -> MemoryModel:
    """What of each unit the local machine holds, as a MemoryModel (its reserve and margin): its
    local steps, or a job no server holds if larger. The planner's rule for J concurrent units
    (the J heaviest at once) then applies unchanged."""
    local = tuple(
        UnitCost(
            u.name,
            fixed=max([u.local_memory] + [j.memory for j in u.jobs if not fleet.holds(j)]),
            per_arch=0,
            front_s=u.local_seconds,
            per_arch_s=0.0,
        )
        for u in units
    )
    return MemoryModel(name="local parts", units=local, reserve=reserve, margin=margin)


def plan_dist_jobs(
    units: Sequence[DistUnit], *, budget: int, cores: float, fleet: Fleet, reserve: int, margin: float
) -> DistJobs:
    """MAX_JOBS for a --dist build: no more than the local parts of the J heaviest units fit
    `budget` (the remote jobs' memory is the servers'), and among those the J with the shortest
    predicted build (ties: fewer jobs). The bound says which of the two decided."""
    local = local_memory_model(units, fleet, reserve=reserve, margin=margin)
    fit = max(1, local.max_jobs_within(budget, 1, 1))
    widest = max((len(u.jobs) for u in units), default=1)
    heaviest = max((j for u in units for j in u.jobs), key=lambda j: j.memory, default=None)
    useful = math.ceil(cores) + (math.ceil(fleet.slots_for(heaviest) / widest) if heaviest else 0)
    top = max(1, min(fit, len(units), 2 * useful))
    room = budget - reserve
    scored = [
        (simulate_fleet(units, Local(cores, room, jobs), fleet).seconds, jobs) for jobs in range(1, top + 1)
    ]
    seconds, jobs = min(scored)
    predicted = simulate_fleet(units, Local(cores, room, jobs), fleet)
    if jobs == fit and fit < len(units):
        bound = str(Bound.LOCAL_MEMORY)
        why = f"MAX_JOBS={jobs}: the local parts of the {jobs} heaviest units fill the budget"
    elif jobs == len(units):
        bound, why = "units", f"MAX_JOBS={jobs}: every unit at once"
    elif jobs == top:
        bound = "cores and slots"
        why = f"MAX_JOBS={jobs}: twice what the local cores and the servers' slots keep busy (no more tried)"
    else:
        bound = str(predicted.bound)
        why = f"MAX_JOBS={jobs}: more jobs are not predicted faster; the build is then bound by {bound}"
    return DistJobs(jobs, bound, f"{why} ({seconds:.0f} s predicted)", predicted)
