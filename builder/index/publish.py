"""Put checked wheels into a wheelhouse tree and regenerate its index, under the tree's lock.

One exclusive lock (``<root>/.lock``) covers a whole publish: checking names against what is there,
copying, and regenerating every page from the full listing. Two publishers therefore run one after
the other, and the second one's pages list the first one's wheels too.

Each wheel is copied into the tree first (a temporary folder in ``files/``), and that copy is what
is read, checked, hashed and renamed into place: a file replaced after it was first checked cannot
be served unchecked, and the index's sha256 is the served file's. A wheel that is already there
with the same sha256 is left alone; one of the same distribution with other bytes (or under
another spelling of its name) is refused, all wheels being checked before any is renamed into
place. Every file goes in atomically (:func:`wheelbuild.index.tree.atomic_write`,
:func:`wheelbuild.index.tree.place`), so a publish killed at any moment (or stopped by a full
disk) leaves the previous pages whole, and each page only links files that exist with the hash it
names; the next publish removes the killed one's temp files and copies and finishes the job.

Only the local tree is written here. A later remote target (S3, rsync, twine) can reuse the same
pieces: :func:`wheelbuild.index.tree.render` turns a listing into pages without touching any disk.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from ..bounded import FileRefused, open_regular
from ..errors import (
    BadArgument,
    IndexWriteFailed,
    InvalidWheel,
    PublishLocked,
    WheelConflict,
)
from . import index_page, tree, wheel_names

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "CopiesCheck",
    "PublishResult",
    "locked_tree",
    "only_tree",
    "publish",
    "published_inputs",
    "regenerate",
    "reindex",
    "remove_temp_files",
    "staged",
    "write_failed",
]

DEFAULT_LOCK_TIMEOUT = 120.0
LOCK_NAME = ".lock"


@dataclass(frozen=True)
class PublishResult:
    root: Path
    added: tuple[str, ...]  # wheel file names copied in
    present: tuple[str, ...]  # already there with the same sha256: nothing done
    written: tuple[str, ...]  # index files written or removed, relative to root
    sha256: Mapping[str, str] = field(default_factory=dict)  # each wheel's, as published

    @property
    def pages(self) -> tuple[str, ...]:
        """The index pages (under simple/) that changed."""
        return tuple(p for p in self.written if p.startswith(f"{tree.SIMPLE}/"))


@contextlib.contextmanager
def locked_tree(root: Path, timeout: float) -> Iterator[None]:
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise IndexWriteFailed(
            f"cannot create the wheelhouse {root}: {error.strerror or error}",
            "choose a directory you can write, or fix its permissions",
        ) from None
    lock = FileLock(root / LOCK_NAME, timeout=timeout)
    try:
        lock.acquire()
    except Timeout:
        raise PublishLocked(
            f"another publish has held {root / LOCK_NAME} for over {timeout:g} s",
            "wait for it to finish, or raise --lock-timeout; if no publish is running, the lock "
            "is free already (it is released when its process dies) and this run can be retried",
        ) from None
    except OSError as error:
        raise IndexWriteFailed(
            f"cannot take the lock {root / LOCK_NAME}: {error.strerror or error}",
            "publish into a directory you can write, or fix its permissions",
        ) from None
    try:
        yield
    finally:
        lock.release()


def write_failed(root: Path, error: OSError) -> IndexWriteFailed:
    where = f" ({error.filename})" if error.filename else ""
    if error.errno == errno.ENAMETOOLONG:
        # A wheel name that fits the file system can still be too long for its temp file or sidecars.
        return IndexWriteFailed(
            f"writing {root} failed: a file name is too long for its file system{where}",
            "give the wheel a shorter name (project, version and local label), or publish to a "
            "file system that allows longer names; the index still lists only complete files",
        )
    return IndexWriteFailed(
        f"writing {root} failed: {error.strerror or error}{where}",
        "free disk space (or fix permissions) and publish again; the index still lists only complete files",
    )


def remove_temp_files(root: Path) -> None:
    """Temp files of a killed writer. Only called under the lock, when no writer is running."""
    for temp in root.glob(f".{index_page.PAGE}.*{tree.TEMP_SUFFIX}"):  # the page for people's
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    for folder in (root / tree.FILES, root / tree.SIMPLE):
        if not folder.is_dir():
            continue
        for dirpath, dirs, names in os.walk(folder):
            for name in names:
                if name.startswith(".") and name.endswith(tree.TEMP_SUFFIX):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(dirpath, name))
            for name in [d for d in dirs if d.startswith(".") and d.endswith(tree.TEMP_SUFFIX)]:
                dirs.remove(name)  # a killed publish's copies (staged): gone with their folder
                shutil.rmtree(os.path.join(dirpath, name), ignore_errors=True)


def regenerate(root: Path) -> tuple[str, ...]:
    return tree.write_plan(root, tree.index_changes(root))


# What publish runs on the copies it made in the tree (wheel given -> its copy), under the lock,
# before any is renamed into place: the caller's checks (archs, label, pin, gate), which raise.
CopiesCheck = Callable[[Mapping[Path, Path]], None]


@dataclass(frozen=True)
class Sidecars:
    """What goes beside each wheel besides its METADATA, by wheel file name."""

    inputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # keys of the builds it serves
    statements: Mapping[str, bytes] = field(default_factory=dict)  # its provenance statement
    torch_ranges: Mapping[str, str] = field(default_factory=dict)  # the torch releases it loaded with
    sigstore_bundles: Mapping[str, bytes] = field(default_factory=dict)  # its statement signed keyless


def publish(
    wheels: Sequence[Path],
    root: Path,
    *,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    sidecars: Sidecars | None = None,
    check: CopiesCheck | None = None,
) -> PublishResult:
    """Copy *wheels* into ``root/files`` and regenerate the index of *root*. *sidecars* go beside
    each wheel: the inputs keys of the builds it serves (the one that made it; for an abi3 wheel,
    the nightly's cells of every Python, ``<wheel>.inputs``) so that a nightly can skip cells whose
    wheels are already published; its provenance statement (:func:`_add_statement`); the line its
    build's torch range says, for the index page.

    Each wheel is read and checked as given first (a bad one is refused before the tree is
    touched); then, under the lock, copied into the tree under a temporary name, and that copy is
    read, checked (*check* too), hashed and renamed into place: what was checked is what is
    served, even if a file given is replaced meanwhile.

    Raises InvalidWheel for a file that is not a good wheel, WheelConflict when a published file
    of the same name has other bytes (nothing is copied then), PublishLocked when the lock is not
    had within *lock_timeout* seconds, IndexWriteFailed when the disk refuses a write, and what
    *check* raises."""
    sidecars = sidecars or Sidecars()
    _check_inputs(sidecars.inputs)
    wheel_names.refuse_two_of_one_slot(
        [(path, tree.read_wheel(path).filename, tree.hash_file(path)) for path in wheels]
    )
    files = root / tree.FILES
    with locked_tree(root, lock_timeout):
        remove_temp_files(root)
        made = not files.is_dir()
        try:
            files.mkdir(exist_ok=True)
            with staged(wheels, files) as copies:
                checked = [
                    (path, tree.read_wheel(copy), tree.hash_file(copy)) for path, copy in copies.items()
                ]
                wheel_names.refuse_two_of_one_slot(
                    [(path, info.filename, sha256) for path, info, sha256 in checked]
                )
                if check is not None:
                    check(copies)
                added, present = _new_and_present(checked, files)
                _put_in_place(files, copies, added, present, sidecars)
            written = regenerate(root)
        except OSError as error:
            raise write_failed(root, error) from error
        finally:
            if made:
                with contextlib.suppress(OSError):
                    files.rmdir()  # only when nothing went in: a refused publish leaves no trace
    return PublishResult(
        root=root,
        added=tuple(info.filename for _p, info, _s in added),
        present=tuple(present),
        written=written,
        sha256={info.filename: sha256 for _p, info, sha256 in checked},
    )


@contextlib.contextmanager
def staged(wheels: Sequence[Path], folder: Path) -> Iterator[dict[Path, Path]]:
    """A copy of each wheel, under its own name, in a new temporary folder in *folder* (so that
    a copy can be renamed into *folder*): wheel -> copy. Only a regular file is copied
    (InvalidWheel for a FIFO or a device). The folder goes on the way out, with any copy still in
    it; one a killed publish left is removed by the next (its name is a temp file's)."""
    stage = Path(tempfile.mkdtemp(prefix=".stage-", suffix=tree.TEMP_SUFFIX, dir=folder))
    try:
        copies: dict[Path, Path] = {}
        for number, wheel in enumerate(dict.fromkeys(wheels)):
            (stage / str(number)).mkdir()  # two wheels may share a name: one folder each
            copies[wheel] = _copy(wheel, stage / str(number) / wheel.name)
        yield copies
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _copy(wheel: Path, to: Path) -> Path:
    try:
        source = open_regular(wheel)
    except FileRefused:
        raise InvalidWheel(
            f"{wheel.name} is not a usable wheel: it is not a regular file (a FIFO, a device or a "
            "directory is never read)",
            "publish wheels built by `wheelbuild build`",
        ) from None
    with source, open(to, "xb") as out:
        shutil.copyfileobj(source, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(to, 0o644)  # served by whatever serves the tree
    return to


def _check_inputs(inputs: Mapping[str, tuple[str, ...]]) -> None:
    """Each key is written on a line of its own: one with a newline in it would become several."""
    for name, keys in inputs.items():
        for key in keys:
            if not tree.is_inputs_key(key):
                raise BadArgument(
                    f"the inputs key {key!r} given for {name} is not a sha256 hex digest",
                    "publish the wheel from the run folder `wheelbuild build` wrote (its build "
                    "report names the key), or from a folder without a build report",
                )


_Checked = tuple[Path, tree.IndexEntry, str]  # a wheel given, as the index reads it, and its sha256


def _new_and_present(checked: Sequence[_Checked], files: Path) -> tuple[list[_Checked], list[str]]:
    """The wheels to add, and the names already published with the same bytes; WheelConflict
    (before anything is copied) for a name published with other bytes, or a distribution
    published under another spelling of its name (a build tag, the project's case, 0.1 as 0.1.0)."""
    added: list[_Checked] = []
    present: list[str] = []
    seen: set[str] = set()
    published = wheel_names.published_slots(files)
    for path, info, sha256 in checked:
        if info.filename in seen:
            continue
        seen.add(info.filename)
        existing = files / info.filename
        if info.filename not in published:
            wheel_names.refuse_another_spelling(info.filename, published)
            added.append((path, info, sha256))
            continue
        try:
            published_sha256 = tree.file_sha256(existing)
        except FileRefused:
            raise WheelConflict(
                f"{info.filename} is already in {files} as something other than a file (a FIFO, a "
                "device, a folder, or a link to one); nothing was copied",
                f"remove {existing} by hand (a published wheel is a regular file), then publish again",
            ) from None
        if published_sha256 != sha256:
            raise WheelConflict(
                f"{info.filename} is already published with different contents (sha256 "
                f"{published_sha256[:16]}..., this one {sha256[:16]}...); nothing was copied",
                "give the new build another version or local label (e.g. +cu130torch2.11.post1), "
                "or yank the old one; a published file is never replaced",
            )
        present.append(info.filename)
    return added, present


def _add_wheel(
    files: Path,
    copy: Path,
    info: tree.IndexEntry,
    sha256: str,
    sidecars: Sidecars,
) -> None:
    """One wheel into files/: its METADATA, inputs key, statement and torch range first, then
    the checked *copy* renamed into place, then its sha256 cache (each atomically), so no page
    can link a wheel whose metadata is missing."""
    target = files / info.filename
    inputs_keys = sidecars.inputs.get(info.filename, ())
    _add_statement(target, sidecars.statements.get(info.filename))
    _add_beside(target, tree.SIGSTORE_SUFFIX, sidecars.sigstore_bundles.get(info.filename))
    if torch_range := sidecars.torch_ranges.get(info.filename):
        tree.atomic_write(
            target.with_name(target.name + tree.TORCH_RANGE_SUFFIX),
            torch_range.encode()[: tree.MAX_TORCH_RANGE],
        )
    tree.atomic_write(
        target.with_name(target.name + tree.METADATA_SUFFIX),
        info.metadata,
    )
    if inputs_keys:
        tree.atomic_write(
            target.with_name(target.name + tree.INPUTS_SUFFIX),
            "".join(f"{key}\n" for key in inputs_keys).encode(),
        )
    tree.place(copy, target)
    tree.atomic_write(
        target.with_name(target.name + tree.SHA256_SUFFIX),
        tree.sha256_record(sha256, target.stat()),
    )


def _put_in_place(
    files: Path,
    copies: Mapping[Path, Path],
    added: Sequence[_Checked],
    present: Sequence[str],
    sidecars: Sidecars,
) -> None:
    """The new wheels into files/ with their sidecars; a statement beside a wheel already there."""
    for path, info, sha256 in added:
        _add_wheel(files, copies[path], info, sha256, sidecars)
    for name in present:
        _add_statement(files / name, sidecars.statements.get(name))
        _add_beside(files / name, tree.SIGSTORE_SUFFIX, sidecars.sigstore_bundles.get(name))


def _add_statement(wheel: Path, statement: bytes | None) -> None:
    """*wheel*'s provenance statement (one DSSE envelope line) beside it as ``<wheel>.intoto.jsonl``,
    unless it has one already: files in a tree are never replaced (rsync pushes only new ones),
    so a caller's check of the copies is where a statement is judged. One exception: the same
    statement with more signatures (a wheel published unsigned, then with --sign-key) replaces
    it, whole or not at all, as nothing it said is lost."""
    sidecar = wheel.with_name(wheel.name + tree.ENVELOPE_SUFFIX)
    if statement is not None and os.path.lexists(sidecar) and _adds_signatures(sidecar, statement):
        tree.atomic_write(sidecar, statement)
        return
    _add_beside(wheel, tree.ENVELOPE_SUFFIX, statement)


_MAX_ENVELOPE = 4 << 20  # bytes: provenance.statement's cap on a statement


def _adds_signatures(sidecar: Path, statement: bytes) -> bool:
    """Whether *statement* is the envelope at *sidecar* (the same payload, every signature it has)
    with more signatures: a regular file only, read under the cap of a statement."""
    try:
        with open_regular(sidecar) as file:
            old = json.loads(file.read(_MAX_ENVELOPE + 1) or b"null")
        new = json.loads(statement)
    except (OSError, ValueError):
        return False
    if not isinstance(old, dict) or not isinstance(new, dict):
        return False
    same = all(old.get(key) == new.get(key) for key in ("payload", "payloadType"))

    def signatures(envelope: dict[str, object]) -> set[str]:
        listed = envelope.get("signatures")
        return {json.dumps(s, sort_keys=True) for s in listed} if isinstance(listed, list) else set()

    return same and signatures(old) < signatures(new)


def _add_beside(wheel: Path, suffix: str, content: bytes | None) -> None:
    """``<wheel><suffix>`` written once: a file already there is kept."""
    sidecar = wheel.with_name(wheel.name + suffix)
    if content is None or os.path.lexists(sidecar):
        return
    tree.atomic_write(sidecar, content)


def published_inputs(root: Path) -> set[str]:
    """The inputs keys of the builds whose wheels *root* holds."""
    keys: set[str] = set()
    for sidecar in (root / tree.FILES).glob(f"*.whl{tree.INPUTS_SUFFIX}"):
        with contextlib.suppress(OSError, ValueError):  # unreadable: its cells are built again
            keys |= tree.read_inputs(sidecar.with_name(sidecar.name.removesuffix(tree.INPUTS_SUFFIX)))
    return keys


def only_tree(parent: Path) -> Path:
    """The one wheelhouse tree (a directory with simple/index.html) under *parent*."""
    trees = sorted(p.parent.parent for p in parent.glob(f"*/{tree.SIMPLE}/index.html"))
    if len(trees) != 1:
        found = ", ".join(str(t) for t in trees) or "none"
        raise BadArgument(
            f"{parent} holds {len(trees)} published trees ({found}), so which to serve is not clear",
            "name one: wheelbuild serve wheelhouse/cu130",
        )
    return trees[0]


def reindex(root: Path, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> tuple[str, ...]:
    """Regenerate the index of *root* from its files (after a wheel was removed by hand, or to
    finish a publish that was killed). Returns what was written or removed."""
    with locked_tree(root, lock_timeout):
        remove_temp_files(root)
        try:
            return regenerate(root)
        except OSError as error:
            raise write_failed(root, error) from error
