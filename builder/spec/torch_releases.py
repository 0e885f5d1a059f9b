"""The torch releases an index serves: each final release's version, the Pythons it has linux
x86_64 wheels for, and the CUDA it was built with.

- :func:`read_torch_index` reads ``<index>/torch/`` once (PEP 691 JSON, else PEP 503 HTML) and
  keeps the file list for a day; a version the kept list lacks reads the page again.
- :meth:`TorchIndex.cuda_of` says which CUDA a release was built with: from its local label where
  it has one (``2.11.0+cu130`` on PyTorch's index), else from one of its wheels' METADATA, whose
  ``cuda-toolkit==13.0.3`` or ``nvidia-cuda-runtime-cu12==12.8.90`` pin says it (PyPI's torch
  carries no label, and its default CUDA moves: 2.10 is 12.8, 2.11-2.14 are 13.0, 2.15 is 13.2).
  METADATA comes from the index apart (PEP 658) where it says it serves it, else from a few byte
  ranges of the wheel (its zip directory and that one member), never the whole file. A wheel's
  METADATA never changes, so the answer is kept for good.
- :func:`download_wheel` fetches one torch wheel whole, hash-checked, for reading its libraries.

Credentials in the index URL go as a header to the index's own host, never to a log or the disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..errors import BadArgument, TorchIndexUnreachable
from ..index import reader
from ..index.project_pages import ACCEPT, IndexFile, file_url, files_on_page
from ..secrets import Redactor, redact_url, url_secrets
from ..wheel.contents import requirements_in
from .remote_wheel import download_wheel, remote_metadata
from .sources import cache_dir

CACHE_MAX_AGE_S = 24 * 3600

CPYTHON = re.compile(r"cp3(\d+)(t?)")
# glibc Linux on x86_64; the production base is manylinux (glibc), so musllinux wheels do not count.
_LINUX_X86_64 = re.compile(r"linux_x86_64|manylinux(?:1|2010|2014|_\d+_\d+)_x86_64")
_CUDA_LABEL = re.compile(r"cu(\d+)(\d)")
_CUDA_RUNTIME = re.compile(r"nvidia-cuda-runtime(?:-cu\d+)?")

__all__ = [
    "TorchIndex",
    "TorchRelease",
    "cuda_of_metadata",
    "python_tags",
    "read_torch_index",
    "releases_of",
    "torch_python_tags",
]


def _unreachable(page: str, why: str) -> TorchIndexUnreachable:
    return TorchIndexUnreachable(
        f"could not read torch's page on the torch index, {page}: {why}",
        "check the network (proxy, CA bundle) and the index's credentials, or point --torch-index-url "
        "at an index that has torch (plan with --python plans without it; build needs it, but for a torch "
        "an earlier build here installed from it)",
    )


# ---------------------------------------------------------------------------------------------
# Releases, from a page's files (pure)


@dataclass(frozen=True)
class TorchRelease:
    """One final torch release on an index, and its linux x86_64 wheels."""

    version: str  # as the index names it: 2.14.1, or 2.11.0+cu130 on PyTorch's index
    pythons: frozenset[str]  # cp311, cp313t (free-threaded), cp39-abi3 (stable ABI)
    wheels: tuple[IndexFile, ...]

    @property
    def minor(self) -> tuple[int, int]:
        release = Version(self.version).release
        return release[0], release[1] if len(release) > 1 else 0

    @property
    def label_cuda(self) -> str | None:
        """ "13.0" for a version labelled +cu130; None without a CUDA label."""
        match = _CUDA_LABEL.fullmatch(Version(self.version).local or "")
        return f"{match[1]}.{match[2]}" if match else None

    def wheel_for(self, python: str | None) -> IndexFile:
        """The wheel of this release for *python* (cp311), else its first."""
        for wheel in self.wheels:
            if python and _tags_of(wheel.filename) & {python}:
                return wheel
        return self.wheels[0]


def _tags_of(filename: str) -> frozenset[str]:
    """The Python tags a linux x86_64 CPython wheel serves (cp311, cp313t, cp39-abi3); empty for
    any other file."""
    try:
        _name, _version, _build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return frozenset()
    found: set[str] = set()
    for tag in tags:
        if not _LINUX_X86_64.fullmatch(tag.platform) or not CPYTHON.fullmatch(tag.interpreter):
            continue
        if tag.abi in (tag.interpreter, f"{tag.interpreter}m", "none"):  # cp37m: before 3.8
            found.add(tag.interpreter)
        elif tag.abi == f"{tag.interpreter}t":
            found.add(tag.abi)
        elif tag.abi == "abi3":
            found.add(f"{tag.interpreter}-abi3")
    return frozenset(found)


def _torch_wheels(files: Iterable[IndexFile], project: str) -> Iterable[tuple[Version, IndexFile]]:
    name = canonicalize_name(project)
    for file in files:
        if file.yanked or not _tags_of(file.filename):
            continue
        wheel_name, version, _build, _tags = parse_wheel_filename(file.filename)
        if wheel_name == name:
            yield version, file


def python_tags(files: Iterable[IndexFile], torch_version: str, project: str = "torch") -> frozenset[str]:
    """The Python tags (``cp311``, ``cp313t``, ``cp39-abi3``) of the files that are linux x86_64
    wheels of *project* at *torch_version*, by PEP 440 equality: ``2.10.0`` matches
    ``2.10.0+cu128``, and ``2.10.0+cu128`` only itself. Yanked files do not count.
    Raises BadArgument when *torch_version* is not a version."""
    wanted = _specifier(torch_version)
    found: set[str] = set()
    for version, file in _torch_wheels(files, project):
        if wanted.contains(version, prereleases=True):
            found |= _tags_of(file.filename)
    return frozenset(found)


def releases_of(files: Iterable[IndexFile], project: str = "torch") -> tuple[TorchRelease, ...]:
    """The final releases among the page's linux x86_64 wheels (no pre-, dev- or yanked ones),
    newest first; a local label makes a release of its own (2.11.0+cu130, 2.11.0+cu126)."""
    grouped: dict[Version, list[IndexFile]] = {}
    for version, file in _torch_wheels(files, project):
        if not (version.is_prerelease or version.is_devrelease):
            grouped.setdefault(version, []).append(file)
    return tuple(
        TorchRelease(
            version=str(version),
            pythons=frozenset().union(*(_tags_of(f.filename) for f in wheels)),
            wheels=tuple(wheels),
        )
        for version, wheels in sorted(grouped.items(), reverse=True)
    )


def _specifier(torch_version: str) -> SpecifierSet:
    try:
        return SpecifierSet(f"=={torch_version}")
    except (InvalidSpecifier, ValueError):  # ValueError: a number past Python's digit limit
        raise BadArgument(
            f"torch version {torch_version[:80]!r} is not a version", "write it as 2.11.0 or 2.11.0+cu130"
        ) from None


def cuda_of_metadata(metadata: bytes) -> str:
    """The CUDA a torch wheel was built with, from its METADATA: "13.0" for a Requires-Dist of
    ``cuda-toolkit[...]==13.0.3`` or ``nvidia-cuda-runtime-cu12==12.8.90``; "cpu" when it needs
    no CUDA runtime."""
    for requirement in requirements_in(metadata):
        name = canonicalize_name(requirement.name)
        if name != "cuda-toolkit" and not _CUDA_RUNTIME.fullmatch(name):
            continue
        for pin in requirement.specifier:
            if pin.operator in ("==", "===", "~="):
                parts = pin.version.split(".")
                if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                    return f"{int(parts[0])}.{int(parts[1])}"
    return "cpu"


# ---------------------------------------------------------------------------------------------
# The index, read once a day


@dataclass(frozen=True)
class TorchIndex:
    """torch's page on one index, as read (or as kept from a read less than a day old)."""

    url: str  # the index, credentials and all: never shown
    files: tuple[IndexFile, ...]
    cached: bool = False

    @property
    def shown(self) -> str:
        return redact_url(self.url).rstrip("/")

    @property
    def page_url(self) -> str:
        return f"{self.url.rstrip('/')}/torch/"

    @property
    def releases(self) -> tuple[TorchRelease, ...]:
        return releases_of(self.files)

    def python_tags(self, torch_version: str) -> frozenset[str]:
        return python_tags(self.files, torch_version)

    def cpythons(self, torch_version: str) -> tuple[str, ...]:
        """The CPython tags (free-threaded builds left out) that have a wheel of *torch_version*,
        oldest first."""
        tags = (t for t in self.python_tags(torch_version) if re.fullmatch(r"cp3\d+", t))
        return tuple(sorted(tags, key=python_order))

    def release(self, torch_version: str) -> TorchRelease | None:
        """The release *torch_version* names (2.14.1 matches 2.14.1+cu130 too, when alone)."""
        wanted = _specifier(torch_version)
        found = [r for r in self.releases if wanted.contains(Version(r.version), prereleases=True)]
        return found[0] if len(found) == 1 else next((r for r in found if r.version == torch_version), None)

    def wheel_url(self, wheel: IndexFile) -> str:
        return file_url(self.page_url, wheel)

    def cuda_of(self, release: TorchRelease, *, cache: Path | None = None, python: str | None = None) -> str:
        """The CUDA *release* was built with ("13.0", "12.8"; "cpu" for none): its label's, else
        its METADATA's (kept for good under *cache*). Raises TorchIndexUnreachable when the
        METADATA cannot be read."""
        if (labelled := release.label_cuda) is not None:
            return labelled
        wheel = release.wheel_for(python)
        store = (cache if cache is not None else cache_dir()) / "torch-cuda"
        key = wheel.sha256 or hashlib.sha256(redact_url(self.wheel_url(wheel)).encode()).hexdigest()
        path = store / f"{key[:40]}.json"
        try:
            return str(json.loads(path.read_text(encoding="utf-8"))["cuda"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # never read, or garbled: read it
        cuda = cuda_of_metadata(self.metadata(wheel))
        _write_json(path, {"wheel": wheel.filename, "cuda": cuda})
        return cuda

    def download(self, wheel: IndexFile, dest: BinaryIO) -> None:
        """One of its wheels, whole, into *dest*, checked against the sha256 the page names.
        Raises TorchIndexUnreachable."""
        url = self.wheel_url(wheel)
        try:
            download_wheel(url, wheel.sha256, dest)
        except reader.HttpRefused as refused:
            raise _unreachable(redact_url(url), Redactor(url_secrets(self.url))(refused.why)) from None

    def metadata(self, wheel: IndexFile) -> bytes:
        """One wheel's METADATA: from the index apart where it serves it, else from the wheel's
        byte ranges. Raises TorchIndexUnreachable."""
        url = self.wheel_url(wheel)
        shown = redact_url(url)
        redact = Redactor(url_secrets(self.url))
        try:
            if wheel.metadata:
                return reader.fetch(f"{url}.metadata", reader.METADATA).body
            return remote_metadata(url, wheel.filename)
        except reader.HttpRefused as refused:
            raise _unreachable(shown, redact(f"its METADATA could not be read: {refused.why}")) from None
        except (zipfile.BadZipFile, KeyError, ValueError) as bad:
            raise _unreachable(shown, redact(f"it is not a readable wheel: {bad}")) from None


def _write_json(path: Path, record: dict[str, object]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".part", delete=False) as part:
            json.dump(record, part)
        os.replace(part.name, path)
    except OSError:
        pass  # a cache that cannot be written only costs a request next time


def _page_cache(cache: Path, index_url: str) -> Path:
    # Keyed by the redacted URL: no credential (nor anything computed from one) reaches the disk.
    key = redact_url(index_url).rstrip("/")
    return cache / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def _read_page_cache(path: Path, index: str, max_age_s: float) -> tuple[IndexFile, ...] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        age = time.time() - float(record["fetched"])
        if not (0 <= age < max_age_s and record["index"] == index):
            return None
        return tuple(
            IndexFile(str(name), bool(yanked), url=str(url), sha256=str(sha256), metadata=bool(metadata))
            for name, yanked, url, sha256, metadata in record["files"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, unreadable or garbled: ask the index


def _fetch_page(index_url: str, timeout: float) -> tuple[IndexFile, ...]:
    """The torch page's files. Raises TorchIndexUnreachable when it cannot be read, a 404 (no torch
    project: a wrong URL, most likely) included."""
    shown = f"{redact_url(index_url).rstrip('/')}/torch/"
    redact = Redactor(url_secrets(index_url))
    try:
        answer = reader.fetch(
            f"{index_url.rstrip('/')}/torch/",
            reader.PROJECT_PAGE,
            headers={"Accept": ACCEPT},
            timeout=timeout,
        )
    except reader.HttpRefused as refused:
        if refused.status == 404:  # a wrong URL, most likely: never "no torch built with CUDA x"
            raise TorchIndexUnreachable(
                f"the torch index answered 404 (not found) for {shown}: no torch project there",
                "check --torch-index-url (WHEELBUILD_TORCH_INDEX_URL) for a typo: it names a simple "
                "index that has torch, e.g. https://download.pytorch.org/whl/cu130 or https://pypi.org/simple",
            ) from None
        raise _unreachable(shown, redact(refused.why)) from None
    try:
        return files_on_page(answer.body, answer.content_type)
    except ValueError as exc:  # garbled JSON, or JSON that is not a project page
        raise _unreachable(shown, f"not a PEP 691 project page ({redact(str(exc))})") from None


def read_torch_index(
    index_url: str,
    *,
    cache: Path | None = None,
    max_age_s: float = CACHE_MAX_AGE_S,
    timeout: float = 60.0,
    wanted: str | None = None,
) -> TorchIndex:
    """torch's page on *index_url* (a simple index: ``.../simple`` or PyTorch's ``.../whl/cu130``),
    from the cache when read less than *max_age_s* ago and, if *wanted* (a torch version) is
    given, listing it; else read anew, and kept when it lists any torch wheel. Raises
    TorchIndexUnreachable when the page cannot be read."""
    store = cache if cache is not None else cache_dir() / "torch-index"
    path = _page_cache(store, index_url)
    index = redact_url(index_url).rstrip("/")
    kept = _read_page_cache(path, index, max_age_s)
    if kept is not None and (wanted is None or python_tags(kept, wanted)):
        return TorchIndex(index_url, kept, cached=True)
    files = _fetch_page(index_url, timeout)
    if any(_tags_of(f.filename) for f in files):  # an empty answer: a wrong URL being fixed
        _write_json(
            path,
            {
                "index": index,
                "fetched": time.time(),
                "files": [[f.filename, f.yanked, f.url, f.sha256, f.metadata] for f in files],
            },
        )
    return TorchIndex(index_url, files)


def torch_python_tags(
    index_url: str,
    torch_version: str,
    *,
    cache: Path | None = None,
    max_age_s: float = CACHE_MAX_AGE_S,
    timeout: float = 60.0,
    on_line: Callable[[str], None] | None = None,
) -> frozenset[str]:
    """The Python tags for which *index_url* has a linux x86_64 wheel of torch *torch_version*
    (see :func:`python_tags`); empty when it has none, or no torch at all. Raises
    TorchIndexUnreachable, and BadArgument for a torch version that is not a version."""
    _specifier(torch_version)  # a bad version fails here, before any request
    found = read_torch_index(
        index_url, cache=cache, max_age_s=max_age_s, timeout=timeout, wanted=torch_version
    )
    tags = found.python_tags(torch_version)
    if on_line:
        cached = " (cached)" if found.cached else ""
        on_line(f"torch {torch_version} on {found.shown} has wheels for {listed(tags)}{cached}")
    return tags


def python_order(python: str) -> tuple[int, str]:
    match = re.match(r"cp3(\d+)", python)
    return (int(match[1]) if match else 999, python)


def listed(tags: Iterable[str]) -> str:
    return ", ".join(sorted(tags, key=python_order)) or "no Python"
