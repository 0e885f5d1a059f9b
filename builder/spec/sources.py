"""Get a recipe's source onto this machine: a local directory as is, an sdist verified against
its sha256 pin (downloaded once into a cache keyed by that hash). A release a recipe does not
pin (`pypi:<project>==<version>`) is looked up on the index first, and then pinned by the hash
the index lists, which the build report records."""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import assert_never
from urllib.parse import urljoin

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    canonicalize_name,
    parse_sdist_filename,
)
from packaging.version import InvalidVersion, Version

from ..bounded import (
    ArchiveRefused,
    FileRefused,
    file_url_problem,
    regular_file_sha256,
    tar_gz_members,
    url_file_name,
)
from ..errors import BadVersion, SourceUnavailable, UnknownPackage
from ..index import reader
from ..index.project_pages import MEDIA_JSON, IndexFile, files_on_page
from ..recipes import (
    SDIST_SUFFIXES,
    IndexLookup,
    LocalProject,
    LocalSdist,
    Recipe,
    RemoteSdist,
    Source,
    at_newest_pinned,
    at_release,
    nearest_names,
)
from ..secrets import redact_url

SIMPLE_INDEX = "https://pypi.org/simple"  # WHEELBUILD_SIMPLE_INDEX: another PEP 691 index


@dataclass(frozen=True)
class PreparedSource:
    project_dir: Path  # cibuildwheel's working directory (copied into the container)
    package: str  # what cibuildwheel builds, relative to project_dir: "." or an sdist name


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("WHEELBUILD_CACHE_DIR", Path(base) / "wheelbuild"))


def _verify(path: Path, expected: str | None) -> None:
    if expected is None:
        return
    try:
        actual = regular_file_sha256(path)
    except FileRefused:
        raise SourceUnavailable(
            f"{path} is not a regular file (a FIFO, a device, or a link to one)", "give the sdist file itself"
        ) from None
    if actual != expected:
        raise SourceUnavailable(
            f"{path.name} has sha256 {actual}, but the pin says {expected}",
            "the file changed or the pin is wrong: check where it came from before updating the pin",
        )


def _download(url: str, dest: Path, on_line: Callable[[str], None]) -> None:
    # A URL's credentials travel as a header (urllib cannot use user:pw@host) and are never shown.
    shown = redact_url(url)
    on_line(f"downloading {shown}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Download beside the destination, then rename: a killed download never looks complete.
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as part:
        try:
            reader.download(url, part, reader.SDIST)
        except reader.HttpRefused as refused:
            os.unlink(part.name)
            raise SourceUnavailable(
                f"could not download {shown}: {refused.why}",
                "check the URL and the network (proxy, CA bundle)",
            ) from None
    os.replace(part.name, dest)


def _files(base: str, project: str) -> tuple[str, tuple[IndexFile, ...]]:
    """(page URL, files) of a project on a PEP 691 index, read as JSON whatever the server calls it."""
    page = f"{base.rstrip('/')}/{canonicalize_name(project)}/"
    shown = redact_url(page)
    try:
        answer = reader.fetch(page, reader.PROJECT_PAGE, headers={"Accept": MEDIA_JSON})
        return page, files_on_page(answer.body, MEDIA_JSON)
    except reader.HttpRefused as refused:
        # A close known name helps whether or not the index answered: a typo is likelier offline too.
        near = nearest_names(project)
        meant = f"did you mean {' or '.join(near)}? " if near else ""
        if refused.status == 404:
            raise UnknownPackage(
                f"{project} is not on the index ({redact_url(base)})",
                f"{meant}check the name (as pip spells it), or point WHEELBUILD_SIMPLE_INDEX at the index that has it",
            ) from None
        raise SourceUnavailable(
            f"could not look up {project} at {shown}: {refused.why}",
            meant + ("check the network" if refused.status else "check the network (proxy, CA bundle)"),
        ) from None
    except ValueError as exc:
        raise SourceUnavailable(
            f"could not look up {project} at {shown}: {redact_url(str(exc))}",
            "check the network (proxy, CA bundle)",
        ) from None


def _sdists(project: str) -> tuple[str, list[tuple[Version, str, str, bool]]]:
    """(page URL, [(version, absolute URL, sha256, yanked)]) of the project's sdists on the index."""
    page, files = _files(os.environ.get("WHEELBUILD_SIMPLE_INDEX", SIMPLE_INDEX), project)
    found = []
    for file in files:
        try:
            name, version = parse_sdist_filename(file.filename)
        except (InvalidSdistFilename, InvalidVersion):
            continue
        if name == canonicalize_name(project) and file.sha256 and file.url:
            found.append((version, urljoin(page, file.url), file.sha256, file.yanked))
    return page, found


def lookup_sdist(project: str, version: str) -> tuple[str, RemoteSdist]:
    """The release of `project` that `version` names (one release, a PEP 440 specifier, or '' for
    the newest final one) and its sdist as the index lists it (PEP 691 JSON), pinned by its
    sha256. A yanked release is taken only when pinned with ==."""
    page, sdists = _sdists(project)
    wanted = _wanted(version)
    pinned = isinstance(wanted, Version) or version.strip().startswith("==")
    matching = [
        (found, url, sha256, yanked)
        for found, url, sha256, yanked in sdists
        if (found == wanted if isinstance(wanted, Version) else wanted.contains(found, prereleases=pinned))
        and (pinned or not yanked)
    ]
    if matching:
        found, url, sha256, _yanked = max(matching)
        return str(found), RemoteSdist(url=url, sha256=sha256)
    there = ", ".join(str(v) for v in sorted({v for v, _u, _s, y in sdists if not y})[-8:]) or "none"
    raise BadVersion(
        f"{project} {version or '(newest)'} has no sdist with a sha256 on the index ({redact_url(page)})",
        f"name a release it has (newest with an sdist: {there}), or build from an sdist URL with #sha256=",
    )


def _wanted(version: str) -> Version | SpecifierSet:
    """'2.8.3post2' -> Version('2.8.3.post2'); '>=1.6' or '' -> a SpecifierSet."""
    text = version.strip()
    try:
        return Version(text) if text and text[0] not in "<>=!~" else SpecifierSet(text)
    except (InvalidVersion, InvalidSpecifier):
        raise BadVersion(
            f"{version!r} is neither a version nor a PEP 440 specifier",
            "name a release (2.8.3.post2) or a range (>=2.8)",
        ) from None


def newest_release(project: str) -> str:
    """The newest final (not pre-release) version with an sdist on the index."""
    page, sdists = _sdists(project)
    finals = [version for version, _url, _sha, yanked in sdists if not version.is_prerelease and not yanked]
    if not finals:
        raise SourceUnavailable(f"{redact_url(page)} lists no final release of {project}", "check the index")
    return str(max(finals))


def resolve_lookup(recipe: Recipe, on_line: Callable[[str], None]) -> Recipe:
    """The recipe with an IndexLookup source replaced by the sdist the index lists (pinned). A
    known recipe asked for its newest release builds its newest pinned one when the index cannot
    be read, and says so."""
    match recipe.source:
        case IndexLookup(project, version):
            try:
                found, source = lookup_sdist(project, version)
            except SourceUnavailable as unreadable:
                pinned = None if version else at_newest_pinned(recipe)
                if pinned is None:
                    raise
                on_line(
                    f"warning: {unreadable.cause}; building {project} {pinned.version}, the newest "
                    "release wheelbuild pins"
                )
                return pinned
            on_line(
                f"{project} {found} ({version or 'the newest'} on the index): {source.url} sha256 {source.sha256}"
            )
            return at_release(recipe, found, source)
        case LocalProject() | LocalSdist() | RemoteSdist():
            return recipe
        case _:
            assert_never(recipe.source)


def prepare_source(source: Source, on_line: Callable[[str], None]) -> PreparedSource:
    match source:
        case RemoteSdist(url, sha256):
            return _downloaded(url, sha256, on_line)
        case LocalProject(path) if path.is_dir():
            if not (path / "setup.py").is_file() and not (path / "pyproject.toml").is_file():
                raise SourceUnavailable(
                    f"{path} has neither setup.py nor pyproject.toml",
                    "point at the project's root directory",
                )
            return PreparedSource(project_dir=path, package=".")
        case LocalSdist(path, sha256) if path.is_file():
            _verify(path, sha256)
            return PreparedSource(project_dir=path.parent, package=path.name)
        case LocalProject(path) | LocalSdist(path):
            raise SourceUnavailable(f"source {path} does not exist", "check the path")
        case IndexLookup(project, version):
            raise AssertionError(f"{project}=={version} is looked up (resolve_lookup) before it is prepared")
        case _:
            assert_never(source)


def _downloaded(url: str, sha256: str, on_line: Callable[[str], None]) -> PreparedSource:
    """The sdist at *url*, downloaded once into the cache keyed by its pin and verified. The pin
    and the URL's file name become a path: both are checked first (a statement or a recipe may
    be hostile: a sha256 of '../..', a URL of file:///dev/zero or one ending in '..')."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise SourceUnavailable(
            f"the sdist pin {sha256[:80]!r} is not a sha256 (64 hex digits)", "pin the sdist by its sha256"
        )
    if (problem := file_url_problem(url, SDIST_SUFFIXES)) is not None:
        raise SourceUnavailable(
            f"the sdist URL {redact_url(url)!r} is not one wheelbuild downloads: {problem}",
            "give the http(s) URL of the .tar.gz or .zip itself",
        )
    name = url_file_name(url)
    dest = cache_dir() / "sdists" / sha256 / name
    if not dest.is_file():
        _download(url, dest, on_line)
    try:
        _verify(dest, sha256)
    except SourceUnavailable:
        dest.unlink()  # a bad download must not poison the cache
        raise
    on_line(f"source {name}, sha256 {sha256[:16]}... verified")
    return PreparedSource(project_dir=dest.parent, package=name)


# The date a wheel's zip entries carry when the inputs name none: 1980-01-01T00:00:00Z, the
# earliest a zip entry can say.
ZIP_EPOCH = 315532800
SDIST_LIMIT = 4 << 30  # bytes decompressed from an sdist to find its newest member
SDIST_MEMBERS = 100_000


@dataclass(frozen=True)
class SourceDate:
    """SOURCE_DATE_EPOCH for a build, taken from its inputs, and where it came from."""

    epoch: int
    why: str


def source_date(source: PreparedSource) -> SourceDate:
    """The date the wheel's zip entries carry, the same on every machine that builds these
    inputs: an sdist's newest member, else a git checkout's last commit of the project's folder,
    else 1980-01-01 (the zip epoch)."""
    if source.package != ".":
        sdist = source.project_dir / source.package
        newest = 0
        try:
            with closing(tar_gz_members(sdist, SDIST_LIMIT, SDIST_MEMBERS)) as members:
                newest = max((int(member.mtime) for member, _archive in members), default=0)
        except (ArchiveRefused, OSError, EOFError, tarfile.TarError, zlib.error, ValueError):
            newest = 0  # unreadable here: the build will say so; no date from it
        if newest >= ZIP_EPOCH:
            return SourceDate(newest, f"the newest file in {source.package}")
    else:
        committed = _last_commit(source.project_dir)
        if committed is not None:
            return SourceDate(
                committed[0], f"the last commit of {source.project_dir.name}/ ({committed[1][:12]})"
            )
    return SourceDate(ZIP_EPOCH, "no date in the inputs: 1980-01-01, the zip epoch")


def _last_commit(folder: Path) -> tuple[int, str] | None:
    """(commit time, hash) of the last commit that touched *folder*, if git can say; git runs
    on the host, reading the repository only (no package code runs)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), "log", "-1", "--format=%ct %H", "--", "."],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    fields = done.stdout.split()
    if done.returncode != 0 or len(fields) != 2 or not fields[0].isdigit():
        return None
    return int(fields[0]), fields[1]
