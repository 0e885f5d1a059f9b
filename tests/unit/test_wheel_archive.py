"""wheel/archive.py on the zips real tools write: what zipfile writes to a pipe (data descriptors
after each member), zip64 records, and an archive comment are one reading, and so taken; bytes no
entry accounts for are not."""

from __future__ import annotations

import io
import zipfile

import pytest
from wheelbuild.wheel.archive import AmbiguousArchive, NotAZip, check_one_archive

MEMBERS = {"pkg/__init__.py": b"x = 1\n" * 50, "pkg-1.0.dist-info/RECORD": b""}


class _Pipe(io.RawIOBase):
    """A write-only stream that cannot seek: zipfile then writes data descriptors."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: bytes) -> int:  # type: ignore[override]
        self.data += b
        return len(b)


def _zip(*, comment: bytes = b"", zip64: bool = False) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.comment = comment
        for name, data in MEMBERS.items():
            with archive.open(name, "w", force_zip64=zip64) as member:
                member.write(data)
    return buffer.getvalue()


def _piped() -> bytes:
    pipe = _Pipe()
    with zipfile.ZipFile(pipe, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in MEMBERS.items():
            archive.writestr(name, data)
    return bytes(pipe.data)


@pytest.mark.parametrize("data", [_zip(), _zip(comment=b"built here"), _zip(zip64=True), _piped()],
                         ids=["plain", "comment", "zip64", "data-descriptors"])  # fmt: skip
def test_zips_real_writers_make_are_one_reading(data: bytes) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.namelist() == list(MEMBERS)
    check_one_archive(io.BytesIO(data))


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"junk" + _zip(), "its central directory holds something that is not an entry"),
        (_zip() + b"junk", "no end of central directory record ends it"),
        (_zip() + _zip(), "does not end where its end record begins"),
    ],
    ids=["prefix", "suffix", "two-archives"],
)
def test_bytes_no_entry_accounts_for_are_refused(data: bytes, says: str) -> None:
    with pytest.raises(AmbiguousArchive, match=says):
        check_one_archive(io.BytesIO(data))


def test_a_file_that_is_no_zip_at_all_is_left_to_the_zip_reader() -> None:
    with pytest.raises(NotAZip):
        check_one_archive(io.BytesIO(b"not a zip at all"))
