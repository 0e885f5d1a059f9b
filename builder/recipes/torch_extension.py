"""The generic recipe: any torch CUDA extension from a local path or an sdist."""

from __future__ import annotations

from ..plan.memory_model import MemoryModel, default_model
from .base import Recipe, Source


def torch_extension_recipe(
    *, name: str, source: Source, arch_env: str | None = None, memory_model: MemoryModel | None = None
) -> Recipe:
    # An unknown extension gets the conservative default model (4 GiB per arch per job):
    # flash-attn's forward units measure 4-4.8 GiB per arch, most extensions far less.
    return Recipe(
        name=name, source=source, arch_env=arch_env, memory_model=memory_model or default_model(name)
    )
