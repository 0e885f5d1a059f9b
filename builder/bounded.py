"""Reading a file that came from somewhere we do not trust (a config, a build report, a mark
another process wrote, an sdist): never block on a FIFO or a device, never read past a cap; and
taking a URL from the same places: http(s) with a host, and for a file, a name in its last
segment. Files only: no Docker, no subprocess."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Generator
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from .units import format_bytes


class FileRefused(ValueError):
    """The file is not a regular one, or is over the cap; `too_big` says which."""

    def __init__(self, path: Path, too_big: bool) -> None:
        super().__init__(f"{path} is {'over the size cap' if too_big else 'not a regular file'}")
        self.path = path
        self.too_big = too_big


def open_regular(path: Path, limit: int | None = None, *, follow_links: bool = True) -> BinaryIO:
    """*path* opened for reading if it is a regular file (and, with *limit*, no larger): opened
    without blocking (a FIFO with no writer, a device) and checked on the descriptor itself, so a
    file swapped in between cannot slip past. Raises FileRefused, or the OSError of opening it
    (FileNotFoundError among them; ELOOP for a link when *follow_links* is false)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    descriptor = os.open(path, flags)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):  # checked first: a directory cannot even be wrapped
            raise FileRefused(path, too_big=False)
        if limit is not None and status.st_size > limit:
            raise FileRefused(path, too_big=True)
        return os.fdopen(descriptor, "rb")  # owns the descriptor from here on
    except BaseException:
        os.close(descriptor)
        raise


def read_bounded(path: Path, limit: int, *, follow_links: bool = True) -> bytes:
    """At most *limit* bytes of the regular file at *path*: its size is checked before anything
    is read (a hostile file is not read at all), and the read is bounded all the same. Raises
    FileRefused, or the OSError of opening it (FileNotFoundError among them)."""
    with open_regular(path, limit, follow_links=follow_links) as file:
        data = file.read(limit + 1)
    if len(data) > limit:  # it grew since fstat
        raise FileRefused(path, too_big=True)
    return data


class ArchiveRefused(tarfile.ReadError):
    """An archive past a cap: more bytes decompressed, or more members (`members`), than it may have."""

    def __init__(self, message: str, members: bool) -> None:
        super().__init__(message)
        self.members = members


class _Capped(io.BufferedIOBase):
    """A read-only stream that fails once more than *limit* bytes were read through it."""

    def __init__(self, stream: gzip.GzipFile, limit: int) -> None:
        self._stream = stream
        self._limit = limit
        self._left = limit

    def read(self, size: int | None = -1) -> bytes:
        data = self._stream.read(size if size is not None and size >= 0 else self._left + 1)
        self._left -= len(data)
        if self._left < 0:
            raise ArchiveRefused(f"more than {format_bytes(self._limit)} decompressed", members=False)
        return data


def tar_gz_members(
    path: Path, decompressed: int, members: int
) -> Generator[tuple[tarfile.TarInfo, tarfile.TarFile], None, None]:
    """Each member of the .tar.gz at *path* with the archive to read it from (``extractfile``,
    while it is the current one), read as one stream: nothing is extracted to disk, nothing is
    sought. Raises ArchiveRefused past *decompressed* bytes or *members* members, and what
    gzip and tarfile raise for a damaged file (OSError, EOFError, tarfile.TarError, zlib.error).
    Close the iterator (contextlib.closing) when leaving it early."""
    with (
        path.open("rb") as raw,
        gzip.GzipFile(fileobj=raw, mode="rb") as unzipped,
        tarfile.open(fileobj=_Capped(unzipped, decompressed), mode="r|") as archive,
    ):
        for count, member in enumerate(archive):
            if count >= members:
                raise ArchiveRefused(f"more than {members} members", members=True)
            yield member, archive


def regular_file_sha256(path: Path) -> str:
    """sha256 of the regular file at *path*, read in blocks; FileRefused for a FIFO, a device or a
    link to one (which would block, or never end), the OSError of opening for the rest."""
    digest = hashlib.sha256()
    with open_regular(path) as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def http_url_problem(url: str) -> str | None:
    """Why *url* is not an http(s) URL with a host a request can go to; None when it is one."""
    try:
        parts = urlsplit(url)
        _port = parts.port  # a port that is no number raises here
    except ValueError as error:  # "Invalid IPv6 URL", a port out of range
        return str(error)
    if parts.scheme not in ("http", "https"):
        return f"its scheme is {parts.scheme + ':' if parts.scheme else 'missing'}, not http: or https:"
    if not parts.hostname:
        return "it names no host"
    return None


def url_file_name(url: str) -> str:
    """The last segment of *url*'s path, unquoted: the file it names, if it names one."""
    return unquote(urlsplit(url).path).rsplit("/", 1)[-1]


def file_url_problem(url: str, suffixes: tuple[str, ...]) -> str | None:
    """Why *url* is not an http(s) URL of a file named with one of *suffixes*; None when it is."""
    if (problem := http_url_problem(url)) is not None:
        return problem
    name = url_file_name(url)
    if name in ("", ".", "..") or "\\" in name or "\x00" in name:
        return "its last segment names no file"
    if not name.endswith(suffixes):
        return f"its file {name!r} is none of {', '.join(suffixes)}"
    return None
