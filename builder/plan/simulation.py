"""A build simulated as ninja runs it: list scheduling of the units, `jobs` at a time. Pure.

Builds use it: the planner predicts a build's seconds with it (planner._predict: no limit, no
cache, no admission) to choose NVCC_THREADS and to print the predicted time, and the admission
plan predicts its build behind the wrapper (admission.py). The rest (OOM kills under a limit,
sccache hits) serves bench/planner and the tests, and stays in the same loop so the two cannot
drift apart.

Memory over a unit's progress: its fixed part, and its whole peak inside its peak windows. By
default one window from PEAK_ONSET to the end (device compile after the host front end); with
`peak_windows`, the stretches its cicc runs (phases.cicc_windows, from steps measured one by one).
Cicc admission (wheelbuild-admit --cicc) admits each cicc on its own, and so does simulate():
inside a peak window a unit runs min(threads, archs) ciccs (its lanes), each waiting for admission
until its cost fits (a unit its costs file gives no cicc cost passes unheld, as the wrapper lets
it). A unit with k of its L lanes admitted goes through its window at k/L of its speed (nvcc's
other threads wait on their ciccs) and holds its fixed part plus k/L of the rest of its peak; the
ledger holds its ciccs' costs in place of its compile's until the window ends, a cicc beside one
of its own unit's at its cost beside (its arch's part: the unit's fixed part is held once). With
no lane admitted it is stopped: no compiler's memory, no CPU, nothing in the ledger. Ciccs come
before launched compiles, units in launch order (a unit's lanes together, as its ciccs arrive
together), and one cicc is always let through when none is admitted (so nothing deadlocks).
Until 2026-12-01 the simulation admitted a unit's ciccs together, which the wrapper never did.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from .memory_model import UnitCost, _in_flight
from .online import Learner

__all__ = ["PEAK_ONSET", "SimResult", "Window", "simulate"]

# A simulated unit holds only its fixed part until this share of its wall, then its whole peak:
# the device compile (cicc, ptxas) comes after the host front end.
PEAK_ONSET = 0.2

Window = tuple[float, float]  # a stretch of a unit's progress, shares of its wall: [start, end)
_EPS = 1e-12


@dataclass(frozen=True)
class SimResult:
    seconds: float  # until the attempt ended: all done, or the last running compile after a kill
    finished: frozenset[int]  # unit indices that completed
    killed: int  # compilers OOM-killed
    peak: int  # highest memory in use (bytes), base included
    ok: bool  # every unit finished
    # With admission: the highest sum of admitted units' predicted costs (the wrapper's ledger).
    admitted_peak: int = 0
    # With cicc admission: the seconds units spent stopped at it, summed.
    cicc_wait_s: float = 0.0
    # The units' memory in use over the attempt, in byte-seconds (base left out).
    memory_s: float = 0.0
    # The drain: from the last moment a unit waited (to start, in the wrapper, or at cicc admission
    # short of its ciccs) to the end, when memory can only empty. When it began, and the
    # byte-seconds used in it.
    drain_from: float = 0.0
    drain_memory_s: float = 0.0


def simulate(
    units: Sequence[UnitCost],
    *,
    jobs: int,
    threads: int,
    archs: int,
    cpus: float,
    limit: int | None = None,
    base: int = 0,
    cached: Collection[int] = (),
    hit: UnitCost | None = None,
    onset: float = PEAK_ONSET,
    peak_windows: Sequence[Sequence[Window]] | None = None,
    admit_budget: int | None = None,
    admit_costs: Sequence[int] | None = None,
    cicc_costs: Sequence[int | None] | None = None,
    cicc_beside: Sequence[int | None] | None = None,
    admit_fairness_s: float = 30.0,
    admit_slots: int | None = None,
    learn_cold: float | None = None,
) -> SimResult:
    """Run `units` in order, `jobs` at a time, like ninja: a unit starts when a slot frees.

    CPUs are shared: a running unit wants cpu_seconds/wall cores on average; when the running
    units want more than `cpus`, all slow down in proportion. A unit holds its fixed part from
    its start and its whole peak inside its peak windows (`peak_windows[i]`, by default
    [(onset, 1)]). With `limit`, base + memory in use above it OOM-kills the largest compilers
    until it fits; ninja then starts nothing more and the attempt ends when the running units
    finish. Units in `cached` run as `hit` (an sccache hit) instead, with the default window.

    With `admit_budget`, every compile goes through images/wheelbuild-admit: a unit ninja
    launches waits, holding its slot but no memory or CPU, until it is admitted, and then
    compiles. Admission is the wrapper's rule, in launch order: a waiter is admitted when the
    predicted costs of the admitted units plus its own fit `admit_budget`, or when nothing is
    admitted (a unit larger than the budget runs alone); later waiters may pass one that does
    not fit, except one that has waited longer than `admit_fairness_s`. The predicted cost of
    unit i is `admit_costs[i]` (the wrapper's costs file), by default its own peak; sccache
    hits are admitted at that cost too (the wrapper runs before sccache). Memory in use is
    still the units' true peaks, so the limit can still OOM-kill when the costs are too low.
    With `limit` too, the budget shrinks by the overrun, as the wrapper's does: memory in use
    above the reserve (limit - budget) and the admitted units' costs. Launched units still
    waiting when a kill fails the attempt are admitted and compiled in turn.

    With `admit_slots`, the wrapper admits at most that many compiles at once (the CPUs' share),
    so that `jobs` above it are lookahead: launched units wait in the wrapper, and one that fits
    may pass an older one that does not.

    With `cicc_costs` too, cicc admission (see the module doc): each of a unit's ciccs waits
    until its cost `cicc_costs[i]` fits (None: its ciccs run without waiting), or with `cicc_beside`,
    beside one of its unit's, `cicc_beside[i]`.

    With `learn_cold`, admission learns while the build runs (online.Learner, that cold factor):
    every event, each running unit's memory in use is measured against what the ledger holds for
    it, and the costs of the units not yet past their peak are corrected by what their family
    (else their kind) was measured to hold over its prediction; a unit's family settles when one
    of its units finishes.
    """
    return _Ninja(
        units, jobs=jobs, threads=threads, archs=archs, cpus=cpus, limit=limit, base=base, cached=cached,
        hit=hit, onset=onset, peak_windows=peak_windows, admit_budget=admit_budget, admit_costs=admit_costs,
        cicc_costs=cicc_costs, cicc_beside=cicc_beside, admit_fairness_s=admit_fairness_s,
        admit_slots=admit_slots, learn_cold=learn_cold,
    ).run()  # fmt: skip


def _check_lengths(units: int, **given: Sequence[object] | None) -> None:
    for name, values in given.items():
        if values is not None and len(values) != units:
            raise ValueError(f"{name} has {len(values)} entries for {units} units")


class _Ninja:
    """One simulated attempt (see simulate): its units' state, advanced event by event."""

    def __init__(
        self,
        units: Sequence[UnitCost],
        *,
        jobs: int,
        threads: int,
        archs: int,
        cpus: float,
        limit: int | None,
        base: int,
        cached: Collection[int],
        hit: UnitCost | None,
        onset: float,
        peak_windows: Sequence[Sequence[Window]] | None,
        admit_budget: int | None,
        admit_costs: Sequence[int] | None,
        cicc_costs: Sequence[int | None] | None,
        cicc_beside: Sequence[int | None] | None,
        admit_fairness_s: float,
        admit_slots: int | None = None,
        learn_cold: float | None = None,
    ) -> None:
        self.units, self.jobs, self.threads, self.archs, self.cpus = units, max(1, jobs), threads, archs, cpus
        self.limit, self.base, self.admit_slots = limit, base, admit_slots
        self.admit_budget, self.admit_fairness_s = admit_budget, admit_fairness_s
        self.pending = list(range(len(units)))[::-1]  # pop() takes the next in build order
        self.running: dict[int, float] = {}  # unit index -> progress in [0, 1]
        self.waiting: dict[int, float] = {}  # launched, not yet admitted: unit index -> launch time
        # In a peak window with fewer ciccs admitted than it runs: unit index -> since when.
        self.at_cicc: dict[int, float] = {}
        self.lanes: dict[int, int] = {}  # in a peak window: unit index -> its ciccs admitted
        self.in_flight = _in_flight(threads, archs)  # the ciccs a unit runs at once in a window
        _check_lengths(
            len(units), admit_costs=admit_costs, cicc_costs=cicc_costs, cicc_beside=cicc_beside,
            peak_windows=peak_windows,
        )  # fmt: skip
        hits = {i for i in cached if hit is not None}
        self.hits = hits
        self._unit_tables(hits, hit, onset, peak_windows)
        self.predicted = [
            admit_costs[i] if admit_costs is not None else u.peak(threads, archs) for i, u in enumerate(units)
        ]
        self.cicc_cost = None if cicc_costs is None or admit_budget is None else list(cicc_costs)
        self.beside = None if cicc_beside is None else list(cicc_beside)
        # sccache hits run no cicc; a unit with no cicc cost runs its ciccs unheld
        self.unheld = (
            set(self.cost)
            if self.cicc_cost is None
            else hits | {i for i, c in enumerate(self.cicc_cost) if c is None}
        )
        self.now, self.killed, self.failed, self.peak_seen, self.admitted_peak = 0.0, 0, False, base, 0
        self.cicc_wait_s = self.memory_s = self.drain_from = self.memory_before_drain = self.in_use_now = 0.0
        self.finished: set[int] = set()
        self.learner = (
            None
            if learn_cold is None or admit_budget is None
            else Learner(tuple(u.name for u in units), cold=learn_cold)
        )

    def _corrected(self, i: int, cost: int, *, held: bool = True) -> int:
        """A cost the ledger holds for unit i, as the learner corrects it (`held`: at least what
        unit i holds now)."""
        if self.learner is None:
            return cost
        return self.learner.cost(i, cost, self._in_use(i) if held and i in self.running else 0)

    def _measure(self) -> None:
        """The learner sees each running unit's memory in use against its uncorrected charge."""
        if self.learner is None:
            return
        for i in self.running:
            if i in self.hits or self._stopped(i):
                continue
            self.learner.observe(i, self._in_use(i), self._charge(i, raw=True))

    def _unit_tables(
        self,
        hits: set[int],
        hit: UnitCost | None,
        onset: float,
        peak_windows: Sequence[Sequence[Window]] | None,
    ) -> None:
        """Each unit's cost in this attempt (`hit`'s for an sccache hit), peak windows, wall, CPU
        demand and peak; and, filled in as units start, its edges and where its progress is."""
        threads, archs = self.threads, self.archs
        self.cost = {i: (hit if (hit is not None and i in hits) else u) for i, u in enumerate(self.units)}
        default = ((onset, 1.0),)
        self.windows = {
            i: (default if peak_windows is None or i in hits else tuple(peak_windows[i])) for i in self.cost
        }
        self.walls = {i: max(1e-9, c.wall(threads, archs)) for i, c in self.cost.items()}
        self.demand = {
            i: min(float(_in_flight(threads, archs)), c.cpu_seconds(archs) / self.walls[i])
            for i, c in self.cost.items()
        }
        self.peaks = {i: c.peak(threads, archs) for i, c in self.cost.items()}
        self.edges: dict[int, tuple[list[float], list[Window | None]]] = {}  # see _edges
        # A started unit -> (the stretch between its edges its progress is in, that stretch's
        # window, its end): kept, as they are read several times an event for every running unit.
        self.at: dict[int, tuple[int, Window | None, float]] = {}

    def run(self) -> SimResult:
        while True:
            self._launch()
            if self.admit_budget is not None:
                self._admit()
            self._enforce_limit()
            if not self.running:
                if self.waiting:
                    continue  # the kills left room: admit the next waiters
                break
            self._advance()
        return SimResult(
            seconds=self.now,
            finished=frozenset(self.finished),
            killed=self.killed,
            peak=self.peak_seen,
            ok=len(self.finished) == len(self.units),
            admitted_peak=self.admitted_peak,
            cicc_wait_s=self.cicc_wait_s,
            memory_s=self.memory_s,
            drain_from=self.drain_from,
            drain_memory_s=self.memory_s - self.memory_before_drain,
        )

    def _window(self, i: int) -> Window | None:
        """The peak window unit i's progress is in, if any: p with w[0] <= p + _EPS < w[1]."""
        return self.at[i][1]

    def _edges(self, i: int) -> tuple[list[float], list[Window | None]]:
        """Unit i's window edges in order, ending at 1.0 (its end), and the window each stretch
        lies in: stretch k runs from edges[k - 1] (from before its first edge for k = 0) up to
        edges[k], and no window begins or ends inside one."""
        found = self.edges.get(i)
        if found is None:
            edges = sorted({e for w in self.windows[i] for e in w if e < 1.0} | {1.0})
            starts = (edges[0] - 1.0, *edges)
            inside = [next((w for w in self.windows[i] if w[0] <= x < w[1]), None) for x in starts]
            found = self.edges[i] = (edges, inside)
        return found

    def _start(self, i: int) -> None:
        self.running[i] = 0.0
        self._moved(i)

    def _moved(self, i: int) -> None:
        """Unit i's progress p changed: its stretch is bisect_right(edges, p + _EPS), found by
        stepping on from the last one (progress only grows, and each event stops at an edge)."""
        edges, inside = self._edges(i)
        p, k = self.running[i] + _EPS, self.at[i][0] if i in self.at else 0
        while k < len(edges) and edges[k] <= p:
            k += 1
        self.at[i] = (k, inside[k], edges[min(k, len(edges) - 1)])

    def _lane_cost(self, i: int, lanes: int, raw: bool = False) -> int:
        """What a unit's next cicc is admitted at, with `lanes` of its ciccs admitted: its cost,
        or beside one of its own its cost beside (its arch's part alone)."""
        assert self.cicc_cost is not None
        beside = self.beside[i] if lanes and self.beside is not None else None
        cost = beside if beside is not None else self.cicc_cost[i] or 0
        return cost if raw else self._corrected(i, cost, held=False)

    def _stopped(self, i: int) -> bool:
        """Held at cicc admission with no cicc admitted: its steps so far have exited, and nvcc waits."""
        return i in self.at_cicc and not self.lanes.get(i)

    def _rate(self, i: int) -> float:
        """The share of its speed a running unit goes at: k of its ciccs admitted of the L it runs."""
        if i in self.unheld or self._window(i) is None:
            return 1.0
        return self.lanes.get(i, 0) / self.in_flight

    def _in_use(self, i: int) -> int:
        c = self.cost[i]
        if self._window(i) is None:
            return c.fixed
        peak = self.peaks[i]
        if i in self.unheld:
            return peak
        lanes = self.lanes.get(i, 0)  # none: stopped, its steps so far have exited and nvcc waits
        return c.fixed + (peak - c.fixed) * lanes // self.in_flight if lanes else 0

    def _charge(self, i: int, raw: bool = False) -> int:
        """What the wrapper's ledger holds for a running unit: its compile's cost, or while it is
        at a window its admitted ciccs' (the compile's entry then counts 0); learning, as the
        learner corrects them, unless `raw` (the costs file's: what a measurement is held against)."""
        learning = self.learner is not None and not raw
        if self.cicc_cost is None or i in self.unheld or self._window(i) is None:
            held = self.cicc_cost is None or i in self.unheld  # else outside a window: its peak is ahead
            return self._corrected(i, self.predicted[i], held=held) if learning else self.predicted[i]
        lanes = self.lanes.get(i, 0)  # none: stopped, nothing held
        ciccs = sum(self._lane_cost(i, k, raw) for k in range(lanes))
        # Learning: at least what its admitted ciccs hold now.
        return max(ciccs, self._in_use(i)) if lanes and learning else ciccs

    def _launch(self) -> None:
        """ninja starts the next units while a slot is free (none once the attempt has failed)."""
        while not self.failed and self.pending and len(self.running) + len(self.waiting) < self.jobs:
            if self.admit_budget is None:
                self._start(self.pending.pop())
            else:
                self.waiting[self.pending.pop()] = self.now
        self._hold_at_cicc()

    def _hold_at_cicc(self) -> None:
        """Units that reached a peak window with ciccs not yet admitted queue at cicc admission."""
        if self.cicc_cost is None:
            return
        for i in self.running:
            if i not in self.unheld and i not in self.at_cicc and not self.lanes.get(i) and self._window(i):
                self.at_cicc[i] = self.now

    def _admit(self) -> None:
        """The wrapper's rule (images/wheelbuild-admit, admissible): ciccs first, then launched
        compiles, each in arrival order; one of each kind gets in when none of its kind is
        admitted."""
        assert self.admit_budget is not None
        total = sum(self._charge(i) for i in self.running)
        budget = self.admit_budget
        if self.limit is not None:  # the wrapper's overrun, from the memory in use now
            in_use = self.base + sum(self._in_use(i) for i in self.running)
            budget -= max(0, in_use - (self.limit - self.admit_budget) - total)
        ciccs = sum(self.lanes.values())
        compiles = len(self.running) - sum(self._stopped(i) for i in self.running)
        # Units held at cicc admission in launch order (it keeps ninja's longest-first), each unit's
        # ciccs together; then launched compiles in arrival order.
        for i in sorted(self.at_cicc):
            since = self.at_cicc[i]
            while self.lanes.get(i, 0) < self.in_flight:
                cost = self._lane_cost(i, self.lanes.get(i, 0))
                if total + cost > budget and ciccs > 0:
                    break
                total, ciccs = total + cost, ciccs + 1
                if not self.lanes.get(i):
                    self.cicc_wait_s += self.now - since
                    compiles += 1
                self.lanes[i] = self.lanes.get(i, 0) + 1
            if self.lanes.get(i, 0) >= self.in_flight:
                del self.at_cicc[i]
            elif self.now - since > self.admit_fairness_s:
                break  # waited too long: nobody newer passes it
        else:
            total = self._admit_compiles(total, budget, compiles)
        self.admitted_peak = max(self.admitted_peak, total)
        self._hold_at_cicc()

    def _admit_compiles(self, total: int, budget: int, compiles: int) -> int:
        """Launched compiles in arrival order, while the wrapper's slots and the budget allow.
        self.waiting's own order is that: _launch adds units as the clock runs, in build order."""
        for i, since in list(self.waiting.items()):
            if self.admit_slots is not None and compiles >= self.admit_slots:
                break  # every slot taken: no compile gets in, older or newer
            cost = self._corrected(i, self.predicted[i], held=False)
            if total + cost <= budget or compiles == 0:
                total += cost
                del self.waiting[i]
                self._start(i)
                compiles += 1
            elif self.now - since > self.admit_fairness_s:
                break
        return total

    def _enforce_limit(self) -> None:
        """Over the limit, the OOM killer takes the largest compilers until it fits."""
        used = self.base + sum(self._in_use(i) for i in self.running)
        while self.limit is not None and self.running and used > self.limit:
            victim = max(self.running, key=self._in_use)
            used -= self._in_use(victim)
            self._drop(victim)
            self.killed += 1
            self.failed = True
        self.peak_seen = max(self.peak_seen, used)
        self._measure()
        self.in_use_now = used - self.base  # the units' memory in use now, for _account

    def _drop(self, i: int) -> None:
        del self.running[i]
        self.at_cicc.pop(i, None)
        self.lanes.pop(i, None)

    def _advance(self) -> None:
        """To the next event: a unit reaching a window's edge or its end."""
        rates = {i: self._rate(i) for i in self.running}
        moving = {i: p for i, p in self.running.items() if rates[i] > 0}
        if not moving:  # every running unit waits at cicc admission: _admit lets one through
            self._admit()
            return
        speed = min(1.0, max(self.cpus, 1e-9) / sum(self.demand[i] * rates[i] for i in moving))
        step = min((self.at[i][2] - p) * self.walls[i] / (speed * rates[i]) for i, p in moving.items())
        self._account(step)
        for i, p in moving.items():
            p += step * speed * rates[i] / self.walls[i]
            edge = self.at[i][2]  # the next edge from where it was
            if abs(p - edge) < 1e-9:
                p = edge  # land exactly on the edge, so the window test is exact
            if p >= 1.0 - _EPS:
                self._drop(i)
                self.finished.add(i)
                if self.learner is not None:
                    self.learner.settle(i)
                continue
            self.running[i] = p
            if edge <= p + _EPS:  # else it is still in the same stretch
                self._moved(i)
            if self._window(i) is None:
                self.lanes.pop(i, None)  # the window ended: back to the compile's cost
                self.at_cicc.pop(i, None)

    def _account(self, step: float) -> None:
        """The clock and the memory-seconds over one step; while a unit waits, the drain is ahead."""
        waits = self.pending or self.waiting or self.at_cicc  # at_cicc: units short of their ciccs
        self.now += step
        self.memory_s += self.in_use_now * step
        if waits:
            self.drain_from, self.memory_before_drain = self.now, self.memory_s
