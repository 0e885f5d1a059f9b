"""What a built wheel really holds: its name, version, tags and hash, the torch it requires, the
CUDA runtime its extension modules link, and which CUDA architectures are compiled into them.

Reads the ``.nv_fatbin`` ELF section directly (no cuobjdump needed). Layout,
checked against nvcc 13.0 output and cuobjdump 13.x (all little-endian):

Container header, 16 bytes; a section holds several back to back (one per
linked translation unit; nvcc 13 ``-shared`` adds one more at link time):

    0  u32 magic 0xBA55ED50
    4  u16 version (1)
    6  u16 header_size (16): entries start here
    8  u64 fat_size: bytes of entries after the header

Entry header, 64/80/96/112 bytes, followed by its payload:

    0  u16 kind: 1 = PTX, 2 = ELF (SASS cubin), 8 = NVVM IR (LTO)
    2  u16 version (0x0101)
    4  u32 header_size: payload starts here
    8  u64 payload size, padded to 8: the next entry follows it
   16  u32 compressed size (0 if stored plain)
   24  u16 minor, u16 major: PTX ISA / ELF format version
   28  u32 SM arch, e.g. 90, 100, 120 ("sm_90a" is 90 plus flag 0x100000)
   40  u64 flags: 0x8000 = payload zstd-compressed
   56  u64 uncompressed size

Only the headers are read, so compressed payloads (nvcc compresses PTX by
default, and ELF too with ``-Xfatbin -compress-all``) are reported like
plain ones. ``__nv_relfatbin`` (relocatable device code kept for device
linking) is ignored: the CUDA runtime only loads ``.nv_fatbin``.

A wheel is untrusted input (publish takes files from anywhere): every member is read through
:func:`read_member`, which refuses, before reading a byte, one whose declared size or compression
ratio is over a cap, and stops a stream that runs past its declared size; and every ELF section
through elf_sections, which reads only the bytes the file holds (never an SHT_NOBITS section's
claimed size, never a compressed one past the same caps).
"""

from __future__ import annotations

import contextlib
import email.message
import email.parser
import hashlib
import io
import lzma
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from .archive import NotAZip, check_one_archive
from .elf_sections import (
    CORRUPT_ELF,
    MAX_INFLATED_SIZE,
    MAX_INFLATION_RATIO,
    SectionRefused,
    check_bounds,
    open_elf,
    section_bytes,
)
from .tags import check_tags

__all__ = [
    "CudaArchs",
    "ExtensionModule",
    "FatbinFormatError",
    "UnsafeMember",
    "WheelInfo",
    "archs_in_elf",
    "archs_in_fatbin",
    "archs_in_wheel",
    "inspect_wheel",
    "member_chunks",
    "metadata_fields",
    "metadata_of",
    "read_member",
]

FATBIN_MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header_size, fat_size
_ENTRY = struct.Struct("<HHIQ")  # kind, version, header_size, padded payload size
_ARCH = struct.Struct("<I")
_ARCH_OFFSET = 28
_MIN_ENTRY_HEADER = _ARCH_OFFSET + _ARCH.size
_KIND_PTX = 1
_KIND_ELF = 2

# Caps on what is read out of a wheel. Real METADATA is a few KiB (a long README inlined makes it
# tens); a RECORD has a line of about 150 bytes per file (16 MiB: some 100k files). Any other
# member inflates no further than anything compressed in a wheel may (elf_sections' caps).
MAX_METADATA_SIZE = 1024**2
MAX_RECORD_SIZE = 16 * 1024**2
MAX_MEMBER_SIZE = MAX_INFLATED_SIZE
MAX_COMPRESSION_RATIO = MAX_INFLATION_RATIO
_CHUNK = 1 << 20
_READABLE = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA})


class FatbinFormatError(ValueError):
    """The ``.nv_fatbin`` section is corrupt (bad magic, truncated, bad sizes)."""


class UnsafeMember(ValueError):
    """A wheel member is refused unread: too large, or compressed suspiciously well (a zip bomb)."""


def read_member(
    wheel: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    max_size: int = MAX_MEMBER_SIZE,
    max_ratio: float | None = MAX_COMPRESSION_RATIO,
) -> bytes:
    """A member's bytes, refusing (unread) one over the size or compression-ratio cap.

    Raises ``UnsafeMember`` for a member over a cap, ``ValueError`` for one that cannot be read
    (a compression method zipfile lacks, encryption, corrupt compressed data), and lets
    ``zipfile.BadZipFile`` through (a bad CRC: the archive itself is damaged)."""
    return b"".join(member_chunks(wheel, info, max_size, max_ratio))


def member_chunks(
    wheel: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    max_size: int = MAX_MEMBER_SIZE,
    max_ratio: float | None = MAX_COMPRESSION_RATIO,
) -> Iterator[bytes]:
    """A member's bytes a chunk at a time (to hash one without holding it), under the caps and
    with the errors of :func:`read_member`; the caps are checked before the first chunk."""
    if info.file_size > max_size:
        raise UnsafeMember(
            f"{info.filename}: {info.file_size} bytes uncompressed, over the cap of {max_size} bytes"
        )
    if max_ratio is not None and info.file_size > max_ratio * max(info.compress_size, 1):
        raise UnsafeMember(
            f"{info.filename}: {info.compress_size} bytes would expand to {info.file_size}, "
            f"a compression ratio over the cap of {max_ratio:g}"
        )
    if info.compress_type not in _READABLE:
        raise ValueError(
            f"{info.filename}: compression method {info.compress_type} is not one wheelbuild reads"
        )
    if info.flag_bits & 0x1:
        raise ValueError(f"{info.filename}: the member is encrypted")
    return _chunks(wheel, info)


def _chunks(wheel: zipfile.ZipFile, info: zipfile.ZipInfo) -> Iterator[bytes]:
    size = 0
    try:
        with wheel.open(info) as stream:
            while chunk := stream.read(_CHUNK):
                size += len(chunk)
                if size > info.file_size:  # zipfile stops at the declared size; never trust that alone
                    raise UnsafeMember(f"{info.filename}: longer than its declared {info.file_size} bytes")
                yield chunk
    # OSError: bz2's word for corrupt data. zipfile.BadZipFile (a bad CRC) is none of these.
    except (NotImplementedError, RuntimeError, EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
        raise ValueError(f"{info.filename}: cannot be decompressed ({exc})") from exc


def metadata_fields(metadata: bytes) -> email.message.Message:
    """METADATA's headers. Parsed as text: bytes parsing hands back ``email.header.Header``
    objects (shown as ``<email.header.Header object ...>``) for any non-ASCII value. Core
    metadata is UTF-8; bytes that are not read as U+FFFD, for display."""
    return email.parser.Parser().parsestr(metadata.decode("utf-8", errors="replace"), headersonly=True)


@dataclass(frozen=True)
class CudaArchs:
    """SM versions found in one shared object."""

    sass: frozenset[int]  # real cubin (ELF) entries, e.g. {100, 120}
    ptx: frozenset[int]  # virtual archs with PTX entries, e.g. {120}


EMPTY = CudaArchs(sass=frozenset(), ptx=frozenset())


def archs_in_fatbin(section: bytes) -> CudaArchs:
    """Parse the raw contents of a ``.nv_fatbin`` section."""
    sass: set[int] = set()
    ptx: set[int] = set()
    pos, end = 0, len(section)
    while True:
        # The linker may pad between containers to the section alignment;
        # the magic's first byte is non-zero, so zeros are never a header.
        while pos < end and section[pos] == 0:
            pos += 1
        if pos == end:
            break
        if end - pos < _CONTAINER.size:
            raise FatbinFormatError(f"truncated fatbin header at offset {pos:#x}")
        magic, _version, header_size, fat_size = _CONTAINER.unpack_from(section, pos)
        if magic != FATBIN_MAGIC:
            raise FatbinFormatError(f"bad fatbin magic {magic:#010x} at offset {pos:#x}")
        entry = pos + header_size
        container_end = entry + fat_size
        if header_size < _CONTAINER.size or container_end > end:
            raise FatbinFormatError(f"fatbin container at {pos:#x} overruns the section")
        while entry < container_end:
            if container_end - entry < _MIN_ENTRY_HEADER:
                raise FatbinFormatError(f"truncated fatbin entry at offset {entry:#x}")
            kind, _ver, entry_header, payload = _ENTRY.unpack_from(section, entry)
            (arch,) = _ARCH.unpack_from(section, entry + _ARCH_OFFSET)
            # A too-small header would also loop forever or read the arch
            # out of the payload; a too-big size would skip past the end.
            if entry_header < _MIN_ENTRY_HEADER or entry + entry_header + payload > container_end:
                raise FatbinFormatError(f"bad fatbin entry sizes at offset {entry:#x}")
            if kind == _KIND_ELF:
                sass.add(arch)
            elif kind == _KIND_PTX:
                ptx.add(arch)
            # Other kinds (NVVM IR for LTO) are neither SASS nor PTX.
            entry += entry_header + payload
        pos = container_end
    return CudaArchs(sass=frozenset(sass), ptx=frozenset(ptx))


def archs_in_elf(data: bytes) -> CudaArchs:
    """Archs in one ELF shared object/object file; empty if it has no device code.

    Raises ``ValueError`` if *data* is not a readable ELF file and
    ``FatbinFormatError`` if its fatbin is corrupt: past the end of the file, without bytes in it
    (SHT_NOBITS), or compressed past the caps (elf_sections reads it).
    """
    stream = io.BytesIO(data)
    section = None
    try:
        elf, file_size = open_elf(stream)
        section = elf.get_section_by_name(".nv_fatbin")
        if section is None:
            return EMPTY
        raw = section_bytes(stream, section, file_size)
    except SectionRefused as refused:
        if section is None:  # the headers themselves, before the fatbin was found
            raise ValueError(f"not a readable ELF file: {refused}") from refused
        raise FatbinFormatError(str(refused)) from refused
    except CORRUPT_ELF as exc:
        raise ValueError(f"not a readable ELF file: {exc}") from exc
    return archs_in_fatbin(raw)


def archs_in_wheel(path: Path) -> dict[str, CudaArchs]:
    """Member name -> archs for every ``*.so`` member of the wheel at *path*."""
    result: dict[str, CudaArchs] = {}
    with zipfile.ZipFile(path) as wheel:
        for info in wheel.infolist():
            if info.is_dir() or not info.filename.endswith(".so"):
                continue
            # ELFFile needs random access; a zip member stream seeks slowly.
            result[info.filename] = archs_in_elf(read_member(wheel, info))
    return result


def _needed(data: bytes) -> tuple[str, ...]:
    """DT_NEEDED entries (the sonames a shared object links) of one ELF file."""
    try:
        elf, file_size = open_elf(io.BytesIO(data))
        dynamic = elf.get_section_by_name(".dynamic")
        if not isinstance(dynamic, DynamicSection):
            return ()
        check_bounds(dynamic, file_size)
        return tuple(str(getattr(tag, "needed")) for tag in dynamic.iter_tags("DT_NEEDED"))  # noqa: B009
    except CORRUPT_ELF as exc:
        raise ValueError(f"not a readable ELF file: {exc}") from exc


@dataclass(frozen=True)
class ExtensionModule:
    """One ``.so`` in a wheel: its CUDA code and the CUDA runtime it links."""

    member: str  # e.g. wbdemo/_C.cpython-311-x86_64-linux-gnu.so
    archs: CudaArchs
    cudart: tuple[str, ...]  # DT_NEEDED libcudart sonames, e.g. ("libcudart.so.13",)


@dataclass(frozen=True)
class WheelInfo:
    """A wheel as `wheelbuild inspect` shows it and the publish checks judge it."""

    path: Path
    name: str  # as the filename spells it
    version: str  # from the filename
    tags: tuple[str, ...]  # cp311-cp311-manylinux_2_34_x86_64, ...
    sha256: str
    size: int
    metadata_name: str
    metadata_version: str  # METADATA's Version: must equal the filename's
    requires_dist: tuple[str, ...]
    requires_python: str | None
    modules: tuple[ExtensionModule, ...]

    @property
    def torch_requirements(self) -> tuple[str, ...]:
        """Requires-Dist entries naming torch, as written."""
        return tuple(r for r in self.requires_dist if _requirement_name(r) == "torch")

    @property
    def local_label(self) -> str | None:
        """The version's local label: 0.1.0+cu130torch2.11 -> cu130torch2.11."""
        return self.version.partition("+")[2] or None

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.path.name,
            "name": self.name,
            "version": self.version,
            "tags": list(self.tags),
            "sha256": self.sha256,
            "size": self.size,
            "metadata": {
                "name": self.metadata_name,
                "version": self.metadata_version,
                "requires_python": self.requires_python,
                "requires_dist": list(self.requires_dist),
            },
            "torch_requirement": list(self.torch_requirements),
            "extension_modules": {
                m.member: {
                    "sass": sorted(m.archs.sass),
                    "ptx": sorted(m.archs.ptx),
                    "cudart": list(m.cudart),
                }
                for m in self.modules
            },
        }


def _requirement_name(text: str) -> str | None:
    try:
        return canonicalize_name(Requirement(text).name)
    except InvalidRequirement:
        return None


def metadata_of(wheel: zipfile.ZipFile) -> tuple[str, bytes]:
    """The ``*.dist-info/METADATA`` member of an open wheel: (member name, bytes). Raises
    ValueError (``UnsafeMember`` for one over MAX_METADATA_SIZE) when there is not exactly one,
    or it cannot be read."""
    infos = [
        i
        for i in wheel.infolist()
        if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/METADATA")
    ]
    if len(infos) != 1:
        raise ValueError(f"expected one <name>-<version>.dist-info/METADATA, found {len(infos)}")
    # Text: no ratio cap (a long README deflates well); the size cap alone bounds the memory.
    return infos[0].filename, read_member(wheel, infos[0], MAX_METADATA_SIZE, max_ratio=None)


def _extension_module(wheel: zipfile.ZipFile, info: zipfile.ZipInfo) -> ExtensionModule:
    """One ``.so`` member read: its archs and the CUDA runtime it links. A refusal names it."""
    so = read_member(wheel, info)  # its refusals name the member already
    try:
        cudart = tuple(n for n in _needed(so) if n.startswith("libcudart"))
        return ExtensionModule(member=info.filename, archs=archs_in_elf(so), cudart=cudart)
    except FatbinFormatError as exc:
        raise FatbinFormatError(f"{info.filename}: {exc}") from exc
    except ValueError as exc:
        raise ValueError(f"{info.filename}: {exc}") from exc


def inspect_wheel(path: Path) -> WheelInfo:
    """Read a wheel. Raises ValueError when it is not a well-formed wheel."""
    try:
        _name, version, _build, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        raise ValueError(f"{path.name} is not a wheel filename: {exc}") from exc
    if not path.is_file():  # a directory, or a device that reads forever (/dev/zero)
        raise ValueError(f"{path} is not a file")
    data = path.read_bytes()
    modules = []
    with contextlib.suppress(NotAZip):  # zipfile says what it is not, below
        check_one_archive(io.BytesIO(data))
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as wheel:
            check_tags(wheel, path.name)
            _, metadata = metadata_of(wheel)
            for info in wheel.infolist():
                if info.is_dir() or not info.filename.endswith(".so"):
                    continue
                modules.append(_extension_module(wheel, info))
    except zipfile.BadZipFile as exc:
        raise ValueError(f"{path.name} is not a zip archive: {exc}") from exc
    fields = metadata_fields(metadata)
    return WheelInfo(
        path=path,
        name=path.name.split("-")[0],
        version=str(version),
        tags=tuple(sorted(str(t) for t in tags)),
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        metadata_name=str(fields.get("Name", "")),
        metadata_version=str(fields.get("Version", "")),
        requires_dist=tuple(str(r) for r in fields.get_all("Requires-Dist") or []),
        requires_python=str(fields["Requires-Python"]) if fields.get("Requires-Python") else None,
        modules=tuple(modules),
    )


def requirements_in(metadata: bytes) -> Iterator[Requirement]:
    """The Requires-Dist entries of a METADATA's header that parse (a bad one is passed over)."""
    head = metadata.decode("utf-8", errors="replace").split("\n\n", 1)[0]
    for line in head.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "requires-dist":
            with contextlib.suppress(InvalidRequirement):
                yield Requirement(value.strip())
