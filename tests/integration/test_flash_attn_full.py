"""The main job, once, end to end: flash-attn 2.8.3 for torch cu130, one Python, built at the
default plan and through the import gate. Over an hour on 2 cores (74 min for sm_120 on 2026-11-30), so it
runs only with `pytest -m hours`; WHEELBUILD_FULL_ARCHS picks the archs (default 120; "100,120"
for both, about twice that, which the shared compiler cache lets a second run finish).

It writes the figures the closing note quotes to $WHEELBUILD_FULL_FIGURES (or the run dir):
wall time, peak memory per step against the plan's prediction, OOM kills, wheel size, the gate."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.integration.conftest import TORCH_INDEX, wheelbuild


@pytest.mark.hours
def test_flash_attn_cu130_builds_and_loads(cuda_image: str, tmp_path: Path) -> None:
    archs = os.environ.get("WHEELBUILD_FULL_ARCHS", "120")
    out = Path(os.environ.get("WHEELBUILD_FULL_OUT", tmp_path))
    started = time.monotonic()
    result = wheelbuild(
        "flash-attn", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--python", "3.11",
        "--archs", archs, "--output-dir", str(out), timeout=6 * 3600,
    )  # fmt: skip
    wall = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    run_dir = out / "runs" / result.run_id
    report = json.loads((run_dir / "build-report.json").read_text())
    wheel = next(run_dir.glob("flash_attn-*.whl"))
    gate = report["gate"][0]
    assert gate["passed"], gate
    assert [i["module"] for i in gate["imports"]] == ["flash_attn_2_cuda", "flash_attn"]
    figures = {
        "archs": archs,
        "wall_s": round(wall),
        "attempts": [
            {
                k: a[k]
                for k in (
                    "attempt",
                    "max_jobs",
                    "nvcc_threads",
                    "memory",
                    "duration_s",
                    "peak_memory",
                    "peak_memory_compile",
                    "oom_evidence",
                    "units_finished",
                )
            }
            for a in report["attempts"]
        ],
        "predicted_peak": report["plan"]["predicted_peak"],
        "oom_kills": sum(len(a["oom_evidence"]) > 0 for a in report["attempts"]),
        "wheel": wheel.name,
        "wheel_bytes": wheel.stat().st_size,
        "gate": {"passed": gate["passed"], "torch": gate["torch"], "smoke": gate["smoke"]},
    }
    target = Path(os.environ.get("WHEELBUILD_FULL_FIGURES", run_dir / "figures.json"))
    target.write_text(json.dumps(figures, indent=2))
    assert figures["oom_kills"] == 0, figures
