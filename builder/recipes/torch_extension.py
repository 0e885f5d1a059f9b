"""The generic recipe: any torch CUDA extension from a local path or an sdist."""

from __future__ import annotations

from builder.recipes.base import GIB, Recipe, Source


def torch_extension_recipe(
    *, name: str, source: Source, arch_env: str | None = None, job_memory_per_arch: int = 4 * GIB
) -> Recipe:
    # 4 GiB per arch is conservative for an unknown extension: flash-attn's forward units measure
    # 4-4.8 GiB per arch, most extensions far less. The planner issue refines this per recipe.
    return Recipe(name=name, source=source, arch_env=arch_env, job_memory_per_arch=job_memory_per_arch)
