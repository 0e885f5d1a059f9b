"""Get a recipe's source onto this machine: a local directory as is, an sdist verified against
its sha256 pin (downloaded once into a cache keyed by that hash)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder.errors import SourceUnavailable
from builder.recipes import Source


@dataclass(frozen=True)
class PreparedSource:
    project_dir: Path  # cibuildwheel's working directory (copied into the container)
    package: str  # what cibuildwheel builds, relative to project_dir: "." or an sdist name


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(os.environ.get("WHEELBUILD_CACHE_DIR", Path(base) / "wheelbuild"))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify(path: Path, expected: str | None) -> None:
    if expected is not None and (actual := _sha256(path)) != expected:
        raise SourceUnavailable(
            f"{path.name} has sha256 {actual}, but the pin says {expected}",
            "the file changed or the pin is wrong: check where it came from before updating the pin",
        )


def _download(url: str, dest: Path, on_line: Callable[[str], None]) -> None:
    on_line(f"downloading {url}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Download beside the destination, then rename: a killed download never looks complete.
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as part:
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                shutil.copyfileobj(response, part)
        except OSError as exc:
            os.unlink(part.name)
            raise SourceUnavailable(
                f"could not download {url}: {exc}",
                "check the URL and the network (proxy, CA bundle)",
            ) from exc
    os.replace(part.name, dest)


def prepare_source(source: Source, on_line: Callable[[str], None]) -> PreparedSource:
    if source.is_url:
        assert source.sha256 is not None, "URL sources are pinned by resolve_recipe"
        name = source.location.rsplit("/", 1)[-1]
        dest = cache_dir() / "sdists" / source.sha256 / name
        if not dest.is_file():
            _download(source.location, dest, on_line)
        try:
            _verify(dest, source.sha256)
        except SourceUnavailable:
            dest.unlink()  # a bad download must not poison the cache
            raise
        return PreparedSource(project_dir=dest.parent, package=name)
    path = Path(source.location)
    if path.is_dir():
        if not (path / "setup.py").is_file() and not (path / "pyproject.toml").is_file():
            raise SourceUnavailable(
                f"{path} has neither setup.py nor pyproject.toml",
                "point at the project's root directory",
            )
        return PreparedSource(project_dir=path, package=".")
    if path.is_file():
        _verify(path, source.sha256)
        return PreparedSource(project_dir=path.parent, package=path.name)
    raise SourceUnavailable(f"source {path} does not exist", "check the path")
