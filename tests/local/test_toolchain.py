"""The build's compiler stand-ins, run here on real compilers: images/wheelbuild-nvcc (what
--archs says is what nvcc compiles, whatever the package writes), images/wheelbuild-ld (the
ledger of what the build linked), images/wheelbuild-check-linked (a wheel's shared objects were
linked here) and images/wheelbuild-toolchain, which puts the first two in place.

nvcc is the test extras' CUDA 13.1 (tests/toolchain.py); the linker is a copy of this machine's
GNU ld, which gcc runs through -B; the wheels are zips of the shared objects these made."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from wheelbuild.attempt.buildlog import LINKED_MARK, NOT_LINKED_MARK, NVCC_REWRITE_MARK, BuildLog
from wheelbuild.image.inputs import IMAGES_DIR
from wheelbuild.wheel.contents import archs_in_elf

from tests import toolchain
from tests.unit.test_toolchain import CAUSAL_CONV1D_FLAGS, _nvcc_env, _run, _wheel

KERNEL = """
__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" void launch(float* x) { twice<<<1, 32>>>(x); }
"""


def test_a_real_compile_of_a_package_list_holds_exactly_the_asked_sass_and_says_so_once(
    tmp_path: Path,
) -> None:
    nvcc = toolchain.require("nvcc")
    (tmp_path / "k.cu").write_text(KERNEL)
    env = _nvcc_env(tmp_path, WHEELBUILD_NVCC_ARCHS="120", WHEELBUILD_NVCC_THREADS="1")
    wrapper = [sys.executable, str(IMAGES_DIR / "wheelbuild-nvcc"), nvcc]
    said = []
    for output in ("a.o", "b.o"):
        done = _run(
            [*wrapper, "-c", "k.cu", "-o", output, "-Xcompiler", "-fPIC", *CAUSAL_CONV1D_FLAGS], env, tmp_path
        )
        assert done.returncode == 0, done.stderr
        said += [line for line in done.stderr.splitlines() if line.startswith(NVCC_REWRITE_MARK)]
    # nvcc links the static CUDA runtime by default (the wheel layout keeps it in lib/).
    link = [*wrapper, "-shared", "a.o", "-o", "k.so", f"-L{Path(nvcc).parents[1] / 'lib'}"]
    done = _run(link, env, tmp_path)
    assert done.returncode == 0, done.stderr
    # Without the rewrite the static runtime's device-link stub comes in for nvcc's default arch,
    # sm_75 (checked: {75, 120}).
    assert archs_in_elf((tmp_path / "k.so").read_bytes()).sass == {120}
    assert said == [
        f"{NVCC_REWRITE_MARK}rewrote archs sm_75 sm_80 sm_87 sm_90 sm_100 sm_103 sm_110 sm_120 sm_121 -> sm_120; --threads 4 -> 1"
    ]
    log = BuildLog()
    for line in [*said, f"    {said[0]}"]:
        log.feed(line)
    assert log.nvcc_rewrites == [said[0].removeprefix(NVCC_REWRITE_MARK)]


def _toolchain(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    """A CUDA_HOME whose bin/nvcc is the test extras' real nvcc, a copy of this machine's GNU ld,
    and the toolchain run over both: (env, the -B folder gcc finds the linker in, the ledger)."""
    # nvcc finds nvcc.profile and its tools from the path it was run by: a tree of links to the
    # real one's files stands for the image's toolkit.
    real_bin = Path(toolchain.require("nvcc")).parent
    cuda_bin = tmp_path / "cuda" / "bin"
    cuda_bin.mkdir(parents=True)
    for entry in real_bin.parent.iterdir():
        if entry.name != "bin":
            (tmp_path / "cuda" / entry.name).symlink_to(entry)
    for tool in real_bin.iterdir():
        (cuda_bin / tool.name).symlink_to(tool)
    ld_dir = tmp_path / "ld"
    ld_dir.mkdir()
    real_ld = Path(
        subprocess.run(
            ["gcc", "-print-prog-name=ld"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    shutil.copy(shutil.which(str(real_ld)) or real_ld, ld_dir / "ld")
    ledger = tmp_path / "links" / "ledger"
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "CUDA_HOME": str(tmp_path / "cuda"),
        "WHEELBUILD_LINKERS": str(ld_dir / "ld"),
        "WHEELBUILD_LINKS": str(ledger),
        "WHEELBUILD_NVCC_SEEN": str(tmp_path / "seen"),
    }
    for _ in range(2):  # once per Python: the second run only rewrites the shims
        done = _run(["sh", str(IMAGES_DIR / "wheelbuild-toolchain")], env, tmp_path)
        assert done.returncode == 0, done.stderr
    assert (cuda_bin / "nvcc.real").is_symlink() and (ld_dir / "ld.wheelbuild-real").is_file()
    assert ledger.read_text() == ""  # nothing linked yet
    return env, ld_dir, ledger


def test_a_shared_object_linked_through_the_ledger_passes_and_one_linked_elsewhere_is_refused(
    tmp_path: Path,
) -> None:
    env, ld_dir, ledger = _toolchain(tmp_path)
    (tmp_path / "k.cu").write_text(KERNEL)
    nvcc = str(tmp_path / "cuda" / "bin" / "nvcc")  # the stand-in, as CUDA_HOME/bin/nvcc
    built = _run(
        [nvcc, "-c", "k.cu", "-o", "k.o", "-Xcompiler", "-fPIC", "-arch=sm_90"],
        {**env, "WHEELBUILD_NVCC_ARCHS": "120"},
        tmp_path,
    )
    assert built.returncode == 0, built.stderr
    assert archs_in_elf((tmp_path / "k.o").read_bytes()).sass == {120}
    # gcc finds the linker through -B as it finds it in its own folders in a build container.
    here = _run(["gcc", "-shared", f"-B{ld_dir}/", "k.o", "-o", "here.so"], env, tmp_path)
    assert here.returncode == 0, here.stderr
    elsewhere = _run(
        ["gcc", "-shared", "k.o", "-o", "elsewhere.so", "-Wl,--build-id=sha1", "-Wl,-soname,x"], env, tmp_path
    )
    assert elsewhere.returncode == 0, elsewhere.stderr
    (entry,) = ledger.read_text().splitlines()
    assert entry.endswith(f" {tmp_path / 'here.so'}")
    check = [sys.executable, str(IMAGES_DIR / "wheelbuild-check-linked")]

    good = _run(
        [
            *check,
            str(
                _wheel(
                    tmp_path / "good.whl", {"pkg/_k.cpython-312-x86_64-linux-gnu.so": tmp_path / "here.so"}
                )
            ),
        ],
        env,
        tmp_path,
    )
    assert good.returncode == 0, good.stderr
    assert good.stdout == f"{LINKED_MARK} 1 of 1 shared objects (_k.cpython-312-x86_64-linux-gnu.so)\n"

    bad = _wheel(
        tmp_path / "bad.whl",
        {"pkg/_k.so": tmp_path / "here.so", "pkg/_prebuilt.so": tmp_path / "elsewhere.so"},
    )
    refused = _run([*check, str(bad)], env, tmp_path)
    assert refused.returncode == 88
    assert refused.stdout.startswith(f"{NOT_LINKED_MARK} pkg/_prebuilt.so (build id ")
    assert "pkg/_k.so" not in refused.stdout
    log = BuildLog(identifier="cp312-manylinux_x86_64")
    log.feed(refused.stdout.strip())
    assert log.link_checks == [
        f"cp312-manylinux_x86_64: {refused.stdout.strip().removeprefix('wheelbuild: ')}"
    ]
