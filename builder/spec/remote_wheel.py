"""A wheel on an index's server, read without installing it: one member (its METADATA) through
HTTP byte ranges, reading the zip's end record, its directory and that member only, never the
whole file; or the whole file, streamed, capped and checked against the sha256 its page names.

Credentials in a URL go as a header to that URL's host only (index/reader.py), never to a log
or an error.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import BinaryIO

from packaging.utils import parse_wheel_filename

from ..index import reader
from ..index.reader import HttpRefused

METADATA_LIMIT = reader.METADATA.cap
RANGE_BUDGET = 64 << 20  # bytes read from one wheel for one member: torch's zip directory is ~2 MB
_TAIL = 256 << 10  # the first range read from a wheel's end: the end record and most directories

__all__ = ["HttpRefused", "download_wheel", "remote_metadata"]


class _RemoteFile(io.RawIOBase):
    """A wheel on a server read as a seekable file through HTTP range requests: each read past
    what is held asks for at least _TAIL bytes, and no more than *budget* bytes in all."""

    def __init__(self, url: str, budget: int) -> None:
        super().__init__()
        self._url, self._budget, self._pos = url, budget, 0
        body, _status, headers = self._ranged(f"bytes=-{_TAIL}", _TAIL)
        match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", headers.get("content-range", "").strip())
        if match is None:
            raise HttpRefused(206, "the server does not serve byte ranges (no Content-Range)")
        self.size = int(match[3])
        self._held: list[tuple[int, bytes]] = [(int(match[1]), body)]

    def _ranged(self, value: str, length: int) -> tuple[bytes, int, dict[str, str]]:
        if length > self._budget:
            raise HttpRefused(206, f"reading its METADATA would take more than {RANGE_BUDGET} bytes")
        self._budget -= length
        try:
            answer = reader.fetch(self._url, reader.byte_range(length), headers={"Range": value})
        except reader.TooLarge as refused:
            if refused.status != 200:
                raise
            raise HttpRefused(200, "the server does not serve byte ranges") from None  # the whole file
        if answer.status != 206:
            raise HttpRefused(answer.status, "the server does not serve byte ranges")
        return answer.body, answer.status, dict(answer.headers)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), self.size - self._pos)
        if want <= 0:
            return 0
        for start, data in self._held:
            if start <= self._pos and self._pos + want <= start + len(data):
                at = self._pos - start
                buffer[:want] = data[at : at + want]
                self._pos += want
                return want
        end = min(self.size, self._pos + max(want, _TAIL)) - 1
        body, _status, _headers = self._ranged(f"bytes={self._pos}-{end}", end - self._pos + 1)
        self._held.append((self._pos, body))
        return self.readinto(buffer) if len(body) >= want else 0


def remote_metadata(url: str, filename: str) -> bytes:
    """The METADATA of the wheel at *url* (named *filename*), read through byte ranges: the zip's
    end record and directory, then that one member. Raises HttpRefused, or zipfile.BadZipFile,
    KeyError or ValueError for a file that is not such a wheel."""
    name, version, _build, _tags = parse_wheel_filename(filename)
    with zipfile.ZipFile(_RemoteFile(url, RANGE_BUDGET)) as archive:
        wanted = f"{name.replace('-', '_')}-{version}.dist-info/METADATA".lower()
        member = next(
            (i for i in archive.infolist() if i.filename.lower() == wanted),
            None,
        ) or next(i for i in archive.infolist() if i.filename.lower().endswith(".dist-info/metadata"))
        if member.file_size > METADATA_LIMIT:
            raise ValueError(f"its METADATA is {member.file_size} bytes")
        with archive.open(member) as source:
            data = source.read(METADATA_LIMIT + 1)
        if len(data) > METADATA_LIMIT:
            raise ValueError("its METADATA inflates past its declared size")
        return data


# ---------------------------------------------------------------------------------------------
# A whole wheel


def download_wheel(url: str, sha256: str, dest: BinaryIO) -> None:
    """Stream the file at *url* into *dest*: at most a wheel's cap (reader.WHEEL), and (where
    *sha256* is given) only a file of that sha256. Raises HttpRefused."""
    found = reader.download(url, dest, reader.WHEEL)
    if sha256 and found != sha256:
        raise HttpRefused(200, f"its sha256 is {found}, not the {sha256} its page names")
