"""The C++ standard follows torch, on this machine's real compilers: a source guarded as torch
2.14's ATen.h is (`__cplusplus < 202002L` is an #error) fails under the package's -std=c++17,
and compiles through images/wheelbuild-cxx (g++) and images/wheelbuild-nvcc (the test extras'
CUDA 13.1 nvcc) once the standard is raised; wheelbuild-cxx --torch-std reads the standard from
a torch tree's ATen.h. tests/unit/test_cxx_standard.py holds the rules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from wheelbuild.attempt.buildlog import BuildLog
from wheelbuild.image.inputs import IMAGES_DIR

from tests.toolchain import require

GUARD = (
    "#if !defined(_MSC_VER) && __cplusplus < 202002L\n"
    "#error C++20 or later compatible compiler is required to use ATen.\n"
    "#endif\n"
    "int answer() { return 42; }\n"
)
RAISED = "wheelbuild-cxx: raised -std=c++17 to -std=c++20 (torch's headers require C++20)"


def _run(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_gxx_compiles_a_cxx20_header_under_the_packages_cxx17_once_it_is_raised(tmp_path: Path) -> None:
    (tmp_path / "guard.cpp").write_text(GUARD)
    gxx = require("g++")
    compile_ = [gxx, "-std=c++17", "-c", "guard.cpp", "-o", "guard.o"]
    kept = _run([sys.executable, str(IMAGES_DIR / "wheelbuild-cxx"), *compile_], tmp_path)
    assert kept.returncode != 0 and "C++20 or later compatible compiler is required" in kept.stderr
    seen = str(tmp_path / "seen")
    for time in range(2):
        raised = _run(
            [sys.executable, str(IMAGES_DIR / "wheelbuild-cxx"), *compile_],
            tmp_path,
            WHEELBUILD_CXX_STD="20",
            WHEELBUILD_CXX_SEEN=seen,
        )
        assert raised.returncode == 0, raised.stderr
        assert raised.stderr.splitlines() == ([RAISED] if time == 0 else [])  # said once per container
    assert (tmp_path / "guard.o").stat().st_size > 0
    log = BuildLog()  # as the build's log reader sees it, cibuildwheel's indent or not
    for line in (RAISED, f"    {RAISED}"):
        log.feed(line)
    assert log.std_raises == ["raised -std=c++17 to -std=c++20 (torch's headers require C++20)"]


def test_nvcc_compiles_a_cxx20_header_under_the_packages_cxx17_once_it_is_raised(tmp_path: Path) -> None:
    (tmp_path / "guard.cu").write_text(GUARD + "__global__ void kernel(int* out) { *out = 42; }\n")
    nvcc = require("nvcc")
    compile_ = [nvcc, "-std", "c++17", "-Xcompiler", "-std=c++17", "-c", "guard.cu", "-o", "guard.o"]
    env = {"WHEELBUILD_NVCC_ARCHS": "120", "WHEELBUILD_NVCC_SEEN": str(tmp_path / "seen-nvcc")}
    kept = _run([sys.executable, str(IMAGES_DIR / "wheelbuild-nvcc"), *compile_], tmp_path, **env)
    assert (
        kept.returncode != 0 and "C++20 or later compatible compiler is required" in kept.stdout + kept.stderr
    )
    raised = _run(
        [sys.executable, str(IMAGES_DIR / "wheelbuild-nvcc"), *compile_],
        tmp_path,
        **env,
        WHEELBUILD_CXX_STD="20",
        WHEELBUILD_CXX_SEEN=str(tmp_path / "seen"),
    )
    assert raised.returncode == 0, raised.stderr
    said = [line for line in raised.stderr.splitlines() if line.startswith("wheelbuild-cxx:")]
    assert said == [
        "wheelbuild-cxx: raised -std c++17 to -std=c++20 (torch's headers require C++20)",
        "wheelbuild-cxx: raised -Xcompiler -std=c++17 to -Xcompiler -std=c++20 (torch's headers require C++20)",
    ]


def test_the_standard_is_read_from_the_torch_tree_the_python_imports(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "torch" / "include" / "ATen").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        "raise ImportError('wheelbuild-cxx reads torch, never imports it')\n"
    )
    (site / "torch" / "include" / "ATen" / "ATen.h").write_text("#pragma once\n\n" + GUARD)
    script = str(IMAGES_DIR / "wheelbuild-cxx")
    found = _run([sys.executable, script, "--torch-std"], tmp_path, PYTHONPATH=str(site))
    assert (found.returncode, found.stdout) == (0, "20\n"), found.stderr
    no_torch = _run([sys.executable, script, "--torch-std"], tmp_path, PYTHONPATH=str(tmp_path / "empty"))
    assert (no_torch.returncode, no_torch.stdout) == (0, "\n")
