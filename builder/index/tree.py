"""A wheelhouse tree and its static package index: PEP 503 HTML, PEP 691 JSON (API 1.1), PEP 658/714
metadata files, PEP 592 yanking and PEP 700 sizes, upload times and versions.

Files in, files out. A tree looks like this (``root`` is e.g. ``wheelhouse/cu130``)::

    files/<wheel>                the wheel; never changed once there
    files/<wheel>.metadata       its METADATA bytes (PEP 658), linked from the pages
    files/<wheel>.sha256         cache: "<sha256> <size> <mtime_ns>", trusted only while size and
                                 mtime still match the wheel
    files/<wheel>.yanked         optional marker; its text is the yank reason (PEP 592)
    files/<wheel>.archs          cache: "<sha256> <SASS archs...>" read from its .so files, for
                                 the page for people; trusted only while the sha256 matches
    files/<wheel>.intoto.jsonl   optional: its provenance statement, a DSSE envelope (publish
                                 --sign-key signs it; `wheelbuild verify` checks it), linked
    index.html                   the page for people (builder/index/index_page.py)
    simple/index.html|json       every project
    simple/<project>/index.html|json
    cu130-torch2.14/simple/...   a route: the same pages listing only the wheels that load with
                                 that torch (routes.py)

Every page is rendered from the full listing of ``files/`` (never appended to), so two publishers
that each regenerate under the lock cannot lose each other's wheels. :func:`render` (pages.py) is
pure (records in, page bytes out), so a remote target can list its bucket into
:class:`Distribution` records and upload the same pages. :func:`write_plan` puts each file in place atomically (temp file in the same
directory, fsync, rename): a crash at any moment leaves every page either old or new, each valid and
each linking only to files that exist.

This module reads and writes files; it takes no lock and touches no network.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import Message
from email.parser import BytesParser
from email.policy import compat32
from pathlib import Path

from packaging.utils import (
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from ..bounded import FileRefused, open_regular, read_bounded, regular_file_sha256
from ..errors import InvalidWheel
from ..wheel.archive import AmbiguousArchive, NotAZip, check_one_archive
from ..wheel.contents import MAX_METADATA_SIZE, archs_in_wheel, metadata_fields, metadata_of
from ..wheel.layout import check_layout
from ..wheel.tags import TagsDisagree, check_tags, one_reading_refusal
from . import index_page
from .inputs import INPUTS_SUFFIX, inputs_keys, is_inputs_key, read_inputs
from .pages import API_VERSION, ENVELOPE_SUFFIX, FILES, SIGSTORE_SUFFIX, SIMPLE, Distribution, render
from .routes import ROUTE, torch_requirements
from .wheel_names import NAME_MAX, is_served_name

__all__ = [
    "API_VERSION",
    "ENVELOPE_SUFFIX",
    "FILES",
    "INPUTS_SUFFIX",
    "NAME_MAX",
    "SIGSTORE_SUFFIX",
    "SIMPLE",
    "Distribution",
    "IndexChanges",
    "IndexEntry",
    "atomic_write",
    "file_sha256",
    "hash_file",
    "index_changes",
    "inputs_keys",
    "is_inputs_key",
    "is_served_name",
    "normalize",
    "place",
    "read_inputs",
    "read_wheel",
    "render",
    "scan",
    "sha256_record",
    "write_plan",
]

METADATA_SUFFIX = ".metadata"
SHA256_SUFFIX = ".sha256"
YANKED_SUFFIX = ".yanked"
ARCHS_SUFFIX = ".archs"
# The torch releases the wheel loaded with, as its build's torch range said (one line per
# Python); shown on the page for people. Written by publish, never by a client.
TORCH_RANGE_SUFFIX = ".torch-range"
MAX_TORCH_RANGE = 4096
TEMP_SUFFIX = ".tmp"
_MAX_CACHE_SIZE = 64 * 1024  # a .sha256 or .archs cache line, a yank reason
_CHUNK = 1 << 20
_VALID_PROJECT = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def normalize(name: str) -> str:
    """PEP 503 normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def is_project_name(name: str) -> bool:
    """Whether *name* is a normalized project name (what may appear under ``simple/``)."""
    return bool(_VALID_PROJECT.match(name))


@dataclass(frozen=True)
class IndexEntry:
    """A wheel file as the index records it, read and checked: its name, version and METADATA
    (wheels.WheelInfo is the other view of a wheel: what a build made, inspected)."""

    filename: str
    project: NormalizedName
    version: Version
    metadata: bytes  # the wheel's .dist-info/METADATA, byte for byte
    requires_python: str | None


@dataclass(frozen=True)
class IndexChanges:
    """Files to put in place (relative path -> bytes, in write order) and to remove."""

    writes: Mapping[str, bytes] = field(default_factory=dict)
    removes: tuple[str, ...] = ()


def read_capped_metadata(path: Path) -> bytes:
    """A published .metadata sidecar, read no further than a METADATA may be long: one a zip bomb
    left before members were capped must not be loaded on every publish, and only a regular file
    (a FIFO there would block every publish). Raises FileNotFoundError when there is none."""
    try:
        return read_bounded(path, MAX_METADATA_SIZE)
    except FileRefused as refused:
        why = (
            f"over the {MAX_METADATA_SIZE} bytes a METADATA may have (a zip bomb published before "
            "wheelbuild capped them): it would be served to every client"
            if refused.too_big
            else "not a regular file (a FIFO or a device where a METADATA belongs): it is never read"
        )
        raise InvalidWheel(
            f"{path} is {why}",
            f"remove {path.name.removesuffix(METADATA_SUFFIX)} and its sidecars from {path.parent} by hand, "
            "then publish again",
        ) from None


def _bad(path: Path, why: str) -> InvalidWheel:
    return InvalidWheel(
        f"{path.name} is not a usable wheel: {why}",
        "publish wheels built by `wheelbuild build` (or remove the file from the wheelhouse)",
    )


def parse_filename(path: Path) -> tuple[NormalizedName, Version]:
    try:
        name, version, _build, _tags = parse_wheel_filename(path.name)
    except (InvalidWheelFilename, InvalidVersion) as error:
        raise _bad(path, f"its file name does not parse ({error})") from None
    return name, version


def read_wheel(path: Path, *, publishable: bool = True) -> IndexEntry:
    """Read and check a wheel: its name parses, it is a zip with exactly one METADATA whose Name
    and Version agree with the file name, and (*publishable*) this index can serve it (its name
    and its sidecars') and an installer would take it as it is: its layout, WHEEL and RECORD,
    every member hashed against RECORD (wheel/layout.py)."""
    project, version = parse_filename(path)
    if publishable and not is_served_name(path.name + METADATA_SUFFIX):
        raise _bad(
            path,
            "its name cannot be served (letters, digits and . _ + ! - only, and at most "
            f"{NAME_MAX - len(METADATA_SUFFIX)} characters, so that its .metadata fits too)",
        )
    try:
        with open_regular(path) as file:
            if publishable:
                with contextlib.suppress(NotAZip):  # zipfile says what it is not, below
                    check_one_archive(file)
            with zipfile.ZipFile(file) as archive:
                _member, metadata = metadata_of(archive)
                headers = _agreeing_metadata(path, metadata, project, version)
                if publishable:
                    check_layout(archive, path.name)
                    check_tags(archive, path.name)
    except (AmbiguousArchive, TagsDisagree) as error:
        raise one_reading_refusal(path.name, error) or _bad(path, str(error)) from None
    except FileRefused:
        raise _bad(path, "it is not a regular file (a FIFO, a device or a directory is never read)") from None
    except (OSError, zipfile.BadZipFile) as error:
        raise _bad(path, f"cannot read it as a zip file ({error})") from None
    except ValueError as error:
        raise _bad(path, str(error)) from None
    requires = headers.get("Requires-Python")
    return IndexEntry(
        filename=path.name,
        project=project,
        version=version,
        metadata=metadata,
        requires_python=str(requires).strip() if requires else None,
    )


def _agreeing_metadata(path: Path, metadata: bytes, project: NormalizedName, version: Version) -> Message:
    """METADATA's headers, once its Name and Version are the file name's; InvalidWheel if not."""
    headers = metadata_fields(metadata)  # text, never email.header.Header objects
    meta_name, meta_version = headers.get("Name"), headers.get("Version")
    if not meta_name or canonicalize_name(str(meta_name)) != project:
        raise _bad(path, f"its METADATA names project {meta_name!r}, the file name says {project!r}")
    try:
        same_version = meta_version is not None and Version(str(meta_version)) == version
    except InvalidVersion:
        same_version = False
    if not same_version:
        raise _bad(path, f"its METADATA has version {meta_version!r}, the file name says {version}")
    return headers


def hash_file(path: Path) -> str:
    """sha256 of the regular file at *path*. Raises FileRefused (a ValueError) for anything else
    (a FIFO or a device named like a wheel would block or never end), or the OSError of opening."""
    return regular_file_sha256(path)


def sha256_record(sha256: str, stat: os.stat_result) -> bytes:
    """The ``.sha256`` cache line for a wheel whose stat is *stat*."""
    return f"{sha256} {stat.st_size} {stat.st_mtime_ns}\n".encode()


def _cached_sha256(wheel: Path, stat: os.stat_result) -> str | None:
    try:
        text = read_bounded(wheel.with_name(wheel.name + SHA256_SUFFIX), _MAX_CACHE_SIZE).decode()
    except (OSError, ValueError):  # not there, not a regular file, not text: computed again
        return None
    parts = text.split()
    if (
        len(parts) == 3
        and re.fullmatch(r"[0-9a-f]{64}", parts[0])
        and parts[1] == str(stat.st_size)
        and parts[2] == str(stat.st_mtime_ns)
    ):
        return parts[0]
    return None


def file_sha256(wheel: Path) -> str:
    """sha256 of a wheel in a tree: from its cache when that still matches, else computed."""
    return _cached_sha256(wheel, wheel.stat()) or hash_file(wheel)


def _cached_archs(wheel: Path, sha256: str) -> tuple[int, ...] | None:
    try:
        parts = read_bounded(wheel.with_name(wheel.name + ARCHS_SUFFIX), _MAX_CACHE_SIZE).decode().split()
    except (OSError, ValueError):  # not there, not a regular file, not text: read again
        return None
    if parts and parts[0] == sha256 and all(p.isdigit() and len(p) <= 4 for p in parts[1:]):
        return tuple(int(p) for p in parts[1:])
    return None


def read_archs(wheel: Path) -> tuple[int, ...] | None:
    """The SASS archs of every extension module of *wheel* together; None when they cannot be
    read (a damaged or oversized member): the page says "?" rather than failing a publish."""
    try:
        found = archs_in_wheel(wheel)
    except (OSError, ValueError, zipfile.BadZipFile):
        return None
    return tuple(sorted({arch for module in found.values() for arch in module.sass}))


def read_torch_range(sidecar: Path) -> str | None:
    """What a wheel's torch-range sidecar says (at most MAX_TORCH_RANGE bytes, a regular file),
    or None when there is none."""
    try:
        return read_bounded(sidecar, MAX_TORCH_RANGE).decode("utf-8", errors="replace").strip() or None
    except (FileNotFoundError, FileRefused):
        return None


def read_yank(marker: Path) -> str | None:
    """The reason a yank marker gives (PEP 592; "" for none), or None when there is no marker.
    One that is not a regular file still marks the yank; it is not read."""
    try:
        return read_bounded(marker, _MAX_CACHE_SIZE).decode("utf-8", errors="replace").strip()
    except FileNotFoundError:
        return None
    except FileRefused:
        return ""


def _is_wheel_entry(entry: os.DirEntry[str]) -> bool:
    return entry.name.endswith(".whl") and not entry.name.startswith(".") and entry.is_file()


def scan(root: Path) -> tuple[tuple[Distribution, ...], dict[str, bytes]]:
    """Every wheel under ``root/files`` as a record, and the sidecars that are missing or stale
    (``.metadata`` extracted, ``.sha256`` recomputed), keyed by relative path."""
    files_dir = root / FILES
    sidecars: dict[str, bytes] = {}
    found: list[Distribution] = []
    if not files_dir.is_dir():
        return (), sidecars
    with os.scandir(files_dir) as entries:
        wheels = sorted(e.name for e in entries if _is_wheel_entry(e))
    for name in wheels:
        wheel = files_dir / name
        project, version = parse_filename(wheel)
        stat = wheel.stat()
        sha256 = _cached_sha256(wheel, stat)
        if sha256 is None:
            sha256 = hash_file(wheel)
            sidecars[f"{FILES}/{name}{SHA256_SUFFIX}"] = sha256_record(sha256, stat)
        metadata_path = files_dir / (name + METADATA_SUFFIX)
        try:
            if metadata_path.is_symlink():  # its hash would be another file's: written anew
                raise FileNotFoundError(metadata_path)
            metadata = read_capped_metadata(metadata_path)
        except FileNotFoundError:
            metadata = read_wheel(wheel, publishable=False).metadata  # published: checked then
            sidecars[f"{FILES}/{name}{METADATA_SUFFIX}"] = metadata
        requires = BytesParser(policy=compat32).parsebytes(metadata, headersonly=True).get("Requires-Python")
        yanked = read_yank(files_dir / (name + YANKED_SUFFIX))
        torch_range = read_torch_range(files_dir / (name + TORCH_RANGE_SUFFIX))
        statement = files_dir / (name + ENVELOPE_SUFFIX)
        bundle = files_dir / (name + SIGSTORE_SUFFIX)
        archs = _cached_archs(wheel, sha256)
        if archs is None and (archs := read_archs(wheel)) is not None:
            sidecars[f"{FILES}/{name}{ARCHS_SUFFIX}"] = " ".join([sha256, *map(str, archs)]).encode() + b"\n"
        found.append(
            Distribution(
                filename=name,
                project=project,
                version=version,
                sha256=sha256,
                size=stat.st_size,
                upload_time=datetime.fromtimestamp(stat.st_mtime_ns / 1e9, UTC),
                metadata_sha256=hashlib.sha256(metadata).hexdigest(),
                requires_python=str(requires).strip() if requires else None,
                yanked=yanked,
                archs=archs,
                statement=statement.is_file() and not statement.is_symlink(),
                sigstore_bundle=bundle.is_file() and not bundle.is_symlink(),
                torch_range=torch_range,
                torch_requirements=torch_requirements(metadata),
            )
        )
    return tuple(found), sidecars


def _stale_in(root: Path, top: str, pages: Mapping[str, bytes]) -> list[str]:
    """Under ``root/top/`` (a ``simple/``): project pages no longer in *pages*, and links that
    are not in it (named by the link itself: :func:`write_plan` removes a link, never what it
    points at)."""
    simple = root / top
    if (simple.is_symlink() and top != SIMPLE) or not simple.is_dir():
        return []
    stale: list[str] = []
    for entry in sorted(simple.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_symlink():
            rel = f"{top}/{entry.name}"
            if rel not in pages and f"{rel}/index.html" not in pages:
                stale.append(rel)
            continue
        if not entry.is_dir():
            continue
        for page in ("index.html", "index.json"):
            rel = f"{top}/{entry.name}/{page}"
            if rel not in pages and (entry / page).exists():
                stale.append(rel)
    return stale


def _stale_pages(root: Path, pages: Mapping[str, bytes]) -> tuple[str, ...]:
    """Pages of projects that are no longer in the listing, in the whole index and in every
    route folder (``cu130-torch2.14/simple/``), a route's own list of projects included once no
    wheel is listed under it."""
    stale = _stale_in(root, SIMPLE, pages)
    with os.scandir(root) as entries:
        route_folders = sorted(
            e.name for e in entries if ROUTE.match(e.name) and e.is_dir(follow_symlinks=False)
        )
    for route in route_folders:
        stale += _stale_in(root, f"{route}/{SIMPLE}", pages)
        for page in ("index.html", "index.json"):
            rel = f"{route}/{SIMPLE}/{page}"
            if rel not in pages and (root / rel).exists():
                stale.append(rel)
    return tuple(stale)


def index_changes(root: Path) -> IndexChanges:
    """What to write so that the index of *root* lists exactly the wheels in ``root/files``:
    missing sidecars first, then the pages; and which stale project pages to remove."""
    distributions, sidecars = scan(root)
    # The page for people goes last: every file and page it points at is in place before it.
    pages = {**render(distributions), index_page.PAGE: index_page.render(distributions).encode()}
    return IndexChanges(writes={**sidecars, **pages}, removes=_stale_pages(root, pages))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | Path) -> None:
    """Put *data* (bytes, or the contents of a file) at *path* all at once: a temp file in the
    same directory, synced, then renamed over *path*. A reader sees the old file or the new one,
    never a part. A killed writer leaves only a ``.<name>.*.tmp`` file, which readers ignore."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as out:
            if isinstance(data, Path):
                with data.open("rb") as source:
                    shutil.copyfileobj(source, out, _CHUNK)
            else:
                out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temp, 0o644)  # served by whatever serves the tree; mkstemp made it 0600
        place(Path(temp), path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def place(temp: Path, path: Path) -> None:
    """Rename the complete, synced file *temp* (on the same file system) over *path*, and sync
    the folder: a reader sees the old file or the new one, never a part."""
    os.replace(temp, path)
    _fsync_dir(path.parent)


def _link_below(root: Path, rel: str) -> Path | None:
    """The first symbolic link on the way from ``root/<top>`` to ``root/rel``, *rel*'s own last
    part included; None when there is none. The top folders (``files``, ``simple``) may be links
    an operator made (wheels on another volume); anything below them is ours, and a link there
    is never written or deleted through."""
    top, *below = rel.split("/")
    path = root / top
    if ROUTE.match(top) and path.is_symlink():
        return path  # a route folder is always ours, never a link
    for part in below:
        path = path / part
        if path.is_symlink():
            return path
    return None


def write_plan(root: Path, plan: IndexChanges) -> tuple[str, ...]:
    """Carry out *plan* under *root*, in order; files whose bytes are already there are left
    alone. Returns the relative paths written or removed.

    A link found below ``files/`` or ``simple/`` on the way to a file is removed (the link
    itself) before that file is written or instead of removing it, so no write and no delete ever
    lands outside the tree through a link planted in it."""
    changed: list[str] = []
    for rel, data in plan.writes.items():
        target = root / rel
        link = _link_below(root, rel)
        if link is not None:
            link.unlink()
        else:
            # Only a regular file of the same size is read (a FIFO there would block): else replaced.
            with contextlib.suppress(FileNotFoundError, NotADirectoryError, FileRefused):
                if read_bounded(target, len(data)) == data:
                    continue
        atomic_write(target, data)
        changed.append(rel)
    for rel in plan.removes:
        target = root / rel
        link = _link_below(root, rel)
        if link is not None and link != target:
            link.unlink()  # a folder on the way is a link: it goes, not the page it leads to
            changed.append(rel)
            continue
        with contextlib.suppress(FileNotFoundError):
            target.unlink()  # a link itself, if *target* is one
            changed.append(rel)
        top = root / rel.split("/")[0]
        # A project's folder goes once both its pages are gone and nothing else is there; so do
        # a route's simple/ and the route itself once they are empty. Never simple/ or files/.
        folders = [target.parent] if target.parent != top else []
        if ROUTE.match(top.name):
            folders += [target.parent.parent, top]
        for folder in folders:
            with contextlib.suppress(OSError):
                folder.rmdir()
    return tuple(changed)
