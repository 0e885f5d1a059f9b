"""wheelbuild.attempt.buildlog: reading cibuildwheel's streamed log (lines taken from a real build.log)."""

from __future__ import annotations

from pathlib import Path

from wheelbuild.attempt.buildlog import MAX_STEPS, BuildLog, is_kill_line

from tests.reportkit import PYTHONS, step_done, two_python_log

REAL_LOG = Path(__file__).parents[1] / "fixtures" / "reports" / "wbdemo-build.log"

NVCC = (
    "  [{n}/5] /usr/local/cuda-13.1/nvidia/cu13/bin/nvcc -MD -MF "
    "/project/build/temp.linux-x86_64-cpython-311/csrc/{unit}.o.d -c -c /project/csrc/{unit}.cu "
    "-o /project/build/temp.linux-x86_64-cpython-311/csrc/{unit}.o --threads 2"
)


def feed(*lines: str) -> BuildLog:
    log = BuildLog()
    for line in lines:
        log.feed(line)
    return log


def test_ninja_lines_count_finished_units_of_the_current_python() -> None:
    log = feed(
        "Building cp311-manylinux_x86_64 wheel",
        NVCC.format(n=1, unit="reduce"),
        NVCC.format(n=2, unit="relu"),
    )
    assert (log.identifier, log.done, log.total) == ("cp311-manylinux_x86_64", 2, 5)
    assert log.finished_units == {"cp311-manylinux_x86_64": ["reduce.o", "relu.o"]}
    assert log.units_finished == 2
    assert log.units_total == 5


def test_a_second_python_restarts_the_count_and_adds_to_the_total() -> None:
    log = feed(
        "Building cp311-manylinux_x86_64 wheel",
        NVCC.format(n=5, unit="scale"),
        "Building cp312-manylinux_x86_64 wheel",
        NVCC.format(n=1, unit="scale"),
    )
    assert (log.identifier, log.done) == ("cp312-manylinux_x86_64", 1)
    assert log.units_total == 10
    assert log.units_finished == 2


def test_sccache_counts_are_read_per_unit_from_show_stats() -> None:
    # As sccache 0.16 printed it for wbdemo (4 .cu units and 1 .cpp), all compiled.
    log = feed(
        "Cache hits                                 0",
        "Cache misses                              25",
        "Cache misses (C/C++)                       1",
        "Cache misses (CUBIN)                       8",
        "Cache misses (CUDA)                        4",
        "Cache misses (CUDA (Device code))          4",
        "Cache misses (PTX)                         8",
        "Cache hits rate                         0.00 %",
    )
    assert (log.cache_hits, log.cache_misses) == (0, 5)


def test_a_cuda_unit_whose_device_code_recompiled_is_a_miss() -> None:
    # sccache 0.16 for wbdemo's second Python without SCCACHE_BASEDIRS: the nvcc calls "hit",
    # but cicc (PTX) ran again for every arch: the units were recompiled, and count so.
    log = feed(
        "Building cp313-manylinux_x86_64 wheel",
        "Cache hits                                 12",
        "Cache hits (CUBIN)                          8",
        "Cache hits (CUDA)                           4",
        "Cache misses                               13",
        "Cache misses (C/C++)                        1",
        "Cache misses (CUDA (Device code))           4",
        "Cache misses (PTX)                          8",
    )
    assert log.cache_by_identifier == {"cp313-manylinux_x86_64": (0, 5)}


def test_sccache_counts_are_kept_per_python() -> None:
    log = feed(
        "Building cp311-manylinux_x86_64 wheel",
        "Cache misses (C/C++)  1", "Cache misses (CUDA)  4", "Cache misses (CUDA (Device code))  4",
        "Building cp313-manylinux_x86_64 wheel",
        "Cache hits (CUDA)  4", "Cache hits (CUDA (Device code))  4", "Cache misses (C/C++)  1",
    )  # fmt: skip
    assert log.cache_by_identifier == {"cp311-manylinux_x86_64": (0, 5), "cp313-manylinux_x86_64": (4, 1)}
    assert (log.cache_hits, log.cache_misses) == (4, 6)


def test_sccache_hits_count_units_too() -> None:
    log = feed(
        "Cache hits                                 5", "Cache hits (C/C++)  1", "Cache hits (CUDA)  4"
    )
    assert (log.cache_hits, log.cache_misses) == (5, 0)


def test_memory_mark_is_read_back() -> None:
    assert (
        feed("wheelbuild: container memory limit: 4294967296 (asked 4294967296)").memory_limit_seen
        == 4294967296
    )
    assert feed("wheelbuild: container memory limit: max (asked 4294967296)").memory_limit_seen is None


def test_kill_lines_are_collected_but_echoed_commands_are_not() -> None:
    log = feed(
        "    + sh -c 'grep Killed log'",
        "nvcc error   : 'cicc' died due to signal 9 (Kill signal)",
        "Killed",
    )
    assert log.killed_lines == ["nvcc error   : 'cicc' died due to signal 9 (Kill signal)", "Killed"]
    assert not is_kill_line("    + sh -c 'grep Killed log'")


def test_build_steps_are_timed_from_building_to_repairing() -> None:
    log = BuildLog()
    log.feed("Running before_build...", now=10.0)
    log.feed("Building wheel...", now=40.0)
    log.feed(NVCC.format(n=1, unit="relu"), now=45.0)
    log.feed("Repairing wheel...", now=52.5)
    assert log.build_seconds == 12.5


def test_build_steps_are_timed_per_python_too() -> None:
    log = BuildLog()
    for identifier, start, end in (
        ("cp311-manylinux_x86_64", 0.0, 30.0),
        ("cp313-manylinux_x86_64", 40.0, 46.0),
    ):
        log.feed(f"Building {identifier} wheel", now=start)
        log.feed("Building wheel...", now=start + 1)
        log.feed("Repairing wheel...", now=end)
    assert log.build_seconds_by_identifier == {"cp311-manylinux_x86_64": 29.0, "cp313-manylinux_x86_64": 5.0}
    assert log.build_seconds == 34.0


def test_a_unit_ninja_reports_failed_is_not_finished() -> None:
    # From a real OOM-killed attempt: ninja prints the [n/N] line of a failed unit too.
    log = feed(
        "Building cp311-manylinux_x86_64 wheel",
        NVCC.format(n=1, unit="scale"),
        NVCC.format(n=2, unit="reduce"),
        "  FAILED: [code=254] /project/build/temp.linux-x86_64-cpython-311/csrc/reduce.o",
        "  gcc: fatal error: Killed signal terminated program cc1plus",
    )
    assert log.finished_units == {"cp311-manylinux_x86_64": ["scale.o"]}
    assert log.killed_lines == ["gcc: fatal error: Killed signal terminated program cc1plus"]


def test_cibuildwheel_steps_are_followed() -> None:
    log = feed("Setting up build environment...", "Running before_build...")
    assert log.step == "Running before_build"
    log.feed("    + sh -c 'pip install ...'")
    log.feed("Building wheel...")
    assert log.step == "Building wheel"


# -- cibuildwheel's steps, timed: the report's phases --------------------------------------------


def test_cibuildwheel_steps_are_timed_per_python_from_step_line_to_its_check_mark() -> None:
    log = two_python_log()  # cibuildwheel's lines for cp311 then cp313, fed with their times
    found = [(s.identifier, s.step, s.start, s.end) for s in log.steps]
    cp311, cp313 = PYTHONS
    assert found == [
        (None, "Copying project into container", 0.0, 1.0),
        (None, "Running before_all", 1.0, 2.0),
        (cp311, "Setting up build environment", 2.0, 6.0),
        (cp311, "Running before_build", 6.0, 90.0),
        (cp311, "Building wheel", 90.0, 300.0),
        (cp311, "Repairing wheel", 300.0, 310.0),
        (cp313, "Setting up build environment", 312.0, 316.0),
        (cp313, "Running before_build", 316.0, 400.0),
        (cp313, "Building wheel", 400.0, 610.0),
        (cp313, "Repairing wheel", 610.0, 620.0),
        (None, "Copying wheels back to host", 620.0, 622.0),  # ended by end_step: the attempt's end
    ]


def test_a_step_ends_at_the_next_one_or_at_the_attempts_end_when_it_prints_no_check_mark() -> None:
    log = BuildLog()
    log.feed("Building cp311-manylinux_x86_64 wheel", 0.0)
    log.feed("Running before_build...", 1.0)
    log.feed("Building wheel...", 30.0)  # no "✓" between: the step before ends here
    log.feed(NVCC.format(n=1, unit="relu"), 35.0)
    assert [(s.step, s.end) for s in log.steps] == [("Running before_build", 30.0), ("Building wheel", None)]
    log.end_step(41.0)  # the attempt ended (an OOM kill) while compiling
    assert log.steps[-1].end == 41.0


def test_the_packages_own_output_of_a_steps_shape_starts_no_phase() -> None:
    log = BuildLog()
    log.feed("Building cp311-manylinux_x86_64 wheel", 0.0)
    log.feed("Building wheel...", 1.0)
    for line in (
        "Compiling objects...",
        "  Building wheel...",
        "Building wheel",
        "Emitting ninja build file...",
    ):
        log.feed(line, 2.0)
    assert [(s.step, s.start, s.end) for s in log.steps] == [("Building wheel", 1.0, None)]


def test_the_steps_kept_are_bounded_whatever_the_log_prints() -> None:
    log = BuildLog()
    for i in range(3 * MAX_STEPS):
        log.feed("Building wheel...", float(i))
    assert len(log.steps) == MAX_STEPS


def test_steps_fed_without_a_time_are_not_timed() -> None:
    assert (
        feed("Building cp311-manylinux_x86_64 wheel", "Running before_build...", step_done(3.0)).steps == []
    )


def test_the_steps_of_a_real_build_log_are_found_with_the_line_each_began_and_ended_on() -> None:
    """scripts/example's real build.log (the run of tests/fixtures/reports/wbdemo-torch-range.json),
    fed with each line's number as its time: every step cibuildwheel ran, from its line to its ✓."""
    log = BuildLog()
    lines = REAL_LOG.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        log.feed(line, float(number))
    log.end_step(float(len(lines)))
    cp311 = "cp311-manylinux_x86_64"
    assert [(s.identifier, s.step, s.start, s.end) for s in log.steps] == [
        (None, "Copying project into container", 119.0, 124.0),
        (None, "Running before_all", 125.0, 132.0),
        (cp311, "Setting up build environment", 137.0, 147.0),
        (cp311, "Running before_build", 148.0, 160.0),  # torch from the machine's cache
        (cp311, "Building wheel", 161.0, 217.0),
        (cp311, "Repairing wheel", 218.0, 276.0),
        (None, "Copying wheels back to host", 282.0, 286.0),
    ]
