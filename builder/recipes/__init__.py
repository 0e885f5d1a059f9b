"""Recipes: what to build and the env a package's setup.py reads. Pure: no Docker, no network.

`resolve_recipe()` turns what the user typed into a Recipe: a known name (flash-attn, wbdemo),
a local project directory, or an sdist (local path or URL pinned with #sha256=).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..bounded import file_url_problem
from ..bundled import bundled_dir
from ..errors import BadArgument, BadPackageArgument, BadUrl, BadVersion, SourceUnavailable, UnknownPackage
from ..plan.memory_model import wbdemo_model
from ..secrets import redact_url
from .base import (
    IndexLookup,
    LocalProject,
    LocalSdist,
    Recipe,
    RemoteSdist,
    Source,
    source_location,
    source_pin,
)
from .build_vars import parse_arch_env
from .flash_attn import LATEST, flash_attn_recipe
from .torch_extension import torch_extension_recipe

__all__ = [
    "EXAMPLE",
    "EXAMPLE_DIR",
    "SDIST_SUFFIXES",
    "IndexLookup",
    "LocalProject",
    "LocalSdist",
    "Recipe",
    "RemoteSdist",
    "Source",
    "at_newest_pinned",
    "at_release",
    "chosen_package",
    "default_package",
    "known_recipes",
    "nearest_names",
    "resolve_recipe",
    "source_location",
    "source_pin",
]

# The bundled example, also the test fixture: a small real CUDA extension.
EXAMPLE = "wbdemo"
EXAMPLE_DIR = bundled_dir("example")
# What makes a folder a project build and plan take by default, as cibuildwheel and uv build.
PROJECT_FILES = ("pyproject.toml", "setup.py")
SDIST_SUFFIXES = (".tar.gz", ".zip")


def _wbdemo(version: str | None) -> Recipe:
    recipe = torch_extension_recipe(
        name="wbdemo",
        source=LocalProject(EXAMPLE_DIR),
        arch_env="WBDEMO_CUDA_ARCHS",
        memory_model=wbdemo_model(),
    )
    return replace(recipe, local_version_env="WBDEMO_LOCAL_VERSION", smoke_test="wbdemo.py")


_KNOWN = {"flash-attn": flash_attn_recipe, EXAMPLE: _wbdemo}


def at_release(recipe: Recipe, version: str, listed: RemoteSdist) -> Recipe:
    """The recipe once the index named its release: a known recipe at that release (its own pin
    where its table has one, which must be the file the index lists, and its model for that
    release), any other package pinned by the sha256 the index lists."""
    if recipe.name not in _KNOWN:
        return replace(recipe, version=version, source=listed)
    known = _KNOWN[recipe.name](version)
    if isinstance(known.source, RemoteSdist) and known.source.sha256 != listed.sha256:
        raise SourceUnavailable(
            f"the index lists {listed.url} with sha256 {listed.sha256}, but wheelbuild pins "
            f"{recipe.name} {version} at {known.source.sha256}",
            "the file changed or the index is not the one wheelbuild pinned from: check it before "
            f"trusting it, or build another release ({recipe.name}==VERSION)",
        )
    return replace(known, source=known.source if isinstance(known.source, RemoteSdist) else listed)


def at_newest_pinned(recipe: Recipe) -> Recipe | None:
    """A known recipe asked for its newest release, at the newest one it pins (its version until
    the index says otherwise); None for any other package."""
    if recipe.name not in _KNOWN or recipe.version is None:
        return None
    known = _KNOWN[recipe.name](recipe.version)
    return known if isinstance(known.source, RemoteSdist) else None


# Packages on PyPI that wheelbuild was tried on (docs/guides/build.md's table): with the recipes,
# the names a typo is compared with.
TRIED_ON_PYPI = ("causal-conv1d", "grouped-gemm", "mamba-ssm", "torch-cluster", "torchsort", "natten")


def nearest_names(name: str) -> list[str]:
    """The known names closest to a mistyped one (flash-atn -> flash-attn), closest first."""
    known = {*known_recipes(), *TRIED_ON_PYPI} - {EXAMPLE}
    return difflib.get_close_matches(canonicalize_name(name), sorted(known), n=3, cutoff=0.75)


def known_recipes() -> list[str]:
    return sorted(_KNOWN)


def _holds_project(folder: Path) -> bool:
    try:
        return any((folder / name).is_file() for name in PROJECT_FILES)
    except OSError:  # the current directory removed under us, or unreadable
        return False


def _shown(folder: Path) -> str:
    try:
        return str(folder.absolute())
    except OSError:  # the current directory was removed
        return "this folder"


def default_package(package: str | None, *, example: bool, cwd: Path = Path()) -> str | None:
    """What build and plan build: PACKAGE as given, else the bundled example with --example,
    else the project in *cwd* (`.`) when it has a pyproject.toml or setup.py; None when none of
    these (chosen_package says what to do then)."""
    if example:
        return EXAMPLE
    if package is not None:
        return package
    return "." if _holds_project(cwd) else None


def chosen_package(package: str | None, *, example: bool, cwd: Path = Path()) -> str:
    """default_package(), or BadArgument: PACKAGE and --example both, or neither and no project
    in *cwd*. The remedy names how to build a project and how to build the example."""
    if example and package is not None and package.lower().replace("_", "-") != EXAMPLE:
        raise BadPackageArgument(
            f"--example builds the bundled example, {EXAMPLE}, but PACKAGE {package!r} names one too",
            f"give PACKAGE or --example, not both (--example is the same as PACKAGE {EXAMPLE})",
        )
    chosen = default_package(package, example=example, cwd=cwd)
    if chosen is None:
        raise BadPackageArgument(
            f"no PACKAGE given, and {_shown(cwd)} holds no project (no {' or '.join(PROJECT_FILES)})",
            "run it in a project's folder, or name one (a path, an sdist, or a recipe: "
            f"{', '.join(known_recipes())}); add --example to build the bundled example, {EXAMPLE}",
        )
    return chosen


def resolve_recipe(package: str, *, version: str | None = None, arch_env: str | None = None) -> Recipe:
    """Raises UnknownPackage or BadArgument with a one-line cause and remedy."""
    # Given but empty is a mistake (an unset shell variable), never the default: '' is the
    # current directory as a path, and an empty --version would build the default release.
    if not package.strip():
        raise BadPackageArgument(
            "the package argument is empty",
            "name a recipe (flash-attn), a project path or an sdist; leave it out for the project "
            f"in this folder, or use --example for the bundled example, {EXAMPLE}",
        )
    if version is not None and not version.strip():
        raise BadVersion("--version is empty", "give a release (e.g. --version 2.8.3), or leave it out")
    if arch_env is not None and not arch_env.strip():
        raise BadArgument(
            "--arch-env is empty",
            "name the variable, and its form where it is not 90;100 (e.g. --arch-env NATTEN_CUDA_ARCH:dotted), "
            "or leave it out",
        )
    if arch_env is not None:
        parse_arch_env(arch_env)  # a name and a form wheelbuild writes, or BadArgument now
    normalized = package.lower().replace("_", "-")
    if normalized in _KNOWN:
        return _KNOWN[normalized](version)
    if (named := _index_name(package)) and named[0] in _KNOWN and not _names_a_path(package):
        return _KNOWN[named[0]](_pinned(package, *named, version))
    if version is not None:
        return _named_with_version(package, version, arch_env)
    if "://" in package:
        return _remote_sdist_recipe(package, arch_env)
    return _local_recipe(package, arch_env)


def _names_a_path(package: str) -> bool:
    """Whether *package* is a path that exists here (a name too long for the file system is not)."""
    try:
        return Path(package).exists()
    except OSError:
        return False


def _named_with_version(package: str, version: str, arch_env: str | None) -> Recipe:
    """A package named on the index with --version (as a nightly matrix's versions say it):
    NAME --version V is NAME==V, and --version latest the newest. A path or a URL builds the
    version it holds."""
    named = _index_name(package)
    if named is None or _names_a_path(package):
        raise BadVersion(
            f"--version applies to a recipe or a name on the index, not to {package!r}",
            "drop --version; a local path or sdist builds the version it contains",
        )
    name, wanted = named
    if wanted:
        raise BadVersion(
            f"{package!r} names its versions and --version names {version!r}: two answers",
            f"give one: {name}=={version}, or {package} without --version",
        )
    wanted = "" if version.strip().lower() in LATEST else version.strip()
    return torch_extension_recipe(name=name, source=IndexLookup(name, wanted), arch_env=arch_env)


def _pinned(package: str, name: str, wanted: str, version: str | None) -> str:
    """The release a recipe is named with (flash-attn==2.8.3.post2): == one version only."""
    exact = re.fullmatch(r"===?\s*([^,*]+)", wanted.strip())
    if exact is None or version is not None:
        raise BadVersion(
            f"{package!r}: a recipe builds one release, named with == or --version (not a range, not both)",
            f"name one release: {name}==VERSION",
        )
    return exact[1].strip()


def _remote_sdist_recipe(package: str, arch_env: str | None) -> Recipe:
    """An sdist URL, which must carry its #sha256= pin."""
    location, _, fragment = package.partition("#")
    if (problem := file_url_problem(location, SDIST_SUFFIXES)) is not None:
        raise BadUrl(
            f"sdist URL {redact_url(location)!r} is not one wheelbuild downloads: {problem}",
            "give the http(s) URL of the .tar.gz or .zip itself, with #sha256=<its hash>",
        )
    digest = fragment.removeprefix("sha256=")
    if not fragment.startswith("sha256=") or not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise BadUrl(
            f"sdist URL {location} carries no #sha256= pin",
            f"append the file's hash: {location}#sha256=<64 hex digits>",
        )
    return torch_extension_recipe(
        name=Path(location).name,
        source=RemoteSdist(url=location, sha256=digest),
        arch_env=arch_env,
    )


def _local_recipe(package: str, arch_env: str | None) -> Recipe:
    """A project directory or an sdist file (optionally #sha256= pinned) on this machine."""
    path_text, _, fragment = package.partition("#")
    path = Path(path_text).expanduser()
    try:
        found = path.is_dir() or path.is_file()
    except OSError as error:  # a name too long for the file system, a loop of links
        raise UnknownPackage(
            f"unknown package {package!r}: not a known recipe, and not a path ({error.strerror})",
            f"use one of {', '.join(known_recipes())}, a local project path, or an sdist URL with #sha256=",
        ) from None
    if found:
        sha256 = fragment[7:] if fragment.startswith("sha256=") else None
        if path.is_file() and not path.name.endswith((".tar.gz", ".zip")):
            raise BadPackageArgument(
                f"{path} is neither a project directory nor an sdist (.tar.gz or .zip)",
                "give a directory with setup.py/pyproject.toml or an sdist file",
            )
        where = path.resolve()
        source: Source = LocalSdist(where, sha256) if path.is_file() else LocalProject(where)
        return torch_extension_recipe(name=where.name, source=source, arch_env=arch_env)
    if named := _index_name(package):
        name, wanted = named
        return torch_extension_recipe(name=name, source=IndexLookup(name, wanted), arch_env=arch_env)
    raise UnknownPackage(
        f"unknown package {package!r}: not a known recipe, no such path, and no package name as pip takes one",
        f"use one of {', '.join(known_recipes())}, a name on the index (causal-conv1d==1.7.0), a local "
        "project path, or an sdist URL with #sha256=",
    )


def _index_name(package: str) -> tuple[str, str] | None:
    """A package named as pip names one (NAME, NAME==VERSION, NAME>=X): its canonical name and the
    versions wanted ('' for the newest final release); None for anything else (extras, markers, a
    URL, a path)."""
    try:
        requirement = Requirement(package)
    except InvalidRequirement:
        return None
    if requirement.url or requirement.marker or requirement.extras or "/" in package:
        return None
    return canonicalize_name(requirement.name), str(requirement.specifier)
