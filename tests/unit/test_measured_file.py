"""What the engine's watcher shares with the admission wrapper while a build compiles: each unit's
memory, measured, in a file beside the wrapper's ledger (unit_memory.measured_now and
write_measured). Process snapshots in, as the watcher takes them from /proc; a real file out."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

from wheelbuild.attempt.config import ADMIT_DIR, AttemptConfig, cibuildwheel_env
from wheelbuild.host.unit_memory import (
    MEASURED_FILE,
    MEASURED_MAX_UNITS,
    ProcessInfo,
    UnitTracker,
    measured_now,
    write_measured,
)

from tests.unit.test_engine_env import _create_args

MIB = 1024**2
PY = "cp311-manylinux_x86_64"


def _compile(pid: int, source: str, rss: int) -> list[ProcessInfo]:
    """A unit's wrapper (wheelbuild-admit, waiting on its child) and its compiler, cc1plus."""
    wrapper = ProcessInfo(pid, 1, 10 * MIB, ("/usr/local/bin/wheelbuild-admit", "c++", "-c", source))
    compiler = ProcessInfo(pid + 1, pid, rss, ("/usr/lib/gcc/cc1plus", "-dumpbase", source))
    return [wrapper, compiler]


def test_each_compiling_unit_is_shared_with_what_it_holds_now_its_peak_and_whether_it_is_over() -> None:
    tracker = UnitTracker()
    tracker.observe(
        1.0, PY, [*_compile(10, "src/a.cpp", 300 * MIB), *_compile(20, "src/b_1.cu", 100 * MIB)], None
    )
    tracker.observe(2.0, PY, _compile(20, "src/b_1.cu", 400 * MIB), None)
    assert measured_now(tracker, PY) == {
        "units": {
            "a": {"held": 0, "peak": 310 * MIB, "done": True},  # not seen at the last sample: over
            "b_1": {"held": 410 * MIB, "peak": 410 * MIB, "done": False},
        }
    }
    # The next Python's build starts from what this one measured: each unit over, at its peak.
    tracker.observe(3.0, "cp312-manylinux_x86_64", _compile(30, "src/a.cpp", 200 * MIB), None)
    assert measured_now(tracker, "cp312-manylinux_x86_64") == {
        "units": {
            "b_1": {"held": 0, "peak": 410 * MIB, "done": True},
            "a": {"held": 210 * MIB, "peak": 210 * MIB, "done": False},  # its own, compiling now
        }
    }


def test_a_unit_seen_only_preprocessing_says_nothing_of_its_compile() -> None:
    """A cache hit: sccache preprocesses to hash, and no compiler runs; its memory is no measure."""
    tracker = UnitTracker()
    hit = ProcessInfo(11, 10, 50 * MIB, ("/usr/bin/cc1plus", "-E", "-dumpbase", "hit.cpp"))
    tracker.observe(1.0, PY, [hit, *_compile(20, "real.cpp", 200 * MIB)], None)
    units = measured_now(tracker, PY)["units"]
    assert isinstance(units, dict) and set(units) == {"real"}


def test_the_file_is_bounded_to_the_units_seen_last() -> None:
    tracker = UnitTracker()
    for n in range(MEASURED_MAX_UNITS + 5):
        tracker.observe(float(n), PY, _compile(10 + 2 * n, f"u{n}.cpp", MIB), None)
    units = measured_now(tracker, PY)["units"]
    assert isinstance(units, dict) and len(units) == MEASURED_MAX_UNITS
    assert "u4" not in units and "u5" in units and f"u{MEASURED_MAX_UNITS + 4}" in units


def test_the_file_is_replaced_whole_so_a_reader_never_sees_a_part(tmp_path: Path) -> None:
    big = {"units": {f"unit_{n}": {"held": n, "peak": n, "done": False} for n in range(MEASURED_MAX_UNITS)}}
    small: dict[str, object] = {"units": {}}
    write_measured(tmp_path, small)
    stop, seen = threading.Event(), []

    def read() -> None:
        while not stop.is_set():
            seen.append(json.loads((tmp_path / MEASURED_FILE).read_text()))  # raises on a part

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(50):
        write_measured(tmp_path, big)
        write_measured(tmp_path, small)
    stop.set()
    reader.join()
    assert seen and all(s in (big, small) for s in seen)
    assert [p.name for p in tmp_path.iterdir()] == [MEASURED_FILE]  # no temporary left


def test_the_shared_folder_is_mounted_as_the_ledgers_and_named_to_the_wrapper(
    make_config: Callable[..., AttemptConfig], tmp_path: Path
) -> None:
    folder = tmp_path / "admit-1"
    admitted = cibuildwheel_env(make_config(admission=(1024 * MIB, "{}"), admit_dir=folder))
    assert f"--volume={folder}:{ADMIT_DIR}" in _create_args(admitted)
    assert f"WHEELBUILD_ADMIT_DIR={ADMIT_DIR}" in admitted["CIBW_ENVIRONMENT_LINUX"]
    rule = (Path(__file__).parents[2] / "builder" / "plan" / "online.py").resolve()
    assert f"--volume={rule}:/usr/local/bin/wheelbuild_online.py:ro" in _create_args(admitted)
    plain = cibuildwheel_env(make_config(admit_dir=folder))  # no admission: no ledger to share
    assert not any(ADMIT_DIR in arg for arg in _create_args(plain))
