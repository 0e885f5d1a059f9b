"""The inputs keys kept beside a published wheel (``<wheel>.inputs``, one per line): the build
that made it, and for an abi3 wheel the nightly's cells of the other Pythons that built the same
file name. `wheelbuild matrix --skip-published` and `wheelbuild nightly schedule` read them to skip
builds whose wheels are published. A key is a sha256 hex digest and nothing else, where it is
written and where it is read: one with a newline in it would become several."""

from __future__ import annotations

import re
from pathlib import Path

from ..bounded import read_bounded

__all__ = ["INPUTS_SUFFIX", "MAX_INPUTS_SIZE", "inputs_keys", "is_inputs_key", "read_inputs"]

INPUTS_SUFFIX = ".inputs"
# A sidecar lists the cells one wheel serves (one per Python of a nightly): a few 65-byte lines.
MAX_INPUTS_SIZE = 64 * 1024
_INPUTS_KEY = re.compile(r"[0-9a-f]{64}")  # what pipeline/results.py's inputs_key makes: a sha256


def is_inputs_key(text: str) -> bool:
    """Whether *text* is an inputs key: a sha256 hex digest and nothing else (a newline in one
    would turn a sidecar, read a key a line, into several keys)."""
    return bool(_INPUTS_KEY.fullmatch(text))


def inputs_keys(text: str) -> set[str]:
    """The inputs keys a wheel's INPUTS_SUFFIX sidecar lists, one per line. Raises ValueError
    when a line is not one: such a sidecar is damaged and names no key at all."""
    keys: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if not is_inputs_key(line.strip()):
            raise ValueError(f"line {number} of an inputs sidecar is not an inputs key (a sha256 hex digest)")
        keys.add(line.strip())
    return keys


def read_inputs(wheel: Path) -> set[str]:
    """The inputs keys in the sidecar beside a published *wheel*; none when it has none. Raises
    FileRefused (a ValueError) for a sidecar that is not a regular file or is over its cap, and
    UnicodeDecodeError (a ValueError too) for one that is not text."""
    try:
        data = read_bounded(wheel.with_name(wheel.name + INPUTS_SUFFIX), MAX_INPUTS_SIZE)
    except FileNotFoundError:
        return set()
    return inputs_keys(data.decode())
