"""One wheel for every Python: the stable ABI (abi3) as values.

A recipe whose extension uses only Python's limited API builds one wheel tagged `cp310-abi3`
(the oldest CPython it loads in, then abi3) instead of one per Python. cibuildwheel builds it for
the first Python asked for and, for each later one it serves, prints "Found previously built
wheel ..., that's compatible with <identifier>. Skipping build step..." and builds nothing
(buildlog reads that line). So one wheel stands for several Pythons, and whatever judged one
wheel per Python judges it under each of them here: the import gate loads it under every Python
the build was for (gate_pythons), and the report says which Python built it and which reused it
(Abi3Use).

Pure: wheel file names and Python tags in, values out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from ..errors import ImportGateFailed

__all__ = [
    "Abi3Use",
    "StableAbi",
    "abi3_uses",
    "gate_pythons",
    "python_tag",
    "stable_abi",
    "unserved_problem",
]

_CPYTHON = re.compile(r"cp3(\d+)(t?)")


@dataclass(frozen=True)
class StableAbi:
    """An abi3 wheel's promise: every CPython 3.<minimum> or later that is not free-threaded."""

    tag: str  # cp310-abi3
    minimum: int  # 10

    def serves(self, python: str) -> bool:
        """Whether the CPython tagged *python* (cp311, cp313t) can install and load the wheel."""
        match = _CPYTHON.fullmatch(python)
        return match is not None and not match[2] and int(match[1]) >= self.minimum


def stable_abi(wheel: str) -> StableAbi | None:
    """The stable ABI a wheel's file name claims (cp310-abi3 -> minimum 10), or None for a wheel
    of one Python (cp311-cp311) or a name that is not a wheel's."""
    try:
        _name, _version, _build, tags = parse_wheel_filename(wheel)
    except InvalidWheelFilename:
        return None
    minimums = sorted(
        int(match[1])
        for tag in tags
        if tag.abi == "abi3" and (match := _CPYTHON.fullmatch(tag.interpreter)) and not match[2]
    )
    return StableAbi(f"cp3{minimums[0]}-abi3", minimums[0]) if minimums else None


def python_tag(wheel: str) -> str | None:
    """The interpreter tag a wheel's file name carries (…-cp311-cp311-manylinux_2_34_x86_64.whl:
    cp311; cp310-abi3: cp310), or None for a name too short to be a wheel's."""
    parts = wheel.removesuffix(".whl").split("-")
    return parts[-3].split(".")[0] if len(parts) >= 5 else None


def gate_pythons(wheel: str, pythons: Sequence[str]) -> tuple[str, ...]:
    """The Pythons the import gate loads *wheel* under: an abi3 wheel under each Python of the
    build (*pythons*, cp311 ...) that it serves, in order; any other wheel under its own."""
    abi = stable_abi(wheel)
    if abi is None:
        own = python_tag(wheel)
        return (own,) if own else ()
    return tuple(p for p in pythons if abi.serves(p))


def unserved_problem(wheel: str, pythons: Sequence[str]) -> ImportGateFailed | None:
    """An abi3 wheel that some Python the build was for cannot install (tagged cp310-abi3, built
    for cp39, or for a free-threaded cp313t): that Python has no wheel, so the build fails."""
    abi = stable_abi(wheel)
    if abi is None:
        return None
    left = [p for p in pythons if not abi.serves(p)]
    if not left:
        return None
    return ImportGateFailed(
        f"{wheel} is tagged {abi.tag} (CPython 3.{abi.minimum} or later, not free-threaded), so "
        f"{', '.join(left)} of this build cannot install it and would have no wheel",
        f"build for CPython 3.{abi.minimum} or later only (--python), or build the extension "
        "against an older limited API (a lower Py_LIMITED_API and wheel tag)",
    )


@dataclass(frozen=True)
class Abi3Use:
    """How one abi3 wheel served the build's Pythons."""

    wheel: str
    tag: str  # cp310-abi3
    built_under: str | None  # the Python whose build made it (cp311); None if the log never said
    reused_under: tuple[str, ...]  # later Pythons cibuildwheel gave it to without building (cp313)


def _same_tags(a: str, b: str) -> bool:
    """Two names of one wheel: the stamp may change the version (its local label), not the tags."""
    try:
        return parse_wheel_filename(a)[3] == parse_wheel_filename(b)[3]
    except InvalidWheelFilename:
        return False


def abi3_uses(
    wheels: Sequence[str], pythons: Sequence[str], reused: Mapping[str, str]
) -> tuple[Abi3Use, ...]:
    """Each abi3 wheel among *wheels* (stamped names), with the Python that built it and those
    that reused it. *pythons*: the build's, in cibuildwheel's order (cp311 ...); *reused*:
    build identifier (cp313-manylinux_x86_64) -> the wheel it reused, as cibuildwheel named it."""
    uses = []
    for wheel in wheels:
        abi = stable_abi(wheel)
        if abi is None:
            continue
        reusing = {identifier.split("-")[0] for identifier, name in reused.items() if _same_tags(name, wheel)}
        served = [p for p in pythons if abi.serves(p)]
        built = next((p for p in served if p not in reusing), None)
        uses.append(Abi3Use(wheel, abi.tag, built, tuple(p for p in served if p in reusing)))
    return tuple(uses)
