"""wheelbuild.bounded.read_bounded on real files of every hostile shape (no mocks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from wheelbuild.bounded import FileRefused, read_bounded


def test_a_regular_file_within_the_cap_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 10)
    assert read_bounded(tmp_path / "f", 10) == b"x" * 10


def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse"
    with sparse.open("wb") as file:
        file.truncate(64 * 1024**3)  # 64 GiB by its size, nothing on disk: reading it would hang the test
    with pytest.raises(FileRefused) as refused:
        read_bounded(sparse, 1024)
    assert refused.value.too_big


@pytest.mark.parametrize("shape", ["fifo", "device", "directory", "link to a device"])
def test_what_is_not_a_regular_file_is_refused_without_blocking(tmp_path: Path, shape: str) -> None:
    target = tmp_path / "x"
    if shape == "fifo":
        os.mkfifo(target)  # no writer: a blocking open or read would never return
    elif shape == "device":
        target = Path("/dev/zero")
    elif shape == "directory":
        target.mkdir()
    else:
        target.symlink_to("/dev/zero")
    with pytest.raises(FileRefused) as refused:
        read_bounded(target, 1024)
    assert not refused.value.too_big


def test_a_link_is_not_followed_when_asked(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"{}")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert read_bounded(tmp_path / "link", 10) == b"{}"
    with pytest.raises(OSError):
        read_bounded(tmp_path / "link", 10, follow_links=False)


def test_a_missing_file_is_the_callers_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "absent", 10)
