"""build's and plan's options as click parses them (one TypedDict), and the BuildSpec they make:
both commands read their options through build_spec, so plan checks exactly what build will."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from ..host.gpu import GpuMode
from ..plan.dist import dist_target
from ..recipes import Recipe, resolve_recipe
from ..spec.build_spec import (
    BuildSpec,
    PinMode,
    Resources,
    check_cpus,
    parse_archs,
    parse_env,
    parse_ptx,
    parse_pythons,
)
from ..units import parse_memory
from ..variants import parse_variant

__all__ = ["BuildOptions", "build_spec"]


class BuildOptions(TypedDict):
    """build's options that make its BuildSpec, by click's parameter names."""

    package: str  # PACKAGE, the example (--example) or `.`: build_flags chose it
    torch_variant: str
    like: Path | None  # read by cli/like.py before build_spec: it fills torch, python and archs
    torch_index_url: str | None
    archs: str
    pythons: tuple[str, ...]
    recipe_version: str | None
    arch_env: str | None
    memory: str | None
    cpus: float | None
    max_jobs: int | None
    nvcc_threads: int | None
    env_pairs: tuple[str, ...]
    gpus: str
    output_dir: Path
    admission: bool
    cicc_admission: bool
    dist: str | None
    dist_network: str | None
    dist_token_file: Path | None
    dist_servers: str | None
    keep_package_archs: bool
    keep_package_std: bool
    build_network: bool
    compiler_cache: bool
    rebuild: bool
    gate: bool
    torch_range: bool
    torch_range_older: int
    pin: str


def build_spec(given: BuildOptions) -> BuildSpec:
    """The BuildSpec of build's options (as click parsed them), each checked: build and plan
    read the options one way."""
    return BuildSpec(
        recipe=_recipe(given["package"], given["recipe_version"], given["arch_env"], given["env_pairs"]),
        variant=parse_variant(given["torch_variant"], given["torch_index_url"]),
        archs=parse_archs(given["archs"]),
        ptx=parse_ptx(given["archs"]),
        pythons=parse_pythons(given["pythons"]),
        gpus=GpuMode(given["gpus"]),
        resources=_resources(given["memory"], given["cpus"], given["max_jobs"], given["nvcc_threads"]),
        output_dir=Path(given["output_dir"]).resolve(),
        rebuild=given["rebuild"],
        keep_package_archs=given["keep_package_archs"],
        keep_package_std=given["keep_package_std"],
        build_network=given["build_network"],
        compiler_cache=given["compiler_cache"],
        admission=given["admission"],
        cicc_admission=given["cicc_admission"],
        gate=given["gate"],
        torch_range=given["torch_range"],
        torch_range_older=given["torch_range_older"],
        pin=PinMode(given["pin"]),
        dist=dist_target(
            given["dist"], given["dist_network"], given["dist_token_file"], given["dist_servers"]
        ),
    )


def _recipe(package: str, version: str | None, arch_env: str | None, env_pairs: tuple[str, ...]) -> Recipe:
    """PACKAGE as a recipe, with the --env variables the command line gave it."""
    return resolve_recipe(package, version=version, arch_env=arch_env).with_env(parse_env(env_pairs))


def _resources(
    memory: str | None, cpus: float | None, max_jobs: int | None, nvcc_threads: int | None
) -> Resources:
    """--memory, --cpus, --max-jobs and --nvcc-threads, checked; None: the planner's to derive."""
    return Resources(
        memory=parse_memory(memory) if memory is not None else None,
        cpus=check_cpus(cpus),
        max_jobs=max_jobs,
        nvcc_threads=nvcc_threads,
    )
