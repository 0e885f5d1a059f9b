"""Admission by memory, planned: what images/wheelbuild-admit is told (its budget and costs file)
and the MAX_JOBS / NVCC_THREADS that suit a build behind it. Pure.

With admission, the wrapper, not MAX_JOBS, bounds what compiles together: it admits at most the
CPUs' worth of compiles at once (its slots), each once its predicted cost fits the budget beside
the admitted ones, and ninja launches LOOKAHEAD times as many, so that a unit that fits can pass
one that waits for memory. So NVCC_THREADS is chosen by the build predicted behind the wrapper (simulate() with the
wrapper's rule, units in launch order), and the plan's peak and time are the simulated ones.

Cicc admission (on by default; --no-cicc-admission turns it off): a device unit holds its peak only
while a cicc runs (phases.py). So its compile is admitted at its cost outside cicc (the larger of
its fixed part and its largest other step, cudafe++), and each cicc it runs waits for admission
(wheelbuild-admit --cicc) until its own cost, one arch's peak, fits; with nvcc --threads 2 a
unit's second cicc beside its first costs its arch's part alone, since the unit's part outside its
archs is held once (calibration: two archs 7778 MiB at once, 4150 one at a time). Host units, units the costs
file does not know, and units whose steps were not measured (any but flash-attn's kernels,
phases.shape_of) are admitted whole. It is the default because it wins where memory
binds and costs nothing where it does not: on the real subset build (bench/subset, 2 CPUs, ABBA
from one learned profile) its compile step was 0.745 x whole-unit admission's in 8 GiB, where
no two ciccs fit together (a cicc runs beside the other units' other steps), and 1.00 x in
11.5 GiB, where the CPUs bind; bench/planner has it at 1.02-1.43 of the lower bound against
1.02-2.04, with no first-attempt OOM kill."""

from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import dataclass, replace

from ..units import PAGE, format_bytes
from .memory_model import MemoryModel, UnitCost, launch_order
from .online import COLD, COLD_PROFILE
from .phases import cicc_windows, shape_of
from .planner import OVERSUBSCRIBE, Plan, governed_by
from .simulation import SimResult, simulate

__all__ = [
    "ADMIT_MARGIN",
    "LOOKAHEAD",
    "MEASURED_MARGIN",
    "SPREAD_DRAWS",
    "WALL_SPREAD",
    "UnitCosts",
    "admission_costs",
    "admission_file",
    "admission_jobs",
    "admission_shape",
    "unit_costs",
    "with_admission",
]


# Extra room on top of the model's margin in the admission wrapper's costs: admission packs memory
# up to the predicted peaks and keeps none of a static plan's accidental slack (bench/planner,
# against the measured rows, 2026-12-01, each cicc admitted on its own: with every true peak 10% over,
# 0 of 180 first attempts OOM-killed with it, 61 of 180 with 5%, 153 of 180 without; it costs
# about 5% of median build time, 1.21 -> 1.27 of the lower bound). It covers an estimate's
# error (a unit scaled from its kin, a toolkit other than the one measured on), so a unit
# measured on the build's own toolkit (UnitCost.measured: calibrate, or the model learned from
# the last build) gets MEASURED_MARGIN instead.
ADMIT_MARGIN = 0.10
# A measured unit's extra room: the watcher samples, so it may miss the top of a peak, and a peak
# differs from build to build (another image, another host compiler under the same toolkit).
# bench/planner, the build after one: with every true peak 10% over what was measured, 0 of 180
# first attempts OOM-killed with it, 153 of 180 without (once a unit's second cicc is charged its
# arch's part alone, admission packs within the margins); it costs about 1% of median build time.
MEASURED_MARGIN = 0.05


# The spread in unit times the admission plan allows for when it picks NVCC_THREADS. Each
# unit's time is one sample, and most units are scaled from a measured kin's row (bench/planner
# draws its truths with the same lognormal 15%). When every unit compiles at once, the slowest
# one decides the build, and a spread makes the slowest slower than any of the model's; nvcc
# threads shorten every unit, so they are worth more than the plain model says. The plan is
# scored over SPREAD_DRAWS seeded draws, the same each time.
WALL_SPREAD = 0.15
SPREAD_DRAWS = 8
# ninja launches this many times the wrapper's slots: compiles past the slots wait in the wrapper,
# where one that fits may pass an older one that waits for memory (a CPU would idle otherwise).
LOOKAHEAD = 2


def with_admission(
    plan: Plan, *, keep_jobs: bool = False, cicc_admission: bool | None = None, learning: bool = True
) -> Plan:
    """The same plan with its compiles admitted by memory (images/wheelbuild-admit): ninja may
    launch up to the CPUs (or the units), and each compile waits until its predicted peak fits
    what the running ones leave of the container's limit less the model's reserve.

    Unless given (--nvcc-threads, --max-jobs) or `keep_jobs`, NVCC_THREADS is chosen again for
    admission, by the predicted build behind the wrapper with unit times spread by WALL_SPREAD,
    and MAX_JOBS is then the most the CPUs allow at those threads (the 1.25 x CPUs rule).

    With `learning` (admission that learns while the build runs, online.py), a model whose unit
    count is unknown (the default model) no longer caps MAX_JOBS at the static plan's: the
    wrapper, correcting its costs by what the running compiles measure, bounds the memory, so
    MAX_JOBS is the CPUs' as for a known unit list (without it, the static plan's worst case
    at the default guess is the only bound a wrong guess leaves). A real build always learns
    (admission_costs); the bench plans without learning to compare."""
    per_cicc = plan.cicc_admission if cicc_admission is None else cicc_admission
    plan = replace(plan, cicc_admission=per_cicc)
    model = plan.model
    keep_jobs = keep_jobs or plan.given_jobs
    budget = max(PAGE, (plan.memory - model.reserve) // PAGE * PAGE)
    threads, lines = plan.nvcc_threads, list[str]()
    if not keep_jobs and not plan.given_threads and model.complete and plan.archs > 1:
        threads, lines = _admission_threads(plan, budget)
    # Kept jobs keep their slots too (an admitted plan predicted again, as learned.remember does).
    jobs, slots = (
        (plan.max_jobs, plan.admission_slots) if keep_jobs else _admission_shape(plan, threads, learning)
    )
    why = _admission_line(model, jobs, threads, slots, budget, per_cicc)
    run = _admitted_run(plan, jobs, threads, budget, slots=slots)
    admitted = replace(
        plan,
        max_jobs=jobs,
        nvcc_threads=threads,
        admission_budget=budget,
        admission_slots=slots,
        reasons=(*plan.reasons, *lines, why, *_simulated_lines(run, plan.memory)),
        # The wrapper, not MAX_JOBS, bounds what runs together: the peak is the simulated one.
        predicted_peak=run.peak if run is not None else plan.predicted_peak,
        predicted_seconds=run.seconds if run is not None else plan.predicted_seconds,
    )
    return governed_by(plan, "admission", admitted)


def _simulated_lines(run: SimResult | None, limit: int) -> list[str]:
    """The admitted build's predicted peak and time, as the plan's summary shows them; none
    without a unit list to simulate (the static plan's then stand)."""
    if run is None:
        return []
    verdict = "within" if run.peak <= limit else "OVER"
    return [
        f"predicted peak {format_bytes(run.peak)} {verdict} {format_bytes(limit)} with admission: the "
        "highest the simulated build holds (the reserve, and each admitted compile at its predicted "
        "peak with the model's margin)",
        f"predicted build: {run.seconds:.0f} s with admission, each unit's time as the model has it "
        "(the calibration machine's speed per core; for comparing plans, not a promise)",
    ]


def _admission_line(
    model: MemoryModel, jobs: int, threads: int, slots: int | None, budget: int, per_cicc: bool
) -> str:
    """The plan's reason line for admission: what ninja launches and what each compile waits for."""
    head = (
        f"admission: ninja launches up to MAX_JOBS={jobs} at NVCC_THREADS={threads}{_shape_text(jobs, slots)}"
    )
    if per_cicc and _cicc_admission_applies(model):
        return (
            f"{head}; within {format_bytes(budget)} (the limit less the model's reserve), each compile "
            "starts once its cost outside cicc fits, and each cicc once its own predicted peak "
            f"({_margin_text(model)}) fits beside what runs (cicc admission; host units: their whole peak)"
        )
    why = (
        "cicc admission knows the steps of flash-attn's kernels alone" if per_cicc else "--no-cicc-admission"
    )
    return (
        f"{head}; each compile starts once its predicted peak ({_margin_text(model)}) fits "
        f"{format_bytes(budget)} (the limit less the model's reserve) beside the running ones ({why})"
    )


def admission_jobs(cpus: float, units: int, threads: int) -> int:
    """The most compiles ninja launches behind the wrapper: the whole CPUs at one nvcc thread,
    1.25 x CPUs / threads above, never more than the units."""
    slots = max(1, int(cpus))
    cpu_room = slots if threads == 1 else max(1, math.floor(OVERSUBSCRIBE * cpus) // threads)
    return max(1, min(cpu_room, units))


def admission_shape(cpus: float, units: int, threads: int, least: int = 1) -> tuple[int, int | None]:
    """MAX_JOBS and the wrapper's slots (None: no cap, it would never bind): the slots are
    admission_jobs (never fewer than `least`, the static plan's jobs, or than the units allow),
    and ninja launches LOOKAHEAD times as many, at most the units, so that a unit that fits can
    pass one that waits for memory."""
    slots = max(admission_jobs(cpus, units, threads), min(least, units))
    jobs = max(slots, min(units, LOOKAHEAD * slots))
    return jobs, (slots if slots < jobs else None)


def _admission_shape(plan: Plan, threads: int, learning: bool = False) -> tuple[int, int | None]:
    """admission_shape for the plan's units; unknown, the static plan's jobs, or with `learning`
    as many as the lookahead fills."""
    unknown = LOOKAHEAD * max(1, int(plan.cpus)) if learning else plan.max_jobs
    return admission_shape(plan.cpus, plan.model.unit_count or unknown, threads, plan.max_jobs)


def _shape_text(jobs: int, slots: int | None) -> str:
    if slots is None or slots >= jobs:
        return ""
    return f", at most {slots} compiling at once (the CPUs; the rest wait as lookahead)"


def _admission_threads(plan: Plan, budget: int) -> tuple[int, list[str]]:
    """NVCC_THREADS for admission: the shortest build over the spread draws; ties to fewer."""
    scored = []
    for threads in range(1, plan.archs + 1):
        jobs, slots = _admission_shape(plan, threads)
        draws = [_admitted_run(plan, jobs, threads, budget, draw, slots) for draw in range(SPREAD_DRAWS)]
        seconds = statistics.fmean(r.seconds for r in draws if r is not None)
        scored.append((seconds, threads, jobs))
    seconds, threads, jobs = min(scored)
    others = ", ".join(f"{t}: {s:.0f} s at MAX_JOBS={j}" for s, t, j in scored if t != threads)
    return threads, [
        f"NVCC_THREADS={threads} behind admission: the shortest predicted build, {seconds:.0f} s at "
        f"MAX_JOBS={jobs} (vs {others}), each unit's time spread by {WALL_SPREAD:.0%} over "
        f"{SPREAD_DRAWS} draws, longest units launched first"
    ]


def _admitted_run(
    plan: Plan, jobs: int, threads: int, budget: int, draw: int | None = None, slots: int | None = None
) -> SimResult | None:
    """The build simulated behind the wrapper (and its cicc admission, if the plan has it): units in
    launch order, admitted at the wrapper's costs, each holding its peak with the model's margin
    inside its cicc windows, the reserve held throughout; with `draw`, the units' times spread by
    that seeded draw. None without a unit list."""
    model, archs, cpus = plan.model, plan.archs, plan.cpus
    if not model.complete:
        return None
    order = launch_order(model.units, threads, archs)
    units = [_with_margin(model.units[i], model.margin) for i in order]
    costs = [unit_costs(model, model.units[i], threads, archs) for i in order]
    if draw is not None:
        units = _spread(units, draw)
    per_cicc = plan.cicc_admission and _cicc_admission_applies(model)
    return simulate(
        units, jobs=jobs, threads=threads, archs=archs, cpus=cpus, base=model.reserve,
        peak_windows=[cicc_windows(u, threads, archs) for u in units], admit_budget=budget,
        admit_costs=[c.compile if per_cicc else c.whole for c in costs],
        cicc_costs=[c.cicc for c in costs] if per_cicc else None,
        cicc_beside=[c.cicc_beside for c in costs] if per_cicc else None, admit_slots=slots,
    )  # fmt: skip


def _with_margin(unit: UnitCost, margin: float) -> UnitCost:
    return replace(
        unit, fixed=math.ceil(unit.fixed * (1 + margin)), per_arch=math.ceil(unit.per_arch * (1 + margin))
    )


def _spread(units: list[UnitCost], draw: int) -> list[UnitCost]:
    """The units with their times scaled by a seeded lognormal draw of sigma WALL_SPREAD."""
    rng = random.Random(draw)
    scaled = []
    for u in units:
        factor = math.exp(rng.gauss(0.0, WALL_SPREAD))
        scaled.append(replace(u, front_s=u.front_s * factor, per_arch_s=u.per_arch_s * factor))
    return scaled


def _cicc_admission_applies(model: MemoryModel) -> bool:
    """Whether cicc admission has a unit to admit: one whose steps were measured (phases.shape_of).
    With none (another extension's units), the costs file has no cicc costs and no cicc admission is
    installed, so the plan, its simulation and its costs file all admit whole units."""
    return any(shape_of(u) is not None for u in model.units)


def _margin_text(model: MemoryModel) -> str:
    measured = sum(u.measured for u in model.units)
    if not measured:
        return f"+{ADMIT_MARGIN:.0%}"
    units = "unit" if measured == 1 else "units"
    return f"+{ADMIT_MARGIN:.0%}, +{MEASURED_MARGIN:.0%} for the {measured} {units} measured on this toolkit"


def _admit_margin(unit: UnitCost) -> float:
    return MEASURED_MARGIN if unit.measured else ADMIT_MARGIN


def _admit_cost(model: MemoryModel, unit: UnitCost, threads: int, archs: int) -> int:
    return int(model.unit_peak(unit, threads, archs) * (1 + _admit_margin(unit)))


@dataclass(frozen=True)
class UnitCosts:
    """What the wrapper's ledger holds for one unit: its compile, and each cicc it runs (None:
    no cicc admission, the compile is admitted at its whole peak); `cicc_beside`, a cicc that runs beside
    one of the same unit's (nvcc --threads 2): its arch's part alone, since the unit's fixed part
    is held once (calibration: two archs 7778 MiB at once, 4150 one at a time)."""

    compile: int
    cicc: int | None
    whole: int
    # The unit's whole peak at the plan's threads: its cost without cicc admission.
    cicc_beside: int | None = None


def unit_costs(model: MemoryModel, unit: UnitCost, threads: int, archs: int) -> UnitCosts:
    whole = _admit_cost(model, unit, threads, archs)
    shape = shape_of(unit)
    if shape is None:
        return UnitCosts(compile=whole, cicc=None, whole=whole)
    cicc = _admit_cost(model, unit, 1, 1)  # one cicc compiles one arch
    beside = math.ceil(unit.per_arch * (1 + model.margin) * (1 + _admit_margin(unit)))
    low = max(unit.fixed, math.ceil(shape.low * unit.peak(1, 1)))
    compile_cost = int(low * (1 + model.margin) * (1 + _admit_margin(unit)))
    return UnitCosts(compile=compile_cost, cicc=cicc, whole=whole, cicc_beside=min(cicc, beside))


def admission_costs(plan: Plan) -> dict[str, object]:
    """The wrapper's costs file, by each unit's source's basename: "units", what its compile is
    admitted at (its whole peak, or with cicc admission its cost outside cicc); with it,
    "cicc", what each of its ciccs is (device units only), and "cicc_beside", what one is beside
    a cicc of the same unit already admitted. An unknown unit's compile costs as
    much as the heaviest unit's whole peak, and its ciccs run without waiting. "learn": the
    wrapper learns while the build runs, from this cold factor (a guess's COLD, a profile's
    COLD_PROFILE); with cicc admission, "whole" too: each unit's whole peak, which its measured
    memory (its whole compile's) is held against, its compile's and ciccs' costs scaled alike."""
    costs = {
        u.name.rsplit("/", 1)[-1]: unit_costs(plan.model, u, plan.nvcc_threads, plan.archs)
        for u in plan.model.units
    }
    heaviest = max(c.whole for c in costs.values())
    slots = {} if plan.admission_slots is None else {"slots": plan.admission_slots}
    # The wrapper corrects the costs by what the watcher measures (online.py), a guess's starting
    # at COLD times them, a profile's at their own.
    learn = {"cold": COLD if plan.model.blind else COLD_PROFILE}
    if not (plan.cicc_admission and _cicc_admission_applies(plan.model)):
        return {"default": heaviest, "units": {n: c.whole for n, c in costs.items()}, **slots, "learn": learn}
    return {
        "default": heaviest,
        "units": {name: c.compile for name, c in costs.items()},
        "cicc": {name: c.cicc for name, c in costs.items() if c.cicc is not None},
        "cicc_beside": {name: c.cicc_beside for name, c in costs.items() if c.cicc_beside is not None},
        **slots,
        "learn": learn,
        "whole": {name: c.whole for name, c in costs.items()},
    }


def admission_file(plan: Plan) -> tuple[int, str] | None:
    """AttemptConfig.admission: the budget and the costs file's JSON text; None without admission."""
    if plan.admission_budget is None:
        return None
    return plan.admission_budget, json.dumps(admission_costs(plan), separators=(",", ":"))
