"""The cicc windows (plan/phases.py) and cicc admission in simulate() (plan/simulation.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wheelbuild.plan.memory_model import GIB, MIB, UnitCost, flash_attn_model
from wheelbuild.plan.phases import BWD_STEPS, FWD_STEPS, cicc_windows, device_shape, shape_of
from wheelbuild.plan.simulation import SimResult, simulate

PHASES = Path(__file__).resolve().parents[2] / "bench" / "flash-attn-phases.tsv"


def _measured_rows() -> dict[str, list[tuple[str, float, int]]]:
    rows: dict[str, list[tuple[str, float, int]]] = {}
    for line in PHASES.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith(("#", "unit\t")):
            continue
        unit, _arch, _step, what, _where, cpu_s, _wall, rss_mib, _cgroup = line.split("\t")
        if what != "whole nvcc":
            rows.setdefault(unit, []).append((what, float(cpu_s), int(rss_mib)))
    return rows


def test_the_shipped_steps_are_the_measured_rows() -> None:
    rows = _measured_rows()
    for profile in (FWD_STEPS, BWD_STEPS):
        shipped = [(s.name, s.cpu_s, s.peak // MIB) for s in profile.steps]
        assert shipped == rows[profile.unit]


def test_cicc_is_most_of_an_arch_and_the_front_is_split_around_the_device_steps() -> None:
    fwd, bwd = device_shape(FWD_STEPS), device_shape(BWD_STEPS)
    # 53.03 of 78.32 CPU s per arch; 85.35 of 98.70
    assert fwd.cicc == pytest.approx(53.03 / 78.32)
    assert bwd.cicc == pytest.approx(85.35 / 98.70)
    assert fwd.before == pytest.approx((0.99 + 4.38) / (0.99 + 4.38 + 0.04 + 4.93))
    assert 0 < fwd.preprocess < 0.02
    assert fwd.low == pytest.approx(792 / 3534) and bwd.low == pytest.approx(770 / 5788)  # cudafe++


def test_windows_one_per_round_inside_the_unit() -> None:
    unit = UnitCost(
        "flash_fwd_hdim64_fp16_sm80.cu", fixed=500 * MIB, per_arch=3 * GIB, front_s=20, per_arch_s=80
    )
    one = cicc_windows(unit, threads=1, archs=2)
    both = cicc_windows(unit, threads=2, archs=2)
    assert len(one) == 2 and len(both) == 1
    assert 0 < one[0][0] < one[0][1] < one[1][0] < one[1][1] < 1
    shape = shape_of(unit)
    assert shape is not None
    # each window is cicc's share of one arch's time, over the unit's wall
    assert one[0][1] - one[0][0] == pytest.approx(shape.cicc * 80 / unit.wall(1, 2))
    host = UnitCost("flash_api.cpp", fixed=GIB, per_arch=0, front_s=20, per_arch_s=0)
    assert cicc_windows(host, 1, 2) == ()
    bwd = UnitCost("flash_bwd_hdim64_fp16_sm80.cu", fixed=0, per_arch=GIB, front_s=1, per_arch_s=1)
    assert shape_of(bwd) == device_shape(BWD_STEPS) != shape


def test_only_units_whose_steps_were_measured_have_a_shape_and_go_through_cicc_admission() -> None:
    """Only flash-attn's kernels had their steps measured. Another extension's unit may hold as
    much in cudafe++ or its host compile as in cicc, so it gets no shape: simulated at its peak
    from PEAK_ONSET on, admitted whole, and a build of such units installs no cicc admission."""
    from wheelbuild.plan.admission import admission_costs, with_admission
    from wheelbuild.plan.memory_model import wbdemo_model
    from wheelbuild.plan.planner import plan_build
    from wheelbuild.plan.simulation import PEAK_ONSET

    saxpy = UnitCost("csrc/saxpy.cu", fixed=100 * MIB, per_arch=GIB, front_s=2, per_arch_s=5)
    assert shape_of(saxpy) is None and cicc_windows(saxpy, 1, 2) == ((PEAK_ONSET, 1.0),)
    assert (
        shape_of(replace(saxpy, name="csrc/flash_attn/src/flash_fwd_split_hdim64_fp16_sm80.cu")) is not None
    )
    model = wbdemo_model()
    plan = with_admission(plan_build(budget=8 * GIB, cpus=2, archs=2, model=model), cicc_admission=True)
    costs = admission_costs(plan)
    assert "cicc" not in costs, costs
    whole = admission_costs(with_admission(plan_build(budget=8 * GIB, cpus=2, archs=2, model=model)))
    assert costs["units"] == whole["units"]


def _pair() -> list[UnitCost]:
    return [
        UnitCost(f"flash_fwd_{n}.cu", fixed=200 * MIB, per_arch=2 * GIB, front_s=20, per_arch_s=100)
        for n in ("a", "b")
    ]


def test_cicc_admission_overlaps_one_units_cicc_with_the_others_other_steps() -> None:
    """Two units whose peaks do not fit together: admitted whole they run one after the other;
    with cicc admission only their ciccs take turns, and the rest of each overlaps."""
    units = _pair()
    windows = [cicc_windows(u, 1, 1) for u in units]
    peak = units[0].peak(1, 1)
    budget = peak + peak // 2
    whole = simulate(units, jobs=2, threads=1, archs=1, cpus=4, peak_windows=windows, admit_budget=budget)
    per_cicc = simulate(
        units, jobs=2, threads=1, archs=1, cpus=4, peak_windows=windows, admit_budget=budget,
        admit_costs=[u.fixed for u in units], cicc_costs=[peak, peak],
    )  # fmt: skip
    assert whole.seconds == pytest.approx(2 * units[0].wall(1, 1))
    assert per_cicc.ok and per_cicc.killed == 0
    shape = shape_of(units[0])
    assert shape is not None
    cicc_s = shape.cicc * units[0].per_arch_s
    # the second unit's cicc waits for the first's: one unit's wall plus one cicc
    assert per_cicc.seconds == pytest.approx(units[0].wall(1, 1) + cicc_s)
    assert per_cicc.cicc_wait_s == pytest.approx(cicc_s)
    assert per_cicc.peak <= budget  # never both ciccs at once
    assert per_cicc.admitted_peak <= budget


def test_a_cicc_larger_than_the_budget_still_runs_alone() -> None:
    units = _pair()
    peak = units[0].peak(1, 1)
    result = simulate(
        units, jobs=2, threads=1, archs=1, cpus=4, peak_windows=[cicc_windows(u, 1, 1) for u in units],
        admit_budget=peak // 2, admit_costs=[u.fixed for u in units], cicc_costs=[peak, peak],
    )  # fmt: skip
    assert result.ok and result.peak <= peak + units[0].fixed


def test_cicc_admission_shrinks_by_the_overrun_when_the_costs_are_low() -> None:
    """Costs at 80% of the true peaks: the overrun of the running cicc keeps the next one out,
    so the limit is never met. (The second unit's cicc comes later: two ciccs that ask at the
    same moment are both let in before either has grown, here as in the wrapper.)"""
    first, second = _pair()
    units = [first, replace(second, front_s=60)]
    peak = first.peak(1, 1)
    limit = peak + peak // 2
    result = simulate(
        units, jobs=2, threads=1, archs=1, cpus=4, limit=limit,
        peak_windows=[cicc_windows(u, 1, 1) for u in units], admit_budget=limit,
        admit_costs=[u.fixed for u in units], cicc_costs=[peak * 4 // 5] * 2,
    )  # fmt: skip
    assert result.ok and result.killed == 0
    assert result.cicc_wait_s > 0
    assert result.peak <= limit


units = st.builds(
    UnitCost,
    name=st.sampled_from(["flash_fwd_x.cu", "flash_bwd_x.cu", "host.cpp"]),
    fixed=st.integers(min_value=0, max_value=2 * GIB),
    per_arch=st.integers(min_value=0, max_value=8 * GIB),
    front_s=st.floats(min_value=0.1, max_value=100),
    per_arch_s=st.floats(min_value=0, max_value=200),
)


@settings(max_examples=150, deadline=None)
@given(
    unit_list=st.lists(units, min_size=1, max_size=10),
    jobs=st.integers(min_value=1, max_value=8),
    threads=st.integers(min_value=1, max_value=2),
    budget=st.integers(min_value=0, max_value=40 * GIB),
)
def test_cicc_admission_never_deadlocks_and_keeps_the_ledger_in_the_budget(
    unit_list: list[UnitCost], jobs: int, threads: int, budget: int
) -> None:
    archs = 2
    result = simulate(
        unit_list, jobs=jobs, threads=threads, archs=archs, cpus=4,
        peak_windows=[cicc_windows(u, threads, archs) for u in unit_list], admit_budget=budget,
        admit_costs=[u.fixed for u in unit_list], cicc_costs=[u.peak(1, 1) for u in unit_list],
    )  # fmt: skip
    assert result.ok and result.killed == 0
    # Within the budget, except for one compile or one cicc let in alone, and the compiles'
    # fixed parts beside a cicc let in alone.
    alone = max(u.peak(threads, archs) for u in unit_list) + sum(u.fixed for u in unit_list)
    assert result.admitted_peak <= max(budget, alone)


def test_flash_attn_with_cicc_admission_beats_whole_unit_admission_where_memory_binds() -> None:
    model = flash_attn_model()
    units = list(model.units)
    windows = [cicc_windows(u, 1, 2) for u in units]
    budget = 40 * GIB
    peaks = [u.peak(1, 2) for u in units]
    whole = simulate(units, jobs=16, threads=1, archs=2, cpus=16, peak_windows=windows, admit_budget=budget,
                     admit_costs=peaks)  # fmt: skip
    one_arch = [u.peak(1, 1) for u in units]
    per_cicc = simulate(
        units, jobs=16, threads=1, archs=2, cpus=16, peak_windows=windows, admit_budget=budget,
        admit_costs=[u.fixed for u in units], cicc_costs=one_arch,
    )  # fmt: skip
    assert whole.ok and per_cicc.ok
    assert per_cicc.seconds < 0.9 * whole.seconds
    assert per_cicc.peak <= budget


def test_a_units_ciccs_run_one_by_one_unless_the_second_fits_at_its_arch_alone() -> None:
    """nvcc --threads 2: each of a unit's two ciccs comes to cicc admission on its own. Two whole ciccs
    (3 GiB each) do not fit 5 GiB: one runs while its sibling waits, so the unit goes through its
    window at half speed holding one arch's peak. Beside the first, the second costs its arch's
    part alone (2 GiB): both run, and the unit holds its whole peak for the window's length."""
    unit = UnitCost("flash_fwd_a.cu", fixed=GIB, per_arch=2 * GIB, front_s=20, per_arch_s=100)
    ((start, end),) = cicc_windows(unit, 2, 2)
    window_s = (end - start) * unit.wall(2, 2)

    def run(beside: list[int | None] | None) -> SimResult:
        return simulate(
            [unit], jobs=1, threads=2, archs=2, cpus=4, peak_windows=[cicc_windows(unit, 2, 2)],
            admit_budget=5 * GIB, admit_costs=[unit.fixed], cicc_costs=[unit.peak(1, 1)], cicc_beside=beside,
        )  # fmt: skip

    apart, beside = run(None), run([unit.per_arch])
    assert apart.ok and beside.ok
    assert apart.seconds == pytest.approx(unit.wall(2, 2) + window_s)
    assert apart.peak == unit.peak(1, 1)
    assert beside.seconds == pytest.approx(unit.wall(2, 2))
    assert beside.peak == unit.peak(2, 2)
    assert max(apart.admitted_peak, beside.admitted_peak) <= 5 * GIB
