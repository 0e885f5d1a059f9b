"""The model that learns, round trip on a real build: a real Docker build of the fixture whose
units are made heavy (a salted 1.5M-element blob, so each compiles for seconds and costs far
more than the built-in wbdemo profile says), then `wheelbuild plan` for the same release,
toolkit and env. The plan must say it used the learned model and how far both models were off.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from .conftest import TORCH_INDEX, wheelbuild


# The build's measured peak is compared with both models' predictions: compiles slowed by
# another process's load overlap differently and move that peak, so nothing runs beside it.
@pytest.mark.alone
def test_a_build_teaches_the_next_plan_and_the_plan_says_how_far_off_it_was(
    cuda_image: str, tmp_path: Path
) -> None:
    env = ["--env", "WBDEMO_BLOB_ELEMENTS=1500000", "--env", f"WBDEMO_BLOB_SALT={uuid.uuid4().hex}"]
    # A cache dir of its own: what this build teaches stays out of the other tests' plans.
    cache = {"WHEELBUILD_CACHE_DIR": str(tmp_path / "cache")}
    common = ["--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--memory", "6g", "--cpus", "2", *env]
    built = wheelbuild(
        "build", "wbdemo", *common, "--python", "3.11", "--no-gate",
        "--output-dir", str(tmp_path / "out"), env=cache,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr
    report = json.loads((tmp_path / "out" / "runs" / built.run_id / "build-report.json").read_text())
    attempt = report["attempts"][-1]
    measured = {u["unit"]: u["measured_peak"] for u in attempt["units"] if u.get("measured_peak")}
    # The four salted kernels compile for seconds each: every one is caught by the sampler.
    kernels = {unit for unit in measured if not unit.endswith("binding.o")}
    assert len(kernels) == 4, attempt["units"]
    assert attempt["peak_error"] == round(attempt["predicted_peak"] / attempt["peak_memory_compile"] - 1, 3)
    assert attempt["unit_error"] is not None and attempt["overhead_at_peak"] is not None
    assert f"model for the next plan: learned from build {built.run_id}" in built.stdout

    planned = wheelbuild("plan", "wbdemo", *common, "-v", env=cache)  # -v: the why lines
    assert planned.returncode == 0, planned.stderr
    line = next(line for line in planned.stdout.splitlines() if "its plan predicted" in line)
    assert built.run_id in line and "units measured" in line
    found = re.search(r"its plan predicted .+? \(([+-]\d+)%\), this model predicts .+? \(([+-]\d+)%\)", line)
    assert found, line
    before, after = (int(found[i]) for i in (1, 2))
    # The built-in profile knows nothing of the blob; the learned model has measured it.
    assert abs(after) < abs(before), line
    print(f"\nlearned model: {line.strip()}")
    # Another env has learned nothing: its plan is the built-in one.
    other = wheelbuild(
        "plan", "wbdemo", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--memory", "6g", "--cpus", "2",
        "-v", env=cache,
    )  # fmt: skip
    assert other.returncode == 0, other.stderr
    assert "learned from build" not in other.stdout
