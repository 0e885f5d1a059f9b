"""The in-container scripts of images/, each run alone on this host with `sh` and a stub
environment (a cgroup fixture tree, a stub compiler, stub Pythons and pip): what the engine
bind-mounts into a container does what the engine then reads back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from wheelbuild.engine.containers import script_volume
from wheelbuild.engine.unit_compile import CALIBRATE_MARK, parse_unit_report
from wheelbuild.errors import ImageInputsMissing
from wheelbuild.image.inputs import IMAGES_DIR


def _sh(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(IMAGES_DIR / script), *args],
        env={"PATH": os.environ["PATH"], **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _stub(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


# ---------------------------------------------------------------------------------------------
# wheelbuild-memory-limit (doctor's probe)


def test_memory_limit_reads_cgroup_v2_memory_max(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("67108864\n")
    done = _sh("wheelbuild-memory-limit", env={"WHEELBUILD_CGROUP_ROOT": str(tmp_path)})
    assert (done.returncode, done.stdout.strip()) == (0, "67108864")


def test_memory_limit_falls_back_to_cgroup_v1(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("67108864\n")
    done = _sh("wheelbuild-memory-limit", env={"WHEELBUILD_CGROUP_ROOT": str(tmp_path)})
    assert (done.returncode, done.stdout.strip()) == (0, "67108864")


def test_memory_limit_without_a_memory_cgroup_fails(tmp_path: Path) -> None:
    assert _sh("wheelbuild-memory-limit", env={"WHEELBUILD_CGROUP_ROOT": str(tmp_path)}).returncode != 0


# ---------------------------------------------------------------------------------------------
# wheelbuild-calibrate-unit (one unit compiled alone)


def _cgroup_v1(root: Path, peak: int, ooms: int) -> None:
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "memory.max_usage_in_bytes").write_text(f"{peak}\n")
    (root / "memory" / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {ooms}\n")


def test_calibrate_unit_runs_the_compiler_with_pythons_include_and_reports_its_cost(tmp_path: Path) -> None:
    _cgroup_v1(tmp_path / "cg", peak=2_500_000_000, ooms=0)
    argv = tmp_path / "argv"
    nvcc = _stub(tmp_path / "nvcc", f'printf "%s\\n" "$@" > {argv}; echo compiling\n')
    started = time.monotonic()
    done = _sh(
        "wheelbuild-calibrate-unit", str(nvcc), "-c", "/src/csrc/unit.cu",
        env={"WHEELBUILD_CGROUP_ROOT": str(tmp_path / "cg"), "PYTHON": sys.executable},
    )  # fmt: skip
    ran_s = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    include = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert argv.read_text().splitlines() == ["-c", "/src/csrc/unit.cu", f"-I{include}"]
    lines = done.stdout.splitlines()
    assert lines[-1].startswith(CALIBRATE_MARK)
    result = parse_unit_report(lines, 0)
    assert (result.returncode, result.peak, result.oom) == (0, 2_500_000_000, False)
    assert 0 <= result.wall_s <= ran_s  # the compiler's time, measured within the script's run


def test_calibrate_unit_raises_the_units_standard_to_what_the_torch_headers_require(tmp_path: Path) -> None:
    """A torch whose ATen.h demands C++20 (2.14's guard): the unit's -std=c++17 reaches nvcc as
    -std=c++20, through wheelbuild-cxx, as in a build."""
    _cgroup_v1(tmp_path / "cg", peak=1, ooms=0)
    aten = tmp_path / "torch-here" / "torch" / "include" / "ATen"
    aten.mkdir(parents=True)
    (aten.parents[2] / "__init__.py").write_text("raise SystemExit('torch is never imported')\n")
    (aten / "ATen.h").write_text(
        "#if !defined(__cplusplus) || __cplusplus < 202002L\n#error C++20 or later compatible compiler is required\n#endif\n"
    )
    argv = tmp_path / "argv"
    nvcc = _stub(tmp_path / "nvcc", f'printf "%s\\n" "$@" > {argv}\n')
    done = _sh(
        "wheelbuild-calibrate-unit", str(nvcc), "-std=c++17", "-Xcompiler", "-std=c++17", "-c", "u.cu",
        env={
            "WHEELBUILD_CGROUP_ROOT": str(tmp_path / "cg"), "PYTHON": sys.executable,
            "WHEELBUILD_TORCH_HEADERS": str(tmp_path / "torch-here"),
            "WHEELBUILD_CXX_SCRIPT": str(IMAGES_DIR / "wheelbuild-cxx"), "TMPDIR": str(tmp_path),
        },
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert argv.read_text().splitlines()[:4] == ["-std=c++20", "-Xcompiler", "-std=c++20", "-c"]


def test_calibrate_unit_reports_a_compiler_killed_at_the_limit_as_an_oom(tmp_path: Path) -> None:
    _cgroup_v1(tmp_path / "cg", peak=4_000_000_000, ooms=1)
    nvcc = _stub(tmp_path / "nvcc", "exit 137\n")
    done = _sh(
        "wheelbuild-calibrate-unit", str(nvcc),
        env={"WHEELBUILD_CGROUP_ROOT": str(tmp_path / "cg"), "PYTHON": sys.executable},
    )  # fmt: skip
    result = parse_unit_report(done.stdout.splitlines(), done.returncode)
    assert (result.returncode, result.peak, result.oom) == (137, 4_000_000_000, True)


def test_calibrate_unit_reads_cgroup_v2_peak_and_events(tmp_path: Path) -> None:
    (tmp_path / "memory.peak").write_text("123456\n")
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
    nvcc = _stub(tmp_path / "bin" / "nvcc", "exit 1\n")
    done = _sh(
        "wheelbuild-calibrate-unit",
        str(nvcc),
        env={"WHEELBUILD_CGROUP_ROOT": str(tmp_path), "PYTHON": sys.executable},
    )
    result = parse_unit_report(done.stdout.splitlines(), done.returncode)
    assert (result.returncode, result.peak, result.oom) == (1, 123456, True)


# ---------------------------------------------------------------------------------------------
# wheelbuild-gate-python (the gate under the wheel's Python)


def test_gate_python_runs_the_gate_under_the_wheels_python(tmp_path: Path) -> None:
    _stub(tmp_path / "bin" / "python3.12", 'echo "python3.12 $*"\n')
    _stub(tmp_path / "bin" / "python3.11", 'echo "python3.11 $*"\n')
    done = _sh(
        "wheelbuild-gate-python", "/usr/local/bin/wheelbuild-gate", "spec.json", "out.json",
        env={"WB_PYTHON": "cp312", "WHEELBUILD_PYTHON_DIRS": f"{tmp_path / 'none'} {tmp_path / 'bin'}"},
    )  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (
        0,
        "python3.12 /usr/local/bin/wheelbuild-gate spec.json out.json",
    )


def test_gate_python_without_that_python_exits_3_saying_so(tmp_path: Path) -> None:
    _stub(tmp_path / "bin" / "python3.11", "echo wrong\n")
    done = _sh(
        "wheelbuild-gate-python",
        "gate",
        env={"WB_PYTHON": "cp313", "WHEELBUILD_PYTHON_DIRS": str(tmp_path / "bin")},
    )
    assert done.returncode == 3
    assert done.stdout == ""
    assert "the base image has no Python 3.13" in done.stderr


# ---------------------------------------------------------------------------------------------
# wheelbuild-torch-headers (calibrate's torch volume)


def test_torch_headers_gives_pip_the_index_from_the_file_never_in_argv(tmp_path: Path) -> None:
    index = tmp_path / "torch-index-url"
    index.write_text("https://user:secret@example.invalid/simple")
    seen = tmp_path / "seen"
    python = _stub(tmp_path / "python3", f'echo "$PIP_INDEX_URL" > {seen}; echo "$*" >> {seen}\n')
    target = tmp_path / "torch"
    target.mkdir()
    done = _sh(
        "wheelbuild-torch-headers", str(index), str(target),
        env={"TORCH_REQUIREMENT": "torch==2.11.0", "PYTHON": str(python)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    url, argv = seen.read_text().splitlines()
    assert url == "https://user:secret@example.invalid/simple"
    assert argv == f"-m pip install -q --no-deps --target {target} torch==2.11.0"
    assert (target / ".complete").is_file()


def test_torch_headers_marks_nothing_complete_when_pip_fails(tmp_path: Path) -> None:
    index = tmp_path / "torch-index-url"
    index.write_text("https://example.invalid/simple")
    python = _stub(tmp_path / "python3", "exit 1\n")
    target = tmp_path / "torch"
    target.mkdir()
    done = _sh(
        "wheelbuild-torch-headers",
        str(index),
        str(target),
        env={"TORCH_REQUIREMENT": "torch", "PYTHON": str(python)},
    )
    assert done.returncode != 0
    assert not (target / ".complete").exists()


# ---------------------------------------------------------------------------------------------
# Mounting them


@pytest.mark.parametrize(
    "name",
    [
        "wheelbuild-memory-limit",
        "wheelbuild-calibrate-unit",
        "wheelbuild-gate-python",
        "wheelbuild-torch-headers",
    ],
)
def test_each_script_is_mounted_read_only_where_the_engine_runs_it(name: str) -> None:
    inside, volumes = script_volume(name)
    assert volumes == {str((IMAGES_DIR / name).resolve()): {"bind": inside, "mode": "ro"}}
    assert inside == f"/usr/local/bin/{name}"


def test_a_missing_script_is_exit_31_with_a_remedy(tmp_path: Path) -> None:
    with pytest.raises(ImageInputsMissing) as caught:
        script_volume("wheelbuild-memory-limit", tmp_path)
    assert caught.value.exit_code == 31 and "reinstall wheelbuild" in caught.value.remedy
