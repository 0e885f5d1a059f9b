"""Stamp a built wheel with what it was built against: the local version label of its torch
variant (0.1.0 -> 0.1.0+cu130torch2.11) and a torch pin in METADATA (torch==2.11.*).

A wheel built against torch 2.11 fails at import on 2.10 with undefined symbols, so the pin is
the user's protection, and the label lets wheels for several variants share one index.

The rewrite is consistent, never a rename: METADATA's Version, the .dist-info (and .data)
directory names, every RECORD row (paths, and the hash and size of what changed) and the file
name all agree afterwards. Every other member keeps its bytes, timestamp, permissions and
compression. A wheel that already carries the label and the pin is left as it is (a recipe may
set the label through its own env, as flash-attn's FLASH_ATTN_LOCAL_VERSION does).

No Docker, no subprocess: zip in, zip out.
"""

from __future__ import annotations

import base64
import csv
import functools
import hashlib
import io
import os
import stat
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..variants import TorchVariant
from .contents import MAX_RECORD_SIZE, metadata_of, read_member

__all__ = ["stamp_wheel", "stamped_metadata", "torch_pin"]

_ZIP_EPOCH = 315532800  # 1980-01-01T00:00:00Z: a zip entry's time cannot be earlier


def torch_pin(torch_minor: str) -> str:
    return f"torch=={torch_minor}.*"


def _is_torch(value: str) -> Requirement | None:
    try:
        requirement = Requirement(value)
    except InvalidRequirement:
        return None
    return requirement if canonicalize_name(requirement.name) == "torch" else None


def stamped_version(version: str, label: str) -> str:
    """0.1.0 -> 0.1.0+label; a different local label is replaced, the same one kept."""
    try:
        public = Version(version).public
    except InvalidVersion as exc:
        raise ValueError(f"version {version!r} is not PEP 440: {exc}") from exc
    return f"{public}+{label}"


def stamped_metadata(metadata: bytes, version: str, variant: TorchVariant, pin: str | None = None) -> bytes:
    """METADATA with Version set and every torch requirement pinned to the variant's minor (its
    marker kept), or to *pin* (``>=2.12,<2.15``: a proven range); an unconditional pin is added
    when none names torch. The body (description) after the headers is untouched."""
    specifier = pin or f"=={variant.torch_minor}.*"
    text = metadata.decode("utf-8")
    head, separator, body = text.partition("\n\n")
    lines = head.split("\n")
    out: list[str] = []
    pinned = False
    for line in lines:
        key, _, value = line.partition(": ")
        if key == "Version":
            out.append(f"Version: {version}")
        elif key == "Requires-Dist" and (requirement := _is_torch(value)) is not None:
            marker = f"; {requirement.marker}" if requirement.marker else ""
            extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
            out.append(f"Requires-Dist: torch{extras}{specifier}{marker}")
            pinned = pinned or not requirement.marker
        else:
            out.append(line)
    if not pinned:
        # After the last header that describes dependencies, or at the end of the headers.
        headers = ("Requires-Dist:", "Version:")
        at = max((i for i, line in enumerate(out) if line.startswith(headers)), default=len(out) - 1)
        out.insert(at + 1, f"Requires-Dist: torch{specifier}")
    return ("\n".join(out) + separator + body).encode("utf-8")


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def stamp_wheel(
    path: Path, variant: TorchVariant, pin: str | None = None, date_epoch: int | None = None
) -> Path:
    """Label the wheel at `path` for `variant` (+cu130torch2.11) and pin its torch to the
    variant's minor (torch==2.11.*), or to *pin* (>=2.12,<2.15), in place: a new file name when
    the version changes (the old file is removed only once the new one is complete). With
    *date_epoch* (SOURCE_DATE_EPOCH) the zip is written the same way whatever wrote it before:
    every entry's time that date, its permissions 644 or 755, .dist-info last with RECORD at the
    end; so the same members always give the same bytes. Returns the stamped wheel's path."""
    _name, version, _build, _tags = parse_wheel_filename(path.name)
    new_version = stamped_version(str(version), variant.label)
    parts = path.name[: -len(".whl")].split("-")
    old_prefix = f"{parts[0]}-{parts[1]}"
    new_prefix = f"{parts[0]}-{new_version}"
    new_name = "-".join([parts[0], new_version, *parts[2:]]) + ".whl"

    with zipfile.ZipFile(path) as source:
        metadata_member, metadata = metadata_of(source)
        new_metadata = stamped_metadata(metadata, new_version, variant, pin)
        if new_name == path.name and new_metadata == metadata and date_epoch is None:
            return path  # already stamped
        dist_info = metadata_member.split("/")[0]
        if dist_info != f"{old_prefix}.dist-info":
            raise ValueError(f"{path.name}: its .dist-info is {dist_info!r}, not {old_prefix}.dist-info")

        renamed = functools.partial(_renamed, old_prefix, new_prefix)
        record_member = f"{old_prefix}.dist-info/RECORD"
        new_record = _stamped_record(source, record_member, metadata_member, new_metadata, renamed)
        entries = source.infolist()
        if date_epoch is not None:
            entries = sorted(entries, key=lambda i: _zip_order(i.filename, record_member))

        # Write beside the original, then rename: a crash leaves the original whole.
        fd, temp = tempfile.mkstemp(prefix=f".{new_name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w") as target:
                for info in entries:
                    data = source.read(info)
                    if info.filename == metadata_member:
                        data = new_metadata
                    elif info.filename == record_member:
                        data = new_record
                    target.writestr(_entry(info, renamed(info.filename), date_epoch), data)
                raw.flush()
                os.fsync(raw.fileno())
            os.replace(temp, path.parent / new_name)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
    if new_name != path.name:
        path.unlink()
    return path.parent / new_name


def _zip_order(member: str, record: str) -> tuple[bool, bool, str]:
    """Packages first, then the .dist-info, RECORD last (as installers expect), each by name."""
    return (".dist-info/" in member, member == record, member)


def _entry(info: zipfile.ZipInfo, name: str, date_epoch: int | None) -> zipfile.ZipInfo:
    """The stamped wheel's entry for *info*: as it was, or (with *date_epoch*) normalized: that
    date, written from Unix, 755 for a directory or an executable, 644 otherwise."""
    if date_epoch is None:
        clone = zipfile.ZipInfo(name, date_time=info.date_time)
        clone.external_attr = info.external_attr
        clone.compress_type = info.compress_type
        clone.create_system = info.create_system
        return clone
    clone = zipfile.ZipInfo(name, date_time=time.gmtime(max(date_epoch, _ZIP_EPOCH))[:6])
    mode = (info.external_attr >> 16) & 0o777
    if info.is_dir():
        clone.external_attr = (stat.S_IFDIR | 0o755) << 16 | 0x10  # 0x10: the MS-DOS directory flag
        clone.compress_type = zipfile.ZIP_STORED
    else:
        clone.external_attr = (stat.S_IFREG | (0o755 if mode & 0o111 else 0o644)) << 16
        clone.compress_type = zipfile.ZIP_DEFLATED
    clone.create_system = 3  # Unix: the mode above is read by installers
    return clone


def _renamed(old_prefix: str, new_prefix: str, member: str) -> str:
    """*member*'s name in the stamped wheel: its .dist-info and .data folders follow the version."""
    top, slash, rest = member.partition("/")
    if top in (f"{old_prefix}.dist-info", f"{old_prefix}.data"):
        return top.replace(old_prefix, new_prefix, 1) + slash + rest
    return member


def _stamped_record(
    source: zipfile.ZipFile,
    record_member: str,
    metadata_member: str,
    new_metadata: bytes,
    renamed: Callable[[str], str],
) -> bytes:
    """RECORD for the stamped wheel: every member renamed, METADATA's hash and size new."""
    record_bytes = read_member(source, source.getinfo(record_member), MAX_RECORD_SIZE, max_ratio=None)
    rows = list(csv.reader(io.StringIO(record_bytes.decode("utf-8"))))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for row in rows:
        if not row:
            continue
        member = row[0]
        if member == record_member:
            writer.writerow([renamed(record_member), "", ""])
        elif member == metadata_member:
            writer.writerow([renamed(member), _record_hash(new_metadata), str(len(new_metadata))])
        else:
            writer.writerow([renamed(member), *row[1:]])
    return record.getvalue().encode("utf-8")
