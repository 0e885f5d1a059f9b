"""images/wheelbuild-admit with compiles at once: several real processes in front of fake compilers
share one budget through the script's locked ledger, and what fits runs together, what does not
waits its turn, and no unit is starved or deadlocked. The single-process cases are in
tests/unit/test_admit.py."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

import pytest

from tests.admitkit import ADMIT, Bench


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    return max(sum(start <= t < end for start, end in intervals) for t, _ in intervals)


def test_at_most_what_fits_the_budget_runs_at_once(bench: Bench) -> None:
    # budget 10, every unit 4: two at once, never three; all six finish.
    wrappers = [bench.start(f"unit{i}.cu", "--sleep", "0.3") for i in range(6)]
    assert [bench.finish(w) for w in wrappers] == [0] * 6
    intervals = [bench.interval(f"unit{i}.cu") for i in range(6)]
    assert most_at_once(intervals) == 2
    assert bench.ledger() == {"running": {}, "waiting": {}}


def test_a_unit_larger_than_the_budget_runs_alone(bench: Bench) -> None:
    bench.configure(budget=10, default=4, units={"big.cu": 25})
    small = [bench.start(f"small{i}.cu", "--sleep", "0.3") for i in range(2)]
    big = bench.start("big.cu", "--sleep", "0.3")
    more = [bench.start(f"late{i}.cu", "--sleep", "0.3") for i in range(2)]
    assert bench.finish(big) == 0
    assert [bench.finish(w) for w in small + more] == [0] * 4
    big_start, big_end = bench.interval("big.cu")
    for name in ("small0.cu", "small1.cu", "late0.cu", "late1.cu"):
        start, end = bench.interval(name)
        assert end <= big_start or start >= big_end, f"{name} ran alongside big.cu"


@dataclass(frozen=True)
class Relay:
    big_started: bool
    big_arrived: float  # time.time() of big.cu's arrival, as its wrapper wrote it in the ledger
    passed: dict[str, float]  # small unit -> when it was admitted past big.cu, as its wrapper wrote it


def relay(bench: Bench, *, passes: int | None, start_within: float, window: float = math.inf) -> Relay:
    """Budget 10: small units of 5 (two fit) keep one always running, handing over one by one, so
    big.cu (10, needs an empty ledger) only gets in when newer small units stop passing it.
    Each newer small unit is given `start_within` seconds to start; one that does not is taken as
    refused, and every small unit is let go so that big.cu can get in. Ends once big.cu started,
    once `passes` small units passed it, or once one passed it later than `window` seconds after
    it arrived (by the wrappers' clock)."""
    small = iter(f"small{i}.cu" for i in range(100))
    running = [next(small), next(small)]
    for name in running:
        bench.start(name, "--hold")
    bench.wait_for(lambda: all(bench.started(n) for n in running), what="the first small units")
    big = bench.queue("big.cu", "--sleep", "0.1")
    arrived = bench.ledger()["waiting"][str(big.pid)]["since"]
    passed: dict[str, float] = {}
    guard = time.monotonic() + 60  # a hang guard, not a time limit

    def more() -> bool:
        late = any(at - arrived > window for at in passed.values())
        return not bench.started("big.cu") and not late and (passes is None or len(passed) < passes)

    while more():
        assert time.monotonic() < guard, f"the relay did not end: {passed}"
        name = next(small)
        pid = str(bench.queue(name, "--hold").pid)
        bench.go(running.pop(0))  # one small unit ends: room for 5 again, not for 10
        deadline = time.monotonic() + start_within
        while time.monotonic() < deadline and not (bench.started(name) or bench.started("big.cu")):
            time.sleep(0.02)
        if bench.started(name) and (admitted := bench.ledger()["running"].get(pid)):
            passed[name] = admitted["since"]
            running.append(name)
        else:  # refused though it fits: big.cu waited too long; let every small unit end
            for other in [*running, name]:
                bench.go(other)
            running = []
            bench.wait_for(lambda: bench.started("big.cu"), what="big.cu after the drain")
    return Relay(bench.started("big.cu") is not None, arrived, passed)


def test_fairness_a_big_unit_is_not_passed_after_the_window(bench: Bench) -> None:
    bench.configure(budget=10, default=5, units={"big.cu": 10}, fairness=1.0)
    done = relay(bench, passes=None, start_within=0.8, window=1.0)
    # Passed while within its window (how often depends on the machine's speed), then no more:
    # the running small unit ends and big.cu gets in. Each pass is judged by the wrappers' own
    # clock, as the rule is: admitted at most 1 s (the window) after big.cu arrived.
    late = {name: at - done.big_arrived for name, at in done.passed.items() if at - done.big_arrived > 1.0}
    assert late == {}, f"passed big.cu after its window: {late}"
    assert done.big_started
    bench.wait_for(lambda: (bench.record / "big.cu.json").exists(), what="big.cu to finish")


def test_without_the_fairness_window_small_units_keep_passing(bench: Bench) -> None:
    # The control: with a window longer than the test, every newer small unit passes big.cu.
    bench.configure(budget=10, default=5, units={"big.cu": 10}, fairness=3600)
    done = relay(bench, passes=3, start_within=30)
    assert not done.big_started
    assert len(done.passed) == 3


FAKE_NVCC = """\
import os, subprocess, sys

args = sys.argv[1:]
name = args[args.index("-c") + 1]
cicc = [sys.executable, os.environ["FAKE_ADMIT"], "--cicc", sys.executable, os.environ["FAKE_CICC"]]
archs = [[*cicc, "--orig_src_file_name", name, "--arch", str(a)] for a in range(int(os.environ.get("FAKE_ARCHS", "1")))]
if os.environ.get("FAKE_THREADS") == "2":  # both archs' ciccs at once, as nvcc --threads 2
    sys.exit(max(p.wait() for p in [subprocess.Popen(a) for a in archs]))
for arch in archs:  # one cicc per arch, as nvcc --threads 1
    code = subprocess.call(arch)
    if code:
        sys.exit(code)
"""


FAKE_CICC = """\
import json, os, sys, time

args = sys.argv[1:]
name = args[args.index("--orig_src_file_name") + 1] + ".arch" + args[args.index("--arch") + 1]
start = time.time()
time.sleep(0.3)
path = os.path.join(os.environ["FAKE_RECORD"], name + ".cicc.json")
with open(path, "w") as handle:
    json.dump({"start": start, "end": time.time()}, handle)
"""


def _gate(
    bench: Bench,
    *,
    budget: int,
    compile_cost: int,
    cicc: dict[str, int],
    archs: int = 1,
    beside: dict[str, int] | None = None,
) -> None:
    units = {f"unit{i}.cu": compile_cost for i in range(3)}
    bench.configure(budget=budget, default=compile_cost, units=units)
    costs: dict[str, object] = {"default": compile_cost, "units": units, "cicc": cicc}
    if beside is not None:
        costs["cicc_beside"] = beside
    bench.costs.write_text(json.dumps(costs))
    for name, text in (("fake_nvcc.py", FAKE_NVCC), ("fake_cicc.py", FAKE_CICC)):
        (bench.root / name).write_text(text)
    bench.fake = bench.root / "fake_nvcc.py"
    bench.env.update(FAKE_ADMIT=str(ADMIT), FAKE_CICC=str(bench.root / "fake_cicc.py"), FAKE_ARCHS=str(archs))


def _cicc_intervals(bench: Bench) -> list[tuple[float, float]]:
    spans = [json.loads(p.read_text()) for p in sorted(bench.record.glob("*.cicc.json"))]
    return [(s["start"], s["end"]) for s in spans]


def test_ciccs_take_turns_while_their_compiles_overlap(bench: Bench) -> None:
    """Three compiles at 1 each fit a budget of 10 together; their ciccs at 6 each do not: one
    runs at a time, the waiting one's compile counted as nothing meanwhile."""
    _gate(bench, budget=10, compile_cost=1, cicc={f"unit{i}.cu": 6 for i in range(3)}, archs=2)
    wrappers = [bench.start(f"unit{i}.cu") for i in range(3)]
    assert [bench.finish(w, timeout=30) for w in wrappers] == [0] * 3
    spans = _cicc_intervals(bench)
    assert len(spans) == 6  # two archs each
    assert most_at_once(spans) == 1
    assert bench.ledger() == {"running": {}, "waiting": {}}


@pytest.mark.parametrize(("beside", "together"), [(None, 1), (3, 2)])
def test_a_units_second_cicc_costs_its_arch_alone_beside_its_first(
    bench: Bench, beside: int | None, together: int
) -> None:
    """One unit at nvcc --threads 2 starts both archs' ciccs at once. At 6 each they do not fit
    a budget of 10 together and take turns; with a cost beside of 3 (the unit's part outside
    its archs is held once) the second runs beside the first."""
    _gate(
        bench,
        budget=10,
        compile_cost=1,
        cicc={"unit0.cu": 6},
        archs=2,
        beside=None if beside is None else {"unit0.cu": beside},
    )
    bench.env["FAKE_THREADS"] = "2"
    assert bench.finish(bench.start("unit0.cu"), timeout=30) == 0
    spans = _cicc_intervals(bench)
    assert len(spans) == 2
    assert most_at_once(spans) == together
    assert bench.ledger() == {"running": {}, "waiting": {}}


def test_ciccs_of_units_without_a_cicc_cost_run_at_once(bench: Bench) -> None:
    _gate(bench, budget=10, compile_cost=1, cicc={})
    wrappers = [bench.start(f"unit{i}.cu") for i in range(3)]
    assert [bench.finish(w, timeout=30) for w in wrappers] == [0] * 3
    assert most_at_once(_cicc_intervals(bench)) == 3


def test_compiles_that_fill_the_budget_cannot_deadlock_their_ciccs(bench: Bench) -> None:
    """Compiles at 5 fill the budget of 10 two at a time; a cicc at 8 never fits beside the other
    compile, but no cicc runs, so each is let in alone."""
    _gate(bench, budget=10, compile_cost=5, cicc={f"unit{i}.cu": 8 for i in range(3)})
    wrappers = [bench.start(f"unit{i}.cu") for i in range(3)]
    assert [bench.finish(w, timeout=30) for w in wrappers] == [0] * 3
    assert most_at_once(_cicc_intervals(bench)) == 1


def test_slots_cap_the_compiles_at_once_and_a_fitting_unit_passes_one_that_waits(bench: Bench) -> None:
    """Budget 10, slots 2: big.cu (7) runs; big2.cu (7) cannot fit beside it and waits; small.cu
    (2), launched after it, passes it (lookahead) and takes the second slot; late.cu (1) fits
    the bytes but finds both slots taken. Its wait and big2's are not memory waits worth a line."""
    bench.configure(budget=10, default=1, units={"big.cu": 7, "big2.cu": 7, "small.cu": 2}, slots=2)
    big = bench.start("big.cu", "--hold")
    bench.wait_for(lambda: bench.started("big.cu"), what="big.cu to start")
    big2 = bench.queue("big2.cu", "--hold")
    small = bench.start("small.cu", "--hold")
    bench.wait_for(lambda: bench.started("small.cu"), what="small.cu to pass big2.cu")
    # 7 + 2 + 1 fits 10, but no slot is free: queue() returns once late.cu's first decision was
    # "not yet".
    late = bench.queue("late.cu", "--hold")
    assert bench.started("late.cu") is None and bench.started("big2.cu") is None
    bench.go("small.cu")  # a slot frees: big2 (older) still does not fit, late.cu takes it
    bench.wait_for(lambda: bench.started("late.cu"), what="late.cu to take the freed slot")
    assert bench.started("big2.cu") is None
    bench.go("ALL")
    assert [bench.finish(w) for w in (big, small, late, big2)] == [0] * 4
    assert bench.ledger() == {"running": {}, "waiting": {}}
