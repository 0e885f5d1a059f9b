"""The Recipe value every recipe module produces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ..memory_model import MemoryModel, default_model

# A release to look up on the index when the build starts: pypi:<project>==<version>.
LOOKUP_PREFIX = "pypi:"


@dataclass(frozen=True)
class Source:
    """A local project directory, or an sdist (local path or URL), optionally pinned by sha256,
    or a release still to be looked up on the index (LOOKUP_PREFIX)."""

    location: str
    sha256: str | None = None

    @classmethod
    def lookup(cls, project: str, version: str) -> Source:
        return cls(location=f"{LOOKUP_PREFIX}{project}=={version}")

    @property
    def is_lookup(self) -> bool:
        return self.location.startswith(LOOKUP_PREFIX)

    @property
    def is_url(self) -> bool:
        return "://" in self.location

    @property
    def is_sdist(self) -> bool:
        return self.location.endswith((".tar.gz", ".zip"))


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
    arch_env: str | None = None  # env var the package reads its arch list from ("100;120")
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

    def with_env(self, env: Mapping[str, str]) -> Recipe:
        """The same recipe with extra env for the build (`--env KEY=VALUE`)."""
        return replace(self, extra_env=MappingProxyType({**self.extra_env, **env}))

    def build_env(
        self, archs: Sequence[int], max_jobs: int, nvcc_threads: int, local_label: str | None = None
    ) -> dict[str, str]:
        """The env the package's build reads inside the container."""
        env = {
            "MAX_JOBS": str(max_jobs),
            "NVCC_THREADS": str(nvcc_threads),
            # torch's own arch variable, for extensions that read no variable of their own.
            "TORCH_CUDA_ARCH_LIST": ";".join(f"{a // 10}.{a % 10}" for a in archs),
            **self.extra_env,
        }
        if self.arch_env:
            env[self.arch_env] = ";".join(str(a) for a in archs)
        if self.local_version_env and local_label:
            env[self.local_version_env] = local_label
        return env
