"""The host tools the unit tests compile and read with, found the same way on every machine.

nvcc and cuobjdump come first from the test extras' NVIDIA wheels (pyproject's `test` extra, the
same CUDA 13.1 pins as the image), so a fresh machine that ran scripts/test has them; gcc, g++
and objdump come from Debian (`scripts/setup --tests` installs them). A tool that is missing fails the
test that needs it, with the remedy, instead of skipping it unseen.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def _wheel_bin(name: str) -> str | None:
    try:
        import nvidia.cu13  # type: ignore[import-untyped]
    except ImportError:
        return None
    for root in nvidia.cu13.__path__:
        candidate = Path(root) / "bin" / name
        if candidate.is_file():
            return str(candidate)
    return None


def find(name: str) -> str | None:
    """$<NAME> (e.g. $NVCC), else the test extras' NVIDIA wheel, else PATH."""
    return os.environ.get(name.upper().replace("+", "X")) or _wheel_bin(name) or shutil.which(name)


def require(name: str) -> str:
    """The tool's path, or the test fails saying how to get it."""
    tool = find(name)
    if tool is None:
        remedy = "scripts/setup --tests installs it" + (
            " (the venv's test extra: pip install -e '.[test]')"
            if name in {"nvcc", "cuobjdump"}
            else " (apt)"
        )
        pytest.fail(f"{name} not found in the venv's NVIDIA wheels or on PATH; remedy: {remedy}")
    return tool


def cuda_link_flags(scratch: Path) -> list[str]:
    """nvcc flags to link -lcudart/-lcudadevrt when nvcc is the NVIDIA wheel's: that layout has
    lib/ (nvcc.profile looks in lib64/) and only libcudart.so.13 (the image links it the same way)."""
    nvcc = find("nvcc")
    lib = Path(nvcc).resolve().parents[1] / "lib" if nvcc else None
    if lib is None or not (lib / "libcudart.so.13").is_file():
        return []  # a system toolkit: its own lib64 serves
    scratch.mkdir(parents=True, exist_ok=True)
    for link, target in (("libcudart.so", "libcudart.so.13"), ("libcudadevrt.a", "libcudadevrt.a")):
        # A link left by another venv may dangle (exists() is False for it, symlink_to would
        # raise): whatever is there goes, and the link is made again.
        (scratch / link).unlink(missing_ok=True)
        (scratch / link).symlink_to(lib / target)
    return ["-L", str(scratch)]
