"""Which torch release a variant means: the newest one on the index built with its CUDA that has
wheels for the build's Pythons, below the package's ceiling (`--torch cu130`); the one a full
variant names, checked against its CUDA (`--torch 2.14.1+cu130`); and the releases a matrix rule
names (`cu130:newest-3..newest`). Each comes with the line that says why. What the index serves
is read in torch_releases.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.version import Version

from ..errors import BadVariant
from ..variants import TorchCeiling, TorchRule, TorchVariant, parse_variant
from .pythons import has_wheel
from .torch_releases import CPYTHON, TorchIndex, TorchRelease, listed, python_order

__all__ = ["TorchChoice", "asked_release", "newest_of_any_minor", "newest_release", "releases_by_rule"]


@dataclass(frozen=True)
class TorchChoice:
    """The torch release a build uses, and why, in a line a person reads."""

    version: str  # public: 2.14.1 (torch==2.14.1 also matches 2.14.1+cu130)
    why: str


def newest_release(
    index: TorchIndex,
    variant: TorchVariant,
    pythons: Sequence[str] | None,
    *,
    cache: Path | None = None,
    ceiling: TorchCeiling | None = None,
) -> TorchChoice:
    """The newest final release on *index* built with the variant's CUDA that has a wheel for
    one of *pythons* (the build's: those asked, or the image's that the package admits; None:
    any CPython, for a plan made before the image is known), below the package's *ceiling*.
    Raises BadVariant when there is none, TorchIndexUnreachable when a release's METADATA cannot
    be read."""
    newer: list[str] = []
    for release in index.releases:
        if ceiling is not None and ceiling.excludes(release.version):
            if not any(n.startswith(f"{ceiling.first} and newer") for n in newer):
                newer.append(f"{ceiling.first} and newer: {ceiling.why}")
            continue
        wanted = sorted(release.pythons, key=python_order) if pythons is None else pythons
        usable = [p for p in wanted if has_wheel(release.pythons, p)]
        if not usable:
            continue
        cuda = index.cuda_of(release, cache=cache, python=usable[0])
        if cuda != variant.cuda_version:
            newer.append(f"{release.version} is CUDA {cuda}")
            continue
        passed_over = f" ({'; '.join(newer[:3])}{'; ...' if len(newer) > 3 else ''})" if newer else ""
        version = Version(release.version).public
        return TorchChoice(
            version,
            f"torch {version}: newest on {index.shown} built with CUDA {cuda} with {listed(usable)} "
            f"wheels{passed_over}",
        )
    raise BadVariant(
        f"{index.shown} has no torch release built with CUDA {variant.cuda_version} ({variant.tag}) "
        f"with a wheel for {listed(pythons) if pythons is not None else 'any CPython'}",
        "pick another variant (--torch), another index (--torch-index-url), or other Pythons (--python)",
    )


def newest_of_any_minor(
    candidates: Sequence[tuple[TorchVariant, TorchIndex]],
    pythons: Sequence[str] | None,
    *,
    cache: Path | None = None,
    ceiling: TorchCeiling | None = None,
) -> tuple[TorchVariant, str]:
    """`--torch newest`: of each CUDA tag's newest release (newest_release, on its own index),
    the newest; the variant of that tag, still to be chosen for the build's Pythons, and why.
    BadVariant when no tag has one."""
    found: list[tuple[Version, TorchVariant, TorchChoice]] = []
    for variant, index in candidates:
        try:
            choice = newest_release(index, variant, pythons, cache=cache, ceiling=ceiling)
        except BadVariant:
            continue
        found.append((Version(choice.version), variant, choice))
    if not found:
        raise BadVariant(
            "no index has a torch release of any CUDA 13 minor wheelbuild compiles "
            f"({', '.join(v.tag for v, _i in candidates)}) with a wheel for "
            f"{listed(pythons) if pythons is not None else 'any CPython'}",
            "name a variant (--torch cu130), another index (--torch-index-url), or other Pythons (--python)",
        )
    _version, variant, choice = max(found, key=lambda item: item[0])
    compared = ", ".join(f"{v.tag} {c.version}" for _r, v, c in found)
    return replace(
        variant, any_minor=False, newest=True
    ), f"--torch newest: {variant.tag} ({compared}); {choice.why}"


def asked_release(
    index: TorchIndex, variant: TorchVariant, *, cache: Path | None = None, python: str | None = None
) -> TorchChoice:
    """The release a full variant (2.14.1+cu130) names, checked: one built with another CUDA
    than the tag says fails here (BadVariant), before a download; one the index lacks is left to
    the Python choice, which says so."""
    release = index.release(variant.torch_version)
    if release is None:
        return TorchChoice(variant.torch_version, f"torch {variant.torch_version}: as asked")
    cuda = index.cuda_of(release, cache=cache, python=python)
    if cuda != variant.cuda_version:
        raise BadVariant(
            f"torch {release.version} on {index.shown} is built with CUDA {cuda}, not "
            f"{variant.cuda_version} ({variant.tag})",
            f"ask for a torch built with CUDA {variant.cuda_version} (--torch {variant.tag} picks the "
            f"newest), or for cu{cuda.replace('.', '')} if it is supported",
        )
    return TorchChoice(
        variant.torch_version, f"torch {variant.torch_version}: as asked (CUDA {cuda} on {index.shown})"
    )


def releases_by_rule(
    index: TorchIndex, rule: TorchRule, *, cache: Path | None = None
) -> tuple[TorchChoice, ...]:
    """The releases a matrix rule names on *index*: among the final releases built with the
    tag's CUDA, the newest patch of each minor, minors newest-*rule.oldest* to
    newest-*rule.newest*, oldest first. Raises BadVariant when the index has too few, and
    TorchIndexUnreachable when a release's METADATA cannot be read."""
    wanted = parse_variant(rule.tag, index.url)
    minors: list[TorchRelease] = []
    seen: set[tuple[int, int]] = set()
    for release in index.releases:  # newest first
        if release.minor in seen or not any(CPYTHON.fullmatch(p) for p in release.pythons):
            continue
        if index.cuda_of(release, cache=cache) != wanted.cuda_version:
            continue
        seen.add(release.minor)
        minors.append(release)
        if len(minors) > rule.oldest:
            break
    if len(minors) <= rule.oldest:
        raise BadVariant(
            f"{index.shown} has {len(minors)} torch minor(s) built with CUDA {wanted.cuda_version}; "
            f"{rule} needs {rule.oldest + 1}",
            f"name fewer minors ({rule.tag}:newest-{max(len(minors) - 1, 0)}..newest), or another index",
        )
    chosen = minors[rule.newest : rule.oldest + 1]
    return tuple(
        TorchChoice(
            Version(r.version).public,
            f"torch {Version(r.version).public}: newest-{i + rule.newest} of {rule} on {index.shown}",
        )
        for i, r in reversed(list(enumerate(chosen)))
    )
