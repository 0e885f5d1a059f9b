"""Which Pythons a build targets by default: the image's interpreters for which the chosen torch
release has a linux x86_64 wheel on its index, and which the package's Requires-Python admits.

Pure: :func:`choose_pythons` takes the image's interpreters, the torch release's Python tags
(torch_releases.py reads them from the index), the package's Requires-Python
(requires_python.py) and the Pythons asked for, and gives the Pythons to build and why each
other one is left out.

A tag set says what the index has: ``cp311`` (a CPython 3.11 wheel), ``cp313t`` (free-threaded
3.13), ``cp39-abi3`` (a stable-ABI wheel: every CPython >= 3.9 that is not free-threaded).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from ..errors import BadPython
from ..secrets import redact_url
from .build_spec import BuildSpec

_CPYTHON = re.compile(r"cp3(\d+)(t?)")
_ABI3 = re.compile(r"cp3(\d+)-abi3")


def has_wheel(torch_tags: frozenset[str], python: str) -> bool:
    """Whether a torch with these tags installs on *python* (``cp311``, ``cp313t``)."""
    if python in torch_tags:
        return True
    match = _CPYTHON.fullmatch(python)
    if match is None or match[2]:  # abi3 is not for free-threaded builds
        return False
    minor = int(match[1])
    return any((m := _ABI3.fullmatch(tag)) and int(m[1]) <= minor for tag in torch_tags)


# ---------------------------------------------------------------------------------------------
# The choice (pure)


@dataclass(frozen=True)
class LeftOut:
    python: str  # "cp314"
    why: str  # "torch 2.11.0 has no cp314 wheel on https://***@example.com/simple"

    def __str__(self) -> str:
        return f"{self.python}: {self.why}"


@dataclass(frozen=True)
class PythonChoice:
    pythons: tuple[str, ...]  # what to build, in the image's order (or the order asked)
    left_out: tuple[LeftOut, ...] = ()  # the image's others (none when Pythons were asked for)


@functools.lru_cache(maxsize=4096)
def _admits(requires_python: str, python: str) -> bool:
    """Whether some release of this Python (3.X.0 ... 3.X.99) satisfies Requires-Python: the tag
    does not say which patch release the image has. *requires_python* is a valid specifier."""
    match = _CPYTHON.fullmatch(python)
    if match is None:
        return False
    specifier = SpecifierSet(requires_python)
    return any(specifier.contains(Version(f"3.{match[1]}.{patch}")) for patch in range(100))


def admitted_by(requires_python: str | None, pythons: Sequence[str]) -> tuple[str, ...]:
    """The CPythons among *pythons* that Requires-Python admits (all when it is absent or not a
    specifier: choose_pythons says so)."""
    try:
        return tuple(p for p in pythons if requires_python is None or _admits(requires_python, p))
    except InvalidSpecifier:
        return tuple(pythons)


def choose_pythons(
    image: Sequence[str],
    torch_tags: frozenset[str] | None,
    requires_python: str | None,
    asked: Sequence[str] | None,
    *,
    package: str = "the package",
    torch_version: str | None = None,
    index_url: str | None = None,
) -> PythonChoice:
    """The Pythons to build.

    *image*: the image's interpreters (``cp311``...). *torch_tags*: from :func:`torch_python_tags`,
    or None when not checked. *requires_python*: from :func:`requires_python_of`. *asked*: the
    ``--python`` tags, or None (or empty, as BuildSpec.pythons is) for the default: every image interpreter with a torch wheel that
    Requires-Python admits, the others listed in ``left_out`` with why. *package*, *torch_version*
    and *index_url* only word the reasons (the URL redacted).

    Raises BadPython when an asked Python cannot be built (the cause names each and why, the
    remedy lists those that can), when none is left, and for a Requires-Python that is not a
    version specifier."""
    if requires_python is not None:
        try:
            SpecifierSet(requires_python)
        except InvalidSpecifier:
            raise BadPython(
                f"{package}'s Requires-Python {requires_python!r} is not a version specifier",
                "fix the package's requires-python, or name the Pythons with --python",
            ) from None
    in_image = tuple(dict.fromkeys(image))
    reasons = _Reasons(
        in_image,
        torch_tags,
        requires_python,
        package,
        torch=f"torch {torch_version}" if torch_version else "torch",
        where=redact_url(index_url) if index_url else "its index",
    )
    usable = tuple(p for p in in_image if not reasons.why_not(p))
    left_out = tuple(LeftOut(p, why) for p in in_image if (why := reasons.why_not(p)))
    if asked:
        return _as_asked(asked, reasons, usable)
    if not in_image:
        raise BadPython(
            "the image has no CPython interpreter to build with",
            "build on a manylinux base image (its CPythons are under /opt/python)",
        )
    if not usable:
        raise BadPython(
            f"no Python in the image can build {package}: " + "; ".join(str(x) for x in left_out),
            _no_python_remedy(torch_tags is not None),
        )
    return PythonChoice(pythons=usable, left_out=left_out)


@dataclass(frozen=True)
class _Reasons:
    """Why a Python cannot be built here ("" when it can); the words name the package, the
    torch release and its index (redacted)."""

    in_image: tuple[str, ...]
    torch_tags: frozenset[str] | None
    requires_python: str | None
    package: str
    torch: str
    where: str

    def why_not(self, python: str) -> str:
        reasons = []
        if python not in self.in_image:
            reasons.append(f"the image has no {python} interpreter")
        if not _CPYTHON.fullmatch(python):
            reasons.append("not a CPython tag such as cp311")
        elif self.torch_tags is not None and not has_wheel(self.torch_tags, python):
            reasons.append(f"{self.torch} has no {python} wheel on {self.where}")
        if (
            self.requires_python is not None
            and _CPYTHON.fullmatch(python)
            and not _admits(self.requires_python, python)
        ):
            reasons.append(f"{self.package} requires Python {self.requires_python}")
        return ", and ".join(reasons)


def _as_asked(asked: Sequence[str], reasons: _Reasons, usable: tuple[str, ...]) -> PythonChoice:
    """The Pythons --python names, each of which must be buildable."""
    wanted = tuple(dict.fromkeys(asked))
    refused = [LeftOut(p, why) for p in wanted if (why := reasons.why_not(p))]
    if refused:
        raise BadPython(
            f"--python {', '.join(r.python for r in refused)} cannot be built: "
            + "; ".join(str(r) for r in refused),
            f"pick --python from {', '.join(usable)}"
            if usable
            else "no Python in the image can be built: " + _no_python_remedy(reasons.torch_tags is not None),
        )
    return PythonChoice(pythons=wanted)


def _no_python_remedy(torch_checked: bool) -> str:
    base = "build on a base image with a Python the package supports"
    if not torch_checked:
        return base
    return f"choose a torch release (--torch) or an index (--torch-index-url) with wheels for them, or {base}"


@dataclass(frozen=True)
class PythonConstraints:
    torch_tags: frozenset[str] | None  # the Pythons the variant's torch has wheels for; None: unknown
    requires_python: str | None  # the package's

    def choose(self, image: tuple[str, ...], spec: BuildSpec) -> PythonChoice:
        return choose_pythons(
            image,
            self.torch_tags,
            self.requires_python,
            spec.pythons,
            package=spec.recipe.name,
            torch_version=spec.variant.torch_version,
            index_url=spec.variant.index_url,
        )

    def check_named(self, spec: BuildSpec) -> None:
        """Pythons named that cannot work fail here, before the image (which is not known yet:
        what torch has wheels for is offered)."""
        offered = {t for t in self.torch_tags or () if re.fullmatch(r"cp3\d+", t)} | set(spec.pythons)
        self.choose(tuple(sorted(offered, key=lambda t: int(t[3:]))), spec)
