"""ELF bombs: a small shared object whose section headers ask for more than the file holds. A
`.nv_fatbin` of type SHT_NOBITS with a huge size (pyelftools' data() would hand back that many
zeros), and an SHF_COMPRESSED one declaring or inflating past the caps. Every reader of a wheel's
ELF files (inspect's fatbin and DT_NEEDED, the ABI check's symbol versions) reads its sections
through wheel/elf_sections.py and refuses these in one line, never asking for more than a cap.

The shared objects are compiled with gcc (a real ELF layout) and one section header rewritten."""

from __future__ import annotations

import contextlib
import io
import struct
import subprocess
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from wheelbuild.errors import InvalidWheel
from wheelbuild.pipeline.check import inspect_or_refuse
from wheelbuild.wheel.contents import (
    MAX_MEMBER_SIZE,
    CudaArchs,
    FatbinFormatError,
    archs_in_elf,
    inspect_wheel,
)

from tests import toolchain
from tests.indexkit import make_wheel

SHT_NOBITS = 8
SHF_COMPRESSED = 0x800
ELFCOMPRESS_ZLIB = 1
SHDR_TYPE, SHDR_FLAGS, SHDR_SIZE = 4, 8, 32  # field offsets in an ELF64 section header
# A memory ceiling for one inspection, far below any bomb here (the smallest asks for 64 MiB).
INSPECT_PEAK = 8 * 1024**2
# The tag an x86-64 extension module may carry (a py3-none-any wheel holding one is refused for it).
LINUX = "cp311-cp311-linux_x86_64"


def _fatbin(arch: int) -> bytes:
    """A .nv_fatbin holding one container with one SASS (ELF) entry for sm_<arch>: 16 + 64 + 8
    bytes, the layout wheel/contents.py documents."""
    entry = bytearray(64)
    struct.pack_into("<HHIQ", entry, 0, 2, 0x0101, 64, 8)  # kind ELF, version, header, payload
    struct.pack_into("<I", entry, 28, arch)
    body = bytes(entry) + bytes(8)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def _compressed(payload: bytes, declared: int | None = None) -> bytes:
    """SHF_COMPRESSED contents: an Elf64_Chdr (zlib, declared size, alignment) and the stream."""
    size = len(payload) if declared is None else declared
    return struct.pack("<IIQQ", ELFCOMPRESS_ZLIB, 0, size, 8) + zlib.compress(payload, 9)


@pytest.fixture(scope="module")
def compile_so(tmp_path_factory: pytest.TempPathFactory) -> Callable[[bytes], bytes]:
    """gcc-compiled shared object whose `.nv_fatbin` section holds *contents*."""
    cc = toolchain.require("gcc")
    scratch = tmp_path_factory.mktemp("elf")
    made = iter(range(1000))

    def compile_with(contents: bytes) -> bytes:
        n = next(made)
        source, so = scratch / f"m{n}.c", scratch / f"m{n}.so"
        array = ", ".join(str(b) for b in contents) or "0"
        source.write_text(
            f'__attribute__((section(".nv_fatbin"), used)) static const unsigned char fatbin[] = {{{array}}};\n'
            "int answer(void) { return 42; }\n"
        )
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(source)], check=True)
        return so.read_bytes()

    return compile_with


def _rewrite_fatbin_header(
    elf: bytes, *, sh_type: int | None = None, flags: int = 0, size: int | None = None
) -> bytes:
    """*elf* with its `.nv_fatbin` section header's type, flags (or-ed in) or size rewritten."""
    parsed = ELFFile(io.BytesIO(elf))
    index = next(i for i, s in enumerate(parsed.iter_sections()) if s.name == ".nv_fatbin")
    header = parsed["e_shoff"] + index * parsed["e_shentsize"]
    data = bytearray(elf)
    if sh_type is not None:
        struct.pack_into("<I", data, header + SHDR_TYPE, sh_type)
    if flags:
        (old,) = struct.unpack_from("<Q", data, header + SHDR_FLAGS)
        struct.pack_into("<Q", data, header + SHDR_FLAGS, old | flags)
    if size is not None:
        struct.pack_into("<Q", data, header + SHDR_SIZE, size)
    return bytes(data)


def _peak_of(read: Callable[[], object]) -> int:
    """The most memory *read* held at once, while it ran (it is expected to raise)."""
    tracemalloc.start()
    try:
        with contextlib.suppress(ValueError, InvalidWheel):
            read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_nobits_fatbin_of_a_tebibyte_is_refused_unread(
    compile_so: Callable[[bytes], bytes], tmp_path: Path
) -> None:
    bomb = _rewrite_fatbin_header(compile_so(_fatbin(90)), sh_type=SHT_NOBITS, size=1 << 40)
    assert len(bomb) < 32 * 1024  # a 16 KiB file that asked pyelftools for 1 TiB of zeros
    with pytest.raises(FatbinFormatError, match=r"\.nv_fatbin holds no bytes in the file \(SHT_NOBITS\)"):
        archs_in_elf(bomb)
    wheel = make_wheel(tmp_path, tag=LINUX, extra_files={"wbtiny/_C.so": bomb})
    with pytest.raises(InvalidWheel, match="SHT_NOBITS") as refused:
        inspect_or_refuse(wheel)
    assert refused.value.exit_code == 52
    assert _peak_of(lambda: inspect_wheel(wheel)) < INSPECT_PEAK


def test_a_nobits_helper_library_is_refused_by_inspect_and_publish_in_one_line(
    compile_so: Callable[[bytes], bytes],
    tmp_path: Path,
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """Run for real, in a 1 GiB address space: a reader that made the 600 MiB of zeros (or the
    TiB) would fail there with a MemoryError traceback instead of refusing."""
    helper = _rewrite_fatbin_header(compile_so(_fatbin(90)), sh_type=SHT_NOBITS, size=600 * 1024**2)
    wheel = make_wheel(
        tmp_path / "in",
        tag=LINUX,
        extra_files={"wbtiny/_C.so": compile_so(_fatbin(100)), "wbtiny/_helper.so": helper},
    )
    for args in (
        ("inspect", str(wheel)),
        ("publish", str(wheel), "--to", str(tmp_path / "tree"), "--torch", "cu130"),
    ):
        done = run_cli(*args, capped=True)
        assert done.returncode == 52, done.stderr
        cause, remedy = done.stderr.splitlines()  # one line of cause, one of remedy: no traceback
        assert cause.startswith("error: ") and "wbtiny/_helper.so: section .nv_fatbin" in cause
        assert "SHT_NOBITS" in cause and remedy.startswith("remedy: ")
    assert not (tmp_path / "tree").exists()  # nothing published, nothing written


def test_a_compressed_fatbin_is_inflated_within_its_declared_size(
    compile_so: Callable[[bytes], bytes],
) -> None:
    so = _rewrite_fatbin_header(compile_so(_compressed(_fatbin(90))), flags=SHF_COMPRESSED)
    assert archs_in_elf(so) == CudaArchs(sass=frozenset({90}), ptx=frozenset())


@pytest.mark.parametrize(
    ("payload", "declared", "says"),
    [
        (b"", MAX_MEMBER_SIZE + 1, "over the cap"),  # declares past 2 GiB, a member's cap: refused unread
        (bytes(64 * 1024**2), None, "over the cap"),  # 64 MiB of zeros in ~64 KiB: ratio 1000
        (bytes(64 * 1024**2), 1024, "inflates to more than the 1024 bytes it declares"),
        (_fatbin(90), 4096, "inflates to less than the 4096 bytes it declares"),
    ],
    ids=["declares-past-2-gib", "ratio-past-100", "inflates-past-its-declared-size", "inflates-short"],
)
def test_a_compressed_fatbin_past_the_caps_is_refused_without_inflating_it(
    compile_so: Callable[[bytes], bytes], tmp_path: Path, payload: bytes, declared: int | None, says: str
) -> None:
    so = _rewrite_fatbin_header(compile_so(_compressed(payload, declared)), flags=SHF_COMPRESSED)
    with pytest.raises(FatbinFormatError, match=says):
        archs_in_elf(so)
    wheel = make_wheel(tmp_path, tag=LINUX, extra_files={"wbtiny/_C.so": so})
    with pytest.raises(InvalidWheel, match=says):
        inspect_or_refuse(wheel)
    assert _peak_of(lambda: inspect_wheel(wheel)) < INSPECT_PEAK  # never inflated to 64 MiB
