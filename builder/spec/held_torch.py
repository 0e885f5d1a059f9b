"""Which torch releases this machine's wheel cache holds, as the builds that locked them said.

The wheel cache (the torch-wheels volume, images/wheelbuild-wheel-cache) is visible from a
container only, and a build with every file of its lock there installs torch without reading the
index. So when the torch index cannot be read, a build may still go ahead for a torch and a
Python this machine has already installed from that index: each build records here the locks its
containers printed ("wheelbuild: wheel cache: locked KEY-TAG SHA256 NAME"), and gc forgets the
locks it prunes. A record is what was true when a build or gc last looked: a prune inside a later
build's container (past the cache's bound) is not seen, and the container then reads the index
again and says so.

CACHE/torch-held/KEY.json, KEY being the variant's cache key (its index without credentials and
its requirement): {"torch": "2.14.1", "tag": "cu130", "index": URL, "pythons": {"cp311": {"run": ID, "file":
NAME, "sha256": HEX}}}. A file that does not parse holds nothing.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..bounded import read_bounded
from ..secrets import without_credentials
from ..variants import TorchVariant

__all__ = ["HeldTorch", "forget", "held", "record", "releases_held"]

FOLDER = "torch-held"
_LOCK = re.compile(r"^([0-9a-f]{16})-(cp\d+t?)$")
_MAX_RECORD = 1 << 20


@dataclass(frozen=True)
class HeldTorch:
    """One Python's torch wheel in the wheel cache: the run that locked it, and the file."""

    python: str  # cp311
    run: str
    file: str


def _path(cache: Path, key: str) -> Path:
    return cache / FOLDER / f"{key}.json"


def _load(path: Path) -> object | None:
    """The record's JSON, whatever it holds; None where it is absent, too big or not JSON."""
    try:
        data: object = json.loads(read_bounded(path, _MAX_RECORD))
    except (OSError, ValueError):
        return None
    return data


def _pythons(data: object) -> dict[str, dict[str, str]]:
    """A record's Pythons; none from anything that is not a record."""
    pythons = data.get("pythons") if isinstance(data, dict) else None
    if not isinstance(pythons, dict):
        return {}
    return {
        tag: {k: str(v) for k, v in entry.items()}
        for tag, entry in pythons.items()
        if isinstance(tag, str) and isinstance(entry, dict)
    }


def _header(variant: TorchVariant) -> dict[str, str]:
    return {
        "torch": variant.torch_version,
        "tag": variant.tag,
        "index": without_credentials(variant.index_url)[0],
    }


def _write(path: Path, header: dict[str, str], pythons: dict[str, dict[str, str]]) -> None:
    """The record replaced whole (renamed into place: a reader sees the old one or the new)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {**header, "pythons": dict(sorted(pythons.items()))}
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".held-")
    with os.fdopen(handle, "w") as out:
        json.dump(body, out, indent=1)
    os.replace(temporary, path)


def record(
    cache: Path, variant: TorchVariant, locked_files: Iterable[tuple[str, str, str]], run_id: str
) -> tuple[str, ...]:
    """Keep the Pythons whose torch wheel a build's containers locked for *variant* (their lock
    lines: KEY-TAG, sha256, file name). Returns the Pythons recorded now."""
    key = variant.cache_key
    found: dict[str, dict[str, str]] = {}
    for lock, sha256, name in locked_files:
        match = _LOCK.match(lock)
        if match and match.group(1) == key and name.startswith("torch-") and name.endswith(".whl"):
            found[match.group(2)] = {"run": run_id, "file": name, "sha256": sha256}
    if not found:
        return ()
    path = _path(cache, key)
    _write(path, _header(variant), _pythons(_load(path)) | found)
    return tuple(sorted(found))


def held(cache: Path, variant: TorchVariant) -> tuple[HeldTorch, ...]:
    """The Pythons the wheel cache holds *variant*'s torch for, by the last record of them."""
    if variant.newest:  # a bare tag names no release: nothing can be held for it
        return ()
    pythons = _pythons(_load(_path(cache, variant.cache_key)))
    return tuple(
        HeldTorch(tag, entry.get("run", "?"), entry.get("file", "?"))
        for tag, entry in sorted(pythons.items())
    )


def forget(cache: Path, locks: Iterable[str]) -> None:
    """Drop the Pythons whose locks (KEY-TAG, as the wheel cache's prune names them) are gone."""
    gone: dict[str, set[str]] = {}
    for lock in locks:
        if match := _LOCK.match(lock):
            gone.setdefault(match.group(1), set()).add(match.group(2))
    for key, tags in gone.items():
        path = _path(cache, key)
        data = _load(path)
        if data is None:
            continue
        pythons = {t: e for t, e in _pythons(data).items() if t not in tags}
        if not pythons or not isinstance(data, dict):
            path.unlink(missing_ok=True)
        else:
            _write(path, {k: str(data.get(k, "?")) for k in ("torch", "tag", "index")}, pythons)


def releases_held(cache: Path, variant: TorchVariant) -> tuple[str, ...]:
    """Every torch release of *variant*'s CUDA tag and index the wheel cache holds for some
    Python, by the records: what a build can name when the index cannot be read."""
    index = without_credentials(variant.index_url)[0]
    found = set()
    for path in sorted((cache / FOLDER).glob("*.json")):
        data = _load(path)
        if (
            isinstance(data, dict)
            and data.get("tag") == variant.tag
            and data.get("index") == index
            and _pythons(data)
        ):
            found.add(str(data.get("torch")))
    return tuple(sorted(found, key=_version_key))


def _version_key(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")
