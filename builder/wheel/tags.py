"""A wheel's tags against the binaries it holds: an installer picks a wheel by its tags alone, so
tags that lie put a binary where it cannot load (a CPython 3.11 module in a cp312 wheel, an x86-64
library in an aarch64 or macOS wheel, an extension module in a py3-none-any wheel).

- every extension module's ABI suffix (``.cpython-311-x86_64-linux-gnu.so``) names the CPython
  each tag's interpreter names (an ``.abi3.so`` loads on any CPython 3, so it never disagrees);
- a wheel tagged ``any`` for its platform holds no extension module and no ELF file at all;
- ELF files (read by their first bytes) only in a Linux-tagged wheel (manylinux, musllinux,
  linux), and of the machine and class its platform tag names.

Reads nothing but the open archive: at most an ELF header of each member.
"""

from __future__ import annotations

import lzma
import re
import struct
import zipfile
import zlib

from packaging.tags import Tag
from packaging.utils import parse_wheel_filename

from ..errors import WheelArchiveAmbiguous, WheelbuildError, WheelTagsDisagree
from .archive import AmbiguousArchive

__all__ = ["TagsDisagree", "check_tags", "one_reading_refusal"]

_ELF_MAGIC = b"\x7fELF"
_ELF_HEADER = 20  # through e_machine
# The platform tag's architecture -> (ELF e_machine, ELFCLASS: 1 = 32-bit, 2 = 64-bit).
_MACHINES = {
    "x86_64": (62, 2),
    "aarch64": (183, 2),
    "i686": (3, 1),
    "ppc64le": (21, 2),
    "ppc64": (21, 2),
    "s390x": (22, 2),
    "armv7l": (40, 1),
    "riscv64": (243, 2),
}
_EXTENSION = re.compile(r"\.(?:cpython-(\d)(\d+)[a-z]*-[^/]*\.so|abi3\.so|so|pyd)$")
_LINUX = re.compile(r"^(?:manylinux|musllinux|linux)")


class TagsDisagree(ValueError):
    """The wheel's tags say one thing and its binaries another; the message names both."""


def check_tags(archive: zipfile.ZipFile, filename: str) -> None:
    """Raise TagsDisagree unless every tag of *filename* agrees with the binaries in *archive*."""
    tags = parse_wheel_filename(filename)[3]
    for info in archive.infolist():
        if info.is_dir():
            continue
        name = info.filename
        module = _EXTENSION.search(name)
        elf = _elf_header(archive, info)
        if module is None and elf is None:
            continue
        for tag in sorted(tags, key=str):
            _check_one(tag, name, module, elf)


def _check_one(tag: Tag, name: str, module: re.Match[str] | None, elf: tuple[int, int] | None) -> None:
    what = "extension module" if module is not None else "ELF file"
    if tag.platform == "any":
        raise TagsDisagree(f"it is tagged {tag} (no platform), yet holds the {what} {name!r}")
    if module is not None and module[1] is not None and tag.interpreter.startswith("cp"):
        built_for = f"cp{module[1]}{module[2]}"
        if tag.interpreter != built_for:
            raise TagsDisagree(
                f"it is tagged {tag.interpreter}, yet its extension module {name!r} is for CPython "
                f"{module[1]}.{module[2]} ({built_for})"
            )
    if elf is None:
        return
    if not _LINUX.match(tag.platform):
        raise TagsDisagree(f"it is tagged for {tag.platform}, yet holds the Linux ELF file {name!r}")
    arch = next((a for a in _MACHINES if tag.platform.endswith(f"_{a}")), None)
    wanted = _MACHINES.get(arch) if arch else None
    if wanted is not None and elf != wanted:
        raise TagsDisagree(
            f"it is tagged for {tag.platform}, yet {name!r} is an ELF file for {_machine_name(elf)}"
        )


def _elf_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[int, int] | None:
    """(e_machine, ELF class) of a member that is an ELF file, else None: only its first bytes
    are read."""
    if info.file_size < _ELF_HEADER:
        return None
    try:
        with archive.open(info) as member:
            head = member.read(_ELF_HEADER)
    except (RuntimeError, NotImplementedError, EOFError, OSError, zlib.error, lzma.LZMAError):
        return None  # encrypted or undecodable: refused where its bytes are read (contents, layout)
    if len(head) < _ELF_HEADER or head[:4] != _ELF_MAGIC:
        return None
    elf_class, data = head[4], head[5]
    machine = struct.unpack_from("<H" if data == 1 else ">H", head, 18)[0]
    return machine, elf_class


def _machine_name(elf: tuple[int, int]) -> str:
    for arch, known in _MACHINES.items():
        if known == elf:
            return arch
    return f"machine {elf[0]}, {'64' if elf[1] == 2 else '32'}-bit"


def one_reading_refusal(name: str, error: ValueError) -> WheelbuildError | None:
    """The refusal, with its own exit code, of a wheel that is not one well-formed zip or whose
    tags lie; None for any other error."""
    if isinstance(error, AmbiguousArchive):
        return WheelArchiveAmbiguous(
            f"{name} is not one well-formed zip: {error}",
            "publish the wheel `wheelbuild build` wrote, as it wrote it (a wheel rezipped, appended to "
            "or edited by hand can show pip other files than the ones checked)",
        )
    if isinstance(error, TagsDisagree):
        return WheelTagsDisagree(
            f"{name}'s tags disagree with what it holds: {error}",
            "build the wheel for the Python and platform it is tagged for (a renamed wheel installs "
            "where its binaries cannot load)",
        )
    return None
