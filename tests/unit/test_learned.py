"""The model that learns from every build: per-unit memory from process snapshots
(host/unit_memory.py), the learned model and its record (plan/learned.py), and the plan that
uses it (preflight.model_for / plan_for). Process trees here are real ones of this host where
the reader is tested, and hand-made snapshots where the attribution is."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from wheelbuild.attempt.outcome import AttemptResult
from wheelbuild.host.unit_memory import (
    ProcessInfo,
    UnitMemory,
    UnitTracker,
    attribute,
    generates_code,
    read_processes,
    unit_of,
    waiting_for_admission,
)
from wheelbuild.pipeline.preflight import model_for, plan_for
from wheelbuild.plan.learned import (
    BuildMeasurement,
    LearnedRecord,
    learn,
    learned_path,
    learned_source,
    load_learned,
    record_from_json,
    save_learned,
)
from wheelbuild.plan.memory_model import GIB, MIB, UnitCost, default_model, parse_profile, wbdemo_model
from wheelbuild.plan.planner import plan_build
from wheelbuild.recipes import resolve_recipe
from wheelbuild.report.attempt_records import attempt_record
from wheelbuild.spec.build_spec import Resources

NVCC = ("/usr/local/cuda/bin/nvcc", "-O3", "-c", "/project/csrc/saxpy.cu", "-o", "/project/build/saxpy.o")


# ---------------------------------------------------------------------------------------------
# Which unit a process compiles


@pytest.mark.parametrize(
    ("argv", "unit"),
    [
        (NVCC, "saxpy"),
        (("sccache", *NVCC), "saxpy"),  # the client, as ninja starts it
        (("c++", "-c", "csrc/binding.cpp", "-o", "binding.o"), "binding"),
        (("cicc", "-arch", "compute_100", "/tmp/tmpxft_0000abcd_00000000-7_reduce.cpp1.ii"), "reduce"),
        (("ptxas", "-arch=sm_100", "/tmp/tmpxft_00001f2e_00000000-6_flash_fwd_hdim64_fp16_sm80.ptx"),
         "flash_fwd_hdim64_fp16_sm80"),
        # nvcc's own steps, as `nvcc --dryrun` lists them (nvcc 13.0)
        (("gcc", "-E", "-x", "c++", "-m64", "/project/csrc/scale.cu", "-o", "/tmp/tmpxft_9cb_00000000-5_scale.cpp4.ii"),
         "scale"),
        (("cicc", "--orig_src_file_name", "/project/csrc/scale.cu", "--orig_src_path_name", "/project/csrc/scale.cu"),
         "scale"),
        (("cc1plus", "-quiet", "/tmp/tmpxft_9cb_00000000-6_scale.cudafe1.cpp", "-dumpbase",
          "tmpxft_9cb_00000000-6_scale.cudafe1.cpp"), "scale"),
        # sccache 0.10 running nvcc's steps itself, as seen in a wbdemo build: the host compile
        # and its cc1plus name the unit; its folder's other files do not.
        (("/usr/bin/gcc", "-x", "c++", "-c", "-o", "/project/build/temp/csrc/scale.o", "-O3",
          "/tmp/sccache_nvcc1exYAZ/x_0.cudafe1.cpp"), "scale"),
        (("cc1plus", "-quiet", "/tmp/sccache_nvcc1exYAZ/x_0.cudafe1.cpp", "-dumpdir", "/project/build/temp/csrc/",
          "-dumpbase", "scale.cpp", "-o", "/tmp/ccvCdXhV.s"), "scale"),
        (("ptxas", "-arch=sm_100", "/tmp/sccache_nvcc1exYAZ/x_0.ptx", "-o", "/tmp/sccache_nvcc1exYAZ/x_0.sm_100.cubin"),
         None),
        (("ninja", "-v", "-j", "2"), None),
        (("python", "-c", "import torch"), None),  # -c with code, not a source
    ],
)  # fmt: skip
def test_unit_of_reads_the_source_or_nvccs_intermediates(argv: tuple[str, ...], unit: str | None) -> None:
    assert unit_of(argv) == unit


def test_a_process_counts_for_its_nearest_ancestor_that_names_a_unit() -> None:
    processes = [
        ProcessInfo(1, 0, 50 * MIB, ("sccache", "--start-server")),  # the server: no unit
        ProcessInfo(10, 1, 10 * MIB, NVCC),
        ProcessInfo(11, 10, 1 * MIB, ("sh", "-c", "cicc ...")),  # nvcc's shell: saxpy's
        ProcessInfo(12, 11, 300 * MIB, ("cicc", "-arch", "compute_100")),  # saxpy's too
        ProcessInfo(
            20, 1, 400 * MIB, ("cicc", "/tmp/tmpxft_1_00000000-7_reduce.cpp1.ii")
        ),  # split by sccache
        ProcessInfo(30, 0, 90 * MIB, ("ninja",)),
    ]
    assert attribute(processes) == {"saxpy": 311 * MIB, "reduce": 400 * MIB}


def test_sccaches_steps_of_one_unit_share_its_work_folder() -> None:
    # The server runs nvcc's steps as its own children: only some of them name the unit.
    folder = "/tmp/sccache_nvcc1exYAZ"
    processes = [
        ProcessInfo(1, 0, 50 * MIB, ("sccache",)),
        ProcessInfo(5, 1, 700 * MIB, ("ptxas", f"{folder}/x_0.ptx", "-o", f"{folder}/x_0.sm_100.cubin")),
        ProcessInfo(
            6,
            1,
            200 * MIB,
            ("cicc", "--orig_src_path_name", "/project/csrc/scale.cu", f"{folder}/x_0.cpp1.ii"),
        ),
        ProcessInfo(
            7, 1, 600 * MIB, ("ptxas", "/tmp/sccache_nvccOTHER/x_0.ptx")
        ),  # a folder nothing names yet
    ]
    assert attribute(processes) == {"scale": 900 * MIB}


@pytest.mark.parametrize(
    ("argv", "generates"),
    [
        (("/usr/local/cuda/nvvm/bin/cicc", "--orig_src_path_name", "x.cu"), True),
        (("ptxas", "-arch=sm_100", "x.ptx"), True),
        (("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", "-quiet", "x.cudafe1.cpp", "-o", "x.s"), True),
        (("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus", "-E", "-quiet", "x.cu"), False),  # sccache hashing
        (("sccache", "nvcc", "-c", "x.cu"), False),
        (("gcc", "-E", "x.cu"), False),
        ((), False),
    ],
)
def test_only_code_generators_mark_a_unit_compiled(argv: tuple[str, ...], generates: bool) -> None:
    assert generates_code(argv) is generates


def test_tracker_keeps_each_units_peak_per_python_and_the_overhead_at_the_peak() -> None:
    tracker = UnitTracker()
    saxpy = [ProcessInfo(10, 1, 300 * MIB, NVCC)]  # nvcc alone: sccache may yet answer it
    tracker.observe(1.0, "cp311", saxpy, working_set=1000 * MIB)
    tracker.observe(1.5, "cp311", [*saxpy, ProcessInfo(11, 10, 0, ("/nvvm/bin/cicc", "-arch"))], None)
    tracker.observe(2.0, "cp311", [ProcessInfo(10, 1, 500 * MIB, NVCC)], working_set=1400 * MIB)
    tracker.observe(3.0, "cp311", [ProcessInfo(10, 1, 200 * MIB, NVCC)], working_set=1100 * MIB)
    tracker.observe(9.0, "cp313", saxpy, working_set=900 * MIB)
    units, overhead = tracker.snapshot()
    assert units == (
        UnitMemory("cp311:saxpy", 500 * MIB, 1.0, 3.0, compiled=True),  # cicc worked for it once
        UnitMemory("cp313:saxpy", 300 * MIB, 9.0, 9.0, compiled=False),
    )
    assert overhead == 900 * MIB  # 1400 MiB at the peak, 500 of them saxpy's


def test_the_tracker_counts_the_ciccs_a_unit_ran_at_its_peak() -> None:
    """With cicc admission nvcc --threads 2 may run a unit's ciccs one at a time: what the
    model learns from its peak depends on how many ran then, so the worst sample's count is kept."""
    nvcc = ProcessInfo(10, 1, 100 * MIB, NVCC)

    def cicc(pid: int, rss_mib: int) -> ProcessInfo:
        return ProcessInfo(
            pid, 10, rss_mib * MIB, ("/nvvm/bin/cicc", "--orig_src_file_name", "/p/csrc/saxpy.cu")
        )

    gate = ProcessInfo(12, 10, 20 * MIB, ("python3", "/wb/wheelbuild-admit", "--cicc", "/nvvm/bin/cicc"))
    tracker = UnitTracker()
    tracker.observe(1.0, "cp311", [nvcc, cicc(11, 900), gate], None)  # one runs, one waits at the gate
    tracker.observe(2.0, "cp311", [nvcc, cicc(11, 1200)], None)  # the peak: one cicc
    tracker.observe(3.0, "cp311", [nvcc, cicc(13, 500), cicc(14, 500)], None)  # two, but less
    (one,), _ = tracker.snapshot()
    assert (one.peak, one.ciccs_at_peak) == (1300 * MIB, 1)
    tracker.observe(4.0, "cp311", [nvcc, cicc(13, 800), cicc(14, 800)], None)  # two, the new peak
    (two,), _ = tracker.snapshot()
    assert (two.peak, two.ciccs_at_peak) == (1700 * MIB, 2)


def test_a_units_time_leaves_out_its_waits_in_wheelbuild_admit() -> None:
    """Admission's waits are not the unit's cost: its compile waiting in the wrapper (no child
    yet), then one of its ciccs held at cicc admission (its admit process, no child yet).
    Here: waits at 0-4 and 9-11, working 5-8 and 12-13, so 13 s seen less 7 s waited."""
    wrapper = ProcessInfo(10, 1, 15 * MIB, ("python3", "/usr/local/bin/wheelbuild-admit", "sccache", *NVCC))
    nvcc = ProcessInfo(11, 10, 300 * MIB, ("sccache", *NVCC))
    gate = ProcessInfo(
        13, 11, 20 * MIB,
        ("python3", "/wb/wheelbuild-admit", "--cicc", "/nvvm/bin/cicc", "--orig_src_file_name", "/project/csrc/saxpy.cu"),
    )  # fmt: skip
    cicc = ProcessInfo(
        14, 13, 900 * MIB, ("/nvvm/bin/cicc", "--orig_src_file_name", "/project/csrc/saxpy.cu")
    )
    other = ProcessInfo(20, 1, 100 * MIB, ("c++", "-c", "csrc/binding.cpp", "-o", "binding.o"))
    tracker = UnitTracker()
    for at in range(14):
        if at <= 4:
            seen = [wrapper]
        elif at <= 8:
            seen = [wrapper, nvcc]
        elif at <= 11:
            seen = [wrapper, nvcc, gate]
        else:
            seen = [wrapper, nvcc, gate, cicc]
        waits = {10} if at <= 4 else {13} if 9 <= at <= 11 else set()
        assert waiting_for_admission([*seen, other]) == waits
        tracker.observe(float(at), "cp311", [*seen, other], None)
    units = {u.unit: u for u in tracker.snapshot()[0]}
    saxpy, binding = units["cp311:saxpy"], units["cp311:binding"]
    assert (saxpy.first_s, saxpy.last_s, saxpy.waited_s, saxpy.seen_s) == (0.0, 13.0, 7.0, 6.0)
    assert saxpy.peak == (15 + 300 + 20 + 900) * MIB and saxpy.compiled
    assert (binding.waited_s, binding.seen_s) == (0.0, 13.0)


def test_read_processes_sees_a_real_compile_like_process_with_its_parent_and_memory(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)", "-c", str(tmp_path / "kernel.cu")]
    )
    try:
        procs = tmp_path / "cgroup.procs"
        procs.write_text(f"{os.getpid()}\n{child.pid}\n999999999\n")  # the last one is gone
        for _ in range(50):  # until the child has exec'd python
            found = {p.pid: p for p in read_processes(tmp_path)}
            if child.pid in found and unit_of(found[child.pid].argv) == "kernel":
                break
            time.sleep(0.1)
        assert set(found) == {os.getpid(), child.pid}
        assert found[child.pid].ppid == os.getpid()
        assert found[child.pid].rss > 0
        assert attribute(found.values()) == {"kernel": found[child.pid].rss}
    finally:
        child.kill()
        child.wait()


# ---------------------------------------------------------------------------------------------
# Learning


def _build(**changes: object) -> BuildMeasurement:
    values: dict[str, object] = {
        "run_id": "run-1",
        # saxpy measured at 6x the built-in estimate (the fixture's heavy blob), seen 9 s;
        # relu only once: too short to trust.
        "units": (
            UnitMemory("cp311-manylinux_x86_64:saxpy", 1800 * MIB, 10.0, 19.0, compiled=True),
            UnitMemory("cp313-manylinux_x86_64:saxpy", 1500 * MIB, 40.0, 48.0, compiled=True),
            UnitMemory("cp311-manylinux_x86_64:relu", 100 * MIB, 30.0, 30.0, compiled=True),
            # scale: a cache hit, seen for 20 s but never compiled: its 20 MiB say nothing.
            UnitMemory("cp311-manylinux_x86_64:scale", 20 * MIB, 50.0, 70.0, compiled=False),
        ),
        "overhead": 700 * MIB,
        "measured_peak": 4200 * MIB,
        "predicted_peak": 1600 * MIB,
        "max_jobs": 2,
        "nvcc_threads": 1,
        "archs": (100, 120),
    }
    return BuildMeasurement(**{**values, **changes})  # type: ignore[arg-type]


def test_measured_units_take_their_cost_the_others_scale_never_below_their_old_cost() -> None:
    model = wbdemo_model()
    learned = learn(model, _build(), None, "13.1")
    assert learned is not None
    new, record = learned
    by_name = {u.name: u for u in new.units}
    old = {u.name: u for u in model.units}
    # The worst of its Pythons, exactly (before the model's margin).
    assert by_name["csrc/saxpy.cu"].peak(1, 2) == pytest.approx(1800 * MIB, rel=0.01)
    assert by_name["csrc/saxpy.cu"].wall(1, 2) == pytest.approx(10.0, rel=0.01)  # 9 s seen + a sample
    # Unmeasured kernels (relu: one sample only) scale by the measured kernel's ratio (9x);
    # the binding, host code none of which was measured (a cache hit), keeps its cost.
    for name in ("csrc/relu.cu", "csrc/scale.cu", "csrc/reduce.cu"):
        assert by_name[name].peak(1, 2) == pytest.approx(9 * old[name].peak(1, 2), rel=0.01)
    assert by_name["csrc/binding.cpp"] == old["csrc/binding.cpp"]
    assert new.reserve == 700 * MIB
    assert "learned from build run-1: 1 unit(s) measured" in new.source
    assert (record.units_measured, record.units_total) == (1, 5)
    assert record.predicted_after == new.peak_of_jobs(2, 1, 2)
    assert record.error_before() == pytest.approx(1600 / 4200 - 1)
    assert "learned from build run-1 (1 of 5 units measured)" in record.describe()


def test_a_peak_with_fewer_ciccs_than_nvcc_threads_is_learned_as_that_many_archs() -> None:
    """A build at NVCC_THREADS=2 with cicc admission whose saxpy peaked with one cicc running
    (the gate held the other arch's back): its 1800 MiB are one arch's peak. Read as two archs'
    at once they would halve what each cicc costs, and the next plan would admit twice the ciccs
    that fit; a unit that did peak with both is read as both."""
    model = wbdemo_model()

    def learned_saxpy(ciccs: int) -> UnitCost:
        units = (UnitMemory("cp311:saxpy", 1800 * MIB, 10.0, 19.0, compiled=True, ciccs_at_peak=ciccs),)
        learned = learn(model, _build(units=units, nvcc_threads=2), None, "13.1")
        assert learned is not None
        return next(u for u in learned[0].units if u.name == "csrc/saxpy.cu")

    one, both = learned_saxpy(1), learned_saxpy(2)
    assert one.peak(1, 2) == pytest.approx(1800 * MIB, rel=0.01)
    assert both.peak(2, 2) == pytest.approx(1800 * MIB, rel=0.01)
    # saxpy's fixed part is as large as its part per arch: two archs at once cost 3/2 of one.
    assert one.peak(2, 2) == pytest.approx(1.5 * both.peak(2, 2), rel=0.01)
    # Its time is the build's, at two threads, either way.
    assert one.wall(2, 2) == pytest.approx(10.0, rel=0.01) and both.wall(2, 2) == pytest.approx(
        10.0, rel=0.01
    )


def test_nothing_is_learned_without_a_measured_unit_or_a_unit_list() -> None:
    short = _build(units=(UnitMemory("cp311:saxpy", 900 * MIB, 3.0, 3.5, compiled=True),))
    assert learn(wbdemo_model(), short, None, "13.1") is None
    assert learn(default_model(), _build(), None, "13.1") is None


def test_the_learned_model_and_record_round_trip_through_the_cache(tmp_path: Path) -> None:
    learned = learn(wbdemo_model(), _build(), None, "13.1")
    assert learned is not None
    path = learned_path(tmp_path, "wbdemo", "0.1.0", "13.1", {})
    save_learned(path, *learned)
    loaded = load_learned(path, "wbdemo-0.1.0")
    assert loaded is not None
    model, record = loaded
    assert record == learned[1]
    assert [u.name for u in model.units] == [u.name for u in learned[0].units]
    assert model.peak_of_jobs(2, 1, 2) == pytest.approx(learned[0].peak_of_jobs(2, 1, 2), rel=0.01)
    # Which units were measured on this toolkit survives the file: saxpy alone.
    assert [u.name for u in model.units if u.measured] == ["csrc/saxpy.cu"]
    assert [u.measured for u in model.units] == [u.measured for u in learned[0].units]
    # A profile written before the "measured" column reads as measuring nothing.
    text = path.read_text().replace("\tmeasured\n", "\n").replace("\tyes\n", "\n").replace("\tno\n", "\n")
    old = parse_profile(text, name="old")
    assert [u.name for u in old.units] == [u.name for u in model.units] and not any(
        u.measured for u in old.units
    )
    # A damaged record is no record: the plan falls back to the other models.
    path.with_suffix(".json").write_text('{"run_id": 3}')
    assert load_learned(path, "wbdemo-0.1.0") is None


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", '{"run_id": "r"}', LearnedRecord("r", 1, 5, 2, 1, 0, 1, 1).to_json()],
    ids=["not-json", "a-list", "missing-fields", "zero-peak"],
)
def test_a_record_that_is_not_one_reads_as_none(text: str) -> None:
    assert record_from_json(text) is None


def test_the_next_plan_uses_the_learned_model_and_says_how_far_off_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", str(tmp_path))
    recipe = resolve_recipe("wbdemo")
    before = plan_for(recipe, (100, 120), Resources(memory=6 * GIB, cpus=2.0), toolkit="13.1")
    learned = learn(before.model, _build(), None, "13.1")
    assert learned is not None
    save_learned(learned_path(tmp_path, recipe.name, recipe.version, "13.1", {}), *learned)
    model, line = model_for(recipe, "13.1")
    assert model.source.startswith("learned from build run-1")
    after = plan_for(recipe, (100, 120), Resources(memory=6 * GIB, cpus=2.0), toolkit="13.1")
    assert after.reasons[-1] == line
    assert line is not None and "its plan predicted 1.6 GiB (-62%)" in line
    assert after.predicted_peak > before.predicted_peak  # saxpy and its kin cost more now
    # Another toolkit has learned nothing, nor has a build with other env.
    assert model_for(recipe, "12.8")[1] is None
    assert model_for(recipe.with_env({"WBDEMO_BLOB_ELEMENTS": "1500000"}), "13.1")[1] is None


def test_a_model_learned_from_other_units_is_left_aside_and_the_plan_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build of a trimmed source list (as the flash-attn subset test makes) learns a model of
    fewer units under the release's name; the next plan of the whole release must not use it."""
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", str(tmp_path))
    recipe = resolve_recipe("wbdemo")
    trimmed = replace(recipe.memory_model, units=recipe.memory_model.units[:3])
    before = plan_build(budget=6 * GIB, cpus=2.0, archs=2, model=trimmed, max_jobs=2, nvcc_threads=1)
    learned = learn(before.model, _build(), None, "13.1")
    assert learned is not None and len(learned[0].units) == 3
    save_learned(learned_path(tmp_path, recipe.name, recipe.version, "13.1", {}), *learned)
    model, line = model_for(recipe, "13.1")
    assert model == recipe.memory_model
    assert line is not None and line.startswith("left aside the model learned from build run-1")
    assert "its 3 units are not the recipe's 5" in line and ".learned.* to forget it" in line


# ---------------------------------------------------------------------------------------------
# The report: predicted against measured, per unit and over the build


def test_the_report_puts_each_units_measurement_beside_its_prediction(tmp_path: Path) -> None:
    plan = plan_build(budget=6 * GIB, cpus=2.0, archs=2, model=wbdemo_model(), max_jobs=2, nvcc_threads=1)
    ident = "cp311-manylinux_x86_64"
    result = AttemptResult(
        attempt=1, returncode=0, duration_s=60.0, wheels=(), memory_limit_seen=6 * GIB,
        log_path=tmp_path / "build.log", peak_memory=1500 * MIB, peak_memory_compile=1200 * MIB,
        unit_finished_s=((f"{ident}:saxpy.o", 20.0), (f"{ident}:relu.o", 30.0)),
        unit_memory=(
            UnitMemory(f"{ident}:saxpy", 300 * MIB, 10.0, 19.0, compiled=True),
            UnitMemory(f"{ident}:relu", 20 * MIB, 25.0, 29.0, compiled=False),  # a cache hit
        ),
        overhead_at_peak=800 * MIB,
    )  # fmt: skip
    record = attempt_record(plan, result, [])
    saxpy, relu = record.units
    predicted = plan.model.unit_peak(next(u for u in plan.model.units if "saxpy" in u.name), 1, 2)
    assert (saxpy.predicted_peak, saxpy.measured_peak, saxpy.measured_s) == (predicted, 300 * MIB, 10.0)
    assert (relu.measured_peak, relu.measured_s) == (None, None)  # a cache hit compiles nothing
    assert record.unit_error == round(abs(predicted / (300 * MIB) - 1), 3)
    assert record.peak_error == round(plan.predicted_peak / (1200 * MIB) - 1, 3)
    assert record.overhead_at_peak == 800 * MIB
    written = record.to_json()
    assert written["units"][1] == {"unit": f"{ident}:relu.o", "finished_s": 30.0,  # type: ignore[index]
                                   "predicted_peak": relu.predicted_peak, "predicted_s": relu.predicted_s}  # fmt: skip


def test_a_retry_counts_its_recompiled_units_one_by_one_from_the_compile_log(tmp_path: Path) -> None:
    """Attempt 1 finished saxpy.o and relu.o before its OOM kill. In attempt 2 sccache answered
    saxpy.o and compiled relu.o again (its cache entry was lost), and compiled scale.o and
    reduce.o for the first time: one unit recompiled. The old count from totals (misses 3 -
    (total 4 - finished before 2) = 1) agrees here by chance; it reads 0 when a hit of an
    unfinished unit hides the recompile, which the next case checks."""
    plan = plan_build(budget=6 * GIB, cpus=2.0, archs=2, model=wbdemo_model(), max_jobs=2, nvcc_threads=1)
    ident = "cp311-manylinux_x86_64"

    def result(attempt: int, finished: tuple[str, ...], cache: tuple[tuple[str, bool], ...]) -> AttemptResult:
        return AttemptResult(
            attempt=attempt, returncode=0 if attempt == 2 else 1, duration_s=60.0, wheels=(),
            memory_limit_seen=6 * GIB, log_path=tmp_path / "build.log", units_total=4,
            finished_units=tuple(f"{ident}:{u}" for u in finished), unit_cache=cache,
            cache_misses=sum(compiled for _, compiled in cache),
        )  # fmt: skip

    first = result(1, ("saxpy.o", "relu.o"), ())
    cache = ((f"{ident}:saxpy.o", False), (f"{ident}:relu.o", True), (f"{ident}:scale.o", True))
    second = result(2, ("saxpy.o", "relu.o", "scale.o", "reduce.o"), (*cache, (f"{ident}:reduce.o", True)))
    assert attempt_record(plan, second, [(plan, first)]).units_recompiled == 1
    # reduce.o a hit (another build had compiled it): misses 2 - (4 - 2) = 0 by the totals.
    hidden = result(2, ("saxpy.o", "relu.o", "scale.o", "reduce.o"), (*cache, (f"{ident}:reduce.o", False)))
    assert attempt_record(plan, hidden, [(plan, first)]).units_recompiled == 1
    # Without the compile log there is no count, rather than a guess.
    blind = result(2, ("saxpy.o", "relu.o", "scale.o", "reduce.o"), ())
    assert attempt_record(plan, blind, [(plan, first)]).units_recompiled is None


def test_a_models_source_says_how_many_builds_taught_it_and_does_not_grow_with_them() -> None:
    base = "measured on the fixture: .cu ~190 MB for two archs"
    first = learned_source(base, "run-1", 5)
    assert first == f"learned from build run-1: 5 unit(s) measured, scaling {base}"
    source = first
    for n in range(2, 30):
        source = learned_source(source, f"run-{n}", 1)
    assert source == f"learned from 29 builds, the newest run-29 (1 unit(s) measured), scaling {base}"
    # A model stored before, whose source chained one link per build, is read the same way.
    chained = f"learned from build b: 1 unit(s) measured, scaling learned from build a: 2 unit(s) measured, scaling {base}"
    assert learned_source(chained, "c", 3) == (
        f"learned from 3 builds, the newest c (3 unit(s) measured), scaling {base}"
    )
