"""images/wheelbuild-cuda-libraries, run here on the two layouts torch's CUDA library wheels have:
CUDA 13's shared nvidia/cu13/{include,lib} and CUDA 12's nvidia/<library>/{include,lib}, each
made in tmp_path as those wheels lay them out (their file names, versioned libraries only), with
torch beside them. The real ones are compiled against in tests/integration/test_contract.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from wheelbuild.image.inputs import IMAGES_DIR


def _site(root: Path, files: list[str]) -> Path:
    site = root / "site"
    for name in ["torch/__init__.py", *files]:
        path = site / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    return site


def _run(site: Path, farm: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, str(IMAGES_DIR / "wheelbuild-cuda-libraries"), str(farm)],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def test_cuda13_headers_and_versioned_libraries_become_one_farm(tmp_path: Path) -> None:
    site = _site(
        tmp_path,
        [
            "nvidia/cu13/include/cublas_v2.h", "nvidia/cu13/include/cusparse.h", "nvidia/cu13/include/crt/host_defines.h",
            "nvidia/cu13/lib/libcublas.so.13", "nvidia/cu13/lib/libcusparse.so.12", "nvidia/cu13/lib/libcudart_static.a",
            "nvidia/cudnn/include/cudnn.h", "nvidia/cudnn/lib/libcudnn.so.9",
        ],
    )  # fmt: skip
    farm = tmp_path / "farm"
    (farm / "include").mkdir(parents=True)
    (farm / "include" / "stale.h").write_text("from an earlier Python")
    done = _run(site, farm)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (farm / "include").iterdir()) == [
        "crt",
        "cublas_v2.h",
        "cudnn.h",
        "cusparse.h",
    ]
    assert (farm / "include" / "cublas_v2.h").resolve() == (
        site / "nvidia/cu13/include/cublas_v2.h"
    ).resolve()
    # -lcublas finds the link name; the module then needs the soname, as torch loads it.
    libs = {p.name: p.resolve().name for p in (farm / "lib").iterdir()}
    assert libs == {
        "libcublas.so": "libcublas.so.13",
        "libcusparse.so": "libcusparse.so.12",
        "libcudnn.so": "libcudnn.so.9",
    }
    assert done.stdout.startswith(
        "wheelbuild: CUDA libraries of torch: 4 header entries and 3 link names in "
    )
    assert done.stdout.rstrip().endswith(": cu13, cudnn)")


def test_cuda12_per_library_folders_and_a_shipped_link_name(tmp_path: Path) -> None:
    site = _site(
        tmp_path,
        [
            "nvidia/cublas/include/cublas_v2.h", "nvidia/cublas/lib/libcublas.so.12", "nvidia/cublas/lib/libcublasLt.so.12",
            "nvidia/curand/include/curand.h", "nvidia/curand/lib/libcurand.so.10", "nvidia/curand/lib/libcurand.so",
        ],
    )  # fmt: skip
    farm = tmp_path / "farm"
    assert _run(site, farm).returncode == 0
    assert sorted(p.name for p in (farm / "include").iterdir()) == ["cublas_v2.h", "curand.h"]
    libs = {p.name: p.resolve().name for p in (farm / "lib").iterdir()}
    assert libs == {
        "libcublas.so": "libcublas.so.12",
        "libcublasLt.so": "libcublasLt.so.12",
        "libcurand.so": "libcurand.so",
    }


def test_without_torch_nothing_is_linked(tmp_path: Path) -> None:
    done = _run(tmp_path / "empty", tmp_path / "farm")
    assert done.returncode == 0
    assert done.stdout == "wheelbuild: CUDA libraries: no torch installed, none linked\n"
