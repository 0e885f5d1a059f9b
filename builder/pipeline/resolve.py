"""The one resolution of a build request: what the user asked (a BuildSpec from the command line,
the config files and the environment, which nothing changes) resolved once into one frozen value,
the Resolution, which the plan, the attempts, the check, the gate, the torch range, the report and
the statements read and never resolve again. `build`, `plan` (a dry run: no image), and the
nightly's cells (through build) all make it here.

In the order that wastes least: the release the recipe does not pin looked up on its index;
the compiler for the variant and archs; whether the CUDA 12 layer a cu12x variant needs can be
had; the source (an sdist downloaded once into the cache) and the switches its build files call
for; torch's page on its index; the Pythons named, or, where none are named, whether any Python
at all can build the asked torch (a build whose torch index cannot be read goes ahead only for a
torch and Pythons this machine's wheel cache holds from it). Nothing up to here starts a container or builds an image, so
`plan` refuses what build refuses, with the same error and exit code. Then, for a build, the image
(its interpreters decide the Pythons when none are named, and the newest torch for them), and the
inputs key.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from packaging.utils import canonicalize_name

from ..attempt.config import network_while_building
from ..errors import BadPython, TorchIndexUnreachable
from ..image.inputs import Image, ImageInputs
from ..image.options import ImageOptions, image_inputs
from ..image.ports import Images
from ..plan.planner import Plan
from ..progress.console import Console
from ..recipes import LocalProject, LocalSdist
from ..recipes.survey import Survey
from ..spec.build_spec import BuildSpec
from ..spec.pythons import PythonConstraints, admitted_by
from ..spec.requires_python import SourceMetadata, source_metadata
from ..spec.sources import PreparedSource, SourceDate, prepare_source, resolve_lookup, source_date
from ..spec.torch_releases import TorchIndex
from ..variants import CudaCompiler
from .preflight import (
    arch_note,
    compiled_archs,
    compiler_for_options,
    cuda12_obtainable,
    ensure_cuda12_layer,
    ensure_image,
    governed,
    plan_for,
    resolve_any_minor,
    resolve_torch,
    std_note,
    surveyed,
    toolkit_note,
    torch_held_here,
    torch_index,
)
from .results import inputs_key

__all__ = ["Resolution", "plan_of", "resolve"]


@dataclass(frozen=True)
class ImageStage:
    """What the build image decides of a resolution: its inputs, the image, the Pythons its
    interpreters allow, and the inputs key. A dry run (`plan`) asks Docker nothing and has none."""

    inputs: ImageInputs
    image: Image
    seconds: float  # how long this run took to have its image (built or reused)
    pythons: tuple[str, ...]
    key: str  # the result store's key: the content hash of every input


@dataclass(frozen=True)
class Resolution:
    """A build request resolved, once: everything the steps after it read."""

    spec: BuildSpec  # the request with its release pinned, its switches in its env, its torch chosen
    compiler: CudaCompiler
    source: PreparedSource
    survey: Survey  # what the package's build files ask for, read as text
    switches: tuple[str, ...]  # "NAME=VALUE: why", one per switch the build files call for
    requires_python: str | None
    metadata: SourceMetadata  # the source's own name, version and Requires-Python, read as text
    torch_index: TorchIndex | None  # None: unreadable, and the Pythons were named (a warning said so)
    torch_why: str  # which torch release, and why ("torch 2.14.1: newest on ... with cp311 wheels")
    archs: tuple[int, ...]  # the archs each CUDA unit compiles (the asked ones, or the package's)
    arch_note: str | None  # what the plan says of the package's own arch list, if it names another
    std_note: str | None  # what it says of the C++ standard the package's build files give
    toolkit_note: str  # which CUDA toolkit compiles this torch, in which image, and why
    network: str  # the container's network while the package builds: "off", or "on: <why>"
    date: SourceDate  # SOURCE_DATE_EPOCH, from the source: every zip entry's date
    stage: ImageStage | None  # None in a dry run

    @property
    def project(self) -> str:
        """The package's name as its metadata gives it, normalized as pip compares names (a
        folder or an sdist file is named for what it holds, not for its path)."""
        return canonicalize_name(self.metadata.name) if self.metadata.name else self.spec.recipe.name

    @property
    def imaged(self) -> ImageStage:
        if self.stage is None:  # a caller's bug, not the user's: only build reads these
            raise TypeError("a dry run's resolution has no image")
        return self.stage

    @property
    def inputs(self) -> ImageInputs:
        return self.imaged.inputs

    @property
    def image(self) -> Image:
        return self.imaged.image

    @property
    def pythons(self) -> tuple[str, ...]:
        return self.imaged.pythons

    @property
    def key(self) -> str:
        return self.imaged.key


def resolve(
    request: BuildSpec,
    options: ImageOptions,
    console: Console,
    images: Images,
    *,
    dry_run: bool = False,
    elsewhere: bool = False,
    before_image: Callable[[BuildSpec], None] | None = None,
) -> Resolution:
    """The request resolved (the module doc), in its order; a dry run stops before the image.
    `elsewhere`: for a build on another machine (a nightly cell's key), so whether this one can
    have the CUDA 12 layer is not asked. `before_image` runs once every check has passed, before
    the image: build asks Docker its own questions there (its reaper, orphans, the GPU), so that
    an impossible --gpus fails before any container."""
    # A release the recipe does not pin is found on the index and pinned now, before any work.
    spec = replace(request, recipe=resolve_lookup(request.recipe, console.info))
    spec = replace(spec, variant=resolve_any_minor(spec.variant, spec.pythons or None, console, spec.recipe))
    # No download and no image build for an impossible variant or arch.
    compiler = compiler_for_options(spec.variant, spec.archs, options)
    if not elsewhere:
        cuda12_obtainable(options, spec.variant, images)
    source = prepare_source(spec.recipe.source, console.info)
    spec, survey, switches = surveyed(spec, source, console)
    metadata = source_metadata(source.project_dir / source.package, spec.recipe.extra_env)
    requires_python = metadata.requires_python
    if metadata.name and isinstance(spec.recipe.source, LocalProject | LocalSdist):
        # A folder or a file is named for its path; the package by what it says it is.
        name = canonicalize_name(metadata.name)
        model = spec.recipe.memory_model
        model = replace(model, name=name) if model.name == spec.recipe.name else model
        spec = replace(spec, recipe=replace(spec.recipe, name=name, memory_model=model))
    try:
        index = torch_index(spec.variant, bool(spec.pythons), console, dry_run=dry_run)
    except TorchIndexUnreachable as unreachable:
        # A build for a torch this machine has installed from that index needs no index.
        spec, index = torch_held_here(spec, unreachable, console), None
    torch_why: str | None = None  # chosen for the Pythons named, else for the image's
    stage = None
    if spec.pythons:
        spec, torch_why = _torch_chosen(spec, index, spec.pythons, console)
        _constraints(spec, index, requires_python).check_named(spec)
    else:
        _some_python(spec, index, requires_python)
    if dry_run:
        if torch_why is None:  # the image's Pythons are build's to learn: any CPython the package admits
            spec, torch_why = _torch_chosen(spec, index, None, console)
    else:
        if before_image is not None:
            before_image(spec)
        spec, torch_why, stage = _image_stage(
            spec, options, console, images, index, requires_python, torch_why
        )
    return Resolution(
        spec, compiler, source, survey, switches, requires_python, metadata, index, torch_why,
        compiled_archs(spec, survey), arch_note(spec, survey), std_note(spec, survey),
        toolkit_note(spec.variant, compiler),
        network_while_building(spec.build_network, spec.dist, os.environ), source_date(source), stage,
    )  # fmt: skip


def _image_stage(
    spec: BuildSpec,
    options: ImageOptions,
    console: Console,
    images: Images,
    index: TorchIndex | None,
    requires_python: str | None,
    torch_why: str | None,
) -> tuple[BuildSpec, str, ImageStage]:
    """The image's inputs, the CUDA 12 layer, the image, and the torch release and Pythons its
    interpreters allow when none were named (torch_why None until then)."""
    inputs = image_inputs(images, options.for_variant(spec.variant))
    started = time.monotonic()
    ensure_cuda12_layer(images, inputs, console)
    console.step("image")
    image = ensure_image(images, inputs, console)
    seconds = round(time.monotonic() - started, 1)
    in_image = tuple(images.image_pythons(image.tag))
    if torch_why is None:
        spec, torch_why = _torch_chosen(spec, index, admitted_by(requires_python, in_image), console)
    choice = _constraints(spec, index, requires_python).choose(in_image, spec)
    for left in choice.left_out:
        console.info(f"not building for {left}")
    key = inputs_key(spec, inputs, choice.pythons)
    return spec, torch_why, ImageStage(inputs, image, seconds, choice.pythons, key)


def plan_of(resolved: Resolution) -> Plan:
    """The plan a build runs: for the archs each unit really compiles (the asked ones, or the
    package's own), on the resolved compiler, governed as the build is (admission, --dist)."""
    spec = resolved.spec
    return governed(
        plan_for(spec.recipe, resolved.archs, spec.resources, toolkit=resolved.compiler.version),
        spec.dist,
        spec.admission,
        spec.cicc_admission,
    )


def _torch_chosen(
    spec: BuildSpec, index: TorchIndex | None, pythons: tuple[str, ...] | None, console: Console
) -> tuple[BuildSpec, str]:
    """The spec with its torch release resolved for these Pythons (None: any CPython, as `plan`
    resolves a bare tag before the image is known; see preflight.resolve_torch)."""
    variant, why = resolve_torch(spec.variant, index, pythons, console, spec.recipe)
    return replace(spec, variant=variant), why


def _constraints(spec: BuildSpec, index: TorchIndex | None, requires_python: str | None) -> PythonConstraints:
    tags = index.python_tags(spec.variant.torch_version) if index is not None else None
    return PythonConstraints(tags, requires_python)


def _some_python(spec: BuildSpec, index: TorchIndex | None, requires_python: str | None) -> None:
    """With no Python named and a release asked (2.14.1+cu130): some CPython must have its torch
    wheel and be admitted by the package, or no image could build it (BadPython, as the
    Python choice after the image would say). A bare tag is resolved for the image's Pythons."""
    if index is None or spec.variant.newest:
        return
    version = spec.variant.torch_version
    tags = index.cpythons(version)
    if admitted_by(requires_python, tags):
        return
    found = f"CPython wheels for {', '.join(tags)}" if tags else "no CPython wheel"
    admits = f", none of which {spec.recipe.name}'s Requires-Python {requires_python} admits" if tags else ""
    raise BadPython(
        f"no Python can build {spec.recipe.name} for torch {version}: {index.shown} has {found} of it{admits}",
        "pick a torch release the index has (--torch cu130 picks the newest), or another index "
        "(--torch-index-url)",
    )
