"""What the wheel cache (images/wheelbuild-wheel-cache --report) says of the torch-wheels volume,
as gc reads it: its bytes on disk against its bound, and each installed tree with the cache's own
verdict. Pure: gc's decisions (gc/decisions.py) take it as a value.

The rule (images/wheelbuild-wheel-cache applies it after every run that adds to the cache, and
says it here through --report, read by a container of the base image): everything within the
bound (WHEELBUILD_WHEEL_CACHE_BOUND, 40 GiB by default, bytes on disk with each hard link once);
past it the least recently used trees go, never one used in the last hour, then what no
remaining tree or lock needs."""

from __future__ import annotations

from dataclasses import dataclass

from ..units import format_bytes


@dataclass(frozen=True)
class CachedTree:
    """One installed tree of the wheel cache (TAG/KEY.LOCKDIGEST.2), as its --report saw it."""

    name: str
    used: float  # its last use (a build, a gate, a range trial)
    drop: bool  # the cache's rule would remove it now
    why: str  # the rule's words for it
    frees: int  # bytes on disk its removal frees, after those removed before it; 0 when kept


@dataclass(frozen=True)
class WheelCacheUse:
    """What images/wheelbuild-wheel-cache --report says of the torch-wheels volume: its bytes on
    disk (each inode once), its bound, and each tree with the rule's verdict."""

    volume: str
    bound: int
    bytes: int
    bytes_after: int  # once what the rule drops is gone
    unneeded: int  # bytes no tree or lock needs, which go first past the bound
    trees: tuple[CachedTree, ...]

    @classmethod
    def from_json(cls, volume: str, data: object) -> WheelCacheUse:
        """Raises ValueError for an answer that is not the script's."""
        try:
            if not isinstance(data, dict) or not isinstance(data["trees"], list):
                raise TypeError("not an object with a list of trees")
            trees = tuple(
                CachedTree(str(t["name"]), float(t["used"]), bool(t["drop"]), str(t["why"]), int(t["frees"]))
                for t in data["trees"]
            )
            return cls(
                volume,
                int(data["bound"]),
                int(data["bytes"]),
                int(data["bytes_after"]),
                int(data["unneeded"]),
                trees,
            )
        except (KeyError, TypeError, ValueError) as bad:
            raise ValueError(f"not the wheel cache's report: {bad!r}") from bad

    @property
    def said(self) -> str:
        return f"{format_bytes(self.bytes)} on disk of its {format_bytes(self.bound)} bound"


UNNEEDED = "(unpacked wheels and files no tree or lock needs)"
