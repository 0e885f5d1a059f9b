"""images/wheelbuild-admit: memory admission for compiles, run for real.

Every test runs the script as a process in front of a fake compiler (a small Python script that
records when it ran and under which pid, then sleeps, exits or kills itself), with a costs file,
a budget and a ledger directory in tmp_path. Nothing is mocked.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.admitkit import ADMIT, Bench
from tests.scriptkit import script_module

REPO = Path(__file__).resolve().parents[2]


def load_admit() -> ModuleType:
    """The script as a module, for its pure functions."""
    return script_module(ADMIT)


# --- (a) the budget holds -------------------------------------------------------------------------


# --- (b) a unit larger than the budget --------------------------------------------------------------


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


# --- cicc admission: wheelbuild-admit --cicc, as nvcc.profile's cicc ---------------------------------


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


def test_a_compile_stopped_at_cicc_admission_frees_its_slot() -> None:
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


# --- learning while the build runs: the watcher's measurements correct the costs ------------------


def _learning(bench: Bench, cold: float) -> None:
    gib = 1024**3
    bench.configure(budget=10 * gib, default=4 * gib)
    costs = json.loads(bench.costs.read_text())
    bench.costs.write_text(json.dumps({**costs, "learn": {"cold": cold}}))


def _measured(bench: Bench, units: dict[str, dict[str, object]]) -> None:
    """What the engine's watcher writes beside the ledger (host/unit_memory.write_measured)."""
    bench.ledger_dir.mkdir(exist_ok=True)
    path = bench.ledger_dir / "measured.json"
    path.with_suffix(".tmp").write_text(json.dumps({"units": units}))
    path.with_suffix(".tmp").replace(path)


def test_a_unit_measured_over_its_prediction_raises_the_cost_of_its_family_still_waiting(
    bench: Bench,
) -> None:
    """Budget 10 GiB, every unit predicted at 4, a profile's cold factor 1: two units of one family
    (k1.cu, k2.cu: a template's instances) would compile together (8 of 10). k1 is measured
    holding 6 GiB, 1.5 x its prediction: k2 is then charged 4 x 1.5 x 1.1 = 6.6 GiB beside k1's
    6.6 and waits until k1 is over, then says why it was admitted at more than predicted."""
    gib = 1024**3
    _learning(bench, cold=1.0)
    first = bench.start("k1.cu", "--hold")
    bench.wait_for(lambda: bench.started("k1.cu"), what="k1.cu to start")
    _measured(bench, {"k1": {"held": 6 * gib, "peak": 6 * gib, "done": False}})
    second = bench.queue("k2.cu")
    ledger = bench.ledger()
    assert ledger["waiting"][str(second.pid)]["bytes"] == math.ceil(4 * gib * 1.5 * 1.1)
    assert ledger["waiting"][str(second.pid)]["predicted"] == 4 * gib
    assert ledger["units"]["k1"] == {"name": "k1.cu", "predicted": 4 * gib}
    assert bench.started("k2.cu") is None, "k2.cu was admitted beside k1.cu at its old cost"
    bench.go("k1.cu")
    assert bench.finish(first) == 0
    _measured(bench, {"k1": {"held": 0, "peak": 6 * gib, "done": True}})
    out, err = second.communicate(timeout=15)
    assert second.returncode == 0 and out == ""
    assert re.fullmatch(
        r"wheelbuild-admit: k2\.cu admitted at 6\.60 GiB, 1\.65 x its predicted 4\.00 GiB: compiles like it "
        r"measured more than predicted, so it waited \d+s\n",
        err,
    ), err
    # Raised, and let in at once (nothing runs): it waited for nothing, and says nothing.
    third = bench.start("k3.cu")
    assert bench.finish(third) == 0


def test_a_blind_models_units_start_cold_and_without_learning_nothing_changes(bench: Bench) -> None:
    """The default model's guess (cold factor 2): a1.cu and b.cpp, predicted at 4 GiB each, cost 8
    before anything is measured, so the second waits for the first (16 > 10); without "learn" in
    the costs file they compile together, as before."""
    _learning(bench, cold=2.0)
    first = bench.start("a1.cu", "--hold")
    bench.wait_for(lambda: bench.started("a1.cu"), what="a1.cu to start")
    second = bench.queue("b.cpp")
    assert bench.ledger()["waiting"][str(second.pid)]["bytes"] == 8 * 1024**3
    bench.go("a1.cu")
    assert bench.finish(first) == 0 and bench.finish(second) == 0
    assert bench.interval("a1.cu")[1] <= bench.interval("b.cpp")[0]

    bench.configure(budget=10 * 1024**3, default=4 * 1024**3)  # no "learn"
    together = [bench.start(name, "--sleep", "1") for name in ("c1.cu", "d.cpp")]
    assert [bench.finish(p) for p in together] == [0, 0]
    (c_start, c_end), (d_start, d_end) = bench.interval("c1.cu"), bench.interval("d.cpp")
    assert max(c_start, d_start) < min(c_end, d_end)  # they overlapped


def test_with_cicc_admission_a_units_measured_peak_scales_its_kins_compile_and_cicc_costs() -> None:
    """Cicc admission charges parts of a unit (its compile outside cicc, each cicc, a cicc beside
    another); the watcher measures the whole compile. So the measured peak is held against the
    unit's whole peak (costs file "whole"), and every part of its family's units is scaled by the
    factor learned: k1 peaked at 6 GiB of a predicted 4 (1.5, settled: x 1.5 x 1.1), so k2's
    compile entry, cicc and cost beside are each 1.65 times theirs. No floor of what k1 holds."""
    from wheelbuild.plan import online

    admit, gib = load_admit(), 1024**3
    state: dict[str, object] = {
        "running": {"1": {"bytes": gib, "predicted": gib, "unit": "k1.cu"}},
        "waiting": {
            "2": {"bytes": gib, "predicted": gib, "unit": "k2.cu"},
            "3": {
                "bytes": 2 * gib, "predicted": 2 * gib, "beside": gib, "predicted_beside": gib,
                "unit": "k2.cu", "kind": "cicc",
            },
            "4": {"bytes": 3 * gib, "predicted": 3 * gib, "unit": "other.cu"},
        },
        "units": {},
    }  # fmt: skip
    whole = {"k1.cu": 4 * gib, "k2.cu": 4 * gib}
    measured = {"k1": {"held": 5 * gib, "peak": 6 * gib, "done": True}}
    factors = admit.relearn(state, measured, 1.0, online, whole)
    waiting = state["waiting"]
    assert isinstance(waiting, dict)
    assert factors["2"] == factors["3"] == pytest.approx(1.5 * 1.1)
    assert waiting["2"]["bytes"] == int(gib * 1.65)
    assert (waiting["3"]["bytes"], waiting["3"]["beside"]) == (int(2 * gib * 1.65), int(gib * 1.65))
    # What the costs file does not know is neither learned from nor corrected past the cold factor.
    assert waiting["4"]["bytes"] == 3 * gib and "other" not in state["units"]  # type: ignore[operator]
    assert state["units"] == {
        "k1": {"name": "k1.cu", "predicted": 4 * gib},
        "k2": {"name": "k2.cu", "predicted": 4 * gib},
    }
    # As predicted (what would have admitted it without learning): the costs file's own parts.
    back = admit.as_predicted(state)["waiting"]
    assert (back["3"]["bytes"], back["3"]["beside"]) == (2 * gib, gib)


def test_a_costs_file_with_cicc_costs_and_no_whole_peaks_teaches_no_cicc(tmp_path: Path) -> None:
    """A costs file of cicc admission written before it learned: the compile learns as before,
    and "whole" is absent, so a cicc is admitted at its own cost (load_whole: None)."""
    admit = load_admit()
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"default": 1, "cicc": {"a.cu": 1}, "learn": {"cold": 1.0}}))
    assert admit.load_learning(str(path)) == 1.0 and admit.load_whole(str(path)) is None
    path.write_text(
        json.dumps({"default": 1, "cicc": {"a.cu": 1}, "learn": {"cold": 1.0}, "whole": {"a.cu": 5}})
    )
    assert admit.load_whole(str(path)) == {"a.cu": 5}


def test_the_rule_the_wrapper_imports_runs_on_the_images_python() -> None:
    """plan/online.py is mounted into the build's container beside the wrapper: standard library
    only, Python 3.9 syntax, as the wrapper itself."""
    rule = REPO / "builder" / "plan" / "online.py"
    tree = ast.parse(rule.read_text(), feature_version=(3, 9))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))  # no package


def test_a_bad_cold_factor_fails_loudly(bench: Bench) -> None:
    bench.costs.write_text(json.dumps({"default": 4, "units": {}, "learn": {"cold": "warm"}}))
    wrapper = bench.start("a.cu")
    _, err = wrapper.communicate(timeout=10)
    assert wrapper.returncode == 2
    assert (
        err
        == "wheelbuild-admit: costs file "
        + str(bench.costs)
        + ": learn[\"cold\"] is 'warm', not a positive factor\n"
    )
    assert bench.started("a.cu") is None
