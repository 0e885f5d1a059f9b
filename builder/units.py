"""Sizes in bytes as Docker and people write them: `6g` in, `6.0 GiB` out. Pure."""

from __future__ import annotations

import re

from .errors import BadMemory

__all__ = ["MAX_MEMORY", "MIN_MEMORY", "PAGE", "format_bytes", "parse_memory"]

PAGE = 4096  # the kernel rounds memory limits down to whole pages
# Docker refuses limits under 6 MiB; nothing that runs pip fits in less than this anyway.
MIN_MEMORY = 256 * 1024**2
# Docker takes the limit as an int64 of bytes; anything near that is a typo, not a machine.
MAX_MEMORY = 4 * 1024**6

_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNIT = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_memory(text: str) -> int:
    """Docker's units, all binary: 64g = 64 GiB, 512m, 1.5g, 6GiB, 1073741824. Page-aligned."""
    match = _MEMORY_RE.match(text)
    if match is None:
        raise BadMemory(
            f"memory size {text!r} is not understood",
            "write a number with a unit, as docker does: 6g, 512m, 1.5g, 64GiB",
        )
    number = float(match[1]) * _UNIT[match[2].lower()]  # inf for 400 digits
    if not number <= MAX_MEMORY:
        raise BadMemory(
            f"memory size {text!r} is over the {MAX_MEMORY // 1024**6} EiB a container limit can be",
            "give the limit the build may use, e.g. 64g",
        )
    size = int(number) // PAGE * PAGE  # the kernel rounds limits down to pages
    if size < MIN_MEMORY:
        # A bare number is bytes, as docker reads it: --memory 64 is 64 bytes, which is surely 64g.
        meant = (
            f"did you mean {text.strip()}g? "
            if not match[2] and not match[3] and float(match[1]) <= 4096
            else ""
        )
        raise BadMemory(
            f"memory size {text!r} is below the {MIN_MEMORY // 1024**2} MiB a build container needs"
            + (" (a number without a unit is bytes)" if not match[2] and not match[3] else ""),
            f"{meant}give at least 256m; a CUDA extension build wants several GiB",
        )
    return size


def format_bytes(size: int) -> str:
    """The largest binary unit that fits, one decimal: 1.5 GiB, 512.0 MiB, 100 B."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
