"""wheelbuild.plan.online: admission that learns while the build runs, alone and inside simulate()."""

from __future__ import annotations

import pytest
from wheelbuild.plan.admission import admission_costs, with_admission
from wheelbuild.plan.memory_model import GIB, UnitCost, default_model, flash_attn_model
from wheelbuild.plan.online import COLD, MARGIN, Learner, family_of, kind_of
from wheelbuild.plan.planner import plan_build
from wheelbuild.plan.simulation import simulate


def unit(name: str, gib: float, seconds: float = 100.0) -> UnitCost:
    """A unit that holds nothing for its first 20% and `gib` from then on (simulate's default window)."""
    return UnitCost(name=name, fixed=0, per_arch=round(gib * GIB), front_s=0.0, per_arch_s=seconds)


def test_family_is_the_basename_without_digits_and_kind_the_suffix() -> None:
    assert family_of("csrc/src/flash_bwd_hdim128_fp16_sm80.cu") == family_of("flash_bwd_hdim256_fp16_sm80.cu")
    assert family_of("flash_bwd_hdim128_fp16_sm80.cu") != family_of("flash_fwd_hdim128_fp16_sm80.cu")
    assert kind_of("csrc/flash_api.cpp") == "host" and kind_of("a/b.cu") == "device"


def test_learner_is_cold_until_a_family_settles_then_takes_its_highest_ratio() -> None:
    learner = Learner(("fwd1.cu", "fwd2.cu", "bwd1.cu", "api.cpp"))
    assert learner.cost(1, 1000) == 1000 * COLD  # nothing seen: the guess is not trusted
    learner.observe(0, held=1500, predicted=1000)  # fwd1 holds 1.5 times its cost, still growing
    assert learner.factor(1) == pytest.approx(max(COLD, 1.5 * (1 + MARGIN)))
    learner.settle(0)  # fwd1 done: its family's ratio stands, the cold factor goes
    assert learner.factor(1) == pytest.approx(1.5 * (1 + MARGIN))
    # Another family of the same kind stays cold, and never below what its kind was seen to need.
    assert learner.factor(2) == pytest.approx(COLD)
    learner.observe(1, held=3000, predicted=1000)
    assert learner.factor(2) == pytest.approx(3 * (1 + MARGIN))
    assert learner.factor(3) == COLD  # a host compile learns nothing from device compiles
    # A running unit is charged at least what it holds now, whatever its family's ratio.
    assert learner.cost(1, 100, held=3000) == 3000


def test_learner_lowers_a_guess_that_was_too_high_once_its_family_settles() -> None:
    learner = Learner(("k1.cu", "k2.cu"))
    learner.observe(0, held=250, predicted=1000)
    learner.settle(0)
    assert learner.cost(1, 1000) == round(1000 * 0.25 * (1 + MARGIN))


def test_simulate_learning_stops_the_first_wave_of_a_wrong_by_half_model_meeting_the_oom_killer() -> None:
    """Six units of one family, each truly 4 GiB from 20% of its 100 s, predicted 2 GiB (wrong by
    half). Budget 10 GiB, limit 11 GiB (1 GiB outside the compiles), four jobs. Admission on the
    model lets four in (8 GiB predicted) and they peak together at 17 GiB: OOM-killed. Learning
    charges them COLD x 2 GiB until one has finished: two at once, 9 GiB, nothing killed; then
    each at the measured 4 GiB (+10%): two at a time still."""
    units = [unit(f"k{n}.cu", 4) for n in range(6)]
    costs = [2 * GIB] * 6
    common = dict(jobs=4, threads=1, archs=1, cpus=8, limit=11 * GIB, base=GIB, admit_budget=10 * GIB)
    plain = simulate(units, admit_costs=costs, **common)  # type: ignore[arg-type]
    assert plain.killed > 0 and not plain.ok
    learned = simulate(units, admit_costs=costs, learn_cold=COLD, **common)  # type: ignore[arg-type]
    assert learned.ok and learned.killed == 0
    assert learned.peak == 9 * GIB  # two at a time, from the first wave on
    assert learned.seconds == pytest.approx(300)


def test_simulate_learning_from_an_overrun_holds_back_the_next_unit_of_the_family() -> None:
    """The model trusted (cold factor 1): k0.cu predicted 2 GiB holds 6 from 20% of its 100 s; a
    host compile (2 GiB, 30 s) runs beside it; k2.cu (predicted 2, truly 6) comes at 30 s. Limit
    12, budget 10, 2 GiB outside the compiles. The wrapper's overrun alone shrinks the budget to 6,
    where k2.cu's 2 still fits: 2 + 6 + 6 is OOM-killed. Learning charges k2.cu what k0.cu was
    measured at over its prediction (3 x 2 GiB, +10%): it waits for k0.cu, nothing is killed."""
    units = [unit("k0.cu", 6), UnitCost("h.cpp", 2 * GIB, 0, 30.0, 0.0), unit("k2.cu", 6, 10)]
    common = dict(
        jobs=2, threads=1, archs=1, cpus=8, limit=12 * GIB, base=2 * GIB, admit_budget=10 * GIB,
        admit_costs=[2 * GIB] * 3,
    )  # fmt: skip
    plain = simulate(units, **common)  # type: ignore[arg-type]
    assert plain.killed > 0
    learned = simulate(units, learn_cold=1.0, **common)  # type: ignore[arg-type]
    assert learned.ok and learned.killed == 0
    assert learned.seconds == pytest.approx(100 + 10)  # k2.cu ran after k0.cu


def test_simulate_learning_packs_more_when_the_model_was_too_high() -> None:
    """Units predicted 4 GiB that hold 1: after the first settles, its family is charged 1.1 GiB
    each, so more run at once than the model's costs allow, and the build is shorter."""
    units = [unit(f"k{n}.cu", 1) for n in range(8)]
    common = dict(
        jobs=8, threads=1, archs=1, cpus=8, limit=9 * GIB, base=GIB, admit_budget=8 * GIB,
        admit_costs=[4 * GIB] * 8,
    )  # fmt: skip
    plain = simulate(units, **common)  # type: ignore[arg-type]
    learned = simulate(units, learn_cold=1.0, **common)  # type: ignore[arg-type]
    assert plain.ok and learned.ok and learned.killed == 0
    assert plain.seconds == pytest.approx(400)  # two at a time
    assert learned.seconds < 0.6 * plain.seconds


def test_admission_for_an_unknown_package_learning_launches_the_cpus_worth() -> None:
    """The default model knows no unit count: without learning the static plan's worst case caps
    MAX_JOBS; learning, the wrapper's corrected costs bound the memory and MAX_JOBS is the CPUs'."""
    static = plan_build(budget=62 * GIB, cpus=64, archs=2, model=default_model())
    plain = with_admission(static, learning=False)
    learning = with_admission(static, learning=True)
    assert plain.max_jobs == static.max_jobs < 64
    # A real build learns whenever it admits whole units (its costs file says "learn"), as here.
    assert "learn" in admission_costs(with_admission(static)) and with_admission(static) == learning
    assert learning.max_jobs == 2 * learning.admission_slots if learning.admission_slots else False
    assert learning.admission_slots == 64


def test_a_blind_build_of_flash_attn_with_peaks_over_its_profile_is_not_oom_killed_when_learning() -> None:
    """The default model's plan and costs file (a package nobody measured) run flash-attn's 73 units,
    each costing its profile's peak +25% (a stand-in for a package heavier than the guess: the
    bench's truths are the measured rows), on 64 cores in 62 GiB: admission on the guess is
    OOM-killed; learning while it runs is not."""
    limit, base = 62 * GIB, 768 * 1024**2
    truth = [
        UnitCost(u.name, round(u.fixed * 1.25), round(u.per_arch * 1.25), u.front_s, u.per_arch_s)
        for u in flash_attn_model().units
    ]
    plan = with_admission(plan_build(budget=limit, cpus=64, archs=2, model=default_model()), learning=True)
    assert plan.admission_budget is not None
    cost = admission_costs(plan)["default"]
    assert isinstance(cost, int)

    def run(learn: float | None) -> int:
        result = simulate(
            truth, jobs=plan.max_jobs, threads=plan.nvcc_threads, archs=2, cpus=64, limit=limit, base=base,
            admit_budget=plan.admission_budget, admit_costs=[cost] * len(truth), admit_slots=plan.admission_slots,
            learn_cold=learn,
        )  # fmt: skip
        assert learn is None or result.ok
        return result.killed

    assert run(None) > 0
    assert run(COLD) == 0
