"""The example built three times from the same inputs gives one wheel, byte for byte: twice with
--no-compiler-cache (every unit compiled for real: sccache reads nothing, SCCACHE_RECACHE) into
other run folders minutes apart, then once more with the compiler cache warm from them. What
differs between such builds (the time, the folder, the cache, the pids of nvcc's steps) must not
reach the wheel; `wheelbuild diff` says where it did. The gate and the torch range do not change
a wheel's bytes: they are off here to keep this to three short builds."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.integration.conftest import TORCH_INDEX, Completed, wheelbuild


def _build(out: Path, *extra: str) -> tuple[Completed, Path]:
    done = wheelbuild(
        "build", "wbdemo", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--archs", "120",
        "--python", "3.11", "--no-gate", "--no-torch-range", "--rebuild", "--output-dir", str(out), *extra,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    (wheel,) = sorted((out / "runs" / done.run_id).glob("*.whl"))
    return done, wheel


@pytest.mark.usefixtures("cuda_image")
def test_two_cold_builds_and_a_warm_one_give_one_wheel(tmp_path: Path) -> None:
    cold, first = _build(tmp_path / "cold-1", "--no-compiler-cache")
    _again, second = _build(tmp_path / "cold-2", "--no-compiler-cache")
    _warm, third = _build(tmp_path / "warm")
    for other in (second, third):
        same = wheelbuild("diff", str(first), str(other))
        assert same.returncode == 0, same.stderr  # the cause names the member and ELF section
    digests = {hashlib.sha256(w.read_bytes()).hexdigest() for w in (first, second, third)}
    assert len(digests) == 1
    report = json.loads((tmp_path / "cold-1" / "runs" / cold.run_id / "build-report.json").read_text())
    source = report["recipe"]["source"]
    assert isinstance(source["date_epoch"], int) and source["date_from"]
