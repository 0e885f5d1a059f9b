"""A source's Requires-Python, read without running it: an sdist's top-level PKG-INFO (the archive
read as a hostile stream, capped in what it decompresses, in members and in PKG-INFO's bytes) or
a project directory's pyproject.toml ``[project] requires-python``, else its PKG-INFO. Which
Pythons that admits is pythons.py's to decide."""

from __future__ import annotations

import tarfile
import tomllib
import zlib
from contextlib import closing
from email.parser import HeaderParser
from pathlib import Path

from ..bounded import ArchiveRefused, tar_gz_members
from ..errors import SourceUnavailable

PKG_INFO_LIMIT = 1 << 20  # bytes of PKG-INFO read: its headers come first, the long description last
SDIST_LIMIT = 4 << 30  # bytes decompressed from an sdist before giving up on finding PKG-INFO
SDIST_MEMBERS = 100_000


def _from_pkg_info(data: bytes) -> str | None:
    headers, blank, _body = data.partition(b"\n\n")
    if not blank and len(data) >= PKG_INFO_LIMIT:
        return None  # headers cut off by the cap: do not trust a half-read value
    value = HeaderParser().parsestr(headers.decode("utf-8", errors="replace")).get("Requires-Python")
    if value is None:
        return None
    return str(value).strip() or None


def _from_sdist(path: Path) -> str | None:
    """Requires-Python from the PKG-INFO at the top of an sdist (``<name>-<version>/PKG-INFO``).
    The archive may be hostile: read as a stream, capped in what it decompresses, in members
    looked at and in the bytes of PKG-INFO read; nothing is extracted to disk."""
    try:
        with closing(tar_gz_members(path, SDIST_LIMIT, SDIST_MEMBERS)) as members:
            for member, archive in members:
                parts = member.name.removeprefix("./").split("/")
                if len(parts) == 2 and parts[1] == "PKG-INFO" and member.isfile():
                    stream = archive.extractfile(member)
                    return _from_pkg_info(stream.read(PKG_INFO_LIMIT)) if stream else None
    except ArchiveRefused as exc:
        if exc.members:
            return None  # so many members and no PKG-INFO among them: it says none
        raise SourceUnavailable(
            f"cannot read the sdist {path}: {exc}", "check the file: it is not a readable .tar.gz"
        ) from None
    except (OSError, EOFError, tarfile.TarError, zlib.error) as exc:
        raise SourceUnavailable(
            f"cannot read the sdist {path}: {exc}", "check the file: it is not a readable .tar.gz"
        ) from None
    return None


def _from_pyproject(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            document = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SourceUnavailable(f"cannot read {path}: {exc}", "fix the file's TOML") from None
    project = document.get("project")
    value = project.get("requires-python") if isinstance(project, dict) else None
    if value is None:
        return None
    if not isinstance(value, str):
        raise SourceUnavailable(
            f"{path}: [project] requires-python is not a string", 'write it as requires-python = ">=3.10"'
        )
    return value.strip() or None


def requires_python_of(project: Path) -> str | None:
    """The Requires-Python of a source: an sdist (``.tar.gz``: its top-level PKG-INFO) or a project
    directory (``pyproject.toml``'s ``[project] requires-python``, else its PKG-INFO). None when it
    says none (a setup.py-only project cannot be read without running it). Raises
    SourceUnavailable for an sdist or pyproject.toml that cannot be read."""
    if project.is_dir():
        if (pyproject := project / "pyproject.toml").is_file() and (found := _from_pyproject(pyproject)):
            return found
        pkg_info = project / "PKG-INFO"
        if pkg_info.is_file():
            try:
                with pkg_info.open("rb") as f:
                    return _from_pkg_info(f.read(PKG_INFO_LIMIT))
            except OSError as exc:
                raise SourceUnavailable(f"cannot read {pkg_info}: {exc}", "check the file") from None
        return None
    if project.is_file() and project.name.endswith(".tar.gz"):
        return _from_sdist(project)
    return None
