"""Reading a file that came from somewhere we do not trust (a config, a build report, a mark
another process wrote): never block on a FIFO or a device, never read past a cap. Pure."""

from __future__ import annotations

import os
import stat
from pathlib import Path


class FileRefused(ValueError):
    """The file is not a regular one, or is over the cap; `too_big` says which."""

    def __init__(self, path: Path, too_big: bool) -> None:
        super().__init__(f"{path} is {'over the size cap' if too_big else 'not a regular file'}")
        self.too_big = too_big


def read_bounded(path: Path, limit: int, *, follow_links: bool = True) -> bytes:
    """At most *limit* bytes of the regular file at *path*: its size is checked before anything
    is read (a hostile file is not read at all), and the read is bounded all the same. Raises
    FileRefused, or the OSError of opening it (FileNotFoundError among them)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)
    descriptor = os.open(path, flags)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):  # checked first: a directory cannot even be wrapped
            raise FileRefused(path, too_big=False)
        if status.st_size > limit:
            raise FileRefused(path, too_big=True)
        file = os.fdopen(descriptor, "rb")  # owns the descriptor from here on
    except BaseException:
        os.close(descriptor)
        raise
    with file:
        data = file.read(limit + 1)
    if len(data) > limit:  # it grew since fstat
        raise FileRefused(path, too_big=True)
    return data
