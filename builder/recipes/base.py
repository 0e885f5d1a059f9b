"""The Recipe value every recipe module produces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TypeAlias, assert_never

from ..plan.memory_model import MemoryModel, default_model
from ..variants import TorchCeiling
from .build_vars import TORCH_ARCH_FORM, ArchVar, parse_arch_env

# How a release still to be looked up on the index is written: pypi:<project>==<version>.
LOOKUP_PREFIX = "pypi:"


@dataclass(frozen=True)
class LocalProject:
    """A project directory on this machine, built as it is."""

    path: Path


@dataclass(frozen=True)
class LocalSdist:
    """An sdist file on this machine, checked against its sha256 when one is given."""

    path: Path
    sha256: str | None = None


@dataclass(frozen=True)
class RemoteSdist:
    """An sdist to download, always pinned: the file must have this sha256."""

    url: str
    sha256: str


@dataclass(frozen=True)
class IndexLookup:
    """A release the recipe does not pin: its sdist is looked up on the index when the build
    starts, and pinned then by the sha256 the index lists (sources.resolve_lookup). `version` is
    one release (2.8.1), a PEP 440 specifier (>=1.6, ==1.7.0), or '' for the newest final one."""

    project: str
    version: str


# Where a recipe's source comes from; `match` on it (mypy checks every case is handled).
Source: TypeAlias = LocalProject | LocalSdist | RemoteSdist | IndexLookup


def source_location(source: Source) -> str:
    """Where the source is, as people and the build report read it: a path, a URL, or
    pypi:<project>==<version>."""
    match source:
        case LocalProject(path) | LocalSdist(path):
            return str(path)
        case RemoteSdist(url):
            return url
        case IndexLookup(project, version):
            return f"{LOOKUP_PREFIX}{project}=={version}"
        case _:
            assert_never(source)


def source_pin(source: Source) -> str | None:
    """The sha256 the source must have; None where nothing pins it."""
    match source:
        case LocalSdist(_, sha256) | RemoteSdist(_, sha256):
            return sha256
        case LocalProject() | IndexLookup():
            return None
        case _:
            assert_never(source)


@dataclass(frozen=True)
class UnitRecipe:
    """How to compile one of the package's units alone, as its setup.py would (for
    `wheelbuild calibrate`), and how its units fall into families."""

    nvcc_flags: tuple[str, ...]
    include_dirs: tuple[str, ...]  # relative to the source root
    families: Mapping[str, str]  # family -> regex on a unit's file name, in sampling order


@dataclass(frozen=True)
class Recipe:
    name: str
    source: Source
    version: str | None = None
    # env var the package reads its arch list from: NAME ("100;120") or NAME:FORM (build_vars.py)
    arch_env: str | None = None
    extra_env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # Peak memory and time of its units by archs compiled at once: what the planner plans with.
    memory_model: MemoryModel = field(default_factory=default_model)
    # env var the package's setup.py appends to its version as a local label
    # (FLASH_ATTN_LOCAL_VERSION); without one, the label is stamped into the built wheel after.
    local_version_env: str | None = None
    # How to compile a unit alone (None: this recipe cannot be calibrated).
    units: UnitRecipe | None = None
    # The import gate: top-level packages to import besides every extension module (None: every
    # package the wheel holds), and a GPU smoke test in images/smoke/ run where a GPU is.
    import_packages: tuple[str, ...] | None = None
    smoke_test: str | None = None
    # The first torch it cannot compile against, and why: `--torch cu130` then picks an older one.
    torch_ceiling: TorchCeiling | None = None
    # Variables its build files read an arch list (in their form) and their parallelism from,
    # found by the survey: the build sets them to the archs and to MAX_JOBS.
    arch_vars: tuple[ArchVar, ...] = ()
    jobs_vars: tuple[str, ...] = ()

    def with_env(self, env: Mapping[str, str]) -> Recipe:
        """The same recipe with extra env for the build (`--env KEY=VALUE`)."""
        return replace(self, extra_env=MappingProxyType({**self.extra_env, **env}))

    def build_env(
        self,
        archs: Sequence[int],
        max_jobs: int,
        nvcc_threads: int,
        local_label: str | None = None,
        ptx: Sequence[int] = (),
    ) -> dict[str, str]:
        """The env the package's build reads inside the container."""
        env = {
            "MAX_JOBS": str(max_jobs),
            "NVCC_THREADS": str(nvcc_threads),
            # torch's own arch variable, for extensions that read no variable of their own.
            "TORCH_CUDA_ARCH_LIST": TORCH_ARCH_FORM.spell(archs, ptx),
            **self.extra_env,
        }
        for var in self.arch_vars:
            if var.name not in self.extra_env:  # --env wins over what the survey found
                env[var.name] = var.form.spell(archs, ptx)
        for name in self.jobs_vars:
            if name not in self.extra_env:
                env[name] = str(max_jobs)
        if self.arch_env:
            named = parse_arch_env(self.arch_env)
            env[named.name] = named.form.spell(archs, ptx)
        if self.local_version_env and local_label:
            env[self.local_version_env] = local_label
        return env
