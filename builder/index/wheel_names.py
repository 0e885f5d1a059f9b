"""What a wheel's file name means: to an installer, the slot it fills whatever its spelling
(:class:`WheelIdentity`), and to `wheelbuild serve`, whether it answers for it at all
(:func:`is_served_name`). A tree holds one file per slot, under a name the server answers for."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import NormalizedName, parse_wheel_filename
from packaging.version import Version

from ..errors import WheelConflict

__all__ = [
    "NAME_MAX",
    "WheelIdentity",
    "is_served_name",
    "published_slots",
    "refuse_another_spelling",
    "refuse_two_of_one_slot",
]

# The file names `wheelbuild serve` answers under files/ (a wheel, its .metadata and .inputs, its
# provenance statement and that statement's Sigstore bundle: every file the pages link to); publish
# takes no wheel whose name, or whose .metadata's, is not one: it would be listed and then 404.
_SERVED_NAME = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._+!-]*\.whl(\.metadata|\.inputs|\.intoto\.jsonl|\.sigstore\.json)?"
)
NAME_MAX = 255  # no file name, so no project folder, is longer (ENAMETOOLONG past it)


def is_served_name(name: str) -> bool:
    """Whether `wheelbuild serve` answers for a file of this name under files/."""
    return len(name) <= NAME_MAX and bool(_SERVED_NAME.fullmatch(name))


@dataclass(frozen=True)
class WheelIdentity:
    """What a wheel's file name means to an installer, whatever its spelling: the project and
    version canonical (Foo_Bar-0.1.0 is foo-bar 0.1), and the tags it installs under. The build
    tag is left out: an installer takes the file with the highest one, so a second file that
    differs only by its build tag would silently replace the first."""

    project: NormalizedName
    version: Version
    tags: frozenset[Tag]

    @classmethod
    def of(cls, filename: str) -> WheelIdentity:
        """Raises InvalidWheelFilename or InvalidVersion (ValueErrors) for a name that does not parse."""
        project, version, _build, tags = parse_wheel_filename(filename)
        return cls(project, version, tags)

    def same_slot(self, other: WheelIdentity) -> bool:
        """Whether an installer could take either file for the same environment."""
        return (
            self.project == other.project and self.version == other.version and bool(self.tags & other.tags)
        )


def _shared_tag(one: WheelIdentity, other: WheelIdentity) -> str:
    return min(str(tag) for tag in one.tags & other.tags)


def refuse_two_of_one_slot(given: Sequence[tuple[Path, str, str]]) -> None:
    """WheelConflict when the wheels given (path, file name, sha256) fill one slot with two
    contents, or under two spellings."""
    seen: dict[str, tuple[WheelIdentity, str]] = {}
    for path, filename, sha256 in given:
        mine = WheelIdentity.of(filename)
        for name, (theirs, their_sha256) in seen.items():
            if name == filename and their_sha256 != sha256:
                raise WheelConflict(
                    f"two different wheels named {filename} were given (one is {path})",
                    "publish one of them; a wheel's file name must name exactly one content",
                )
            if name != filename and theirs.same_slot(mine):
                raise WheelConflict(
                    f"{name} and {filename} were both given, and both are {mine.project} "
                    f"{mine.version} for {_shared_tag(mine, theirs)}",
                    "publish one of them; an installer would pick one of the two by its build tag or at random",
                )
        seen.setdefault(filename, (mine, sha256))


def published_slots(files: Path) -> dict[str, WheelIdentity]:
    """Every wheel in files/ by its file name (one whose name does not parse is not served)."""
    found: dict[str, WheelIdentity] = {}
    if not files.is_dir():
        return found
    with os.scandir(files) as entries:
        for entry in entries:
            if entry.name.endswith(".whl") and not entry.name.startswith("."):
                with contextlib.suppress(ValueError):
                    found[entry.name] = WheelIdentity.of(entry.name)
    return found


def refuse_another_spelling(filename: str, published: Mapping[str, WheelIdentity]) -> None:
    """WheelConflict when a file of another name already fills *filename*'s slot."""
    mine = WheelIdentity.of(filename)
    for name, theirs in published.items():
        if theirs.same_slot(mine):
            raise WheelConflict(
                f"{filename} is {mine.project} {mine.version} for {_shared_tag(mine, theirs)}, "
                f"already published as {name}; nothing was copied",
                "give the new build another version or local label (e.g. +cu130torch2.11.post1); "
                "a published distribution is never replaced, whatever its file name's spelling "
                "or build tag",
            )
