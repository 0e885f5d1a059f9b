"""builder.planner: properties of the simple plan that must hold for every input."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from builder.planner import GIB, HOST_RESERVE, default_memory, plan_build

MIB = 1024**2
memories = st.integers(min_value=256 * MIB, max_value=2048 * GIB)
cpus = st.floats(min_value=0.1, max_value=512, allow_nan=False, allow_infinity=False)
archs = st.integers(min_value=1, max_value=8)
per_arch = st.integers(min_value=64 * MIB, max_value=32 * GIB)
counts = st.integers(min_value=1, max_value=64)


@settings(max_examples=300, deadline=None)
@given(memory=memories, cpus=cpus, archs=archs, per_arch=per_arch)
def test_plan_always_gives_at_least_one_job(memory: int, cpus: float, archs: int, per_arch: int) -> None:
    plan = plan_build(memory=memory, cpus=cpus, archs=archs, job_memory_per_arch=per_arch)
    assert plan.max_jobs >= 1
    assert plan.nvcc_threads >= 1


@settings(max_examples=300, deadline=None)
@given(memory=memories, cpus=cpus, archs=archs, per_arch=per_arch)
def test_default_nvcc_threads_never_exceed_archs_nor_two(
    memory: int, cpus: float, archs: int, per_arch: int
) -> None:
    plan = plan_build(memory=memory, cpus=cpus, archs=archs, job_memory_per_arch=per_arch)
    assert plan.nvcc_threads <= archs
    assert plan.nvcc_threads == min(archs, 2)


@settings(max_examples=300, deadline=None)
@given(
    memory=memories,
    extra=st.integers(min_value=0, max_value=512 * GIB),
    cpus=cpus,
    archs=archs,
    per_arch=per_arch,
)
def test_more_memory_never_gives_fewer_jobs(
    memory: int, extra: int, cpus: float, archs: int, per_arch: int
) -> None:
    less = plan_build(memory=memory, cpus=cpus, archs=archs, job_memory_per_arch=per_arch)
    more = plan_build(memory=memory + extra, cpus=cpus, archs=archs, job_memory_per_arch=per_arch)
    assert more.max_jobs >= less.max_jobs


@settings(max_examples=300, deadline=None)
@given(
    memory=memories,
    cpus=cpus,
    archs=archs,
    per_arch=per_arch,
    threads=st.one_of(st.none(), counts),
)
def test_several_jobs_never_exceed_memory_under_the_plans_own_model(
    memory: int, cpus: float, archs: int, per_arch: int, threads: int | None
) -> None:
    plan = plan_build(
        memory=memory, cpus=cpus, archs=archs, job_memory_per_arch=per_arch, nvcc_threads=threads
    )
    per_job = per_arch * min(plan.nvcc_threads, archs)
    if plan.max_jobs > 1:
        assert plan.max_jobs * per_job <= memory


@settings(max_examples=300, deadline=None)
@given(memory=memories, cpus=cpus, archs=archs, per_arch=per_arch)
def test_jobs_never_exceed_whole_cpus(memory: int, cpus: float, archs: int, per_arch: int) -> None:
    plan = plan_build(memory=memory, cpus=cpus, archs=archs, job_memory_per_arch=per_arch)
    assert plan.max_jobs <= max(1, int(cpus))


@settings(max_examples=200, deadline=None)
@given(memory=memories, cpus=cpus, archs=archs, per_arch=per_arch, jobs=counts, threads=counts)
def test_given_max_jobs_and_nvcc_threads_are_respected(
    memory: int, cpus: float, archs: int, per_arch: int, jobs: int, threads: int
) -> None:
    plan = plan_build(
        memory=memory,
        cpus=cpus,
        archs=archs,
        job_memory_per_arch=per_arch,
        max_jobs=jobs,
        nvcc_threads=threads,
    )
    assert (plan.max_jobs, plan.nvcc_threads) == (jobs, threads)
    assert plan.memory == memory
    assert plan.cpus == cpus
    assert plan.reasons == (f"NVCC_THREADS={threads}: given", f"MAX_JOBS={jobs}: given")


def test_plan_for_flash_attn_on_64_gib_and_32_cpus_is_four_jobs_of_two_threads() -> None:
    plan = plan_build(memory=64 * GIB, cpus=32, archs=2, job_memory_per_arch=int(7.2 * GIB))
    assert (plan.max_jobs, plan.nvcc_threads) == (4, 2)
    assert plan.reasons == (
        "NVCC_THREADS=2: min(archs=2, 2)",
        "MAX_JOBS=4: min(cpus=32, memory 64.0 GiB / 14.4 GiB per job = 4), at least 1",
    )


def test_plan_below_one_job_of_memory_still_runs_one_job() -> None:
    plan = plan_build(memory=4 * GIB, cpus=16, archs=2, job_memory_per_arch=int(7.2 * GIB))
    assert plan.max_jobs == 1


def test_fractional_cpus_below_one_still_give_one_job() -> None:
    plan = plan_build(memory=64 * GIB, cpus=0.5, archs=1, job_memory_per_arch=GIB)
    assert plan.max_jobs == 1


@settings(max_examples=300, deadline=None)
@given(available=st.integers(min_value=0, max_value=4096 * GIB))
def test_default_memory_is_never_below_one_gib_and_is_page_aligned(available: int) -> None:
    memory = default_memory(available)
    assert memory >= GIB
    assert memory % 4096 == 0
    assert memory <= max(GIB, available - HOST_RESERVE)


def test_default_memory_leaves_two_gib_to_the_host() -> None:
    assert default_memory(64 * GIB) == 62 * GIB
    assert default_memory(64 * GIB + 4095) == 62 * GIB
    assert default_memory(2 * GIB) == GIB
    assert default_memory(0) == GIB
