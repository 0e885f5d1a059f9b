"""Plan: the container's memory limit and CPUs, MAX_JOBS and NVCC_THREADS, and why. Pure.

The planner reads a MemoryModel (builder/plan/memory_model.py): per-unit peak memory and time by archs
compiled at once. A plan must be safe whichever units ninja happens to run together, so MAX_JOBS
jobs are checked against the MAX_JOBS heaviest units plus the model's reserve.

Choosing MAX_JOBS and NVCC_THREADS together: every pair that fits the budget (jobs x the
heaviest units at that many nvcc threads, plus the reserve), with MAX_JOBS at most the whole
CPUs and the units, NVCC_THREADS at most the archs (nvcc has nothing more to run in parallel),
and jobs x threads within 1.25 x the CPUs, is scored by its predicted build time (a
list-scheduling simulation of the model's units, as ninja runs them); the shortest wins, a tie
going to fewer threads, then fewer jobs. More memory only adds pairs, so more memory never
gives a slower predicted build. Where memory binds, fewer jobs of two threads can beat more
jobs of one: the planner trades them. A given MAX_JOBS gets the fastest threads that fit beside
it; a given NVCC_THREADS the most jobs that fit. After an OOM kill, `Plan.halved()` halves
MAX_JOBS, then lowers NVCC_THREADS.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace

from ..units import PAGE, format_bytes
from .memory_model import GIB, MemoryModel, launch_order, ninja_order
from .simulation import simulate

__all__ = [
    "GIB",
    "HOST_RESERVE",
    "MIN_CONTAINER",
    "OVERSUBSCRIBE",
    "PAGE",
    "Plan",
    "container_limit",
    "explain_container_limit",
    "format_plan",
    "governed_by",
    "ninja_order_file",
    "over_budget",
    "plan_build",
    "predicted_build_seconds",
    "runs",
    "summary_lines",
    "why_lines",
    "why_parts",
]

# Memory left to the host (sshd, dockerd, the page cache they need) when the limit is derived.
HOST_RESERVE = 2 * GIB
# The least a derived container limit is set to. Docker reads --memory 0 as "no limit", so a
# derived limit is never 0; below this nothing that runs pip and a compiler gets anywhere anyway.
MIN_CONTAINER = GIB
# jobs x nvcc threads may exceed the CPUs by this factor: nvcc's threads are busy only during
# the per-arch part of a unit, and a little oversubscription shortens the tail of the build.
OVERSUBSCRIBE = 1.25


@dataclass(frozen=True)
class Plan:
    memory: int  # the container's memory limit: the budget the plan fits
    cpus: float
    max_jobs: int
    nvcc_threads: int
    reasons: tuple[str, ...]  # the numbers that led here, one line each
    predicted_peak: int  # worst case under the model: reserve + the max_jobs heaviest units
    archs: int
    model: MemoryModel = field(repr=False, compare=False)
    # Build time the model predicts, in the calibration machine's seconds: for comparing plans.
    predicted_seconds: float | None = None
    # With admission (images/wheelbuild-admit): the bytes admitted compiles may hold together.
    admission_budget: int | None = None
    # MAX_JOBS / NVCC_THREADS were given (--max-jobs, --nvcc-threads): admission keeps them.
    given_jobs: bool = False
    given_threads: bool = False
    # With admission: each cicc admitted on its own too (on unless --no-cicc-admission; plan/admission.py).
    cicc_admission: bool = False
    # With admission: the most compiles the wrapper admits at once; MAX_JOBS above it is lookahead.
    admission_slots: int | None = None
    # A governed plan (admission, --dist): how many of `reasons` lead to the static plan it
    # started from, and what governs it; format_plan labels the two parts. None: static.
    static_reasons: int | None = None
    governor: str = ""

    def halved(self, times: int = 1) -> Plan | None:
        """The plan after `times` OOM kills (0: this one), each halving the jobs; at one job, the
        nvcc threads.

        None when nothing that small is left: one job of one thread cannot be halved.
        """
        smaller: Plan | None = self
        for _ in range(times):
            smaller = smaller._half() if smaller is not None else None
        return smaller

    def _half(self) -> Plan | None:
        """Half the jobs; at one job, half the nvcc threads; None at one job of one thread."""
        if self.max_jobs > 1:
            jobs, threads = self.max_jobs // 2, self.nvcc_threads
            why = f"MAX_JOBS={jobs}: half of {self.max_jobs}, after an OOM kill"
        elif self.nvcc_threads > 1:
            jobs, threads = 1, self.nvcc_threads // 2
            why = f"NVCC_THREADS={threads}: half of {self.nvcc_threads} after an OOM kill at MAX_JOBS=1"
        else:
            return None
        peak = self.model.peak_of_jobs(jobs, threads, self.archs)
        seconds = _predict(self.model, jobs, threads, self.archs, self.cpus)
        return Plan(
            memory=self.memory,
            cpus=self.cpus,
            max_jobs=jobs,
            nvcc_threads=threads,
            reasons=(why, _peak_line(self.model, peak, self.memory, jobs, threads, self.archs)),
            predicted_peak=peak,
            archs=self.archs,
            model=self.model,
            predicted_seconds=seconds,
            # The model was wrong somewhere: admit less, too.
            admission_budget=None if self.admission_budget is None else self.admission_budget * 3 // 4,
            admission_slots=None if self.admission_slots is None else max(1, self.admission_slots // 2),
            cicc_admission=self.cicc_admission,
            static_reasons=None if self.static_reasons is None else 0,
            governor=self.governor,
        )

    def as_dict(self) -> dict[str, object]:
        """For the build report: the plan and the model's name, not its unit table."""
        return {
            "memory": self.memory,
            "cpus": self.cpus,
            "max_jobs": self.max_jobs,
            "nvcc_threads": self.nvcc_threads,
            "archs": self.archs,
            "predicted_peak": self.predicted_peak,
            "predicted_seconds": None if self.predicted_seconds is None else round(self.predicted_seconds, 1),
            "model": {"name": self.model.name, "source": self.model.source, "units": self.model.unit_count},
            "admission_budget": self.admission_budget,
            "cicc_admission": self.cicc_admission,
            "admission_slots": self.admission_slots,
            "reasons": list(self.reasons),
        }


def ninja_order_file(plan: Plan) -> str | None:
    """AttemptConfig.ninja_order: images/wheelbuild-ninja's order file as JSON text, the launch
    order the plan was predicted with; None without a complete unit list (nothing to order by)."""
    if not plan.model.complete:
        return None
    return json.dumps(ninja_order(plan.model.units, plan.nvcc_threads, plan.archs), separators=(",", ":"))


def container_limit(host_available: int, own_cgroup_limit: int | None, reserve: int = HOST_RESERVE) -> int:
    """The container's --memory: the smaller of the host's available memory and our own cgroup's
    limit, less `reserve` for the host (sshd, dockerd), page-aligned down; never above that,
    except that it is never under MIN_CONTAINER (docker would read 0 as "no limit")."""
    ceiling = host_available if own_cgroup_limit is None else min(host_available, own_cgroup_limit)
    return max(MIN_CONTAINER, (ceiling - reserve) // PAGE * PAGE)


def explain_container_limit(
    host_available: int, own_cgroup_limit: int | None, reserve: int = HOST_RESERVE
) -> str:
    """container_limit's reason, for Plan.reasons."""
    limit = container_limit(host_available, own_cgroup_limit, reserve)
    if own_cgroup_limit is not None and own_cgroup_limit < host_available:
        source = (
            f"our cgroup's limit {format_bytes(own_cgroup_limit)} "
            f"(below the host's {format_bytes(host_available)} available)"
        )
    else:
        source = f"host available {format_bytes(host_available)}"
        if own_cgroup_limit is not None:
            source += f" (our cgroup allows {format_bytes(own_cgroup_limit)})"
    line = f"memory limit {format_bytes(limit)}: {source} less {format_bytes(reserve)} kept for the host"
    ceiling = host_available if own_cgroup_limit is None else min(host_available, own_cgroup_limit)
    if limit > ceiling - reserve:
        line += f", raised to the {format_bytes(MIN_CONTAINER)} floor"
    return line


# What a plan from a model nobody measured (the default) says of itself.
BLIND = (
    "how sure: a guess: nothing of this package was measured, and its units may need more "
    "(flash-attn's measure 4-7 GiB per arch) or much less; this build measures each unit, "
    "and the next plan of it learns from that"
)


def plan_build(
    *,
    budget: int,
    cpus: float,
    archs: int,
    model: MemoryModel,
    max_jobs: int | None = None,
    nvcc_threads: int | None = None,
    budget_reason: str | None = None,
    cpus_reason: str | None = None,
) -> Plan:
    """MAX_JOBS and NVCC_THREADS for a container of `budget` bytes and `cpus` CPUs (see module doc).

    Given values are kept as they are; the reasons say when the model thinks they do not fit.
    """
    archs = max(1, archs)
    reasons: list[str] = [r for r in (budget_reason, cpus_reason) if r]
    reasons.append(
        f"model: {model.describe()}; reserve {format_bytes(model.reserve)} once, "
        f"+{model.margin:.0%} on every unit's peak"
    )
    reasons += [BLIND] if model.blind else []
    reasons.append(_worst_line(model, archs))

    if max_jobs is None and nvcc_threads is None and model.peak_of_jobs(1, 1, archs) <= budget:
        jobs, threads, lines = _jobs_and_threads(model, budget, cpus, archs)
        reasons += lines
    else:
        if max_jobs is None:
            threads_for_jobs = nvcc_threads if nvcc_threads is not None else 1
            jobs, line = _jobs(model, budget, cpus, archs, threads_for_jobs)
            reasons.append(line)
            over = jobs == 1 and model.peak_of_jobs(1, threads_for_jobs, archs) > budget
        else:
            jobs, over = max_jobs, False
            reasons.append(f"MAX_JOBS={jobs}: given")
        threads, line = _nvcc_threads(model, budget, cpus, archs, jobs, nvcc_threads, over)
        reasons.append(line)

    peak = model.peak_of_jobs(jobs, threads, archs)
    seconds = _predict(model, jobs, threads, archs, cpus)
    reasons.append(_peak_line(model, peak, budget, jobs, threads, archs))
    if seconds is not None:
        reasons.append(
            f"predicted build: {seconds:.0f} s at the calibration machine's speed per core "
            f"(for comparing plans, not a promise)"
        )
    return Plan(
        memory=budget,
        cpus=cpus,
        max_jobs=jobs,
        nvcc_threads=threads,
        reasons=tuple(reasons),
        predicted_peak=peak,
        archs=archs,
        model=model,
        predicted_seconds=seconds,
        given_jobs=max_jobs is not None,
        given_threads=nvcc_threads is not None,
    )


def _nvcc_threads(
    model: MemoryModel, budget: int, cpus: float, archs: int, jobs: int, given: int | None, over: bool
) -> tuple[int, str]:
    """NVCC_THREADS and the reason: as given, else 1 when even one job does not fit, else what
    fits beside *jobs*."""
    if given is not None:
        line = f"NVCC_THREADS={given}: given"
        if given > archs:
            line += f" (nvcc compiles at most archs={archs} at once; more threads only idle)"
        return given, line
    if over:
        return 1, "NVCC_THREADS=1: the smallest job there is, as even one job does not fit"
    return _threads(model, budget, cpus, archs, jobs)


def _jobs(model: MemoryModel, budget: int, cpus: float, archs: int, threads: int) -> tuple[int, str]:
    slots = max(1, int(cpus))
    fit = model.max_jobs_within(budget, threads, archs)
    per = f"{threads} nvcc thread{'s' if threads > 1 else ''} each"
    if fit == 0:
        smallest = model.peak_of_jobs(1, threads, archs)
        return 1, (
            f"MAX_JOBS=1: the budget {format_bytes(budget)} is below the model's smallest job "
            f"({format_bytes(smallest)}: reserve + the worst unit at {per}); running one job "
            f"anyway, expect an OOM kill unless the model over-estimates"
        )
    caps = [(fit, f"{fit} fit {format_bytes(budget)} at {per}")]
    caps.append((slots, f"{slots} whole CPU{'s' if slots > 1 else ''}"))
    if model.unit_count is not None:
        caps.append((model.unit_count, f"{model.unit_count} units"))
    jobs = min(c for c, _ in caps)
    used = model.peak_of_jobs(jobs, threads, archs)
    detail = f"{'; '.join(text for _, text in caps)}"
    if jobs == fit and (model.unit_count is None or fit < model.unit_count):
        more = model.peak_of_jobs(fit + 1, threads, archs)
        detail += f" ({jobs} need {format_bytes(used)}, {jobs + 1} would need {format_bytes(more)})"
    return jobs, f"MAX_JOBS={jobs}: the least of: {detail}"


def _jobs_and_threads(model: MemoryModel, budget: int, cpus: float, archs: int) -> tuple[int, int, list[str]]:
    """The pair with the shortest predicted build of all that fit (see the module doc), and
    the reasons: the MAX_JOBS line as at those threads, then the best pair at each threads."""
    slots = max(1, int(cpus))
    room = math.floor(OVERSUBSCRIBE * cpus)
    best_at: dict[int, tuple[float, int]] = {}  # threads -> (seconds, jobs) of its best jobs
    for threads in range(1, archs + 1):
        top = min(model.max_jobs_within(budget, threads, archs), slots, model.unit_count or slots)
        if threads > 1:
            top = min(top, room // threads)
        scored = [
            (predicted_build_seconds(model, jobs, threads, archs, cpus), jobs) for jobs in range(1, top + 1)
        ]
        if scored:
            best_at[threads] = min(scored)  # ties: fewer jobs
    seconds, threads, jobs = min((s, t, j) for t, (s, j) in best_at.items())
    most, jobs_line = _jobs(model, budget, cpus, archs, threads)
    if jobs < most:
        jobs_line = (
            f"MAX_JOBS={jobs}: fewer than the {most} that fit, as no more is predicted faster ({jobs_line})"
        )
    if archs == 1:
        return jobs, threads, [jobs_line, "NVCC_THREADS=1: one arch, nothing for nvcc to run in parallel"]
    others = [
        f"{t} thread{'s' if t > 1 else ''}: {j} jobs, {s:.0f} s"
        for t, (s, j) in best_at.items()
        if t != threads
    ]
    unfit = [t for t in range(1, archs + 1) if t not in best_at]
    line = f"NVCC_THREADS={threads}: of at most archs={archs}, the shortest predicted build ({seconds:.0f} s"
    line += f"; best at {', '.join(others)})" if others else ")"
    if unfit:
        line += (
            f"; {', '.join(map(str, unfit))} thread(s) fit no job within {format_bytes(budget)} or the CPUs"
        )
    return jobs, threads, [jobs_line, line]


def _threads(model: MemoryModel, budget: int, cpus: float, archs: int, jobs: int) -> tuple[int, str]:
    if archs == 1:
        return 1, "NVCC_THREADS=1: one arch, nothing for nvcc to run in parallel"
    room = max(1, math.floor(OVERSUBSCRIBE * cpus) // jobs)
    scored: list[tuple[float, int]] = []
    refused: list[str] = []
    for threads in range(1, archs + 1):
        peak = model.peak_of_jobs(jobs, threads, archs)
        if threads > 1 and peak > budget:
            refused.append(f"{threads} would need {format_bytes(peak)} for {jobs} jobs")
            continue
        if threads > room:
            refused.append(
                f"{threads} would run {jobs * threads} threads on {cpus:g} CPUs (at most {OVERSUBSCRIBE:g}x)"
            )
            continue
        scored.append((predicted_build_seconds(model, jobs, threads, archs, cpus), threads))
    best_score, best = min(scored)  # ties: fewer threads (tuples compare the count second)
    others = [f"{t}: {s:.0f} s" for s, t in scored if t != best]
    line = f"NVCC_THREADS={best}: of at most archs={archs}"
    if others:
        line += f", the shortest predicted build ({best_score:.0f} s vs {', '.join(others)})"
    if refused:
        line += f"; {'; '.join(refused)}"
    return best, line


def _predict(model: MemoryModel, jobs: int, threads: int, archs: int, cpus: float) -> float | None:
    """Predicted build seconds with a complete unit list; None without one."""
    if not model.complete:
        return None
    units = [model.units[i] for i in launch_order(model.units, threads, archs)]
    return simulate(units, jobs=jobs, threads=threads, archs=archs, cpus=cpus).seconds


def predicted_build_seconds(model: MemoryModel, jobs: int, threads: int, archs: int, cpus: float) -> float:
    """Predicted build seconds. Without a unit list (the build is some unknown number of units
    like the model's worst): the seconds per unit at the throughput of waves of `jobs` units,
    which compares settings the same way whatever the count."""
    seconds = _predict(model, jobs, threads, archs, cpus)
    if seconds is not None:
        return seconds
    unit = max(model.units, key=lambda u: u.cpu_seconds(archs))
    wall = unit.wall(threads, archs)
    busy = jobs * unit.cpu_seconds(archs) / wall
    return wall * max(1.0, busy / max(cpus, 1e-9)) / jobs


def _worst_line(model: MemoryModel, archs: int) -> str:
    one = model.peak_per_job(1, archs)
    worst = max(model.units, key=lambda u: model.unit_peak(u, 1, archs))
    text = f"worst unit: {worst.name.rsplit('/', 1)[-1]} at {format_bytes(one)} with 1 nvcc thread"
    if archs > 1:
        text += f", {format_bytes(model.peak_per_job(archs, archs))} with {archs} (archs={archs})"
    return text


def _peak_line(model: MemoryModel, peak: int, budget: int, jobs: int, threads: int, archs: int) -> str:
    if model.complete and jobs < len(model.units):
        which = f"the {jobs} heaviest unit{'s' if jobs > 1 else ''}"
    elif model.complete:
        which = f"all {len(model.units)} units"
    else:
        which = f"{jobs} x the worst unit"
    verdict = "within" if peak <= budget else "OVER"
    return (
        f"predicted peak {format_bytes(peak)} {verdict} {format_bytes(budget)}: reserve + {which} "
        f"at NVCC_THREADS={threads}"
    )


def governed_by(static: Plan, governor: str, plan: Plan) -> Plan:
    """`plan`, made from `static` by `governor` ("admission"), marked so that format_plan
    labels the static plan's reasons and the governed plan's apart (a plan governed again, as
    learned.remember predicts it, keeps its first mark)."""
    if static.static_reasons is not None:
        return plan
    return replace(plan, static_reasons=len(static.reasons), governor=governor)


def over_budget(plan: Plan) -> str | None:
    """The warning for a plan whose predicted peak is over its memory limit; None when it fits."""
    if plan.predicted_peak <= plan.memory:
        return None
    return (
        f"predicted peak {format_bytes(plan.predicted_peak)} is over the memory limit "
        f"{format_bytes(plan.memory)} ({plan.predicted_peak / plan.memory:.0%}): expect an OOM kill "
        "and attempts at half the jobs, unless the model over-estimates; give more --memory"
    )


_STATIC = "the static plan: MAX_JOBS alone bounds memory"


def format_plan(plan: Plan) -> str:
    """The plan and its reasoning, for `wheelbuild plan -v` and the build log: the summary is the
    plan that runs, and each of its numbers is said in a reason; a governed plan's reasons come
    in two labelled parts, the static plan's, then the governed plan's, which the summary is."""
    return "\n".join([f"plan for {plan.model.describe()}", *summary_lines(plan), *why_lines(plan)])


def runs(plan: Plan) -> str:
    """Which plan runs: "the static plan", or the governed one ("the admission plan")."""
    return f"the {plan.governor} plan" if plan.static_reasons is not None else "the static plan"


def summary_lines(plan: Plan) -> list[str]:
    """The plan that runs, one indented row per number (`  MAX_JOBS        4`)."""
    width = 16
    rows = [
        ("runs", runs(plan)),
        ("memory limit", format_bytes(plan.memory)),
        ("CPUs", f"{plan.cpus:g}"),
        ("archs", str(plan.archs)),
        ("MAX_JOBS", str(plan.max_jobs)),
        ("NVCC_THREADS", str(plan.nvcc_threads)),
        ("predicted peak", f"{format_bytes(plan.predicted_peak)} ({plan.predicted_peak / plan.memory:.0%})"),
    ]
    if plan.predicted_seconds is not None:
        rows.append(("predicted time", f"{plan.predicted_seconds:.0f} s (calibration machine)"))
    return [f"  {key:<{width}}{value}" for key, value in rows]


def why_parts(plan: Plan) -> list[tuple[str, tuple[str, ...]]]:
    """The reasons in their labelled parts: the static plan's, then (governed) the plan that runs."""
    if plan.static_reasons is None:
        return [(_STATIC, plan.reasons)]
    static, governed = plan.reasons[: plan.static_reasons], plan.reasons[plan.static_reasons :]
    parts = [(f"{_STATIC}; without {plan.governor}, this would run", static)] if static else []
    return [*parts, (f"the {plan.governor} plan: what runs, the summary above", governed)]


def why_lines(plan: Plan) -> list[str]:
    """The reasons under their labels: `why (...)`, or `why, 1 of 2 (...)` and `why, 2 of 2 (...)`."""
    parts = why_parts(plan)
    lines: list[str] = []
    for number, (label, reasons) in enumerate(parts, 1):
        counted = f", {number} of {len(parts)}" if len(parts) > 1 else ""
        lines.append(f"why{counted} ({label}):")
        lines += [f"  - {reason}" for reason in reasons]
    return lines
