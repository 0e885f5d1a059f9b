"""The toolkit follows torch's CUDA minor, end to end: PyPI's torch 2.15.0 is a CUDA 13.2 build,
so the example built for `--torch cu132` is compiled in the CUDA 13.2 image (NVIDIA's 13.2.86
wheels, pinned by hash in images/requirements-cuda132.txt), made from the same Dockerfile as the
default 13.1 image, and its wheel passes the gate with torch 2.15.0. One Python, one arch, no
torch range: a minute or two once torch 2.15.0 is in the machine's wheel cache."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from wheelbuild.image.names import image_repository
from wheelbuild.wheel.contents import archs_in_elf

from tests.integration.conftest import TORCH_INDEX, wheelbuild


def test_the_example_for_cu132_is_compiled_by_the_cuda_13_2_toolkit_and_loads_with_torch_2_15(
    tmp_path: Path,
) -> None:
    done = wheelbuild(
        "build", "--example", "--torch", "cu132", "--torch-index-url", TORCH_INDEX,
        "--archs", "120", "--python", "3.11", "--memory", "4g",
        "--output-dir", str(tmp_path), "--no-torch-range", "--rebuild",
        timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    run = tmp_path / "runs" / done.run_id
    report = json.loads((run / "build-report.json").read_text())
    assert report["torch"]["variant"] == "2.15.0+cu132"
    # The image is the 13.2 toolkit's, and its nvcc is what compiled every CUDA unit.
    assert report["image"]["tag"].startswith(f"{image_repository('13.2')}:")
    assert report["image"]["labels"]["org.wheelbuild.cuda.version"] == "13.2"
    assert "nvidia-cuda-nvcc==13.2.86" in report["image"]["labels"]["org.wheelbuild.cuda.packages"]
    log = (run / "build.log").read_text(errors="replace")
    assert "/usr/local/cuda-13.2/nvidia/cu13/bin/nvcc" in log and "/usr/local/cuda-13.1/" not in log
    said = done.stdout + done.stderr
    assert "toolkit: CUDA 13.2, in the " in said and "torch 2.15.0 is a CUDA 13.2 build" in said
    (wheel,) = sorted(run.glob("*.whl"))
    assert "+cu132torch2.15-" in wheel.name
    with zipfile.ZipFile(wheel) as archive:
        (module,) = [n for n in archive.namelist() if n.endswith(".so")]
        assert set(archs_in_elf(archive.read(module)).sass) == {120}
    assert [g["passed"] for g in report["gate"]] == [True]
