"""wheelbuild.wheel.contents against real nvcc output, checked against cuobjdump (tests/toolchain.py finds both)."""

from __future__ import annotations

import re
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from wheelbuild.wheel.contents import (
    CudaArchs,
    FatbinFormatError,
    archs_in_elf,
    archs_in_fatbin,
    archs_in_wheel,
)

from tests import toolchain

NVCC = toolchain.require("nvcc")
CC = toolchain.require("gcc")

KERNEL_A = """
__global__ void ka(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" void launch_a(float* x) { ka<<<1, 32>>>(x); }
"""
KERNEL_B = """
__global__ void kb(float* x) { x[threadIdx.x] += 1.0f; }
extern "C" void launch_b(float* x) { kb<<<1, 32>>>(x); }
"""
PLAIN_C = "int answer(void) { return 42; }\n"

# -cudart none: nothing to link, so the objects stay tiny and fast to build.
NVCC_SO = ["-Xcompiler", "-fPIC", "-cudart", "none", "-shared"]
SM90_PLUS_PTX = ["-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
# name -> (extra nvcc args, expected archs)
SINGLE_TU: dict[str, tuple[list[str], CudaArchs]] = {
    "sass2": (
        ["-gencode", "arch=compute_100,code=sm_100", "-gencode", "arch=compute_120,code=sm_120"],
        CudaArchs(sass=frozenset({100, 120}), ptx=frozenset()),
    ),
    "ptx_only": (
        ["-gencode", "arch=compute_120,code=compute_120"],
        CudaArchs(sass=frozenset(), ptx=frozenset({120})),
    ),
    "sass_ptx": (SM90_PLUS_PTX, CudaArchs(sass=frozenset({90}), ptx=frozenset({90}))),
    # nvcc compresses only PTX by default; this compresses the cubins too.
    "compress_all": (
        [*SM90_PLUS_PTX, "-Xfatbin", "-compress-all"],
        CudaArchs(sass=frozenset({90}), ptx=frozenset({90})),
    ),
}
# Two TUs built with different archs and linked: one container per TU.
TWO_TU = CudaArchs(sass=frozenset({80, 90}), ptx=frozenset({120}))
EMPTY = CudaArchs(sass=frozenset(), ptx=frozenset())


def _run_all(cmds: list[list[str]]) -> None:
    """Run compiler commands in parallel (keeps the module well under 20 s)."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for c in cmds]
    for cmd, proc in zip(cmds, procs, strict=True):
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{out.decode(errors='replace')}"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fatbin")
    (d / "a.cu").write_text(KERNEL_A)
    (d / "b.cu").write_text(KERNEL_B)
    (d / "plain.c").write_text(PLAIN_C)
    out = {name: d / f"{name}.so" for name in [*SINGLE_TU, "two_tu", "plain"]}
    cmds = [
        [NVCC, *NVCC_SO, *args, str(d / "a.cu"), "-o", str(out[name])]
        for name, (args, _) in SINGLE_TU.items()
    ]
    gencode_a = ["-gencode", "arch=compute_80,code=sm_80"]
    gencode_b = ["-gencode", "arch=compute_90,code=sm_90"]
    gencode_b += ["-gencode", "arch=compute_120,code=compute_120"]
    cmds += [
        [NVCC, "-Xcompiler", "-fPIC", *gencode_a, "-c", str(d / "a.cu"), "-o", str(d / "a.o")],
        [NVCC, "-Xcompiler", "-fPIC", *gencode_b, "-c", str(d / "b.cu"), "-o", str(d / "b.o")],
        [CC, "-fPIC", "-shared", str(d / "plain.c"), "-o", str(out["plain"])],
    ]
    _run_all(cmds)
    _run_all([[NVCC, *NVCC_SO, str(d / "a.o"), str(d / "b.o"), "-o", str(out["two_tu"])]])
    return out


def _fatbin_section(path: Path) -> tuple[int, bytes]:
    with path.open("rb") as f:
        section = ELFFile(f).get_section_by_name(".nv_fatbin")
        assert section is not None
        return section["sh_offset"], section.data()


@pytest.mark.parametrize("name", list(SINGLE_TU))
def test_single_tu(built: dict[str, Path], name: str) -> None:
    assert archs_in_elf(built[name].read_bytes()) == SINGLE_TU[name][1]


def test_two_translation_units_are_unioned(built: dict[str, Path]) -> None:
    _, section = _fatbin_section(built["two_tu"])
    assert section.count(struct.pack("<I", 0xBA55ED50)) >= 2  # really several containers
    assert archs_in_elf(built["two_tu"].read_bytes()) == TWO_TU


def test_compressed_entries_are_reported(built: dict[str, Path]) -> None:
    _, plain = _fatbin_section(built["sass_ptx"])
    _, packed = _fatbin_section(built["compress_all"])
    assert b"\x7fELF" in plain  # default: cubins stored as-is ...
    assert b"\x7fELF" not in packed  # ... -compress-all: every cubin zstd-compressed
    assert b"\x28\xb5\x2f\xfd" in packed
    assert archs_in_fatbin(packed) == archs_in_fatbin(plain)


def test_plain_elf_without_fatbin_is_empty(built: dict[str, Path]) -> None:
    assert archs_in_elf(built["plain"].read_bytes()) == EMPTY


def test_not_an_elf_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a readable ELF") as exc:
        archs_in_elf(b"definitely not an ELF file")
    assert not isinstance(exc.value, FatbinFormatError)


def test_zero_padding_between_containers_is_skipped(built: dict[str, Path]) -> None:
    _, section = _fatbin_section(built["sass2"])
    assert archs_in_fatbin(section + bytes(8) + section + bytes(16)) == SINGLE_TU["sass2"][1]
    assert archs_in_fatbin(b"") == EMPTY


def _patched(path: Path, rel_offset: int, new: bytes) -> bytes:
    """The file's bytes with *new* written at *rel_offset* into .nv_fatbin."""
    sh_offset, _ = _fatbin_section(path)
    data = bytearray(path.read_bytes())
    data[sh_offset + rel_offset : sh_offset + rel_offset + len(new)] = new
    return bytes(data)


@pytest.mark.parametrize(
    ("rel_offset", "new", "message"),
    [
        (0, b"\xde\xad\xbe\xef", "bad fatbin magic"),
        (8, struct.pack("<Q", 1 << 40), "overruns"),  # container fat_size
        (16 + 4, struct.pack("<I", 0), "bad fatbin entry sizes"),  # entry header_size
        (16 + 8, struct.pack("<Q", 1 << 40), "bad fatbin entry sizes"),  # payload size
    ],
)
def test_corrupt_fatbin_raises(built: dict[str, Path], rel_offset: int, new: bytes, message: str) -> None:
    with pytest.raises(FatbinFormatError, match=message):
        archs_in_elf(_patched(built["sass_ptx"], rel_offset, new))


def test_truncated_section_raises(built: dict[str, Path]) -> None:
    _, section = _fatbin_section(built["sass_ptx"])
    for cut in (10, 20, len(section) - 8):
        with pytest.raises(FatbinFormatError):
            archs_in_fatbin(section[:cut])


def test_archs_in_wheel(built: dict[str, Path], tmp_path: Path) -> None:
    wheel = tmp_path / "demo-1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("demo/__init__.py", "")
        zf.write(built["sass2"], "demo/_C.so")
        zf.write(built["ptx_only"], "demo/ops/_ptx.so")
        zf.write(built["two_tu"], "demo/_two.so")
        zf.write(built["plain"], "demo/_plain.so")
        zf.write(built["plain"], "demo.libs/libplain.so.1")  # versioned: not a *.so name
        zf.writestr("demo-1.0.dist-info/RECORD", "")
    assert archs_in_wheel(wheel) == {
        "demo/_C.so": SINGLE_TU["sass2"][1],
        "demo/ops/_ptx.so": SINGLE_TU["ptx_only"][1],
        "demo/_two.so": TWO_TU,
        "demo/_plain.so": EMPTY,
    }


def test_matches_cuobjdump(built: dict[str, Path]) -> None:
    tool = toolchain.require("cuobjdump")
    for name in [*SINGLE_TU, "two_tu"]:
        listing = subprocess.run(
            [tool, "--list-elf", "--list-ptx", str(built[name])],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        # e.g. "ELF file    1: sass2.1.sm_100.cubin", "PTX file    1: x.1.sm_120.ptx"
        found = re.findall(r"\.sm_(\d+)[a-z]?\.(cubin|ptx)$", listing, re.MULTILINE)
        expected = CudaArchs(
            sass=frozenset(int(sm) for sm, ext in found if ext == "cubin"),
            ptx=frozenset(int(sm) for sm, ext in found if ext == "ptx"),
        )
        assert archs_in_elf(built[name].read_bytes()) == expected, name
