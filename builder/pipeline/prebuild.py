"""Everything `wheelbuild build` checks before its first container, which `wheelbuild plan` (its
dry run) runs too, so that plan refuses what build refuses, with the same error and exit code.

In the order that wastes least: the release the recipe does not pin looked up on its index;
the compiler for the variant and archs; whether the CUDA 12 layer a cu12x variant needs can be
had; the source (an sdist downloaded once into the cache, as build would) and the switches its
build files call for; torch's page on its index; the Pythons named, or, where none are named,
whether any Python at all can build the asked torch. Then the plan, for the archs each unit
really compiles. Nothing here starts a container or builds an image: Docker is asked only
whether the CUDA 12 layer's image is here, and only when its archives can be neither found here
nor reached. What needs the image (its interpreters, so the Pythons chosen when none are named,
and the newest torch for them) is build's alone, after this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..errors import BadArgument
from ..image.options import ImageOptions
from ..image.ports import ImageIds
from ..plan.planner import Plan
from ..progress.console import Console
from ..recipes.survey import Survey
from ..spec.build_spec import BuildSpec
from ..spec.pythons import PythonConstraints, admitted_by
from ..spec.requires_python import requires_python_of
from ..spec.sources import PreparedSource, prepare_source, resolve_lookup
from ..spec.torch_releases import TorchIndex
from ..variants import CudaCompiler
from .preflight import (
    compiled_archs,
    compiler_for_options,
    cuda12_obtainable,
    governed,
    plan_for,
    resolve_torch,
    surveyed,
    torch_index,
)

__all__ = ["Prebuilt", "constraints", "plan_of", "prebuild", "torch_chosen"]


@dataclass(frozen=True)
class Prebuilt:
    """What the checks found: the spec with its release pinned and the package's switches in its
    env (and its torch resolved when Pythons were named), and what build goes on with."""

    spec: BuildSpec
    compiler: CudaCompiler
    source: PreparedSource
    survey: Survey
    switches: tuple[str, ...]  # "NAME=VALUE: why", one per switch the build files call for
    requires_python: str | None
    index: TorchIndex | None  # None: unreadable, and the Pythons were named (a warning said so)
    torch_why: str | None  # None until the image's Pythons are known (no --python named)


def prebuild(spec: BuildSpec, options: ImageOptions, console: Console, images: ImageIds) -> Prebuilt:
    """Every check build makes before its first container (the module doc), in its order."""
    # A release the recipe does not pin is found on the index and pinned now, before any work.
    spec = replace(spec, recipe=resolve_lookup(spec.recipe, console.info))
    # No download and no image build for an impossible variant or arch.
    compiler = compiler_for_options(spec.variant, spec.archs, options)
    cuda12_obtainable(options, spec.variant, images)
    source = prepare_source(spec.recipe.source, console.info)
    spec, survey, switches = surveyed(spec, source, console)
    requires_python = requires_python_of(source.project_dir / source.package)
    index = torch_index(spec.variant, bool(spec.pythons), console)
    torch_why = None
    if spec.pythons:
        spec, torch_why = torch_chosen(spec, index, spec.pythons, console)
        constraints(spec, index, requires_python).check_named(spec)
    else:
        _some_python(spec, index, requires_python)
    return Prebuilt(spec, compiler, source, survey, switches, requires_python, index, torch_why)


def plan_of(spec: BuildSpec, toolkit: str, survey: Survey) -> Plan:
    """The plan a build runs: for the archs each unit really compiles (the asked ones, or the
    package's own), on the compiler's `toolkit`, governed as the build is (admission, --dist)."""
    archs = compiled_archs(spec, survey)
    return governed(
        plan_for(spec.recipe, archs, spec.resources, toolkit=toolkit),
        spec.dist,
        spec.admission,
        spec.cicc_admission,
    )


def torch_chosen(
    spec: BuildSpec, index: TorchIndex | None, pythons: tuple[str, ...] | None, console: Console
) -> tuple[BuildSpec, str]:
    """The spec with its torch release resolved for these Pythons (None: any CPython, as `plan`
    resolves a bare tag before the image is known; see preflight.resolve_torch)."""
    variant, why = resolve_torch(spec.variant, index, pythons, console, spec.recipe)
    return replace(spec, variant=variant), why


def constraints(spec: BuildSpec, index: TorchIndex | None, requires_python: str | None) -> PythonConstraints:
    tags = index.python_tags(spec.variant.torch_version) if index is not None else None
    return PythonConstraints(tags, requires_python)


def _some_python(spec: BuildSpec, index: TorchIndex | None, requires_python: str | None) -> None:
    """With no Python named and a release asked (2.14.1+cu130): some CPython must have its torch
    wheel and be admitted by the package, or no image could build it (BadArgument, as the
    Python choice after the image would say). A bare tag is resolved for the image's Pythons."""
    if index is None or spec.variant.newest:
        return
    version = spec.variant.torch_version
    tags = sorted(
        (t for t in index.python_tags(version) if re.fullmatch(r"cp3\d+", t)), key=lambda t: int(t[3:])
    )
    if admitted_by(requires_python, tags):
        return
    found = f"CPython wheels for {', '.join(tags)}" if tags else "no CPython wheel"
    admits = f", none of which {spec.recipe.name}'s Requires-Python {requires_python} admits" if tags else ""
    raise BadArgument(
        f"no Python can build {spec.recipe.name} for torch {version}: {index.shown} has {found} of it{admits}",
        "pick a torch release the index has (--torch cu130 picks the newest), or another index "
        "(--torch-index-url)",
    )
