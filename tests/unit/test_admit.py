"""images/wheelbuild-admit: memory admission for compiles, run for real.

Every test runs the script as a process in front of a fake compiler (a small Python script that
records when it ran and under which pid, then sleeps, exits or kills itself), with a costs file,
a budget and a ledger directory in tmp_path. Nothing is mocked.
"""

from __future__ import annotations

import ast
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.scriptkit import script_module

REPO = Path(__file__).resolve().parents[2]
ADMIT = REPO / "images" / "wheelbuild-admit"

FAKE_COMPILER = """\
import json, os, sys, time

args = sys.argv[1:]
name = args[args.index("-c") + 1] if "-c" in args else "no-source"
record = os.environ["FAKE_RECORD"]


def write(suffix, data):
    path = os.path.join(record, name + suffix)
    with open(path + ".tmp", "w") as handle:
        json.dump(data, handle)
    os.replace(path + ".tmp", path)


start = time.time()
write(".start", {"pid": os.getpid(), "start": start})
if "--hold" in args:  # until the test writes <record>/go-<name> (or go-ALL, when it ends)
    while not any(os.path.exists(os.path.join(record, "go-" + n)) for n in (name, "ALL")):
        time.sleep(0.01)
time.sleep(float(args[args.index("--sleep") + 1]) if "--sleep" in args else 0.0)
write(".json", {"pid": os.getpid(), "start": start, "end": time.time()})
if "--signal" in args:
    os.kill(os.getpid(), int(args[args.index("--signal") + 1]))
sys.exit(int(args[args.index("--exit") + 1]) if "--exit" in args else 0)
"""


class Bench:
    """A costs file, a budget, a ledger directory and a fake compiler, all in tmp_path."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.record = root / "record"
        self.record.mkdir()
        self.ledger_dir = root / "ledger"
        self.fake = root / "fake_cc.py"
        self.fake.write_text(FAKE_COMPILER)
        self.costs = root / "costs.json"
        self.processes: list[subprocess.Popen[str]] = []
        self.configure(budget=10, default=4)

    def configure(
        self,
        *,
        budget: int,
        default: int,
        units: dict[str, int] | None = None,
        fairness: float = 30,
        slots: int | None = None,
    ) -> None:
        extra = {} if slots is None else {"slots": slots}
        self.costs.write_text(json.dumps({"default": default, "units": units or {}, **extra}))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("WHEELBUILD_ADMIT_")}
        self.env.update(
            FAKE_RECORD=str(self.record),
            WHEELBUILD_ADMIT_BUDGET=str(budget),
            WHEELBUILD_ADMIT_COSTS=str(self.costs),
            WHEELBUILD_ADMIT_DIR=str(self.ledger_dir),
            WHEELBUILD_ADMIT_FAIRNESS_S=str(fairness),
        )

    def start(self, name: str, *extra: str, admit: bool = True) -> subprocess.Popen[str]:
        """wheelbuild-admit <python> fake_cc.py [extra] -c <name>, like ninja's compile rule."""
        env = (
            self.env
            if admit
            else {k: v for k, v in self.env.items() if not k.startswith("WHEELBUILD_ADMIT_")}
        )
        command = [
            sys.executable,
            str(ADMIT),
            sys.executable,
            str(self.fake),
            *extra,
            "-c",
            name,
            "-o",
            f"{name}.o",
        ]
        # A session of its own, as ninja gives each command a process group of its own.
        process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def queue(self, name: str, *extra: str) -> subprocess.Popen[str]:
        """start(), then wait until the wrapper waits in the ledger. The wrapper writes its
        waiting entry under the lock of its first decision, so once it shows, that decision was
        "not yet"; an entry among the running means it was admitted at once."""
        process = self.start(name, *extra)
        pid = str(process.pid)
        self.wait_for(
            lambda: pid in self.ledger()["waiting"] or pid in self.ledger()["running"],
            what=f"{name} to queue",
        )
        assert pid not in self.ledger()["running"], f"{name} was admitted at once"
        return process

    def finish(self, process: subprocess.Popen[str], timeout: float = 15) -> int:
        """Wait for a wrapper; it must print nothing."""
        out, err = process.communicate(timeout=timeout)
        assert (out, err) == ("", ""), f"wheelbuild-admit printed {out!r} {err!r}"
        return process.returncode

    def interval(self, name: str) -> tuple[float, float]:
        data = json.loads((self.record / f"{name}.json").read_text())
        return data["start"], data["end"]

    def started(self, name: str) -> dict[str, Any] | None:
        path = self.record / f"{name}.start"
        return json.loads(path.read_text()) if path.exists() else None

    def go(self, name: str) -> None:
        (self.record / f"go-{name}").touch()

    def ledger(self) -> dict[str, dict[str, Any]]:
        path = self.ledger_dir / "ledger.json"
        return json.loads(path.read_text()) if path.exists() else {"running": {}, "waiting": {}}

    def wait_for(self, condition: Callable[[], object], timeout: float = 10, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what or condition}")
            time.sleep(0.02)


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    yield b
    b.go("ALL")  # every held fake compiler, also those still waiting, ends when it runs
    for process in b.processes:
        try:
            process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the wrapper and its compiler
            process.communicate()


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    return max(sum(start <= t < end for start, end in intervals) for t, _ in intervals)


def load_admit() -> ModuleType:
    """The script as a module, for its pure functions."""
    return script_module(ADMIT)


# --- (a) the budget holds -------------------------------------------------------------------------


def test_at_most_what_fits_the_budget_runs_at_once(bench: Bench) -> None:
    # budget 10, every unit 4: two at once, never three; all six finish.
    wrappers = [bench.start(f"unit{i}.cu", "--sleep", "0.3") for i in range(6)]
    assert [bench.finish(w) for w in wrappers] == [0] * 6
    intervals = [bench.interval(f"unit{i}.cu") for i in range(6)]
    assert most_at_once(intervals) == 2
    assert bench.ledger() == {"running": {}, "waiting": {}}


# --- (b) a unit larger than the budget --------------------------------------------------------------


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


# --- (b2) the model underestimates: the budget shrinks by the overrun -----------------------------


@pytest.mark.parametrize(("layout", "key"), [("memory.stat", "anon"), ("memory/memory.stat", "total_rss")])
def test_compiles_holding_more_than_predicted_shrink_the_budget(bench: Bench, layout: str, key: str) -> None:
    """Limit 12, budget 10 (reserve 2), every unit predicted at 4. a.cu runs and the cgroup (a
    fixture tree: cgroup v2's anon, v1's total_rss) shows 9 of anonymous memory, 3 more than
    reserve + prediction: b.cu, which fits the full budget (8 of 10), waits while that lasts
    and runs once the overrun is gone."""
    gib = 1024**3
    stat = bench.root / "cgroup" / layout
    stat.parent.mkdir(parents=True, exist_ok=True)
    bench.configure(budget=10 * gib, default=4 * gib)
    bench.env |= {
        "WHEELBUILD_MEMORY_LIMIT": str(12 * gib),
        "WHEELBUILD_CGROUP_ROOT": str(bench.root / "cgroup"),
    }

    def measured(anon_gib: int) -> None:
        stat.with_suffix(".tmp").write_text(f"cache 100\n{key} {anon_gib * gib}\ninactive_file 5\n")
        stat.with_suffix(".tmp").replace(stat)

    measured(2 + 4)  # as predicted
    first = bench.start("a.cu", "--hold")
    bench.wait_for(lambda: bench.started("a.cu"), what="a.cu to start")
    measured(2 + 4 + 3)  # a.cu holds 3 more than its prediction
    # queue() returns once the ledger shows b.cu waiting: its first decision, made on the overrun
    # just written, was "not yet" (admitted, the ledger would show it running).
    second = bench.queue("b.cu")
    assert bench.started("b.cu") is None, "b.cu was admitted although a.cu overran its prediction"
    measured(2 + 4)  # the overrun is gone
    bench.wait_for(lambda: bench.started("b.cu"), what="b.cu to start once the overrun is gone")
    bench.go("ALL")
    assert bench.finish(first) == 0
    out, err = second.communicate(timeout=15)
    assert second.returncode == 0 and out == ""
    assert err.startswith("wheelbuild-admit: b.cu waited ")
    assert err.endswith(
        "s: running compiles held 3.0 GiB more than predicted, so the budget shrank to 7.0 GiB\n"
    )


def test_the_overrun_is_what_exceeds_the_reserve_and_the_predictions() -> None:
    admit = load_admit()
    assert admit.overrun(measured=9, limit=12, budget=10, admitted=4) == 3
    assert admit.overrun(measured=5, limit=12, budget=10, admitted=4) == 0  # compiles not at peak yet
    assert admit.overrun(measured=6, limit=12, budget=10, admitted=0) == 4  # the rest outgrew the reserve


# --- (c) exit codes -----------------------------------------------------------------------------------


def test_exit_codes_pass_through(bench: Bench) -> None:
    assert bench.finish(bench.start("three.cu", "--exit", "3")) == 3
    assert bench.finish(bench.start("ok.cpp")) == 0


def test_a_child_killed_by_a_signal_exits_128_plus_the_signal(bench: Bench) -> None:
    assert bench.finish(bench.start("killed.cu", "--signal", str(int(signal.SIGKILL)))) == 128 + 9
    assert bench.ledger()["running"] == {}


# --- (d) a killed wrapper's entry -----------------------------------------------------------------


def test_the_entry_of_a_killed_wrapper_is_dropped(bench: Bench) -> None:
    bench.configure(budget=10, default=10)  # one unit holds the whole budget
    victim = bench.start("victim.cu", "--sleep", "8")
    bench.wait_for(lambda: bench.started("victim.cu"), what="victim.cu to start")
    assert list(bench.ledger()["running"]) == [str(victim.pid)]  # the wrapper's pid, not the child's
    orphan = bench.started("victim.cu")["pid"]  # type: ignore[index]
    victim.kill()  # SIGKILL: no cleanup; left unreaped (a zombie) until the end on purpose
    try:
        assert bench.finish(bench.start("next.cu", "--sleep", "0.1")) == 0
        # Order, not time: next.cu was admitted and done while the orphaned compiler still runs
        # (its 8 s sleep), so the dead wrapper's entry went at once, not when the orphan ended.
        os.kill(orphan, 0)
        assert bench.ledger() == {"running": {}, "waiting": {}}
    finally:
        os.kill(orphan, signal.SIGKILL)
        victim.wait()


def test_a_waiter_killed_while_waiting_leaves_no_entry(bench: Bench) -> None:
    bench.configure(budget=10, default=10)
    holder = bench.start("holder.cu", "--hold")
    bench.wait_for(lambda: bench.started("holder.cu"), what="holder.cu to start")
    waiter = bench.start("waiter.cu")
    bench.wait_for(lambda: str(waiter.pid) in bench.ledger()["waiting"], what="waiter.cu to queue")
    waiter.send_signal(signal.SIGTERM)
    assert waiter.wait(timeout=5) == 128 + signal.SIGTERM
    assert bench.started("waiter.cu") is None  # never ran
    assert str(waiter.pid) not in bench.ledger()["waiting"]
    bench.go("holder.cu")
    assert bench.finish(holder) == 0


def test_sigterm_is_forwarded_to_the_compiler(bench: Bench) -> None:
    wrapper = bench.start("long.cu", "--hold")
    bench.wait_for(lambda: bench.started("long.cu"), what="long.cu to start")
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=5) == 128 + signal.SIGTERM  # the fake died of the forwarded SIGTERM
    assert bench.ledger() == {"running": {}, "waiting": {}}


# --- (e) without admission ------------------------------------------------------------------------


def test_without_the_environment_the_command_is_execd(bench: Bench) -> None:
    wrapper = bench.start("plain.cu", admit=False)
    assert bench.finish(wrapper) == 0
    assert bench.started("plain.cu")["pid"] == wrapper.pid  # type: ignore[index]  # exec: same process
    assert not bench.ledger_dir.exists()


def test_a_command_without_a_source_is_not_admitted(bench: Bench) -> None:
    bench.configure(budget=10, default=10)
    holder = bench.start("holder.cu", "--hold")
    bench.wait_for(lambda: bench.started("holder.cu"), what="holder.cu to start")
    # A link while the budget is taken: runs at once, as the wrapper's own process.
    link = subprocess.run(
        [sys.executable, str(ADMIT), sys.executable, str(bench.fake), "a.o", "b.o", "-shared", "-o", "x.so"],
        env=bench.env,
        capture_output=True,
        text=True,
        timeout=5,
        check=False,
    )
    assert (link.returncode, link.stdout, link.stderr) == (0, "", "")
    assert bench.started("no-source") is not None
    bench.go("holder.cu")
    assert bench.finish(holder) == 0


# --- (f) fairness ---------------------------------------------------------------------------------


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


# --- the pieces -----------------------------------------------------------------------------------


def test_the_unit_is_found_in_ninja_compile_commands() -> None:
    find = load_admit().find_unit
    nvcc = (
        "/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile --dependency-output x.o.d -I/src/csrc"
    )
    assert find([*nvcc.split(), "-c", "/src/csrc/flash_bwd_hdim256_bf16_sm80.cu", "-o", "x.o", "-O3"]) == (
        "/src/csrc/flash_bwd_hdim256_bf16_sm80.cu"
    )
    assert find(["c++", "-MMD", "-MF", "api.o.d", "-c", "/src/csrc/flash_api.cpp", "-o", "api.o"]) == (
        "/src/csrc/flash_api.cpp"
    )
    assert find(["c++", "-c", "-o", "a.o", "a.cc"]) == "a.cc"
    assert find(["c++", "a.o", "b.o", "-shared", "-o", "x.so"]) is None
    assert find(["nvcc", "--version"]) is None
    assert find(["c++", "-dumpversion"]) is None


def test_costs_by_basename_else_default(tmp_path: Path) -> None:
    load_cost = load_admit().load_cost
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"default": 7, "units": {"flash_bwd_hdim256_bf16_sm80.cu": 9}}))
    assert load_cost(str(costs), "/src/csrc/flash_attn/src/flash_bwd_hdim256_bf16_sm80.cu") == 9
    assert load_cost(str(costs), "other.cu") == 7


def test_a_broken_costs_file_fails_loudly(bench: Bench) -> None:
    bench.costs.write_text("{not json")
    wrapper = bench.start("a.cu")
    _, err = wrapper.communicate(timeout=10)
    assert wrapper.returncode == 2
    assert err.startswith("wheelbuild-admit: cannot read the costs file")
    assert bench.started("a.cu") is None


def test_the_script_is_python_3_9() -> None:
    ast.parse(ADMIT.read_text(), feature_version=(3, 9))
    assert os.access(ADMIT, os.X_OK)
    assert ADMIT.read_text().startswith("#!/usr/bin/env python3\n")


# --- the cicc gate: wheelbuild-admit --cicc, as nvcc.profile's cicc ---------------------------------

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


def test_the_ledger_counts_a_compile_as_nothing_while_its_cicc_waits_or_runs() -> None:
    admit = load_admit()
    state = {
        "running": {
            "10": {"bytes": 2, "unit": "a.cu", "since": 1.0},
            "11": {"bytes": 3, "unit": "b.cu", "since": 2.0},
            "20": {"bytes": 6, "unit": "a.cu", "since": 3.0, "kind": "cicc", "relieves": "10"},
        },
        "waiting": {
            "30": {"bytes": 1, "unit": "c.cu", "since": 4.0},
            "21": {"bytes": 6, "unit": "b.cu", "since": 5.0, "kind": "cicc", "relieves": "11"},
        },
    }
    assert admit.charged(state) == 6  # a.cu and b.cu's compiles relieved by their ciccs
    # The younger cicc comes before the older compile; 6 + 6 > 10, so it waits and c.cu passes it.
    assert not admit.admissible(state, "21", 10, 30.0, 6.0)
    assert admit.admissible(state, "30", 10, 30.0, 6.0)
    assert admit.admissible(state, "21", 12, 30.0, 6.0)
    assert admit.cicc_unit(["--c++17", "--orig_src_file_name", "a.cu", "-arch", "compute_120"]) == "a.cu"
    assert admit.cicc_unit(["-arch", "compute_120"]) is None


def test_the_ledger_charges_a_units_ciccs_after_its_oldest_their_cost_beside() -> None:
    """a.cu's first cicc runs (6, its compile relieved); its second (6, beside 3) fits beside it
    in 10, b.cu's (6) does not. Both of a.cu's running: 6 + 3. When the first exits, the second
    carries the unit's part outside its arch again: 6."""
    admit = load_admit()
    cicc = {"bytes": 6, "beside": 3, "kind": "cicc"}
    state = {
        "running": {
            "10": {"bytes": 1, "unit": "a.cu", "since": 1.0},
            "11": {"bytes": 1, "unit": "b.cu", "since": 1.5},
            "20": {**cicc, "unit": "a.cu", "since": 2.0, "relieves": "10"},
        },
        "waiting": {
            "21": {**cicc, "unit": "a.cu", "since": 2.0, "relieves": "10"},
            "22": {**cicc, "unit": "b.cu", "since": 2.5, "relieves": "11"},
        },
    }
    assert admit.charged(state) == 6
    assert admit.admissible(state, "21", 10, 30.0, 3.0)
    assert not admit.admissible(state, "22", 10, 30.0, 3.0)
    state["running"]["21"] = state["waiting"].pop("21")
    assert admit.charged(state) == 6 + 3
    del state["running"]["20"]
    assert admit.charged(state) == 6
    # Without a cost beside, a sibling costs its whole cicc: 6 + 6 > 10.
    state["running"]["20"] = {**cicc, "unit": "a.cu", "since": 2.0, "relieves": "10"}
    state["waiting"]["21"] = state["running"].pop("21")
    for entry in (*state["running"].values(), *state["waiting"].values()):
        entry.pop("beside", None)
    assert not admit.admissible(state, "21", 10, 30.0, 3.0)


def test_the_cost_beside_comes_from_the_costs_file(tmp_path: Path) -> None:
    admit = load_admit()
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"units": {"a.cu": 1}, "cicc": {"a.cu": 6}, "cicc_beside": {"a.cu": 3}}))
    assert admit.load_cicc_cost(str(path), "/src/a.cu", "cicc_beside") == 3
    assert admit.load_cicc_cost(str(path), "b.cu", "cicc_beside") is None
    path.write_text(json.dumps({"units": {"a.cu": 1}, "cicc": {"a.cu": 6}}))
    assert admit.load_cicc_cost(str(path), "a.cu", "cicc_beside") is None  # then its cicc cost
    path.write_text(json.dumps({"cicc_beside": [3]}))
    with pytest.raises(admit.ConfigError, match='"cicc_beside" is not an object'):
        admit.load_cicc_cost(str(path), "a.cu", "cicc_beside")


# --- slots: at most the CPUs' worth of compiles at once; ninja's jobs beyond are lookahead -----------


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


def test_a_compile_stopped_at_the_cicc_gate_frees_its_slot() -> None:
    """a.cu and b.cu compile, d.cu's cicc runs (its compile relieved, still a slot): 9 of 10
    charged, three compiles. c.cu (1) fits the bytes but not three slots; once b.cu's cicc
    waits at the gate (it does not fit beside d.cu's), b.cu holds no CPU and c.cu gets its slot."""
    admit = load_admit()
    state = {
        "running": {
            "10": {"bytes": 2, "unit": "a.cu", "since": 1.0},
            "11": {"bytes": 2, "unit": "b.cu", "since": 2.0},
            "12": {"bytes": 1, "unit": "d.cu", "since": 2.5},
            "22": {"bytes": 5, "unit": "d.cu", "since": 2.6, "kind": "cicc", "relieves": "12"},
        },
        "waiting": {"30": {"bytes": 1, "unit": "c.cu", "since": 4.0}},
    }
    assert admit.charged(state) == 9
    assert admit.admissible(state, "30", 10, 30.0, 5.0)  # no cap
    assert not admit.admissible(state, "30", 10, 30.0, 5.0, slots=3)
    assert admit.admissible(state, "30", 10, 30.0, 5.0, slots=4)
    state["waiting"]["21"] = {"bytes": 9, "unit": "b.cu", "since": 3.0, "kind": "cicc", "relieves": "11"}
    assert not admit.admissible(state, "21", 10, 30.0, 5.0, slots=3)  # 7 + 9 > 10
    assert admit.admissible(state, "30", 10, 30.0, 5.0, slots=3)
    # A cicc of b.cu that fits goes first and its compile holds a CPU again: no slot for c.cu.
    state["waiting"]["21"]["bytes"] = 3
    assert admit.admissible(state, "21", 10, 30.0, 5.0, slots=3)
    assert not admit.admissible(state, "30", 10, 30.0, 5.0, slots=3)
    # d.cu's second cicc waits while its first runs: d.cu still compiles, so still a slot.
    state["waiting"]["21"]["bytes"] = 9
    state["waiting"]["23"] = {"bytes": 5, "unit": "d.cu", "since": 2.7, "kind": "cicc", "relieves": "12"}
    assert not admit.admissible(state, "30", 10, 30.0, 5.0, slots=2)


@pytest.mark.parametrize(
    ("costs", "slots"),
    [({"default": 1}, None), ({"default": 1, "slots": 4}, 4), ({"default": 1, "slots": None}, None)],
)
def test_slots_come_from_the_costs_file(tmp_path: Path, costs: dict[str, object], slots: int | None) -> None:
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(costs))
    assert load_admit().load_slots(str(path)) == slots


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4", True])
def test_a_bad_slots_entry_fails_loudly(bench: Bench, bad: object) -> None:
    bench.costs.write_text(json.dumps({"default": 1, "slots": bad}))
    process = bench.start("a.cu")
    out, err = process.communicate(timeout=15)
    assert process.returncode == 2 and out == ""
    assert err.startswith("wheelbuild-admit: costs file ") and '"slots" is' in err
