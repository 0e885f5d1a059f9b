"""Yank and unyank (PEP 592): a published wheel marked so that installers skip it unless it is
pinned exactly, with a reason; and the mark taken back. Under the tree's publish lock, the index
regenerated, as a publish does (publish.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from ..errors import BadArgument, NotPublished
from . import publish as publishing
from . import tree

__all__ = ["YankResult", "unyank", "yank"]


@dataclass(frozen=True)
class YankResult:
    root: Path
    changed: tuple[str, ...]  # wheels whose yank state this call changed
    unchanged: tuple[str, ...]  # already in the asked state
    written: tuple[str, ...]


def _targets(root: Path, target: str) -> list[str]:
    """Wheel file names in *root* that *target* names: a wheel file name, or PROJECT==VERSION."""
    files = root / tree.FILES
    published = (
        sorted(p.name for p in files.glob("*.whl") if not p.name.startswith(".")) if files.is_dir() else []
    )
    if target.endswith(".whl"):
        if target not in published:
            raise NotPublished(
                f"{target} is not published in {root}",
                f"name a file listed in {files}, or use PROJECT==VERSION",
            )
        return [target]
    project, sep, version_text = target.partition("==")
    try:
        version = Version(version_text.strip())
    except ValueError:  # InvalidVersion, or a number past Python's 4,300-digit limit
        sep = ""
    if not sep or not project.strip():
        raise BadArgument(
            f"{target[:80]!r}{'...' if len(target) > 80 else ''} names no wheel",
            "give a wheel file name (flash_attn-2.8.3+cu130torch2.11-cp312-cp312-linux_x86_64.whl) "
            "or PROJECT==VERSION (flash-attn==2.8.3+cu130torch2.11)",
        )
    name = canonicalize_name(project.strip())
    matches = []
    for filename in published:
        wheel_name, wheel_version = tree.parse_filename(files / filename)
        if wheel_name == name and wheel_version == version:
            matches.append(filename)
    if not matches:
        raise NotPublished(
            f"no wheel of {name} {version} is published in {root}",
            "check the version, local label included (e.g. 2.8.3+cu130torch2.11)",
        )
    return matches


def _set_yank(root: Path, target: str, reason: str | None, lock_timeout: float) -> YankResult:
    try:
        indexed = (root / tree.SIMPLE / "index.html").is_file()
    except OSError:  # a name too long for the file system
        indexed = False
    if not indexed:
        # Checked before the lock, which would create the directory: a typo must leave no trace.
        raise NotPublished(
            f"nothing is published in {root}: it has no index ({root / tree.SIMPLE / 'index.html'})",
            "check --wheelhouse: name a tree a publish wrote, e.g. wheelhouse/cu130",
        )
    changed: list[str] = []
    unchanged: list[str] = []
    with publishing.locked_tree(root, lock_timeout):
        publishing.remove_temp_files(root)
        names = _targets(root, target)
        try:
            for name in names:
                marker = root / tree.FILES / (name + tree.YANKED_SUFFIX)
                if reason is None:
                    if marker.exists():
                        marker.unlink()
                        changed.append(name)
                    else:
                        unchanged.append(name)
                    continue
                if tree.read_yank(marker) == reason:
                    unchanged.append(name)
                else:
                    tree.atomic_write(marker, reason.encode())
                    changed.append(name)
            written = publishing.regenerate(root)
        except OSError as error:
            raise publishing.write_failed(root, error) from error
    return YankResult(root=root, changed=tuple(changed), unchanged=tuple(unchanged), written=written)


def yank(
    root: Path,
    target: str,
    reason: str = "",
    *,
    lock_timeout: float = publishing.DEFAULT_LOCK_TIMEOUT,
) -> YankResult:
    """Mark the wheels *target* names (a file name or PROJECT==VERSION) as yanked (PEP 592), with
    *reason* (one line; may be empty), and regenerate the index. Installers skip yanked files
    unless pinned exactly."""
    # Bytes that are not UTF-8 (argv decoded with surrogateescape) become U+FFFD: the reason is
    # served as text on the pages.
    readable = reason.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return _set_yank(root, target, " ".join(readable.split()), lock_timeout)


def unyank(
    root: Path,
    target: str,
    *,
    lock_timeout: float = publishing.DEFAULT_LOCK_TIMEOUT,
) -> YankResult:
    """Take back a yank of the wheels *target* names, and regenerate the index."""
    return _set_yank(root, target, None, lock_timeout)
