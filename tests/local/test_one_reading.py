"""What pip sees is what was checked: `wheelbuild publish` (the real CLI, on this machine) takes a
wheel only if its bytes are one well-formed zip and its tags agree with its binaries.

Each case was published with exit 0 before (the hardening probe): two wheels concatenated (zipfile
and pip read one, a stream reader the other), a local entry the central directory does not list
(`.data/purelib/zz_evil.pth`, which RECORD's check never saw), and tags that lie about the
binaries. Each now ends in one line of cause and one of remedy, its own exit code, and an
untouched tree."""

from __future__ import annotations

import io
import struct
import subprocess
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from wheelbuild.errors import WheelArchiveAmbiguous, WheelTagsDisagree
from wheelbuild.index.publish import publish

from tests.indexkit import make_wheel

Run = Callable[..., subprocess.CompletedProcess[str]]


def _elf(machine: int = 62, elf_class: int = 2) -> bytes:
    """The first 64 bytes of a little-endian ELF file for *machine* (62: x86-64, 183: aarch64)."""
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4], header[5], header[6] = elf_class, 1, 1
    struct.pack_into("<HHI", header, 16, 3, machine, 1)  # ET_DYN, e_machine, EV_CURRENT
    struct.pack_into("<HHHHHH", header, 52, 64, 56, 0, 64, 0, 0)  # header sizes; no segments, no sections
    return bytes(header)


def _publish(run_cli: Run, wheel: Path, tree: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("publish", str(wheel), "--to", str(tree), "--torch", "2.11.0+cu130")


def _refused(done: subprocess.CompletedProcess[str], code: int, says: str, tree: Path) -> None:
    assert done.returncode == code, done.stdout + done.stderr
    cause, remedy = done.stderr.splitlines()  # no traceback
    assert cause.startswith("error: ") and says in cause, cause
    assert remedy.startswith("remedy: ")
    assert not (tree / "files").exists()


def test_the_untouched_wheels_pass_the_one_reading_checks(tmp_path: Path) -> None:
    """The control: the wheels of the cases below, unchanged, are taken by the index tree (the CLI
    then asks for CUDA code, which these tiny wheels have none of)."""
    plain = make_wheel(tmp_path / "in")
    tagged = make_wheel(tmp_path / "in", tag="cp312-cp312-manylinux_2_34_x86_64",
                        extra_files={"wbtiny/_C.cpython-312-x86_64-linux-gnu.so": _elf()})  # fmt: skip
    publish([plain, tagged], tmp_path / "tree")
    assert {p.name for p in (tmp_path / "tree" / "files").glob("*.whl")} == {plain.name, tagged.name}


@pytest.mark.parametrize("where", ["prepended", "appended"])
def test_a_second_wheel_before_or_after_the_first_is_refused(
    tmp_path: Path, run_cli: Run, where: str
) -> None:
    checked = make_wheel(tmp_path / "a")
    other = make_wheel(tmp_path / "b", payload="import os  # another wheel's code")
    data = (
        other.read_bytes() + checked.read_bytes()
        if where == "prepended"
        else checked.read_bytes() + other.read_bytes()
    )
    with zipfile.ZipFile(io.BytesIO(data)) as seen:  # zipfile takes it, as pip would
        assert seen.namelist()
    checked.write_bytes(data)
    tree = tmp_path / "tree"
    _refused(
        _publish(run_cli, checked, tree), WheelArchiveAmbiguous.exit_code, "is not one well-formed zip", tree
    )


def test_a_local_entry_missing_from_the_central_directory_is_refused(tmp_path: Path, run_cli: Run) -> None:
    wheel = make_wheel(tmp_path / "in")
    data = wheel.read_bytes()
    with zipfile.ZipFile(wheel) as archive:
        first = archive.infolist()[0]
        cd_offset = archive.start_dir
    name = b"wbtiny-0.1.0+cu130torch2.11.data/purelib/zz_evil.pth"
    body = b"import os; os.system('id')\n"
    hidden = (
        struct.pack(
            "<4sHHHHHIIIHH",
            b"PK\x03\x04",
            20,
            0,
            0,
            0,
            0,
            zlib.crc32(body),
            len(body),
            len(body),
            len(name),
            0,
        )
        + name
        + body
    )
    # Slipped in before the central directory, whose offsets (and the end record's) are moved past it.
    patched = bytearray(data[:cd_offset] + hidden + data[cd_offset:])
    end = patched.rfind(b"PK\x05\x06")
    struct.pack_into("<I", patched, end + 16, cd_offset + len(hidden))
    wheel.write_bytes(bytes(patched))
    with zipfile.ZipFile(wheel) as archive:  # the central directory's readers never see it
        assert name.decode() not in archive.namelist() and archive.getinfo(first.filename)
    tree = tmp_path / "tree"
    _refused(_publish(run_cli, wheel, tree), WheelArchiveAmbiguous.exit_code, "a hidden entry", tree)


@pytest.mark.parametrize(
    ("tag", "files", "says"),
    [
        ("cp312-cp312-manylinux_2_34_x86_64", {"wbtiny/_C.cpython-311-x86_64-linux-gnu.so": _elf()},
         "is for CPython 3.11 (cp311)"),
        ("cp312-cp312-macosx_11_0_arm64", {"wbtiny/_C.cpython-312-darwin.so": _elf()},
         "tagged for macosx_11_0_arm64, yet holds the Linux ELF file"),
        ("cp312-cp312-win_amd64", {"wbtiny/_C.cp312-win_amd64.pyd": _elf()},
         "tagged for win_amd64, yet holds the Linux ELF file"),
        ("cp312-cp312-manylinux_2_34_aarch64", {"wbtiny/_C.cpython-312-aarch64-linux-gnu.so": _elf(62)},
         "tagged for manylinux_2_34_aarch64, yet 'wbtiny/_C.cpython-312-aarch64-linux-gnu.so' is an ELF file for x86_64"),
        ("py3-none-any", {"wbtiny/_C.cpython-312-x86_64-linux-gnu.so": _elf()},
         "tagged py3-none-any (no platform), yet holds the extension module"),
    ],
)  # fmt: skip
def test_tags_that_lie_about_the_binaries_are_refused(
    tmp_path: Path, run_cli: Run, tag: str, files: dict[str, bytes], says: str
) -> None:
    wheel = make_wheel(tmp_path / "in", tag=tag, extra_files=files)
    tree = tmp_path / "tree"
    _refused(_publish(run_cli, wheel, tree), WheelTagsDisagree.exit_code, says, tree)
