"""wheelbuild installed as a user installs a CLI, not run from this checkout.

The project's own sdist and wheel are built with `uv build` (the wheel from the sdist, as PyPI
users get it); the wheel goes in with `uv tool install`, the sdist with pip into a plain venv.
Each runs from a directory outside the checkout, and the tool install builds the bundled example
for real. Nothing is mocked: real uv, real pip against PyPI, the real Docker engine and nvcc.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import REPO, TORCH_INDEX

UV = str(Path(sys.executable).parent / "uv")


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    proc = subprocess.run(
        argv, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, (
        f"{argv} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("dist")
    # No flags: uv builds the sdist, then the wheel from that sdist, so both must be complete.
    _run([UV, "build", "--out-dir", str(out), str(REPO)], cwd=out)
    return {"sdist": next(out.glob("wheelbuild-*.tar.gz")), "wheel": next(out.glob("wheelbuild-*.whl"))}


def _outside_checkout(python: Path, cwd: Path) -> Path:
    """Where the installed wheelbuild's code and images/ really are (not in this checkout)."""
    probe = "import wheelbuild, wheelbuild.image.inputs as i; print(wheelbuild.__file__); print(i.IMAGES_DIR)"
    code, images = _run([str(python), "-c", probe], cwd=cwd).split()
    for path in (Path(code), Path(images)):
        assert REPO not in path.resolve().parents, path
    return Path(images)


def test_uv_tool_install_builds_the_bundled_example_from_tmp(
    dists: dict[str, Path], cuda_image: str, tmp_path: Path
) -> None:
    work = tmp_path / "anywhere"
    work.mkdir()
    tools = {"UV_TOOL_DIR": str(tmp_path / "tools"), "UV_TOOL_BIN_DIR": str(tmp_path / "bin")}
    _run([UV, "tool", "install", str(dists["wheel"])], cwd=work, env=tools)
    wheelbuild = tmp_path / "bin" / "wheelbuild"
    images = _outside_checkout(tmp_path / "tools" / "wheelbuild" / "bin" / "python", work)
    assert (images / "Dockerfile.cuda131").read_bytes() == (
        REPO / "images" / "Dockerfile.cuda131"
    ).read_bytes()

    # The packaged images/ is the checkout's, byte for byte, so its inputs hash to the same tag.
    base = os.environ["WHEELBUILD_BASE_IMAGE"]
    tag = _run([str(wheelbuild), "image", "build", "--base-image", base], cwd=work).strip().splitlines()[-1]
    assert tag == cuda_image

    out = tmp_path / "wheelhouse"
    stdout = _run(
        [
            str(wheelbuild), "build", "wbdemo",
            "--torch", "cu130", "--torch-index-url", TORCH_INDEX,
            "--archs", "120", "--python", "3.11", "--memory", "4g",
            "--output-dir", str(out), "--rebuild",
        ],
        cwd=work, timeout=1800,
    )  # fmt: skip
    (run_dir,) = (out / "runs").iterdir()
    report = json.loads((run_dir / "build-report.json").read_text())
    (wheel,) = run_dir.glob("wbdemo-*.whl")
    assert report["gate"][0]["passed"], report["gate"]
    assert wheel.name in stdout
    assert not (work / "wheelhouse").exists()  # nothing written beside the user's cwd unasked


def test_pip_install_of_the_sdist_finds_its_images_from_tmp(
    dists: dict[str, Path], cuda_image: str, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    _run([str(venv / "bin" / "pip"), "install", "-q", str(dists["sdist"])], cwd=tmp_path)
    _outside_checkout(venv / "bin" / "python", tmp_path)
    base = os.environ["WHEELBUILD_BASE_IMAGE"]
    tag = _run([str(venv / "bin" / "wheelbuild"), "image", "build", "--base-image", base], cwd=tmp_path)
    assert tag.strip().splitlines()[-1] == cuda_image
