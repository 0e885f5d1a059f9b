"""images/wheelbuild-cicc-admission, run for real by sh against a toolkit laid out like the image's
(bin/nvcc, bin/nvcc.profile, nvvm/bin/cicc) in tmp_path. The real nvcc is in
tests/integration/test_cicc_admission.py."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GATE = REPO / "images" / "wheelbuild-cicc-admission"
PROFILE = """
TOP              = $(_HERE_)/..

CICC_PATH        = $(TOP)/nvvm/bin
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice

PATH            += $(CICC_PATH):$(_HERE_):
"""


def _toolkit(root: Path) -> Path:
    for path, text in (("bin/nvcc", "#!/bin/sh\n"), ("nvvm/bin/cicc", '#!/bin/sh\necho real cicc "$@"\n')):
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
        file.chmod(0o755)
    (root / "bin" / "nvcc.profile").write_text(PROFILE)
    return root


def _run(toolkit: Path, cicc_dir: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{toolkit / 'bin'}:{os.environ['PATH']}", WHEELBUILD_CICC_DIR=str(cicc_dir))
    return subprocess.run(["sh", str(GATE)], env=env, capture_output=True, text=True, check=False)


def test_the_profile_points_at_a_cicc_that_runs_the_wrapper(tmp_path: Path) -> None:
    toolkit, cicc_dir = _toolkit(tmp_path / "cuda"), tmp_path / "cicc"
    result = _run(toolkit, cicc_dir)
    assert result.returncode == 0, result.stderr
    assert f"cicc admission in {toolkit / 'bin' / 'nvcc.profile'}: CICC_PATH = {cicc_dir}" in result.stdout
    profile = (toolkit / "bin" / "nvcc.profile").read_text()
    assert f"\nCICC_PATH = {cicc_dir}\n" in profile
    assert "NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice" in profile  # the rest as it was
    shim = (cicc_dir / "cicc").read_text()
    assert (
        f'"{REPO / "images" / "wheelbuild-admit"}" --cicc "{toolkit / "nvvm" / "bin" / "cicc"}" "$@"' in shim
    )
    assert (cicc_dir / "cicc").stat().st_mode & stat.S_IXUSR
    # Without the admission env, the wrapper execs the real cicc with the same arguments.
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHEELBUILD_ADMIT_")}
    ran = subprocess.run(
        [str(cicc_dir / "cicc"), "--orig_src_file_name", "a.cu"], env=env, capture_output=True, text=True
    )
    assert ran.stdout == "real cicc --orig_src_file_name a.cu\n", ran.stderr
    # Run again (each Python's before-build does): the same profile, still the real cicc behind it.
    again = _run(toolkit, cicc_dir)
    assert again.returncode == 0 and (toolkit / "bin" / "nvcc.profile").read_text() == profile
    assert str(toolkit / "nvvm" / "bin" / "cicc") in (cicc_dir / "cicc").read_text()


def test_a_profile_it_cannot_change_leaves_the_ciccs_unheld(tmp_path: Path) -> None:
    toolkit, cicc_dir = _toolkit(tmp_path / "cuda"), tmp_path / "cicc"
    (toolkit / "bin" / "nvcc.profile").write_text("TOP = $(_HERE_)/..\n")  # no CICC_PATH line
    result = _run(toolkit, cicc_dir)
    assert result.returncode == 0  # the build goes on
    assert "cannot point" in result.stderr and "each cicc runs unadmitted" in result.stderr
    assert (toolkit / "bin" / "nvcc.profile").read_text() == "TOP = $(_HERE_)/..\n"
