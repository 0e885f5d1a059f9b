"""A source's metadata, read without running it: its name, version and Requires-Python, from an
sdist's top-level PKG-INFO (the archive read as a hostile stream, capped in what it decompresses,
in members and in PKG-INFO's bytes) or a project directory's pyproject.toml ``[project]`` (and
its ``[tool.setuptools.dynamic]`` version), else its PKG-INFO, its setup.cfg, its setup.py's
literal setup() keywords (setup_files.py). Which Pythons Requires-Python admits is pythons.py's
to decide."""

from __future__ import annotations

import tarfile
import tomllib
import zlib
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from ..bounded import ArchiveRefused, tar_gz_members
from ..errors import SourceUnavailable
from .setup_files import directive, from_setup_cfg, from_setup_py

PKG_INFO_LIMIT = 1 << 20  # bytes of PKG-INFO read: its headers come first, the long description last
SDIST_LIMIT = 4 << 30  # bytes decompressed from an sdist before giving up on finding PKG-INFO
SDIST_MEMBERS = 100_000


@dataclass(frozen=True)
class SourceMetadata:
    """What a source says of itself without being run; None where it does not say."""

    name: str | None = None
    version: str | None = None
    requires_python: str | None = None


def _from_pkg_info(data: bytes) -> SourceMetadata:
    headers, blank, _body = data.partition(b"\n\n")
    if not blank and len(data) >= PKG_INFO_LIMIT:
        return SourceMetadata()  # headers cut off by the cap: do not trust a half-read value
    parsed = HeaderParser().parsestr(headers.decode("utf-8", errors="replace"))

    def field(key: str) -> str | None:
        value = parsed.get(key)
        return (str(value).strip() or None) if value is not None else None

    return SourceMetadata(field("Name"), field("Version"), field("Requires-Python"))


def _from_sdist(path: Path) -> SourceMetadata:
    """Requires-Python from the PKG-INFO at the top of an sdist (``<name>-<version>/PKG-INFO``).
    The archive may be hostile: read as a stream, capped in what it decompresses, in members
    looked at and in the bytes of PKG-INFO read; nothing is extracted to disk."""
    try:
        with closing(tar_gz_members(path, SDIST_LIMIT, SDIST_MEMBERS)) as members:
            for member, archive in members:
                parts = member.name.removeprefix("./").split("/")
                if len(parts) == 2 and parts[1] == "PKG-INFO" and member.isfile():
                    stream = archive.extractfile(member)
                    return _from_pkg_info(stream.read(PKG_INFO_LIMIT)) if stream else SourceMetadata()
    except ArchiveRefused as exc:
        if exc.members:
            return SourceMetadata()  # so many members and no PKG-INFO among them: it says none
        raise SourceUnavailable(
            f"cannot read the sdist {path}: {exc}", "check the file: it is not a readable .tar.gz"
        ) from None
    except (OSError, EOFError, tarfile.TarError, zlib.error) as exc:
        raise SourceUnavailable(
            f"cannot read the sdist {path}: {exc}", "check the file: it is not a readable .tar.gz"
        ) from None
    return SourceMetadata()


def _from_pyproject(path: Path, env: Mapping[str, str]) -> SourceMetadata:
    try:
        with path.open("rb") as f:
            document = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SourceUnavailable(f"cannot read {path}: {exc}", "fix the file's TOML") from None
    project = document.get("project")
    if not isinstance(project, dict):
        return SourceMetadata()
    value = project.get("requires-python")
    if value is not None and not isinstance(value, str):
        raise SourceUnavailable(
            f"{path}: [project] requires-python is not a string", 'write it as requires-python = ">=3.10"'
        )
    name, version = project.get("name"), project.get("version")
    if version is None and "version" in (project.get("dynamic") or ()):
        version = _dynamic_version(path.parent, document, env)
    return SourceMetadata(
        name.strip() or None if isinstance(name, str) else None,
        version.strip() or None if isinstance(version, str) else None,
        (value or "").strip() or None,
    )


def _dynamic_version(project: Path, document: dict[str, object], env: Mapping[str, str]) -> str | None:
    """setuptools' ``[tool.setuptools.dynamic] version = {attr = ...}`` or ``{file = ...}``, read
    as text; None for any other backend's dynamic version (only its build can say)."""
    tool = document.get("tool")
    setuptools = tool.get("setuptools") if isinstance(tool, dict) else None
    dynamic = setuptools.get("dynamic") if isinstance(setuptools, dict) else None
    version = dynamic.get("version") if isinstance(dynamic, dict) else None
    if not isinstance(version, dict) or len(version) != 1:
        return None
    ((kind, where),) = version.items()
    if kind not in {"attr", "file"} or not isinstance(where, str):
        return None
    return directive(project, f"{kind}: {where}", env)


def _merged(found: SourceMetadata, more: SourceMetadata | None) -> SourceMetadata:
    """*found*, each field it lacks taken from *more*."""
    if more is None:
        return found
    return SourceMetadata(
        found.name or more.name,
        found.version or more.version,
        found.requires_python or more.requires_python,
    )


def _complete(found: SourceMetadata) -> bool:
    return None not in (found.name, found.version, found.requires_python)


def source_metadata(project: Path, env: Mapping[str, str] | None = None) -> SourceMetadata:
    """The metadata of a source: an sdist (``.tar.gz``: its top-level PKG-INFO) or a project
    directory (``pyproject.toml``'s ``[project]``, each field it lacks from its PKG-INFO, its
    setup.cfg, then its setup.py's literal setup() keywords; *env*: the build's --env, which a
    setup.py may read its version from). Empty where it says nothing (a version a setup.py
    computes cannot be read without running it). Raises SourceUnavailable for an sdist or
    pyproject.toml that cannot be read."""
    env = env or {}
    if project.is_dir():
        found = SourceMetadata()
        if (pyproject := project / "pyproject.toml").is_file():
            found = _from_pyproject(pyproject, env)
        pkg_info = project / "PKG-INFO"
        if pkg_info.is_file() and not _complete(found):
            try:
                with pkg_info.open("rb") as f:
                    found = _merged(found, _from_pkg_info(f.read(PKG_INFO_LIMIT)))
            except OSError as exc:
                raise SourceUnavailable(f"cannot read {pkg_info}: {exc}", "check the file") from None
        for name, read in (("setup.cfg", from_setup_cfg), ("setup.py", from_setup_py)):
            if (project / name).is_file() and not _complete(found):
                stated = read(project / name, env)
                found = _merged(found, SourceMetadata(stated.name, stated.version, stated.requires_python))
        return found
    if project.is_file() and project.name.endswith(".tar.gz"):
        return _from_sdist(project)
    return SourceMetadata()


def requires_python_of(project: Path) -> str | None:
    """The Requires-Python of a source (source_metadata), None when it says none."""
    return source_metadata(project).requires_python
