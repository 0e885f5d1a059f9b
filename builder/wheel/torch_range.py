"""A wheel's torch range, as values: which torch releases around the one it was built with are
tried, what each trial found, the contiguous range it loaded with, and the pin that range writes.

An extension module is tied to the torch it was built against by the C++ symbols it calls: a
release that renames or drops one fails at import with ``undefined symbol``, and a release that
keeps them all may load it. Which ones do is found, not guessed: each release is checked against
its exported symbols (wheel/torch_symbols.py), then the wheel is installed and imported with it
in a fresh container (range_gate.py). An import proves the wheel links and loads with that
torch; it does not prove its kernels compute right there (a layout change in a struct passed by
reference shows only when run: the GPU smoke test does that where a GPU is).

Pure: versions and trials in, ranges, lines and pins out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from packaging.version import Version

from ..records import REQUIRED, Record

__all__ = ["TorchRange", "TorchTrial", "neighbours"]


@dataclass(frozen=True)
class TorchTrial(Record):
    """The wheel against one torch release."""

    torch: str = field(metadata=REQUIRED)  # 2.13.0
    # "" when every torch symbol the wheel needs is exported; else the first missing one, demangled
    static: str = ""
    imported: bool | None = None  # the import gate's verdict; None when it did not run
    detail: str = ""  # why the import failed, or why it did not run

    @property
    def loads(self) -> bool:
        return not self.static and self.imported is True


@dataclass(frozen=True)
class TorchRange(Record):
    """One wheel (under one Python) against the torch releases around its own."""

    wheel: str = field(metadata=REQUIRED)
    python: str = ""  # cp311
    built_with: str = ""  # 2.14.1
    trials: tuple[TorchTrial, ...] = ()  # the build's own first, then the others, oldest first

    def _ordered(self) -> list[TorchTrial]:
        return sorted(self.trials, key=lambda t: Version(t.torch))

    @property
    def proven(self) -> tuple[str, ...]:
        """The releases it loaded with that form one run with the build's own, oldest first."""
        ordered = self._ordered()
        at = next((i for i, t in enumerate(ordered) if t.torch == self.built_with), None)
        if at is None or not ordered[at].loads:
            return ()
        low = at
        while low > 0 and ordered[low - 1].loads:
            low -= 1
        high = at
        while high + 1 < len(ordered) and ordered[high + 1].loads:
            high += 1
        return tuple(t.torch for t in ordered[low : high + 1])

    @property
    def pin(self) -> str | None:
        """The torch specifier the proven range writes: >=2.12,<2.15 for 2.12.1-2.14.1 (every
        patch of each minor taken as its newest's); None when nothing was proven."""
        proven = self.proven
        if not proven:
            return None
        # A release of one number (a "2" in a damaged report) is minor 0 of its major.
        low, high = ((*Version(v).release, 0) for v in (proven[0], proven[-1]))
        return f">={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}"

    @property
    def summary(self) -> str:
        """One line: "imports with torch 2.12.1-2.14.1; fails on 2.11.0: undefined symbol ..."."""
        proven = self.proven
        if proven:
            span = proven[0] if len(proven) == 1 else f"{proven[0]}-{proven[-1]}"
            parts = [f"imports with torch {span}"]
        else:
            parts = [f"did not load with torch {self.built_with}"]
        for trial in self._ordered():
            if trial.torch in proven:
                continue
            if trial.loads:
                parts.append(f"also imports with {trial.torch}, apart from that range")
            elif trial.static or trial.imported is False:
                parts.append(f"fails on {trial.torch}: {trial.static or trial.detail}")
            else:
                parts.append(f"not tried on {trial.torch}: {trial.detail}")
        return "; ".join(parts)


def neighbours(
    versions: Sequence[str], built: str, cuda_of: Callable[[str], str], older: int
) -> tuple[str, ...]:
    """The releases to try a wheel built with *built* against: those of its CUDA major (each
    release's CUDA from *cuda_of*, asked only of the candidates), the newest patch of each
    minor, up to *older* minors older and every newer one; the build's own minor's newest patch
    too when it is not *built*. *versions* are final releases (public, 2.14.1), any order."""
    major = cuda_of(built).split(".")[0]
    built_minor = Version(built).release[:2]
    newest_patch: dict[tuple[int, ...], str] = {}
    for version in sorted(versions, key=Version, reverse=True):
        newest_patch.setdefault(Version(version).release[:2], version)
    tried: list[str] = []
    older_found = 0
    for minor, version in sorted(newest_patch.items(), reverse=True):
        if version == built or (minor < built_minor and older_found >= older):
            continue
        if cuda_of(version).split(".")[0] != major:
            continue
        if minor < built_minor:
            older_found += 1
        tried.append(version)
    return tuple(sorted(tried, key=Version))


def written_pin(ranges: Sequence[TorchRange]) -> str | None:
    """The torch specifier --pin proven writes into one wheel: its proven range, and for a wheel
    gated under several Pythons (abi3) the releases proven under every one of them."""
    proven = [set(r.proven) for r in ranges]
    common = set.intersection(*proven) if proven else set()
    if not common:
        return None
    return TorchRange(
        ranges[0].wheel,
        built_with=ranges[0].built_with,
        trials=tuple(TorchTrial(version, imported=True) for version in common),
    ).pin
