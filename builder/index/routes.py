"""Routes: one index per torch variant inside a tree, the way PyTorch and Astral serve one index
per CUDA variant. ``<tree>/cu130-torch2.14/simple/`` lists only the wheels that load with torch
2.14: the one built for it, and any other whose torch requirement admits 2.14 (wheelbuild writes a
wider requirement than ``torch==2.14.*`` only from a proven torch range). So a user who already has
torch installs without a local label and never has torch changed::

    pip install --index-url <tree>/cu130-torch2.14/simple/ --extra-index-url https://pypi.org/simple flash-attn

A route's CUDA tag is the CUDA the wheels were built with (the label's ``cu130``); its torch is the
torch minor they load with. A wheel built with CUDA 13.0 and proven on torch 2.15.0 (a CUDA 13.2
build) is listed under ``cu130-torch2.15``: within CUDA 13 a newer torch runtime loads it, and the
range proof is what says so.

Pure: wheel versions and requirements in, route names out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from email.parser import BytesParser
from email.policy import compat32

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..variants import cuda_tag

__all__ = [
    "PYPI_SIMPLE",
    "ROUTE",
    "route_install_lines",
    "route_name",
    "routes_of",
    "torch_requirements",
    "torch_route",
    "variant_of",
]

_LABEL = re.compile(r"^(?P<tag>cu(?P<major>\d+)(?P<minor>\d))torch(?P<torch>\d+\.\d+)$")
# What a route folder is named: nothing else at a tree's top is read as one.
ROUTE = re.compile(r"^cu\d{2,4}-torch\d{1,3}\.\d{1,4}$")
# Where a route's install lines take every other dependency from.
PYPI_SIMPLE = "https://pypi.org/simple"
# The highest patch number tried when asking whether a requirement admits a torch minor.
_PATCHES = (0, 1, 2, 3, 9, 99)


def variant_of(local: str | None) -> tuple[str, str, str] | None:
    """(CUDA tag, CUDA version, torch minor) of a wheelbuild local label: cu130torch2.11 ->
    ("cu130", "13.0", "2.11"); None for any other label."""
    found = _LABEL.match(local or "")
    if found is None:
        return None
    return found["tag"], f"{int(found['major'])}.{found['minor']}", found["torch"]


def route_name(cuda_tag: str, torch_minor: str) -> str:
    """cu130, 2.14 -> cu130-torch2.14."""
    return f"{cuda_tag}-torch{torch_minor}"


def torch_route(torch_version: str, cuda_version: str | None) -> str | None:
    """The route for an installed torch: "2.14.1+cu130" with torch.version.cuda "13.0" ->
    cu130-torch2.14; None for a CPU torch or a version that is not PEP 440."""
    try:
        release = Version(torch_version).release
    except InvalidVersion:
        return None
    tag = cuda_tag(cuda_version or "")
    if tag is None or len(release) < 2:
        return None
    return route_name(tag, f"{release[0]}.{release[1]}")


def _admits(specifiers: SpecifierSet, major: int, minor: int) -> bool:
    return any(specifiers.contains(Version(f"{major}.{minor}.{patch}")) for patch in _PATCHES)


def _minors_named(specifiers: SpecifierSet, major: int) -> set[int]:
    named: set[int] = set()
    for specifier in specifiers:
        release = re.findall(r"\d+", specifier.version)
        if len(release) >= 2 and int(release[0]) == major:
            named.add(int(release[1]))
    return named


def routes_of(local: str | None, torch_requirements: Iterable[str]) -> tuple[str, ...]:
    """The routes a wheel is listed under: its own variant's (from its label), and each other
    torch minor of the same major that every unconditional torch requirement it declares
    admits (``>=2.12,<2.16`` -> 2.12 to 2.15). A wheel without wheelbuild's label is in none: no
    one knows which torch it was built for."""
    variant = variant_of(local)
    if variant is None:
        return ()
    cuda_tag, _cuda, own = variant
    major, own_minor = (int(x) for x in own.split("."))
    parsed: list[SpecifierSet] = []
    for text in torch_requirements:
        try:
            parsed.append(SpecifierSet(text))
        except InvalidSpecifier:
            return ()  # a requirement no installer could read: listed under no route
    if not all(_admits(s, major, own_minor) for s in parsed):
        return ()  # a requirement that refuses the torch it was built with: no route can trust it
    named = {own_minor}.union(*(_minors_named(s, major) for s in parsed))
    minors = [m for m in range(min(named), max(named) + 1) if all(_admits(s, major, m) for s in parsed)]
    return tuple(route_name(cuda_tag, f"{major}.{m}") for m in minors)


def torch_requirements(metadata: bytes) -> tuple[str, ...]:
    """The specifiers of the unconditional torch requirements in a wheel's METADATA
    ("==2.14.*", ">=2.12,<2.16"); one with a marker holds only somewhere, and is left out."""
    headers = BytesParser(policy=compat32).parsebytes(metadata, headersonly=True)
    found: list[str] = []
    for value in headers.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(str(value))
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == "torch" and requirement.marker is None:
            found.append(str(requirement.specifier))
    return tuple(found)


def route_install_lines(route_url: str, requirement: str) -> tuple[str, str]:
    """(uv, pip) lines installing *requirement* (``flash-attn``, ``'wbdemo==0.1.0'``) from the
    route at *route_url* (…/cu130-torch2.14/simple/), its other dependencies from PyPI. uv asks
    an ``--index`` before its default (PyPI), and takes a name from the first index that has it,
    so a same-named project on PyPI is never picked. pip takes the highest version of all its
    indexes: ours is higher than PyPI's same release by its label, and a requirement pinned to
    the release keeps a newer PyPI sdist out."""
    uv = f"uv pip install --index {route_url} {requirement}"
    pip = f"pip install --index-url {route_url} --extra-index-url {PYPI_SIMPLE} {requirement}"
    return uv, pip
