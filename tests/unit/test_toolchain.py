"""The build's compiler stand-ins, run here on real compilers: images/wheelbuild-nvcc (what
--archs says is what nvcc compiles, whatever the package writes), images/wheelbuild-ld (the
ledger of what the build linked), images/wheelbuild-check-linked (a wheel's shared objects were
linked here) and images/wheelbuild-toolchain, which puts the first two in place.

nvcc is the test extras' CUDA 13.1 (tests/toolchain.py); the linker is a copy of this machine's
GNU ld, which gcc runs through -B; the wheels are zips of the shared objects these made."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from wheelbuild.image.inputs import IMAGES_DIR

from tests.scriptkit import script_module

NVCC_WRAPPER = script_module(IMAGES_DIR / "wheelbuild-nvcc")
# causal-conv1d 1.7.0's setup.py under CUDA 13: its own list, and --threads 4.
CAUSAL_CONV1D_FLAGS = [
    *(flag for arch in (75, 80, 87, 90, 100, 120, 103, 110, 121) for flag in ("-gencode", f"arch=compute_{arch},code=sm_{arch}")),
    "--threads", "4",
]  # fmt: skip


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


# ---------------------------------------------------------------------------------------------
# wheelbuild-nvcc: the rewrite, as a function


@pytest.mark.parametrize(
    ("flags", "asked", "compiled", "said"),
    [
        (CAUSAL_CONV1D_FLAGS, [120], ["-gencode=arch=compute_120,code=sm_120", "--threads=1"],
         "rewrote archs sm_75 sm_80 sm_87 sm_90 sm_100 sm_103 sm_110 sm_120 sm_121 -> sm_120; --threads 4 -> 1"),
        # torch's own list for TORCH_CUDA_ARCH_LIST=10.0;12.0 is what is asked: left as it is.
        (["-gencode=arch=compute_100,code=sm_100", "-gencode=arch=compute_120,code=sm_120"], [100, 120],
         ["-gencode=arch=compute_100,code=sm_100", "-gencode=arch=compute_120,code=sm_120", "--threads=1"], None),
        # -arch=sm_N alone is SASS and PTX of N; PTX is not asked for.
        (["-arch=sm_80"], [80], ["-gencode=arch=compute_80,code=sm_80", "--threads=1"],
         "rewrote archs sm_80 compute_80 -> sm_80"),
        (["--gpu-architecture", "compute_90", "--gpu-code", "sm_90,compute_90"], [120],
         ["-gencode=arch=compute_120,code=sm_120", "--threads=1"], "rewrote archs sm_90 compute_90 -> sm_120"),
        # An arch-specific variant of an asked arch is kept: its SASS serves the same GPUs.
        (["--generate-code=arch=compute_90a,code=[sm_90a]", "-gencode", "arch=compute_80,code=sm_80"], [90],
         ["-gencode=arch=compute_90a,code=sm_90a", "--threads=1"], "rewrote archs sm_80 sm_90a -> sm_90a"),
        ([], [120], ["-gencode=arch=compute_120,code=sm_120", "--threads=1"],
         "rewrote archs (none given: nvcc's default sm_75 compute_75) -> sm_120"),
        (["-arch=native", "-t", "8"], [100], ["-gencode=arch=compute_100,code=sm_100", "--threads=1"],
         "rewrote archs native -> sm_100; --threads 8 -> 1"),
    ],
)  # fmt: skip
def test_the_package_arch_flags_become_exactly_the_asked_archs(
    flags: list[str], asked: list[int], compiled: list[str], said: str | None
) -> None:
    others = ["-c", "x.cu", "-o", "x.o", "-Xcompiler", "-fPIC"]
    args, change = NVCC_WRAPPER.rewrite([*others, *flags], asked, 1)
    assert args == [*others, *compiled]
    assert change == said


def test_ptx_goes_in_only_for_the_archs_asked_with_it() -> None:
    args, change = NVCC_WRAPPER.rewrite(["-c", "x.cu", "-arch=sm_80"], [100, 120], None, frozenset({120}))
    assert args == [
        "-c", "x.cu", "-gencode=arch=compute_100,code=sm_100",
        "-gencode=arch=compute_120,code=sm_120", "-gencode=arch=compute_120,code=compute_120",
    ]  # fmt: skip
    assert change == "rewrote archs sm_80 compute_80 -> sm_100 sm_120 compute_120"


def test_information_requests_and_other_tools_flags_are_left_alone() -> None:
    for args in (["--version"], ["-V"], ["--list-gpu-arch"]):
        assert NVCC_WRAPPER.rewrite(args, [120], 1) == (args, None)
    # -Xcompiler's value is the host compiler's, never an nvcc arch flag.
    args, _ = NVCC_WRAPPER.rewrite(["-c", "x.cu", "-Xcompiler", "-arch=x86-64"], [120], None)
    assert args == ["-c", "x.cu", "-Xcompiler", "-arch=x86-64", "-gencode=arch=compute_120,code=sm_120"]


def test_kept_package_archs_are_compiled_as_written_while_the_threads_follow_the_plan() -> None:
    args, change = NVCC_WRAPPER.rewrite(["-c", "x.cu", *CAUSAL_CONV1D_FLAGS], None, 2)
    # The same flags in nvcc's `-opt=value` spelling.
    as_written = [f"-gencode={CAUSAL_CONV1D_FLAGS[i + 1]}" for i in range(0, 18, 2)]
    assert args == ["-c", "x.cu", *as_written, "--threads=2"]
    assert change == "rewrote --threads 4 -> 2"


# ---------------------------------------------------------------------------------------------
# wheelbuild-nvcc in front of a real nvcc


def _nvcc_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "WHEELBUILD_NVCC_SEEN": str(tmp_path / "seen"),
        **extra,
    }


def test_the_launcher_runs_the_real_nvcc_with_the_rewritten_command(tmp_path: Path) -> None:
    """sccache's cache key is the command it is given: it must be the one that really compiles."""
    record = tmp_path / "launched"
    launcher = tmp_path / "launcher"
    launcher.write_text(f'#!/bin/sh\necho "$@" > {record}\n')
    launcher.chmod(0o755)
    env = _nvcc_env(tmp_path, WHEELBUILD_NVCC_ARCHS="100,120", WHEELBUILD_NVCC_LAUNCHER=str(launcher))
    done = _run(
        [
            sys.executable,
            str(IMAGES_DIR / "wheelbuild-nvcc"),
            "/cuda/bin/nvcc.real",
            "-c",
            "k.cu",
            "-arch=sm_80",
        ],
        env,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert record.read_text().split() == [
        "/cuda/bin/nvcc.real", "-c", "k.cu",
        "-gencode=arch=compute_100,code=sm_100", "-gencode=arch=compute_120,code=sm_120",
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# wheelbuild-toolchain, wheelbuild-ld and wheelbuild-check-linked together


def _wheel(path: Path, members: dict[str, Path]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, source in members.items():
            wheel.write(source, name)
        wheel.writestr("pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    return path


def test_without_a_ledger_the_check_says_it_was_skipped(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "WHEELBUILD_LINKS": str(tmp_path / "none")}
    so = tmp_path / "x.so"
    so.write_bytes(b"\x7fELF" + bytes(60))
    done = _run(
        [
            sys.executable,
            str(IMAGES_DIR / "wheelbuild-check-linked"),
            str(_wheel(tmp_path / "w.whl", {"x.so": so})),
        ],
        env,
        tmp_path,
    )
    assert done.returncode == 0
    assert done.stdout.startswith("wheelbuild: link check skipped: ")
