"""Which Pythons a build targets by default: the image's interpreters for which the chosen torch
release has a linux x86_64 wheel on its index, and which the package's Requires-Python admits.

Three parts, so each can be tested on its own:

- :func:`torch_python_tags` reads the torch project page of an index once (PEP 691 JSON, else
  PEP 503 HTML) and says which Pythons have a wheel of that torch version; the answer is cached
  for a day. The only part with network.
- :func:`requires_python_of` (requires_python.py) reads a source's Requires-Python (sdist
  PKG-INFO, pyproject.toml).
- :func:`choose_pythons` is pure: image, torch tags, Requires-Python, the Pythons asked for in,
  the Pythons to build (and why each other one is left out) out.

A tag set says what the index has: ``cp311`` (a CPython 3.11 wheel), ``cp313t`` (free-threaded
3.13), ``cp39-abi3`` (a stable-ABI wheel: every CPython >= 3.9 that is not free-threaded).
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import json
import os
import re
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .errors import BadArgument, TorchIndexUnreachable
from .index.index import MEDIA_HTML_V1, MEDIA_JSON
from .secrets import Redactor, authorized_request, redact_url, url_secrets
from .sources import cache_dir

CACHE_MAX_AGE_S = 24 * 3600
PAGE_LIMIT = 64 << 20  # PyTorch's torch page is a few MiB; a bigger answer is not an index page
# PEP 691 negotiation: JSON preferred, HTML (PEP 503) from an index that only has that (PyTorch's).
ACCEPT = f"{MEDIA_JSON}, {MEDIA_HTML_V1};q=0.2, text/html;q=0.1"

_CPYTHON = re.compile(r"cp3(\d+)(t?)")
_ABI3 = re.compile(r"cp3(\d+)-abi3")
# glibc Linux on x86_64; the production base is manylinux (glibc), so musllinux wheels do not count.
_LINUX_X86_64 = re.compile(r"linux_x86_64|manylinux(?:1|2010|2014|_\d+_\d+)_x86_64")


# ---------------------------------------------------------------------------------------------
# URLs with credentials


def _scrub(text: str, url: str) -> str:
    """An error text (from urllib) with the URL's credentials removed, should they appear there."""
    return Redactor(url_secrets(url))(text)


# ---------------------------------------------------------------------------------------------
# A project page, and the Python tags of one version's wheels on it


@dataclass(frozen=True)
class IndexFile:
    """One file a project page lists."""

    filename: str
    yanked: bool
    url: str = field(default="", compare=False)  # as the page gives it: relative to the page


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.anchors: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.anchors.append(dict(attrs))


def anchors(body: bytes) -> list[dict[str, str | None]]:
    """The attributes of every <a> on an HTML page: a PEP 503 page links all it lists."""
    parser = _Anchors()
    parser.feed(body.decode("utf-8", errors="replace"))
    parser.close()
    return parser.anchors


def _file_of(values: dict[str, str | None]) -> IndexFile | None:
    href = values.get("href") or ""
    # PEP 503: the anchor's text is the file name, and so is the URL's last path segment.
    try:
        name = unquote(urlsplit(href).path.rsplit("/", 1)[-1])
    except ValueError:  # a link no client could follow
        return None
    return IndexFile(filename=name, yanked="data-yanked" in values, url=href) if name else None


def files_on_page(body: bytes, content_type: str) -> tuple[IndexFile, ...]:
    """The files of a project page: PEP 691 JSON when *content_type* is JSON, else PEP 503 HTML.
    Raises ValueError for JSON that is not a PEP 691 project page."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media.endswith("json"):
        document = json.loads(body)
        entries = document.get("files") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise ValueError("the JSON page has no list of files")
        files = []
        for entry in entries:
            if isinstance(entry, dict) and isinstance(entry.get("filename"), str):
                yanked = entry.get("yanked", False)
                # PEP 691: false, true, or the reason (a string: yanked).
                url = entry.get("url")
                files.append(
                    IndexFile(
                        entry["filename"],
                        yanked is True or isinstance(yanked, str),
                        url=url if isinstance(url, str) else "",
                    )
                )
        return tuple(files)
    return tuple(file for file in map(_file_of, anchors(body)) if file is not None)


def python_tags(files: Iterable[IndexFile], torch_version: str, project: str = "torch") -> frozenset[str]:
    """The Python tags (``cp311``, ``cp313t``, ``cp39-abi3``) of the files that are linux x86_64
    wheels of *project* at *torch_version*, by PEP 440 equality: ``2.10.0`` matches
    ``2.10.0+cu128``, and ``2.10.0+cu128`` only itself. Yanked files do not count.
    Raises BadArgument when *torch_version* is not a version."""
    try:
        wanted = SpecifierSet(f"=={torch_version}")
    except InvalidSpecifier:
        raise BadArgument(
            f"torch version {torch_version!r} is not a version", "write it as 2.11.0 or 2.11.0+cu130"
        ) from None
    name = canonicalize_name(project)
    found: set[str] = set()
    for file in files:
        if file.yanked:
            continue
        try:
            wheel_name, version, _build, tags = parse_wheel_filename(file.filename)
        except (InvalidWheelFilename, InvalidVersion):
            continue
        if wheel_name != name or not wanted.contains(version, prereleases=True):
            continue
        for tag in tags:
            if not _LINUX_X86_64.fullmatch(tag.platform) or not _CPYTHON.fullmatch(tag.interpreter):
                continue
            if tag.abi in (tag.interpreter, f"{tag.interpreter}m", "none"):  # cp37m: before 3.8
                found.add(tag.interpreter)
            elif tag.abi == f"{tag.interpreter}t":
                found.add(tag.abi)
            elif tag.abi == "abi3":
                found.add(f"{tag.interpreter}-abi3")
    return frozenset(found)


def has_wheel(torch_tags: frozenset[str], python: str) -> bool:
    """Whether a torch with these tags installs on *python* (``cp311``, ``cp313t``)."""
    if python in torch_tags:
        return True
    match = _CPYTHON.fullmatch(python)
    if match is None or match[2]:  # abi3 is not for free-threaded builds
        return False
    minor = int(match[1])
    return any((m := _ABI3.fullmatch(tag)) and int(m[1]) <= minor for tag in torch_tags)


# ---------------------------------------------------------------------------------------------
# The index, read once and cached for a day


def _cache_file(cache: Path, index_url: str, torch_version: str) -> Path:
    # Keyed by the redacted URL: no credential (nor anything computed from one) reaches the disk.
    key = f"{redact_url(index_url).rstrip('/')}\n{torch_version}"
    return cache / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def _read_cache(path: Path, index: str, torch_version: str, max_age_s: float) -> frozenset[str] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        age = time.time() - float(record["fetched"])
        tags = record["tags"]
        fresh = 0 <= age < max_age_s and record["index"] == index and record["torch"] == torch_version
        if fresh and isinstance(tags, list) and all(isinstance(t, str) for t in tags):
            return frozenset(tags)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # absent, unreadable or garbled: ask the index
    return None


def _write_cache(path: Path, index: str, torch_version: str, tags: frozenset[str]) -> None:
    record = {"index": index, "torch": torch_version, "fetched": time.time(), "tags": sorted(tags)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".part", delete=False) as part:
            json.dump(record, part)
        os.replace(part.name, path)
    except OSError:
        pass  # a cache that cannot be written only costs a request next time


def _unreachable(page: str, why: str) -> TorchIndexUnreachable:
    return TorchIndexUnreachable(
        f"could not read torch's page on the torch index, {page}: {why}",
        "check the network (proxy, CA bundle) and the index's credentials, point --torch-index-url "
        "at an index that has torch, or name the Pythons with --python to skip this check",
    )


def _fetch_page(index_url: str, timeout: float) -> tuple[bytes, str] | None:
    """(body, content type) of the torch page, or None when the index has no torch (404)."""
    index = redact_url(index_url)
    shown = f"{index.rstrip('/')}/torch/"
    try:
        request = authorized_request(f"{index_url.rstrip('/')}/torch/", {"Accept": ACCEPT})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body: bytes = response.read(PAGE_LIMIT + 1)
            content_type = str(response.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        why = f"HTTP {exc.code} {exc.reason}"
        if exc.code in (401, 403):
            why += " (the credentials in the URL are missing or refused)"
        raise _unreachable(shown, _scrub(why, index_url)) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise _unreachable(shown, _scrub(str(exc) or type(exc).__name__, index_url)) from None
    if len(body) > PAGE_LIMIT:
        raise _unreachable(shown, f"the page is larger than {PAGE_LIMIT >> 20} MiB")
    return body, content_type


def torch_python_tags(
    index_url: str,
    torch_version: str,
    *,
    cache: Path | None = None,
    max_age_s: float = CACHE_MAX_AGE_S,
    timeout: float = 60.0,
    on_line: Callable[[str], None] | None = None,
) -> frozenset[str]:
    """The Python tags for which *index_url* (a simple index: ``.../simple`` or PyTorch's
    ``.../whl/cu130``) has a linux x86_64 wheel of torch *torch_version* (see
    :func:`python_tags`); empty when it has none, or no torch at all.

    Reads ``<index_url>/torch/`` once; a non-empty answer is kept in *cache* (default: the
    wheelbuild cache dir) for *max_age_s*. Raises TorchIndexUnreachable when the page cannot be
    read (network, HTTP error, a page that is not an index page), BadArgument for a torch version
    that is not a version. Credentials in the URL are sent as Basic auth and never shown."""
    python_tags((), torch_version)  # a bad version fails here, before any request
    index = redact_url(index_url).rstrip("/")
    path = _cache_file(
        cache if cache is not None else cache_dir() / "torch-pythons", index_url, torch_version
    )
    cached = _read_cache(path, index, torch_version, max_age_s)
    if cached is not None:
        if on_line:
            on_line(f"torch {torch_version} on {index} has wheels for {_listed(cached)} (cached)")
        return cached
    fetched = _fetch_page(index_url, timeout)
    if fetched is None:
        tags: frozenset[str] = frozenset()
    else:
        body, content_type = fetched
        try:
            files = files_on_page(body, content_type)
        except ValueError as exc:  # garbled JSON, or JSON that is not a project page
            raise _unreachable(f"{index.rstrip('/')}/torch/", f"not a PEP 691 project page ({exc})") from None
        tags = python_tags(files, torch_version)
    if on_line:
        on_line(f"torch {torch_version} on {index} has wheels for {_listed(tags)}")
    if tags:  # an empty answer is likely a wrong URL or version being fixed: ask again next time
        _write_cache(path, index, torch_version, tags)
    return tags


def _sort_key(python: str) -> tuple[int, str]:
    match = re.match(r"cp3(\d+)", python)
    return (int(match[1]) if match else 999, python)


def _listed(tags: Iterable[str]) -> str:
    return ", ".join(sorted(tags, key=_sort_key)) or "no Python"


# ---------------------------------------------------------------------------------------------
# The choice (pure)


@dataclass(frozen=True)
class LeftOut:
    python: str  # "cp314"
    why: str  # "torch 2.11.0 has no cp314 wheel on https://***@example.com/simple"

    def __str__(self) -> str:
        return f"{self.python}: {self.why}"


@dataclass(frozen=True)
class PythonChoice:
    pythons: tuple[str, ...]  # what to build, in the image's order (or the order asked)
    left_out: tuple[LeftOut, ...] = ()  # the image's others (none when Pythons were asked for)


@functools.lru_cache(maxsize=4096)
def _admits(requires_python: str, python: str) -> bool:
    """Whether some release of this Python (3.X.0 ... 3.X.99) satisfies Requires-Python: the tag
    does not say which patch release the image has. *requires_python* is a valid specifier."""
    match = _CPYTHON.fullmatch(python)
    if match is None:
        return False
    specifier = SpecifierSet(requires_python)
    return any(specifier.contains(Version(f"3.{match[1]}.{patch}")) for patch in range(100))


def choose_pythons(
    image: Sequence[str],
    torch_tags: frozenset[str] | None,
    requires_python: str | None,
    asked: Sequence[str] | None,
    *,
    package: str = "the package",
    torch_version: str | None = None,
    index_url: str | None = None,
) -> PythonChoice:
    """The Pythons to build.

    *image*: the image's interpreters (``cp311``...). *torch_tags*: from :func:`torch_python_tags`,
    or None when not checked. *requires_python*: from :func:`requires_python_of`. *asked*: the
    ``--python`` tags, or None (or empty, as BuildSpec.pythons is) for the default: every image interpreter with a torch wheel that
    Requires-Python admits, the others listed in ``left_out`` with why. *package*, *torch_version*
    and *index_url* only word the reasons (the URL redacted).

    Raises BadArgument when an asked Python cannot be built (the cause names each and why, the
    remedy lists those that can), when none is left, and for a Requires-Python that is not a
    version specifier."""
    if requires_python is not None:
        try:
            SpecifierSet(requires_python)
        except InvalidSpecifier:
            raise BadArgument(
                f"{package}'s Requires-Python {requires_python!r} is not a version specifier",
                "fix the package's requires-python, or name the Pythons with --python",
            ) from None
    in_image = tuple(dict.fromkeys(image))
    reasons = _Reasons(
        in_image,
        torch_tags,
        requires_python,
        package,
        torch=f"torch {torch_version}" if torch_version else "torch",
        where=redact_url(index_url) if index_url else "its index",
    )
    usable = tuple(p for p in in_image if not reasons.why_not(p))
    left_out = tuple(LeftOut(p, why) for p in in_image if (why := reasons.why_not(p)))
    if asked:
        return _as_asked(asked, reasons, usable)
    if not in_image:
        raise BadArgument(
            "the image has no CPython interpreter to build with",
            "build on a manylinux base image (its CPythons are under /opt/python)",
        )
    if not usable:
        raise BadArgument(
            f"no Python in the image can build {package}: " + "; ".join(str(x) for x in left_out),
            _no_python_remedy(torch_tags is not None),
        )
    return PythonChoice(pythons=usable, left_out=left_out)


@dataclass(frozen=True)
class _Reasons:
    """Why a Python cannot be built here ("" when it can); the words name the package, the
    torch release and its index (redacted)."""

    in_image: tuple[str, ...]
    torch_tags: frozenset[str] | None
    requires_python: str | None
    package: str
    torch: str
    where: str

    def why_not(self, python: str) -> str:
        reasons = []
        if python not in self.in_image:
            reasons.append(f"the image has no {python} interpreter")
        if not _CPYTHON.fullmatch(python):
            reasons.append("not a CPython tag such as cp311")
        elif self.torch_tags is not None and not has_wheel(self.torch_tags, python):
            reasons.append(f"{self.torch} has no {python} wheel on {self.where}")
        if (
            self.requires_python is not None
            and _CPYTHON.fullmatch(python)
            and not _admits(self.requires_python, python)
        ):
            reasons.append(f"{self.package} requires Python {self.requires_python}")
        return ", and ".join(reasons)


def _as_asked(asked: Sequence[str], reasons: _Reasons, usable: tuple[str, ...]) -> PythonChoice:
    """The Pythons --python names, each of which must be buildable."""
    wanted = tuple(dict.fromkeys(asked))
    refused = [LeftOut(p, why) for p in wanted if (why := reasons.why_not(p))]
    if refused:
        raise BadArgument(
            f"--python {', '.join(r.python for r in refused)} cannot be built: "
            + "; ".join(str(r) for r in refused),
            f"pick --python from {', '.join(usable)}"
            if usable
            else "no Python in the image can be built: " + _no_python_remedy(reasons.torch_tags is not None),
        )
    return PythonChoice(pythons=wanted)


def _no_python_remedy(torch_checked: bool) -> str:
    base = "build on a base image with a Python the package supports"
    if not torch_checked:
        return base
    return f"choose a torch release (--torch) or an index (--torch-index-url) with wheels for them, or {base}"
