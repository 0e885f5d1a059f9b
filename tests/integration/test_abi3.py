"""One wheel for every Python: the bundled example in abi3 mode (WBDEMO_ABI3=1, a limited-API
binding), built for two Pythons with real Docker, real nvcc 13.1 and real torch. cibuildwheel
builds it under the first Python and reuses it for the second; the gate loads it under both."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from wheelbuild.attempt.buildlog import BuildLog
from wheelbuild.wheel.abi3 import stable_abi
from wheelbuild.wheel.contents import archs_in_wheel

from tests.integration.conftest import TORCH_INDEX, newest_cu130, wheelbuild

FIRST, SECOND = "cp311-manylinux_x86_64", "cp313-manylinux_x86_64"


@pytest.fixture(scope="module")
def abi3_build(cuda_image: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict]:
    out = tmp_path_factory.mktemp("abi3")
    result = wheelbuild(
        "build", "wbdemo", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--archs", "100,120",
        "--python", "3.11", "--python", "3.13", "--memory", "4g", "--output-dir", str(out),
        "--env", "WBDEMO_ABI3=1",
        # A salt no cache has seen: the first Python really compiles its kernels.
        "--env", "WBDEMO_BLOB_ELEMENTS=1000", "--env", f"WBDEMO_BLOB_SALT={uuid.uuid4().hex}",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    run_dir = out / "runs" / result.run_id
    return result.stdout, run_dir, json.loads((run_dir / "build-report.json").read_text())


def test_two_pythons_get_exactly_one_abi3_wheel_with_sm100_and_sm120_code(
    abi3_build: tuple[str, Path, dict],
) -> None:
    stdout, run_dir, report = abi3_build
    (wheel,) = sorted(run_dir.glob("*.whl"))
    # torch 2.11 compiles a py_limited_api extension for CPython 3.10's limited API, and the
    # fixture tags the wheel with what the binary uses.
    assert wheel.name.startswith(f"wbdemo-0.1.0+{newest_cu130().label}-cp310-abi3-manylinux"), wheel.name
    abi = stable_abi(wheel.name)
    assert abi is not None and abi.tag == "cp310-abi3"
    # The project's own checker reads the .nv_fatbin of the one extension module.
    modules = archs_in_wheel(wheel)
    assert set(modules) == {"wbdemo/_C.abi3.so"}
    assert modules["wbdemo/_C.abi3.so"].sass == {100, 120}
    assert [w["file"] for w in report["wheels"]] == [wheel.name]
    assert report["wheels"][0]["extension_modules"]["wbdemo/_C.abi3.so"]["sass"] == [100, 120]
    assert report["checks"] == []
    assert "cp310-abi3: one wheel for every Python; built under cp311, reused under cp313" in stdout


def test_the_second_python_reused_the_first_ones_wheel_and_the_gate_loaded_it_under_both(
    abi3_build: tuple[str, Path, dict],
) -> None:
    _stdout, run_dir, report = abi3_build
    (wheel,) = sorted(run_dir.glob("*.whl"))
    (attempt,) = report["attempts"]
    # cibuildwheel built under cp311 only ("Building wheel..." once) and gave cp313 that wheel.
    assert set(attempt["build_s_by_python"]) == {FIRST}
    assert set(attempt["reused_by_python"]) == {SECOND}
    assert stable_abi(attempt["reused_by_python"][SECOND]) == stable_abi(wheel.name)
    assert report["abi3"] == [
        {
            "wheel": wheel.name,
            "tag": "cp310-abi3",
            "built_under": "cp311",
            "reused_under": ["cp313"],
            "gated_under": ["cp311", "cp313"],
        }
    ]
    page = (run_dir / "build-report.html").read_text()
    assert (
        "cp310-abi3: one wheel for every Python; built under cp311; reused under cp313; gated under cp311, cp313"
        in page
    )
    # The one wheel installed and imported in a fresh base container under each Python.
    gates = [(g["wheel"], g["python"], g["passed"]) for g in report["gate"]]
    assert gates == [(wheel.name, "cp311", True), (wheel.name, "cp313", True)]
    for gate in report["gate"]:
        assert [i["module"] for i in gate["imports"] if i["ok"]] == ["wbdemo._C", "wbdemo"]
    # The gate's log says which interpreter each venv was made with.
    log = (run_dir / "gate.log").read_text()
    assert log.count(f"=== import gate: {wheel.name}") == 2
    assert "Failed to initialize NumPy" not in log  # torch's warning, quieted: the gate has no numpy


def test_the_report_times_each_pythons_steps_then_the_gate_and_the_page_shades_them(
    abi3_build: tuple[str, Path, dict],
) -> None:
    _stdout, run_dir, report = abi3_build
    (attempt,) = report["attempts"]
    phases = [(p["python"], p["step"]) for p in attempt["phases"]]
    # cp311 installed torch, compiled and repaired; cp313 reused its wheel: set up, nothing more.
    for step in ("Running before_build", "Building wheel", "Repairing wheel"):
        assert (FIRST, step) in phases and (SECOND, step) not in phases, phases
    assert (SECOND, "Setting up build environment") in phases
    starts = [p["start_s"] for p in attempt["phases"]]
    assert starts == sorted(starts) and all(p["start_s"] <= p["end_s"] for p in attempt["phases"])
    # wheelbuild's own phases follow the attempt, on its clock.
    gate = next(p for p in attempt["phases"] if p["step"] == "import gate")
    assert gate["start_s"] >= attempt["duration_s"] and gate["python"] is None
    compile_phase = next(p for p in attempt["phases"] if p["step"] == "Building wheel")
    assert compile_phase["end_s"] - compile_phase["start_s"] == pytest.approx(attempt["build_s"], abs=1.0)
    page = (run_dir / "build-report.html").read_text()
    for label in ("cp311 torch install", "cp311 compile", "cp311 repair", "cp313 setup", "import gate"):
        assert f'data-phase="{label}"' in page, label
    assert '<a href="build.log">build.log</a>' in page and '<a href="gate.log">gate.log</a>' in page
    assert "compile&#x27;s peak" in page  # the model against the compile's peak


def test_the_second_python_costs_a_fifth_of_the_first_or_less(abi3_build: tuple[str, Path, dict]) -> None:
    _stdout, run_dir, report = abi3_build
    (attempt,) = report["attempts"]
    seconds = attempt["python_s_by_python"]
    first, second = seconds[FIRST], seconds[SECOND]
    # The report's figures are the build log's, read again here from its own lines' order.
    assert first > 0 and second > 0, seconds
    ratio = second / first
    print(f"abi3 fixture, per-Python time in cibuildwheel: {FIRST} {first} s, {SECOND} {second} s, "
          f"second / first = {ratio:.3f}")  # fmt: skip
    assert ratio <= 0.2, seconds
    # The reused Python compiled nothing: no ninja unit was counted under it.
    replay = BuildLog()
    for line in (run_dir / "build.log").read_text().splitlines():
        replay.feed(line)
    assert SECOND not in replay.finished_units and FIRST in replay.finished_units
    assert replay.reused_wheels == attempt["reused_by_python"]
