"""What an installer requires of a wheel's archive, checked before it is published: a wheel pip or
uv would refuse (or install somewhere it must not) is refused here instead.

- Member paths stay inside the install: none absolute, none with a ``..`` part, a backslash or a
  NUL, none twice.
- Exactly one ``<name>-<version>.dist-info`` folder, whose name and version are the file name's
  (compared as PEP 503 names and PEP 440 versions, whatever the spelling).
- Its WHEEL says ``Wheel-Version: 1.x``; its METADATA is UTF-8 with Metadata-Version, Name and
  Version; its ``.data`` folder holds only the install schemes (purelib, platlib, headers, scripts,
  data).
- Its RECORD lists every member but itself (and its signatures) once, each with a sha256 (or
  stronger) hash and a size that the member's bytes match.

A wheel is untrusted input: every member is read through the caps of :mod:`wheelbuild.wheel.contents`
(size, and for the archive as a whole the compression ratio), a chunk at a time, so hashing a
large wheel holds none of it in memory. Pure but for reading the open archive.
"""

from __future__ import annotations

import base64
import csv
import email.parser
import hashlib
import io
import re
import zipfile
from pathlib import PurePosixPath

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .contents import (
    MAX_COMPRESSION_RATIO,
    MAX_METADATA_SIZE,
    MAX_RECORD_SIZE,
    member_chunks,
    read_member,
)

__all__ = ["WheelLayoutError", "check_layout"]

# RECORD may name these hashes (the wheel spec forbids md5 and sha1).
_HASHES = frozenset({"sha256", "sha384", "sha512"})
_SCHEMES = frozenset({"purelib", "platlib", "headers", "scripts", "data"})
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_WHEEL_VERSION = re.compile(r"(\d+)\.(\d+)")
_REQUIRED_METADATA = ("Metadata-Version", "Name", "Version")
# A whole wheel may unpack to this many times its archive size (machine code deflates ~3:1; a
# bomb of zeros 1000:1), and always to this much (a small wheel of text deflates well).
_MIN_UNPACKED = 256 * 1024**2


class WheelLayoutError(ValueError):
    """The wheel is not one an installer would take; the message says why."""


def _member_path_problem(name: str) -> str | None:
    if "\\" in name or "\x00" in name:
        return "a backslash or NUL in its path"
    if name.startswith("/"):
        return "an absolute path"
    if ".." in PurePosixPath(name).parts:
        return "a '..' in its path"
    return None


def _members(archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """The files of the archive by name (folders left out); refuses a path that could land
    outside the install, a name twice, and an archive that unpacks to too much."""
    files: dict[str, zipfile.ZipInfo] = {}
    unpacked = 0
    for info in archive.infolist():
        problem = _member_path_problem(info.filename)
        if problem is not None:
            raise WheelLayoutError(f"its member {info.filename!r} has {problem}")
        if info.is_dir():
            continue
        if info.filename in files:
            raise WheelLayoutError(f"it holds {info.filename!r} twice")
        files[info.filename] = info
        unpacked += info.file_size
    packed = sum(i.compress_size for i in files.values())
    if unpacked > max(MAX_COMPRESSION_RATIO * packed, _MIN_UNPACKED):
        raise WheelLayoutError(
            f"its members unpack to {unpacked} bytes from {packed}, a ratio over the cap of "
            f"{MAX_COMPRESSION_RATIO:g} (a zip bomb)"
        )
    return files


def _dist_info(files: dict[str, zipfile.ZipInfo], filename: str) -> str:
    """The one ``.dist-info`` folder, checked against the file name."""
    name, version, _build, _tags = parse_wheel_filename(filename)
    found = sorted({f.split("/")[0] for f in files if f.split("/")[0].endswith(".dist-info") and "/" in f})
    if len(found) != 1:
        raise WheelLayoutError(
            f"it has {len(found)} .dist-info folders ({', '.join(found) or 'none'}), not one"
        )
    folder = found[0]
    stem = folder.removesuffix(".dist-info")
    folder_name, dash, folder_version = stem.rpartition("-")
    try:
        same = bool(dash) and canonicalize_name(folder_name) == name and Version(folder_version) == version
    except InvalidVersion:
        same = False
    if not same:
        raise WheelLayoutError(f"its metadata folder {folder} is not that of {name} {version}")
    return folder


def _text(archive: zipfile.ZipFile, files: dict[str, zipfile.ZipInfo], member: str, cap: int) -> str:
    info = files.get(member)
    if info is None:
        raise WheelLayoutError(f"it has no {member}")
    try:
        return read_member(archive, info, cap, max_ratio=None).decode("utf-8")
    except UnicodeDecodeError:
        raise WheelLayoutError(f"its {member} is not UTF-8") from None


def _check_wheel_file(text: str, member: str) -> None:
    version = email.parser.Parser().parsestr(text, headersonly=True).get("Wheel-Version")
    match = _WHEEL_VERSION.fullmatch(str(version or "").strip())
    if match is None:
        raise WheelLayoutError(f"its {member} has no Wheel-Version (it says {version!r})")
    if int(match[1]) != 1:
        raise WheelLayoutError(f"its {member} says Wheel-Version {match[0]}; installers read 1.x")


def _check_metadata(text: str, member: str) -> None:
    fields = email.parser.Parser().parsestr(text, headersonly=True)
    missing = [key for key in _REQUIRED_METADATA if not str(fields.get(key) or "").strip()]
    if missing:
        raise WheelLayoutError(f"its {member} has no {', '.join(missing)}")


def _record_rows(text: str, member: str) -> dict[str, tuple[str, str]]:
    """RECORD's rows: path -> (hash, size), each path once."""
    rows: dict[str, tuple[str, str]] = {}
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row:
            continue
        if len(row) != 3:
            raise WheelLayoutError(f"its {member} line {number} is not path,hash,size")
        path, digest, size = row
        if path in rows:
            raise WheelLayoutError(f"its {member} lists {path!r} twice")
        rows[path] = (digest, size)
    return rows


def _check_hash(archive: zipfile.ZipFile, info: zipfile.ZipInfo, digest: str, size: str) -> None:
    algorithm, _, expected = digest.partition("=")
    if algorithm not in _HASHES or not expected:
        raise WheelLayoutError(f"its RECORD gives {info.filename!r} no sha256 (or stronger) hash")
    hasher = hashlib.new(algorithm)
    length = 0
    # No ratio cap per member: nothing is held, and the archive's ratio was checked as a whole.
    for chunk in member_chunks(archive, info, max_ratio=None):
        hasher.update(chunk)
        length += len(chunk)
    actual = base64.urlsafe_b64encode(hasher.digest()).rstrip(b"=").decode()
    # The spec's encoding, or hex (some generators write it; installers do not check): either
    # way the digest must be that of the bytes.
    if expected.rstrip("=") not in (actual, hasher.hexdigest()):
        raise WheelLayoutError(f"its RECORD's hash of {info.filename!r} is not that of its bytes")
    if size and size != str(length):
        raise WheelLayoutError(f"its RECORD says {info.filename!r} has {size} bytes; it has {length}")


def check_layout(archive: zipfile.ZipFile, filename: str) -> None:
    """Refuse (WheelLayoutError) the wheel named *filename*, open as *archive*, unless an installer
    would take it as it is (see the module's docstring). Lets what :func:`read_member` raises for a
    member it cannot read through (UnsafeMember and other ValueErrors, zipfile.BadZipFile)."""
    files = _members(archive)
    folder = _dist_info(files, filename)
    _check_wheel_file(_text(archive, files, f"{folder}/WHEEL", MAX_METADATA_SIZE), f"{folder}/WHEEL")
    _check_metadata(_text(archive, files, f"{folder}/METADATA", MAX_METADATA_SIZE), f"{folder}/METADATA")
    record = f"{folder}/RECORD"
    rows = _record_rows(_text(archive, files, record, MAX_RECORD_SIZE), record)
    data = folder.removesuffix(".dist-info") + ".data/"
    unsigned = {record, *(f"{folder}/{name}" for name in _SIGNATURES)}
    for name, info in files.items():
        if name.startswith(data) and name.removeprefix(data).split("/")[0] not in _SCHEMES:
            raise WheelLayoutError(
                f"its member {name!r} is in no install scheme ({', '.join(sorted(_SCHEMES))})"
            )
        if name in unsigned:
            continue
        if name not in rows:
            raise WheelLayoutError(f"its RECORD does not list {name!r}")
        _check_hash(archive, info, *rows[name])
    listed_only = sorted(set(rows) - set(files) - unsigned)
    if listed_only:
        raise WheelLayoutError(f"its RECORD lists {listed_only[0]!r}, which the wheel does not hold")
