"""wheelbuild.plan.planner and wheelbuild.plan.memory_model: properties that must hold for every input, and the
flash-attn model against the measurements it was fitted from."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wheelbuild.plan.memory_model import (
    MIB,
    MemoryModel,
    UnitCost,
    default_model,
    flash_attn_model,
    parse_profile,
    wbdemo_model,
)
from wheelbuild.plan.planner import (
    GIB,
    HOST_RESERVE,
    MIN_CONTAINER,
    OVERSUBSCRIBE,
    Plan,
    container_limit,
    explain_container_limit,
    format_plan,
    plan_build,
    predicted_build_seconds,
)
from wheelbuild.plan.simulation import simulate

FLASH_ATTN = flash_attn_model()
WBDEMO = wbdemo_model()
DEFAULT = default_model()

units = st.builds(
    UnitCost,
    name=st.just("unit.cu"),
    fixed=st.integers(min_value=0, max_value=4 * GIB),
    per_arch=st.integers(min_value=0, max_value=8 * GIB),
    front_s=st.floats(min_value=0.1, max_value=100),
    per_arch_s=st.floats(min_value=0, max_value=200),
)
random_models = st.builds(
    MemoryModel,
    name=st.just("random"),
    units=st.lists(units, min_size=1, max_size=12).map(tuple),
    reserve=st.integers(min_value=0, max_value=2 * GIB),
    margin=st.floats(min_value=0, max_value=0.5),
    complete=st.booleans(),
)
models = st.one_of(st.sampled_from([FLASH_ATTN, WBDEMO, DEFAULT]), random_models)
budgets = st.integers(min_value=256 * MIB, max_value=2048 * GIB)
cpus = st.floats(min_value=0.1, max_value=512, allow_nan=False, allow_infinity=False)
archs = st.integers(min_value=1, max_value=8)
counts = st.integers(min_value=1, max_value=64)


def _fits_one_job(model: MemoryModel, budget: int, threads: int, archs: int) -> bool:
    return model.peak_of_jobs(1, threads, archs) <= budget


# --- plan_build properties ---------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(budget=budgets, cpus=cpus, archs=archs, model=models)
def test_plan_always_gives_at_least_one_job_and_thread(
    budget: int, cpus: float, archs: int, model: MemoryModel
) -> None:
    plan = plan_build(budget=budget, cpus=cpus, archs=archs, model=model)
    assert plan.max_jobs >= 1
    assert plan.nvcc_threads >= 1


@settings(max_examples=300, deadline=None)
@given(budget=budgets, cpus=cpus, archs=archs, model=models)
def test_nvcc_threads_never_exceed_archs(budget: int, cpus: float, archs: int, model: MemoryModel) -> None:
    plan = plan_build(budget=budget, cpus=cpus, archs=archs, model=model)
    assert plan.nvcc_threads <= archs


@settings(max_examples=300, deadline=None)
@given(budget=budgets, cpus=cpus, archs=archs, model=models)
def test_plan_never_exceeds_the_budget_under_its_own_model(
    budget: int, cpus: float, archs: int, model: MemoryModel
) -> None:
    plan = plan_build(budget=budget, cpus=cpus, archs=archs, model=model)
    assert plan.predicted_peak == model.peak_of_jobs(plan.max_jobs, plan.nvcc_threads, archs)
    if _fits_one_job(model, budget, 1, archs):
        assert plan.predicted_peak <= budget
        if not model.complete:  # one kind of unit: every job may be the worst one
            assert model.reserve + plan.max_jobs * model.peak_per_job(plan.nvcc_threads, archs) <= budget
    else:
        assert (plan.max_jobs, plan.nvcc_threads) == (1, 1)
        assert any("below the model's smallest job" in reason for reason in plan.reasons)


@settings(max_examples=300, deadline=None)
@given(budget=budgets, cpus=cpus, archs=archs, model=models, threads=counts)
def test_plan_with_given_threads_never_exceeds_the_budget(
    budget: int, cpus: float, archs: int, model: MemoryModel, threads: int
) -> None:
    plan = plan_build(budget=budget, cpus=cpus, archs=archs, model=model, nvcc_threads=threads)
    assert plan.nvcc_threads == threads
    if _fits_one_job(model, budget, threads, archs):
        assert plan.predicted_peak <= budget
    else:
        assert plan.max_jobs == 1


@settings(max_examples=300, deadline=None)
@given(
    budget=budgets,
    extra=st.integers(min_value=0, max_value=512 * GIB),
    cpus=cpus,
    archs=archs,
    model=models,
)
def test_more_memory_never_gives_a_slower_predicted_build(
    budget: int, extra: int, cpus: float, archs: int, model: MemoryModel
) -> None:
    less = plan_build(budget=budget, cpus=cpus, archs=archs, model=model)
    more = plan_build(budget=budget + extra, cpus=cpus, archs=archs, model=model)
    slower = predicted_build_seconds(model, less.max_jobs, less.nvcc_threads, archs, cpus)
    faster = predicted_build_seconds(model, more.max_jobs, more.nvcc_threads, archs, cpus)
    assert faster <= slower


@settings(max_examples=300, deadline=None)
@given(
    budget=budgets,
    extra=st.integers(min_value=0, max_value=512 * GIB),
    cpus=cpus,
    archs=archs,
    model=models,
    threads=counts,
)
def test_with_given_threads_more_memory_never_gives_fewer_jobs(
    budget: int, extra: int, cpus: float, archs: int, model: MemoryModel, threads: int
) -> None:
    less = plan_build(budget=budget, cpus=cpus, archs=archs, model=model, nvcc_threads=threads)
    more = plan_build(budget=budget + extra, cpus=cpus, archs=archs, model=model, nvcc_threads=threads)
    assert more.max_jobs >= less.max_jobs


@settings(max_examples=100, deadline=None)
@given(budget=budgets, cpus=st.floats(min_value=1, max_value=64), archs=archs, model=models)
def test_the_chosen_pair_is_predicted_no_slower_than_any_pair_that_fits(
    budget: int, cpus: float, archs: int, model: MemoryModel
) -> None:
    plan = plan_build(budget=budget, cpus=cpus, archs=archs, model=model)
    if not _fits_one_job(model, budget, 1, archs):
        return
    chosen = predicted_build_seconds(model, plan.max_jobs, plan.nvcc_threads, archs, cpus)
    for threads in range(1, archs + 1):
        for jobs in range(1, max(1, int(cpus)) + 1):
            fits = model.peak_of_jobs(jobs, threads, archs) <= budget
            if fits and (threads == 1 or jobs * threads <= math.floor(OVERSUBSCRIBE * cpus)):
                assert chosen <= predicted_build_seconds(model, jobs, threads, archs, cpus)


@settings(max_examples=300, deadline=None)
@given(budget=budgets, cpus=cpus, archs=archs, model=models)
def test_jobs_never_exceed_whole_cpus_nor_threads_oversubscribe_them(
    budget: int, cpus: float, archs: int, model: MemoryModel
) -> None:
    plan = plan_build(budget=budget, cpus=cpus, archs=archs, model=model)
    assert plan.max_jobs <= max(1, int(cpus))
    if plan.nvcc_threads > 1:
        assert plan.max_jobs * plan.nvcc_threads <= math.floor(OVERSUBSCRIBE * cpus)
    if model.unit_count is not None:
        assert plan.max_jobs <= model.unit_count


@settings(max_examples=200, deadline=None)
@given(budget=budgets, cpus=cpus, archs=archs, model=models, jobs=counts, threads=counts)
def test_given_max_jobs_and_nvcc_threads_are_respected(
    budget: int, cpus: float, archs: int, model: MemoryModel, jobs: int, threads: int
) -> None:
    plan = plan_build(budget=budget, cpus=cpus, archs=archs, model=model, max_jobs=jobs, nvcc_threads=threads)
    assert (plan.max_jobs, plan.nvcc_threads) == (jobs, threads)
    assert plan.memory == budget
    assert plan.cpus == cpus
    assert f"MAX_JOBS={jobs}: given" in plan.reasons
    assert any(reason.startswith(f"NVCC_THREADS={threads}: given") for reason in plan.reasons)
    verdict = "within" if plan.predicted_peak <= budget else "OVER"
    assert any(reason.startswith("predicted peak") and verdict in reason for reason in plan.reasons)


@settings(max_examples=200, deadline=None)
@given(budget=budgets, cpus=cpus, archs=archs, model=models, jobs=counts)
def test_given_max_jobs_gets_threads_that_fit(
    budget: int, cpus: float, archs: int, model: MemoryModel, jobs: int
) -> None:
    plan = plan_build(budget=budget, cpus=cpus, archs=archs, model=model, max_jobs=jobs)
    assert plan.max_jobs == jobs
    assert 1 <= plan.nvcc_threads <= archs
    if plan.nvcc_threads > 1:
        assert plan.predicted_peak <= budget


# --- halved -------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(budget=budgets, cpus=cpus, archs=archs, model=models, jobs=counts, threads=counts)
def test_halved_strictly_shrinks_jobs_times_threads_and_ends_at_none(
    budget: int, cpus: float, archs: int, model: MemoryModel, jobs: int, threads: int
) -> None:
    plan: Plan | None = plan_build(
        budget=budget, cpus=cpus, archs=archs, model=model, max_jobs=jobs, nvcc_threads=threads
    )
    steps = 0
    last = plan
    while plan is not None:
        last = plan
        nxt = plan.halved()
        if nxt is not None:
            assert nxt.max_jobs * nxt.nvcc_threads < plan.max_jobs * plan.nvcc_threads
            assert nxt.max_jobs >= 1 and nxt.nvcc_threads >= 1
            assert (nxt.memory, nxt.cpus, nxt.archs) == (plan.memory, plan.cpus, plan.archs)
            assert nxt.predicted_peak == model.peak_of_jobs(nxt.max_jobs, nxt.nvcc_threads, archs)
            assert nxt.predicted_peak <= plan.predicted_peak
        plan = nxt
        steps += 1
        assert steps <= 16
    assert last is not None
    assert (last.max_jobs, last.nvcc_threads) == (1, 1)


def test_halved_halves_jobs_first_then_threads() -> None:
    plan = plan_build(budget=64 * GIB, cpus=32, archs=2, model=FLASH_ATTN, max_jobs=5, nvcc_threads=2)
    sequence = []
    step: Plan | None = plan
    while step is not None:
        sequence.append((step.max_jobs, step.nvcc_threads))
        step = step.halved()
    assert sequence == [(5, 2), (2, 2), (1, 2), (1, 1)]
    second = plan.halved()
    assert second is not None
    assert second.reasons[0] == "MAX_JOBS=2: half of 5, after an OOM kill"


# --- concrete plans -----------------------------------------------------------------------------


def test_flash_attn_at_64_gib_and_128_cpus_is_eight_jobs_of_one_thread() -> None:
    budget = container_limit(432 * 10**9, 64 * GIB)
    plan = plan_build(
        budget=budget,
        cpus=128,
        archs=2,
        model=FLASH_ATTN,
        budget_reason=explain_container_limit(432 * 10**9, 64 * GIB),
    )
    assert budget == 62 * GIB
    assert (plan.max_jobs, plan.nvcc_threads) == (8, 1)
    # The 8 heaviest units are bwd units at 1 thread: 8 x 7.5 GiB + 1 GiB reserve.
    assert 59 * GIB < plan.predicted_peak <= 62 * GIB
    assert plan.reasons[0] == (
        "memory limit 62.0 GiB: our cgroup's limit 64.0 GiB (below the host's 402.3 GiB available) "
        "less 2.0 GiB kept for the host"
    )
    assert any(r.startswith("MAX_JOBS=8: the least of: 8 fit 62.0 GiB") for r in plan.reasons)
    # At two threads only 4 jobs fit, and they are predicted slower.
    assert any(r.startswith("NVCC_THREADS=1") and "best at 2 threads: 4 jobs" in r for r in plan.reasons)
    text = format_plan(plan)
    assert "MAX_JOBS        8" in text
    assert "NVCC_THREADS    1" in text
    assert "flash_bwd_hdim256" in text


def test_flash_attn_with_memory_to_spare_is_predicted_as_long_as_its_longest_unit() -> None:
    plan = plan_build(budget=container_limit(432 * 10**9, None), cpus=128, archs=2, model=FLASH_ATTN)
    # Longest first, the 73rd (shortest) unit fits behind the first to finish: 72 jobs predict
    # the same build as 73, and a tie goes to fewer jobs.
    assert (plan.max_jobs, plan.nvcc_threads) == (72, 1)
    longest = max(u.wall(1, 2) for u in FLASH_ATTN.units)
    assert plan.predicted_seconds == pytest.approx(longest)


def test_spare_cpus_and_memory_buy_nvcc_threads() -> None:
    # 73 units on 128 CPUs: with memory for all of them at two threads, two threads win.
    plan = plan_build(budget=1024 * GIB, cpus=128, archs=2, model=FLASH_ATTN)
    one = plan_build(budget=1024 * GIB, cpus=128, archs=2, model=FLASH_ATTN, nvcc_threads=1)
    assert (plan.max_jobs, plan.nvcc_threads) == (72, 2)  # 72: as above
    assert (one.max_jobs, one.nvcc_threads) == (73, 1)  # given threads: the most jobs that fit
    assert plan.predicted_seconds is not None and one.predicted_seconds is not None
    assert plan.predicted_seconds < one.predicted_seconds


def test_where_memory_binds_fewer_jobs_of_two_threads_beat_more_of_one() -> None:
    # 30 GiB on 16 CPUs: 3 jobs fit at one thread, 2 at two; the two-thread pair finishes first.
    plan = plan_build(budget=30 * GIB, cpus=16, archs=2, model=FLASH_ATTN)
    one = plan_build(budget=30 * GIB, cpus=16, archs=2, model=FLASH_ATTN, nvcc_threads=1)
    assert (plan.max_jobs, plan.nvcc_threads) == (2, 2)
    assert (one.max_jobs, one.nvcc_threads) == (3, 1)
    assert plan.predicted_seconds is not None and one.predicted_seconds is not None
    assert plan.predicted_seconds < 0.85 * one.predicted_seconds
    assert plan.predicted_peak <= 30 * GIB
    assert any(r.startswith("NVCC_THREADS=2") and "best at 1 thread: 3 jobs" in r for r in plan.reasons)


def test_plan_below_one_job_of_memory_still_runs_one_job() -> None:
    plan = plan_build(budget=4 * GIB, cpus=16, archs=2, model=FLASH_ATTN)
    assert (plan.max_jobs, plan.nvcc_threads) == (1, 1)
    assert any("below the model's smallest job" in r for r in plan.reasons)


def test_fractional_cpus_below_one_still_give_one_job() -> None:
    plan = plan_build(budget=64 * GIB, cpus=0.5, archs=1, model=DEFAULT)
    assert (plan.max_jobs, plan.nvcc_threads) == (1, 1)


def test_generic_extension_gets_four_gib_per_arch_per_job() -> None:
    plan = plan_build(budget=33 * GIB, cpus=64, archs=2, model=DEFAULT)
    # 1 GiB reserve + 8 jobs x 4 GiB at one thread; two threads would need 8 GiB a job.
    assert (plan.max_jobs, plan.nvcc_threads) == (8, 1)
    assert plan.predicted_peak == 33 * GIB
    assert plan.predicted_seconds is None


def test_wbdemo_on_two_cpus_runs_two_jobs() -> None:
    plan = plan_build(budget=6 * GIB, cpus=2, archs=2, model=WBDEMO)
    assert (plan.max_jobs, plan.nvcc_threads) == (2, 1)
    assert plan.predicted_peak < 2 * GIB


def test_plan_as_dict_names_the_model_without_its_table() -> None:
    plan = plan_build(budget=64 * GIB, cpus=16, archs=2, model=FLASH_ATTN)
    data = plan.as_dict()
    assert data["model"] == {"name": "flash-attn-2.8.3", "source": FLASH_ATTN.source, "units": 73}
    assert data["max_jobs"] == plan.max_jobs
    assert data["reasons"] == list(plan.reasons)


# --- container limit ----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    available=st.integers(min_value=0, max_value=4096 * GIB),
    own=st.one_of(st.none(), st.integers(min_value=0, max_value=4096 * GIB)),
)
def test_container_limit_is_page_aligned_above_the_floor_and_never_more_than_allowed(
    available: int, own: int | None
) -> None:
    limit = container_limit(available, own)
    ceiling = available if own is None else min(available, own)
    assert limit % 4096 == 0
    assert limit >= MIN_CONTAINER
    assert limit <= max(MIN_CONTAINER, ceiling - HOST_RESERVE)
    assert limit == max(MIN_CONTAINER, (ceiling - HOST_RESERVE) // 4096 * 4096)


@settings(max_examples=200, deadline=None)
@given(
    available=st.integers(min_value=0, max_value=4096 * GIB),
    own=st.one_of(st.none(), st.integers(min_value=0, max_value=4096 * GIB)),
    extra=st.integers(min_value=0, max_value=64 * GIB),
)
def test_container_limit_grows_with_either_limit(available: int, own: int | None, extra: int) -> None:
    assert container_limit(available + extra, own) >= container_limit(available, own)
    if own is not None:
        assert container_limit(available, own + extra) >= container_limit(available, own)
        assert container_limit(available, own) <= container_limit(available, None)


def test_container_limit_keeps_two_gib_for_the_host() -> None:
    assert container_limit(64 * GIB, None) == 62 * GIB
    assert container_limit(64 * GIB + 4095, None) == 62 * GIB
    assert container_limit(432 * 10**9, 64 * GIB) == 62 * GIB
    assert container_limit(16 * GIB, 64 * GIB) == 14 * GIB
    assert container_limit(64 * GIB, None, reserve=4 * GIB) == 60 * GIB
    assert container_limit(2 * GIB, None) == GIB
    assert container_limit(0, None) == GIB


def test_container_limit_reasons_name_the_smaller_limit_and_the_floor() -> None:
    assert explain_container_limit(64 * GIB, None) == (
        "memory limit 62.0 GiB: host available 64.0 GiB less 2.0 GiB kept for the host"
    )
    assert explain_container_limit(64 * GIB, 128 * GIB) == (
        "memory limit 62.0 GiB: host available 64.0 GiB (our cgroup allows 128.0 GiB) "
        "less 2.0 GiB kept for the host"
    )
    assert explain_container_limit(2 * GIB, None).endswith("raised to the 1.0 GiB floor")


# --- the memory model ---------------------------------------------------------------------------

# shared/calibration/flash-attn-2.8.3-cuda13.0.tsv: (unit, archs, nvcc threads, peak MiB).
MEASURED = [
    ("flash_fwd_hdim64_fp16_sm80.cu", 2, 2, 7778),
    ("flash_fwd_hdim64_fp16_sm80.cu", 2, 1, 4150),
    ("flash_fwd_hdim64_fp16_sm80.cu", 1, 1, 4040),
    ("flash_bwd_hdim128_fp16_sm80.cu", 2, 2, 12856),
    ("flash_bwd_hdim256_bf16_sm80.cu", 1, 1, 7126),
    ("flash_fwd_hdim256_bf16_sm80.cu", 1, 1, 4770),
    ("flash_fwd_split_hdim128_bf16_sm80.cu", 1, 1, 4296),
    ("flash_bwd_hdim64_bf16_causal_sm80.cu", 1, 1, 6387),
    ("flash_api.cpp", 1, 1, 1680),
]


def _unit(name: str) -> UnitCost:
    (unit,) = [u for u in FLASH_ATTN.units if u.name.endswith("/" + name)]
    return unit


@pytest.mark.parametrize(("name", "archs", "threads", "peak_mib"), MEASURED)
def test_flash_attn_model_never_under_estimates_a_measurement(
    name: str, archs: int, threads: int, peak_mib: int
) -> None:
    fitted = _unit(name).peak(threads, archs) / MIB
    assert peak_mib * 0.999 <= fitted <= peak_mib * 1.03
    assert FLASH_ATTN.unit_peak(_unit(name), threads, archs) >= peak_mib * 1.05 * MIB


def test_flash_attn_model_has_every_unit_in_setup_py_order() -> None:
    names = [u.name.rsplit("/", 1)[-1] for u in FLASH_ATTN.units]
    assert len(names) == len(set(names)) == 73
    assert names[0] == "flash_api.cpp"
    assert names[1] == "flash_fwd_hdim32_fp16_sm80.cu"
    assert names[25] == "flash_bwd_hdim32_fp16_sm80.cu"
    assert names[-1] == "flash_fwd_split_hdim256_bf16_causal_sm80.cu"
    for family, count in (("flash_fwd_hdim", 24), ("flash_bwd_hdim", 24), ("flash_fwd_split_hdim", 24)):
        assert sum(n.startswith(family) for n in names) == count
    assert FLASH_ATTN.reserve == GIB
    assert FLASH_ATTN.margin == 0.05


def test_flash_attn_model_shares_memory_across_threads_and_bwd_is_the_worst() -> None:
    # Two threads cost 1.87x one thread, not 2x (the calibration's fwd hdim64 rows).
    fwd = _unit("flash_fwd_hdim64_fp16_sm80.cu")
    assert 1.8 <= fwd.peak(2, 2) / fwd.peak(1, 2) <= 1.9
    worst = max(FLASH_ATTN.units, key=lambda u: u.peak(1, 2))
    assert "flash_bwd_hdim256" in worst.name
    assert FLASH_ATTN.peak_per_job(1, 2) == FLASH_ATTN.unit_peak(worst, 1, 2)
    for unit in FLASH_ATTN.units:
        if "_bwd_" in unit.name:
            assert 6.3 * GIB <= unit.peak(1, 2) <= 7.2 * GIB
        elif "_fwd" in unit.name:
            assert 3.9 * GIB <= unit.peak(1, 2) <= 4.9 * GIB


def test_peak_of_jobs_is_the_heaviest_units_and_stops_at_the_unit_count() -> None:
    peaks = sorted((FLASH_ATTN.unit_peak(u, 1, 2) for u in FLASH_ATTN.units), reverse=True)
    assert FLASH_ATTN.peak_of_jobs(3, 1, 2) == GIB + sum(peaks[:3])
    assert FLASH_ATTN.peak_of_jobs(500, 1, 2) == GIB + sum(peaks)
    # Four bwd hdim256 units (fp16/bf16, causal or not) share the worst peak; the fifth is lighter.
    worst = FLASH_ATTN.peak_per_job(1, 2)
    assert FLASH_ATTN.peak_of_jobs(4, 1, 2) == GIB + 4 * worst
    assert FLASH_ATTN.peak_of_jobs(5, 1, 2) < GIB + 5 * worst
    assert DEFAULT.peak_of_jobs(5, 2, 2) == GIB + 5 * 8 * GIB


@settings(max_examples=200, deadline=None)
@given(model=models, budget=budgets, threads=counts, archs=archs)
def test_max_jobs_within_is_the_most_that_fit(
    model: MemoryModel, budget: int, threads: int, archs: int
) -> None:
    jobs = model.max_jobs_within(budget, threads, archs)
    if jobs > 0:
        assert model.peak_of_jobs(jobs, threads, archs) <= budget
    if model.unit_count is None or jobs < model.unit_count:
        assert model.peak_of_jobs(jobs + 1, threads, archs) > budget


def test_profile_with_a_wrong_header_is_refused() -> None:
    with pytest.raises(ValueError, match="header"):
        parse_profile("name\tpeak\nx.cu\t1\n", name="bad")
    with pytest.raises(ValueError, match="line 2"):
        parse_profile("unit\tfixed_mib\tper_arch_mib\tfront_s\tper_arch_s\nx.cu\tlots\t1\t1\t1\n", name="bad")


def test_a_recipe_can_carry_its_own_profile() -> None:
    model = parse_profile(
        "# mine\n#@ reserve_mib 256\n#@ margin 0.1\nunit\tfixed_mib\tper_arch_mib\tfront_s\tper_arch_s\n"
        "a.cu\t100\t200\t1\t2\nb.cpp\t300\t0\t3\t0\n",
        name="mine",
    )
    assert [u.name for u in model.units] == ["a.cu", "b.cpp"]
    assert model.reserve == 256 * MIB
    assert model.unit_peak(model.units[0], 2, 2) == math.ceil(500 * 1.1) * MIB


# --- simulate -----------------------------------------------------------------------------------

TINY = [
    UnitCost(name="a.cu", fixed=100 * MIB, per_arch=400 * MIB, front_s=2.0, per_arch_s=4.0),
    UnitCost(name="b.cu", fixed=100 * MIB, per_arch=400 * MIB, front_s=2.0, per_arch_s=4.0),
    UnitCost(name="c.cpp", fixed=300 * MIB, per_arch=0, front_s=3.0, per_arch_s=0.0),
]


def test_simulate_one_job_runs_units_one_after_another() -> None:
    result = simulate(TINY, jobs=1, threads=1, archs=2, cpus=4)
    assert result.ok and result.killed == 0
    assert result.seconds == pytest.approx(10 + 10 + 3)
    assert result.peak == 500 * MIB


def test_simulate_jobs_and_threads_run_in_parallel_until_cpus_run_out() -> None:
    assert simulate(TINY, jobs=3, threads=2, archs=2, cpus=8).seconds == pytest.approx(6)
    # 2 + 2 + 1 threads wanted on 2 CPUs: everything runs at 2/5 speed until c.cpp ends.
    squeezed = simulate(TINY, jobs=3, threads=2, archs=2, cpus=2)
    assert squeezed.seconds > 6


def test_simulate_oom_kills_the_largest_and_fails_the_attempt() -> None:
    # At 20% of their 6 s both .cu units reach 900 MiB: 100 + 900 + 900 + 300 > 1400 MiB, so one
    # is killed (a.cu, the first of the largest); ninja starts nothing more, the others finish.
    result = simulate(TINY, jobs=3, threads=2, archs=2, cpus=8, limit=1400 * MIB, base=100 * MIB)
    assert not result.ok
    assert result.killed == 1
    assert result.finished == frozenset({1, 2})
    assert result.peak <= 1400 * MIB
    assert simulate(TINY, jobs=3, threads=2, archs=2, cpus=8, limit=2200 * MIB, base=100 * MIB).ok


def test_simulate_measures_the_memory_seconds_and_the_drain() -> None:
    # One job: each .cu holds 100 MiB for 2 s, then 500 MiB for 8 s (PEAK_ONSET 0.2 of 10 s);
    # c.cpp 300 MiB for 3 s. Something waits to start until c.cpp starts at 20 s: the drain is
    # c.cpp alone.
    result = simulate(TINY, jobs=1, threads=1, archs=2, cpus=4)
    assert result.memory_s == pytest.approx(2 * (100 * 2 + 500 * 8) * MIB + 300 * 3 * MIB)
    assert result.drain_from == pytest.approx(20)
    assert result.drain_memory_s == pytest.approx(300 * 3 * MIB)
    # All three at once: nothing ever waits, so the whole attempt is its drain.
    at_once = simulate(TINY, jobs=3, threads=2, archs=2, cpus=8)
    assert at_once.drain_from == 0 and at_once.drain_memory_s == pytest.approx(at_once.memory_s)
    # Behind the wrapper (budget 1000 MiB): b.cu waits for a.cu, c.cpp for b.cu (until 12 s).
    held = simulate(TINY, jobs=3, threads=2, archs=2, cpus=8, admit_budget=1000 * MIB)
    assert held.drain_from == pytest.approx(12)
    assert held.drain_memory_s == pytest.approx(300 * 3 * MIB)
    assert held.memory_s == pytest.approx(2 * (100 * 1.2 + 900 * 4.8) * MIB + 300 * 3 * MIB)
    # At cicc admission (cicc from half of each 6 s unit on, 500 MiB; budget 700): b.cu's cicc
    # waits for a.cu's to end at 6 s, then runs alone to 9 s: the drain.
    gated = simulate(
        TINY[:2], jobs=2, threads=1, archs=1, cpus=8, peak_windows=[[(0.5, 1.0)]] * 2,
        admit_budget=700 * MIB, admit_costs=[100 * MIB] * 2, cicc_costs=[500 * MIB] * 2,
    )  # fmt: skip
    assert gated.seconds == pytest.approx(9) and gated.drain_from == pytest.approx(6)
    assert gated.memory_s == pytest.approx((200 * 3 + 500 * 3 + 500 * 3) * MIB)
    assert gated.drain_memory_s == pytest.approx(500 * 3 * MIB)


def _windows(edges: list[int]) -> list[tuple[float, float]]:
    """Disjoint windows from distinct 64ths: (e0, e1), (e2, e3), ... (exact in binary)."""
    ends = sorted(set(edges))
    return [(ends[k] / 64, ends[k + 1] / 64) for k in range(0, len(ends) - 1, 2)]


@settings(max_examples=200, deadline=None)
@given(
    first=st.lists(st.integers(0, 64), max_size=8),
    second=st.lists(st.integers(0, 64), max_size=8),
    jobs=st.integers(1, 2),
)
def test_simulate_holds_each_peak_exactly_inside_its_windows(
    first: list[int], second: list[int], jobs: int
) -> None:
    # Windows anywhere, from the unit's start to its end, touching or not: the memory-seconds are
    # each unit's 10 s at its fixed 100 MiB, and at its 500 MiB peak over its windows' length,
    # whether the two units run one after the other or together (8 CPUs: neither slows down).
    windows = [_windows(first), _windows(second)]
    result = simulate(TINY[:2], jobs=jobs, threads=1, archs=2, cpus=8, peak_windows=windows)
    inside = [sum(end - start for start, end in w) for w in windows]
    assert result.seconds == pytest.approx(20 if jobs == 1 else 10)
    assert result.memory_s == pytest.approx(sum(10 * (100 + 400 * share) * MIB for share in inside))
    if jobs == 1:
        assert result.peak == (500 if any(inside) else 100) * MIB
    else:  # the most held at once, found at a moment some window starts (or at 0)
        moments = [t / 64 for t in (0, *first, *second) if t < 64]
        held = [sum(500 if any(a <= t < b for a, b in w) else 100 for w in windows) for t in moments]
        assert result.peak == max(held) * MIB


def test_simulate_cached_units_run_as_hits() -> None:
    hit = UnitCost(name="hit", fixed=50 * MIB, per_arch=0, front_s=0.5, per_arch_s=0.0)
    result = simulate(TINY, jobs=1, threads=1, archs=2, cpus=4, cached={0, 1}, hit=hit)
    assert result.seconds == pytest.approx(0.5 + 0.5 + 3)


# --- simulate with memory admission (images/wheelbuild-admit) -------------------------------------


def test_simulate_admission_holds_units_until_they_fit() -> None:
    # Peaks at NVCC_THREADS=2: a.cu, b.cu 900 MiB, c.cpp 300 MiB; three jobs launched at once.
    # Budget 1000: a.cu alone (0-6), then b.cu (6-12), then c.cpp (12-15).
    held = simulate(TINY, jobs=3, threads=2, archs=2, cpus=8, admit_budget=1000 * MIB)
    assert held.ok and held.seconds == pytest.approx(15)
    assert held.admitted_peak == 900 * MIB
    # Budget 1200: c.cpp passes b.cu and runs beside a.cu (0-3); b.cu follows a.cu (6-12).
    passed = simulate(TINY, jobs=3, threads=2, archs=2, cpus=8, admit_budget=1200 * MIB)
    assert passed.seconds == pytest.approx(12)
    assert passed.admitted_peak == passed.peak == 1200 * MIB


def test_simulate_admission_slots_cap_the_compiles_at_once() -> None:
    # Budget 1200 as above, but one slot: nothing runs beside a.cu; b.cu (older) then c.cpp.
    capped = simulate(TINY, jobs=3, threads=2, archs=2, cpus=8, admit_budget=1200 * MIB, admit_slots=1)
    assert capped.seconds == pytest.approx(15) and capped.admitted_peak == 900 * MIB
    # Two slots: as without a cap (c.cpp passes b.cu into the second slot).
    two = simulate(TINY, jobs=3, threads=2, archs=2, cpus=8, admit_budget=1200 * MIB, admit_slots=2)
    assert two.seconds == pytest.approx(12) and two.admitted_peak == 1200 * MIB


def test_simulate_admission_shrinks_the_budget_when_a_unit_overruns_its_cost() -> None:
    """u0 is predicted at 2 GiB but holds 6 from 20% of its 100 s on; u1 (2, 30 s) runs beside it;
    u2 (6) comes when u1 ends at 30 s. Limit 12, budget 10, 2 GiB held outside the compiles.
    The full budget would admit u2 (2 + 6 = 8) and the OOM killer would meet 2 + 6 + 6; the
    overrun (4) shrinks the budget to 6, so u2 waits for u0 and nothing is killed."""
    gib = 1024**3

    def unit(name: str, fixed: int, per_arch: int, seconds: float) -> UnitCost:
        return UnitCost(
            name=name, fixed=fixed * gib, per_arch=per_arch * gib, front_s=seconds, per_arch_s=0.0
        )

    units = [unit("u0", 0, 6, 100), unit("u1", 2, 0, 30), unit("u2", 6, 0, 10)]
    result = simulate(
        units, jobs=2, threads=1, archs=1, cpus=8, limit=12 * gib, base=2 * gib,
        admit_budget=10 * gib, admit_costs=[2 * gib, 2 * gib, 6 * gib],
    )  # fmt: skip
    assert result.ok and result.killed == 0
    assert result.seconds == pytest.approx(100 + 10)  # u2 ran after u0
    # Without the limit the wrapper has no overrun to see: u2 runs at 30 s, beside u0.
    blind = simulate(
        units, jobs=2, threads=1, archs=1, cpus=8, base=2 * gib,
        admit_budget=10 * gib, admit_costs=[2 * gib, 2 * gib, 6 * gib],
    )  # fmt: skip
    assert blind.seconds == pytest.approx(100) and blind.peak == 14 * gib  # 2 GiB over the limit


def test_simulate_admission_runs_a_unit_larger_than_the_budget_alone() -> None:
    result = simulate(TINY, jobs=3, threads=2, archs=2, cpus=8, admit_budget=500 * MIB)
    assert result.ok and result.seconds == pytest.approx(6 + 6 + 3)
    assert result.peak == 900 * MIB  # one unit at a time, never two


def test_simulate_admission_fairness_stops_newer_units_passing() -> None:
    def unit(name: str, mib: int, seconds: float) -> UnitCost:
        return UnitCost(name=name, fixed=mib * MIB, per_arch=0, front_s=seconds, per_arch_s=0.0)

    # Budget 1000, four jobs: a (0-10) and c (0-15) run; b (1000) needs an empty ledger.
    units = [
        unit("a", 500, 10),
        unit("b", 1000, 10),
        unit("c", 500, 15),
        unit("d", 500, 10),
        unit("e", 500, 1),
    ]

    def makespan(fairness: float) -> float:
        result = simulate(
            units, jobs=4, threads=1, archs=1, cpus=8, admit_budget=1000 * MIB, admit_fairness_s=fairness
        )
        assert result.ok and result.admitted_peak <= 1000 * MIB
        return result.seconds

    # No window: d and e pass b; b gets in when d ends at 20 (20-30).
    assert makespan(math.inf) == pytest.approx(30)
    # 12 s: d passes b at 10; at 15 b has waited too long, e may not pass; b at 20-30, e 30-31.
    assert makespan(12) == pytest.approx(31)
    # 0 s: nobody passes b: b at 15-25 once a and c are done, then d and e (25-35).
    assert makespan(0) == pytest.approx(35)


def test_simulate_admission_uses_the_costs_and_still_oom_kills_on_the_true_peaks() -> None:
    # The costs say 300 MiB each: all three admitted within 1200, but they truly need 2100 + 100.
    low = [300 * MIB] * 3
    result = simulate(
        TINY,
        jobs=3,
        threads=2,
        archs=2,
        cpus=8,
        limit=1400 * MIB,
        base=100 * MIB,
        admit_budget=1200 * MIB,
        admit_costs=low,
    )
    assert result.killed >= 1 and not result.ok
    assert result.admitted_peak == 900 * MIB
    with pytest.raises(ValueError, match="admit_costs"):
        simulate(TINY, jobs=3, threads=2, archs=2, cpus=8, admit_budget=GIB, admit_costs=low[:2])


def test_simulate_admission_lets_launched_units_finish_after_a_kill() -> None:
    # a.cu's cost says 300 MiB: a.cu and b.cu are admitted (1200), c.cpp waits. At their peaks
    # 100 + 900 + 900 > 1300: a.cu is OOM-killed and ninja starts nothing new, but c.cpp, already
    # launched, is admitted into the room a.cu left and compiles.
    costs = [300 * MIB, 900 * MIB, 300 * MIB]
    result = simulate(
        TINY,
        jobs=3,
        threads=2,
        archs=2,
        cpus=8,
        limit=1300 * MIB,
        base=100 * MIB,
        admit_budget=1200 * MIB,
        admit_costs=costs,
    )
    assert result.killed == 1
    assert result.finished == frozenset({1, 2})
    assert not result.ok


@settings(max_examples=200, deadline=None)
@given(
    unit_list=st.lists(units, min_size=1, max_size=10),
    jobs=st.integers(min_value=1, max_value=8),
    threads=st.integers(min_value=1, max_value=2),
    arch_count=st.integers(min_value=1, max_value=2),
    budget=st.integers(min_value=0, max_value=40 * GIB),
    margin=st.floats(min_value=0, max_value=0.3),
)
def test_simulate_admission_never_exceeds_the_budget_under_the_model(
    unit_list: list[UnitCost], jobs: int, threads: int, arch_count: int, budget: int, margin: float
) -> None:
    model = MemoryModel(name="random", units=tuple(unit_list), reserve=0, margin=margin)
    costs = [model.unit_peak(u, threads, arch_count) for u in unit_list]
    result = simulate(
        unit_list,
        jobs=jobs,
        threads=threads,
        archs=arch_count,
        cpus=4,
        admit_budget=budget,
        admit_costs=costs,
    )
    assert result.ok and result.killed == 0
    # The ledger stays within the budget, except for one unit larger than it, alone.
    assert result.admitted_peak <= max(budget, max(costs))
    # The true peaks are below the costs (margin >= 0), so memory in use is too.
    assert result.peak <= result.admitted_peak
    plain = simulate(unit_list, jobs=jobs, threads=threads, archs=arch_count, cpus=4)
    # A budget for everything at once admits everything as it is launched: no admission at all.
    roomy = simulate(
        unit_list,
        jobs=jobs,
        threads=threads,
        archs=arch_count,
        cpus=4,
        admit_budget=sum(costs),
        admit_costs=costs,
    )
    assert (roomy.seconds, roomy.peak, roomy.finished) == (plain.seconds, plain.peak, plain.finished)


# --- admission (images/wheelbuild-admit) --------------------------------------------------------


def test_admission_launches_up_to_the_cpus_and_admits_within_limit_less_reserve() -> None:
    from wheelbuild.plan.admission import ADMIT_MARGIN, admission_costs, with_admission

    model = flash_attn_model()
    static = plan_build(budget=64 * GIB, cpus=128, archs=2, model=model)
    admitted = with_admission(static)
    assert admitted.max_jobs == 73  # min(128 CPUs, 73 units): memory is the wrapper's job now
    assert admitted.admission_budget == 64 * GIB - model.reserve
    costs = admission_costs(admitted)
    worst = max(model.unit_peak(u, admitted.nvcc_threads, 2) for u in model.units)
    assert costs["default"] == int(worst * (1 + ADMIT_MARGIN))
    units = costs["units"]
    assert isinstance(units, dict) and len(units) == 73 and "flash_api.cpp" in units


def test_a_unit_measured_on_the_toolkit_is_admitted_with_the_smaller_margin() -> None:
    """ADMIT_MARGIN covers an estimate's error; a unit measured on the build's toolkit (the
    learned model, calibrate) is admitted with MEASURED_MARGIN instead (a sampled peak, a peak
    that varies from build to build), whole or with cicc admission, and the plan says how many
    such units it has."""
    from dataclasses import replace as with_

    from wheelbuild.plan.admission import (
        ADMIT_MARGIN,
        MEASURED_MARGIN,
        admission_costs,
        unit_costs,
        with_admission,
    )

    model = flash_attn_model()
    bwd = next(i for i, u in enumerate(model.units) if u.name.endswith("flash_bwd_hdim256_fp16_sm80.cu"))
    units = list(model.units)
    units[bwd] = with_(units[bwd], measured=True)
    learned = with_(model, units=tuple(units))
    name = units[bwd].name.rsplit("/", 1)[-1]
    for gate in (False, True):
        plans = [
            with_admission(
                plan_build(budget=64 * GIB, cpus=16, archs=2, model=m, nvcc_threads=1), cicc_admission=gate
            )
            for m in (model, learned)
        ]
        estimated, measured = (unit_costs(p.model, p.model.units[bwd], 1, 2) for p in plans)
        assert estimated.whole == int(model.unit_peak(model.units[bwd], 1, 2) * (1 + ADMIT_MARGIN))
        assert measured.whole == int(model.unit_peak(model.units[bwd], 1, 2) * (1 + MEASURED_MARGIN))
        assert measured.compile < estimated.compile and (measured.cicc or 0) < (estimated.cicc or 1)
        costs = admission_costs(plans[1])
        assert costs["units"][name] == (measured.compile if gate else measured.whole)  # type: ignore[index]
        assert "+5% for the 1 unit measured on this toolkit" in _admission_reason(plans[1])
        assert "measured on this toolkit" not in _admission_reason(plans[0])
    # Every other unit keeps its margin.
    other = units[bwd + 1]
    assert unit_costs(learned, other, 1, 2).whole == unit_costs(model, other, 1, 2).whole


def test_cicc_admission_changes_only_the_costs_of_device_units() -> None:
    """Without cicc admission (--no-cicc-admission) the costs file holds each unit's whole peak and no
    "cicc" map (the wrapper then lets every cicc through); with it, a device unit's compile costs
    its part outside cicc, far less, and its ciccs one arch's peak; the host unit stays whole."""
    from wheelbuild.plan.admission import admission_costs, unit_costs, with_admission

    model = flash_attn_model()
    static = plan_build(budget=64 * GIB, cpus=128, archs=2, model=model)
    plain, gated = with_admission(static), with_admission(static, cicc_admission=True)
    assert not plain.cicc_admission and gated.cicc_admission and plain.as_dict()["cicc_admission"] is False
    assert "(cicc admission;" in _admission_reason(gated)
    assert "(--no-cicc-admission)" in _admission_reason(plain)
    whole, split = admission_costs(plain), admission_costs(gated)
    assert "cicc" not in whole
    bwd = next(u for u in model.units if u.name.endswith("flash_bwd_hdim256_fp16_sm80.cu"))
    name = bwd.name.rsplit("/", 1)[-1]
    costs = unit_costs(model, bwd, plain.nvcc_threads, 2)
    assert whole["units"][name] == costs.whole  # type: ignore[index]
    gated_costs = unit_costs(model, bwd, gated.nvcc_threads, 2)
    assert split["units"][name] == gated_costs.compile < gated_costs.whole / 3  # type: ignore[index]
    assert split["cicc"][name] == gated_costs.cicc  # type: ignore[index]
    assert "flash_api.cpp" not in split["cicc"]  # type: ignore[operator]
    assert split["units"]["flash_api.cpp"] == whole["units"]["flash_api.cpp"]  # type: ignore[index]
    # Both learn while the build runs, a profile's from its own costs; with cicc admission its
    # measured peaks are held against each unit's whole peak.
    assert whole["learn"] == split["learn"] == {"cold": 1.0}
    parts, wholes = split["units"], split["whole"]
    assert isinstance(parts, dict) and isinstance(wholes, dict) and "whole" not in whole
    assert set(wholes) == set(parts) and all(wholes[n] >= c for n, c in parts.items())
    blind = with_admission(plan_build(budget=64 * GIB, cpus=128, archs=2, model=default_model()))
    assert admission_costs(blind)["learn"] == {"cold": 2.0}


def test_admission_launches_twice_the_slots_as_lookahead_and_a_retry_halves_both() -> None:
    """16 CPUs, one nvcc thread: the wrapper admits at most 16 compiles at once and ninja launches 32, so that a
    unit that fits can pass one waiting for memory; the costs file carries the slots. After an
    OOM kill: 16 jobs, 8 slots, 3/4 of the budget, cicc admission kept. Where the units are fewer
    than twice the slots there is no cap that could bind, and the costs file has none."""
    from wheelbuild.plan.admission import LOOKAHEAD, admission_costs, with_admission

    model = flash_attn_model()
    one_thread = plan_build(budget=64 * GIB, cpus=16, archs=2, model=model, nvcc_threads=1)
    admitted = with_admission(one_thread, cicc_admission=True)
    assert (admitted.max_jobs, admitted.admission_slots) == (LOOKAHEAD * 16, 16)
    assert admission_costs(admitted)["slots"] == 16 and admitted.as_dict()["admission_slots"] == 16
    assert "at most 16 compiling at once" in _admission_reason(admitted)
    again = with_admission(admitted, keep_jobs=True)  # as learned.remember predicts a build that ran
    assert (again.max_jobs, again.admission_slots) == (32, 16)
    retry = admitted.halved()
    assert retry is not None and (retry.max_jobs, retry.admission_slots) == (16, 8) and retry.cicc_admission
    assert admission_costs(retry)["slots"] == 8
    wide = with_admission(plan_build(budget=64 * GIB, cpus=128, archs=2, model=model))
    assert wide.max_jobs == 73 and wide.admission_slots is None and "slots" not in admission_costs(wide)


def test_admission_keeps_given_jobs_and_halving_admits_less() -> None:
    from wheelbuild.plan.admission import with_admission

    static = plan_build(budget=64 * GIB, cpus=128, archs=2, model=flash_attn_model(), max_jobs=6)
    admitted = with_admission(static, keep_jobs=True)
    assert admitted.max_jobs == 6
    smaller = admitted.halved()
    assert smaller is not None and smaller.max_jobs == 3
    assert admitted.admission_budget is not None
    assert smaller.admission_budget == admitted.admission_budget * 3 // 4


def test_admission_chooses_nvcc_threads_by_the_build_behind_the_wrapper() -> None:
    """Memory for every unit at one thread, not at two: the static plan runs all at one thread,
    but with unit times spread, the slowest of 73 one-thread units outlasts a queue of two-thread
    ones, and admission takes two threads, as many jobs as the CPU rule allows."""
    from wheelbuild.plan.admission import SPREAD_DRAWS, WALL_SPREAD, with_admission
    from wheelbuild.plan.planner import OVERSUBSCRIBE

    model = flash_attn_model()
    static = plan_build(budget=container_limit(432 * 10**9, None), cpus=128, archs=2, model=model)
    assert static.nvcc_threads == 1
    admitted = with_admission(static)
    assert admitted.nvcc_threads == 2
    assert admitted.max_jobs == min(73, int(OVERSUBSCRIBE * 128) // 2)
    line = next(r for r in admitted.reasons if r.startswith("NVCC_THREADS=2 behind admission"))
    assert f"spread by {WALL_SPREAD:.0%} over {SPREAD_DRAWS} draws" in line and "1: " in line
    assert with_admission(static) == admitted  # seeded draws: the same plan every time
    # Where memory binds (64 GiB), the two are close: the shorter one wins.
    tight = with_admission(plan_build(budget=64 * GIB, cpus=128, archs=2, model=model))
    line = next(
        r for r in tight.reasons if r.startswith(f"NVCC_THREADS={tight.nvcc_threads} behind admission")
    )
    chosen = float(re.search(r"build, (\d+) s at", line)[1])  # type: ignore[index]
    other = float(re.search(r"vs \d: (\d+) s at", line)[1])  # type: ignore[index]
    assert chosen <= other


def test_admission_keeps_given_threads_and_jobs() -> None:
    from wheelbuild.plan.admission import with_admission

    budget = container_limit(432 * 10**9, None)
    model = flash_attn_model()
    threads = with_admission(plan_build(budget=budget, cpus=128, archs=2, model=model, nvcc_threads=1))
    assert threads.nvcc_threads == 1 and threads.max_jobs == 73
    given_jobs = plan_build(budget=budget, cpus=128, archs=2, model=model, max_jobs=10)
    jobs = with_admission(given_jobs)
    assert (jobs.max_jobs, jobs.nvcc_threads) == (10, given_jobs.nvcc_threads)
    assert not any("behind admission" in r for r in threads.reasons + jobs.reasons)


def test_a_plan_from_the_default_model_says_it_is_a_guess_and_a_measured_one_does_not() -> None:
    blind = plan_build(budget=20 * GIB, cpus=2, archs=1, model=DEFAULT)
    assert any(r.startswith("how sure: a guess: nothing of this package was measured") for r in blind.reasons)
    measured = plan_build(budget=20 * GIB, cpus=2, archs=1, model=FLASH_ATTN)
    assert not any(r.startswith("how sure:") for r in measured.reasons)


def _admission_reason(plan: Plan) -> str:
    """The admission plan's line saying what ninja launches and what each compile waits for."""
    return next(line for line in plan.reasons if line.startswith("admission: "))
