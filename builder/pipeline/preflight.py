"""What `wheelbuild build` and `wheelbuild calibrate` need before any container: the image's
inputs (and the CUDA 12 layer a cu12x variant needs), the image itself, the compiler in it for
the variant and archs, the plan for this machine's resources, and (build's) what the package's
build files ask for. Both orchestrations sit above this module; it imports neither.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..errors import (
    CompilerUnavailable,
    CudaRedistUnreachable,
    DockerUnavailable,
    SourceUnavailable,
    TorchIndexUnreachable,
)
from ..host import cgroup
from ..image import cuda_redist
from ..image.inputs import NO_CUDA12, Image, ImageInputs
from ..image.names import image_repository
from ..image.options import ImageOptions, cuda12_layer
from ..image.ports import ImageIds, Images
from ..plan.admission import with_admission
from ..plan.calibration import load_calibrated
from ..plan.dist import DistTarget
from ..plan.dist_plan import with_distribution
from ..plan.learned import learned_path, load_learned
from ..plan.memory_model import MemoryModel
from ..plan.planner import Plan, container_limit, explain_container_limit, plan_build
from ..progress.console import Console
from ..recipes import Recipe
from ..recipes.build_vars import ArchVar, parse_arch_env
from ..recipes.survey import FoundArchVar, Survey, survey_source
from ..spec import held_torch
from ..spec.build_spec import BuildSpec, Resources
from ..spec.sources import PreparedSource, cache_dir
from ..spec.torch_choice import asked_release, newest_of_any_minor, newest_release
from ..spec.torch_releases import TorchIndex, read_torch_index
from ..units import format_bytes
from ..variants import (
    CUDA13_TOOLKITS,
    DEFAULT_TOOLKIT,
    DEFAULT_TORCH_AS_OF,
    PYTORCH_INDEX,
    CudaCompiler,
    TorchVariant,
    any_minor_tags,
    arch_range,
    builds_for,
    compiler_for,
    parse_variant,
    supports_arch,
)

__all__ = [
    "arch_note",
    "compiled_archs",
    "compiler_for_options",
    "compiler_in_image",
    "cuda12_obtainable",
    "ensure_cuda12_layer",
    "ensure_image",
    "governed",
    "model_for",
    "new_run_id",
    "plan_for",
    "resolve_torch",
    "std_note",
    "surveyed",
    "torch_index",
]


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def ensure_cuda12_layer(images: Images, inputs: ImageInputs, console: Console) -> None:
    """Make the CUDA 12 layer's image when the build image needs it and lacks it: the archives
    are downloaded once per host (cached by sha256), verified and unpacked. An unreachable
    server fails here, before the sdist, the image or any container."""
    layer = inputs.cuda12_layer
    if layer is None or images.local_image_id(inputs.tag) or images.local_image_id(layer.tag):
        return
    console.step(f"CUDA {layer.release} compiler layer from NVIDIA's redistributable archives")
    tree = cuda_redist.prepare_tree(layer, cuda_redist.redist_url(os.environ), cache_dir(), console.info)
    images.ensure_cuda_layer_image(layer, tree, console.log)


def ensure_image(images: Images, inputs: ImageInputs, console: Console) -> Image:
    ensure_cuda12_layer(images, inputs, console)
    image = images.ensure_image(inputs, console.log)
    console.info(f"image {image.tag} ({'reused' if image.reused else 'built'})")
    return image


def compiler_in_image(variant: TorchVariant, archs: tuple[int, ...], inputs: ImageInputs) -> CudaCompiler:
    """The image's compiler for this variant and these archs: variants.builds_for says which
    compilers build for a torch, one table (variants.ARCH_SUPPORT) which archs each compiles."""
    cuda12 = None
    if inputs.cuda12_image != NO_CUDA12:
        cuda12 = CudaCompiler.cuda12(inputs.cuda12_version)
    return _compiler(variant, archs, cuda12, inputs.toolkit)


def compiler_for_options(
    variant: TorchVariant, archs: tuple[int, ...], options: ImageOptions
) -> CudaCompiler:
    """compiler_in_image for the image these options make for `variant`, known before the image
    (and before Docker): its CUDA 12 compiler is the layer's (its pins' version) or --cuda12-image's."""
    wanted = options.for_variant(variant)
    cuda12 = None
    if wanted.cuda12_image is not None:
        cuda12 = CudaCompiler.cuda12(wanted.cuda12_version)
    elif wanted.cuda12_redist:
        cuda12 = CudaCompiler.cuda12(cuda12_layer().version)
    return _compiler(variant, archs, cuda12, wanted.toolkit)


def cuda12_obtainable(options: ImageOptions, variant: TorchVariant, images: ImageIds) -> None:
    """Whether the CUDA 12 layer a build of `variant` needs can be had, before any download:
    its tree or archives are kept here, NVIDIA's server (or the mirror) answers for each
    archive not kept, or its image is here already (Docker is asked only then, and a daemon
    that does not answer counts as no image). CudaRedistUnreachable otherwise."""
    wanted = options.for_variant(variant)
    if not wanted.cuda12_redist or wanted.cuda12_image is not None:
        return
    layer = cuda12_layer()
    base_url = cuda_redist.redist_url(os.environ)
    missing = cuda_redist.unreachable_archive(layer, base_url, cache_dir())
    if missing is None:
        return
    try:
        if images.local_image_id(layer.tag):
            return
    except DockerUnavailable:
        pass
    raise CudaRedistUnreachable(
        f"the CUDA {layer.release} compiler layer torch {variant} needs is not here, and {missing}",
        cuda_redist.remedy(base_url),
    )


def _compiler(
    variant: TorchVariant, archs: tuple[int, ...], cuda12: CudaCompiler | None, toolkit: str
) -> CudaCompiler:
    """The image's compiler for `variant`: its CUDA 13 `toolkit` or its CUDA 12 one; else
    CompilerUnavailable, saying which rule refused it."""
    compiler = compiler_for(variant, archs, cuda12, (toolkit,))
    if compiler is not None:
        return compiler
    in_image = [CudaCompiler.cuda13(toolkit), *([cuda12] if cuda12 else [])]
    same_major = [c for c in in_image if c.major == variant.cuda_major]
    if not same_major:
        raise CompilerUnavailable(
            f"torch {variant} needs a CUDA {variant.cuda_major}.x compiler; wheelbuild's images have CUDA "
            f"{', '.join(CUDA13_TOOLKITS)}, and torch refuses an nvcc of another major",
            "let wheelbuild add the CUDA 12 layer from NVIDIA's archives (the default for cu12x), "
            "or pass --cuda12-image nvidia/cuda:12.8.1-devel-rockylinux8@sha256:<digest>",
        )
    compiler = same_major[-1]
    if not builds_for(compiler, variant):
        newest = ", the newest wheelbuild carries" if compiler.version == CUDA13_TOOLKITS[-1] else ""
        raise CompilerUnavailable(
            f"torch {variant} is built with CUDA {variant.cuda_version}, newer than the image's nvcc "
            f"({compiler.version}{newest}): torch's CUDA library headers are {variant.cuda_version}'s, "
            "which an older nvcc's own headers may not compile with",
            f"build for a torch of CUDA {compiler.version} or older (--torch newest picks the newest "
            "torch wheelbuild can compile), or with a wheelbuild that carries that toolkit",
        )
    missing = [a for a in archs if not supports_arch(compiler, a)]
    raise CompilerUnavailable(
        f"torch {variant} builds with CUDA {compiler.version}, which cannot compile "
        + ", ".join(f"sm_{a} (needs {arch_range(a)})" for a in missing),
        "drop those archs from --archs, or pick a torch variant whose CUDA compiles them",
    )


def plan_for(
    recipe: Recipe,
    archs: tuple[int, ...],
    resources: Resources,
    root: Path = Path("/"),
    toolkit: str = DEFAULT_TOOLKIT,
) -> Plan:
    """The plan for these resources, given or read from this machine (its available memory and
    our own cgroup's limits): what `wheelbuild build` runs with and `wheelbuild plan` prints.
    A profile `wheelbuild calibrate` measured for this release and toolkit beats the built-in one."""
    own = cgroup.read_limits(root)
    memory, cpus = resources.memory, resources.cpus
    if memory is None:
        available = cgroup.host_memory_available(root)
        budget = container_limit(available, own.memory_limit)
        why = explain_container_limit(available, own.memory_limit)
    else:
        budget, why = memory, f"memory limit {format_bytes(memory)}: given"
    cpus_why = f"CPUs {cpus:g}: given" if cpus is not None else ""
    if cpus is None:
        cpus = own.effective_cpus or float(len(os.sched_getaffinity(0)))
        cpus_why = f"CPUs {cpus:g}: {'our cgroup' if own.effective_cpus else 'this process'}'s"
    model, learned_line = model_for(recipe, toolkit)
    plan = plan_build(
        budget=budget,
        cpus=cpus,
        archs=len(archs),
        model=model,
        max_jobs=resources.max_jobs,
        nvcc_threads=resources.nvcc_threads,
        budget_reason=why,
        cpus_reason=cpus_why,
    )
    return plan if learned_line is None else replace(plan, reasons=(*plan.reasons, learned_line))


def governed(plan: Plan, dist: DistTarget | None, admission: bool, cicc_admission: bool = True) -> Plan:
    """The plan a build runs: with --dist, spread over the fleet's servers; else admitted by
    memory (the default), each cicc too unless --no-cicc-admission; else the static plan as it is.
    `wheelbuild plan` prints the same."""
    if dist is not None:
        return with_distribution(plan, dist.servers)
    return with_admission(plan, cicc_admission=cicc_admission) if admission else plan


def model_for(recipe: Recipe, toolkit: str) -> tuple[MemoryModel, str | None]:
    """The model to plan with: the one learned from the last build of this release on this
    toolkit (and the line saying how far off it and its predecessor were), else the profile
    `wheelbuild calibrate` measured, else the recipe's own. A learned model of other units than
    the recipe's (a build of a trimmed source list) is left aside, and the line says so."""
    path = learned_path(cache_dir(), recipe.name, recipe.version, toolkit, recipe.extra_env)
    aside = None
    if learned := load_learned(
        path, recipe.name if recipe.version is None else f"{recipe.name}-{recipe.version}"
    ):
        model, record = learned
        if _unit_names(model) == _unit_names(recipe.memory_model) or not recipe.memory_model.complete:
            return model, record.describe()
        aside = (
            f"left aside the model learned from build {record.run_id}: its {len(model.units)} units are not "
            f"the recipe's {len(recipe.memory_model.units)} (delete {path.with_suffix('')}.* to forget it)"
        )
    return load_calibrated(cache_dir(), recipe.name, recipe.version, toolkit) or recipe.memory_model, aside


def _unit_names(model: MemoryModel) -> set[str]:
    return {u.name.rsplit("/", 1)[-1] for u in model.units}


def surveyed(
    spec: BuildSpec, source: PreparedSource, console: Console
) -> tuple[BuildSpec, Survey, tuple[str, ...]]:
    """The package's build files read as text (recipes/survey.py, nothing run), the spec with the
    switches they call for in its env, and one line per switch set ("NAME=VALUE: why"), each
    also said. A variable the recipe or --env sets wins over the switch."""
    survey = survey_source(source.project_dir, source.package)
    for refused in survey.refused:
        console.warn(f"reading the package's build files: {refused}")
    given = spec.recipe.extra_env
    switches: dict[str, str] = {}
    lines: list[str] = []
    for switch in survey.switches:
        if switch.name in switches:
            continue
        if switch.name in given:
            if given[switch.name] != switch.value:
                console.info(
                    f"{switch.name}={given[switch.name]} as given, not {switch.value} ({switch.why})"
                )
            continue
        switches[switch.name] = switch.value
        lines.append(f"{switch.name}={switch.value}: {switch.why}")
        console.info(f"setting {lines[-1]}")
    if survey.missing_sources:  # before any container: plan refuses it as build would
        raise SourceUnavailable(
            f"the source lacks files its setup.py names: {', '.join(survey.missing_sources)}",
            "an sdist published without its sources cannot be built: build from the project's repository "
            "(a git checkout or the release's source archive) instead",
        )
    recipe = _with_build_vars(spec.recipe.with_env(switches), survey, spec, lines, console)
    return replace(spec, recipe=recipe), survey, tuple(lines)


def _with_build_vars(
    recipe: Recipe, survey: Survey, spec: BuildSpec, lines: list[str], console: Console
) -> Recipe:
    """The recipe with the arch and parallelism variables the survey found (each said, as a
    line of *lines*): an arch variable in the form its files read, where they tell it (else a
    warning naming --arch-env NAME:FORM); a parallelism variable at the plan's MAX_JOBS. What
    --env or the recipe's own arch variable sets wins."""
    given = recipe.extra_env
    arch_vars = []
    for found in arch_vars_to_set(recipe, survey, spec):
        if found.form is None:
            console.warn(unknown_arch_form(found.name, found.why))
            continue
        arch_vars.append(ArchVar(found.name, found.form))
        value = found.form.spell(spec.archs, spec.ptx)
        lines.append(f"{found.name}={value}: the CUDA archs, {found.form.name} ({found.why})")
        console.info(f"setting {lines[-1]}")
    jobs = [read for read in survey.jobs_vars if read.name not in given]
    for read in jobs:
        lines.append(f"{read.name}=MAX_JOBS: {read.why}, as the plan's MAX_JOBS")
        console.info(f"setting {lines[-1]}")
    return replace(recipe, arch_vars=tuple(arch_vars), jobs_vars=tuple(read.name for read in jobs))


def arch_vars_to_set(recipe: Recipe, survey: Survey, spec: BuildSpec) -> list[FoundArchVar]:
    """The arch variables the survey found that nothing else sets: not --env, not the recipe's
    own (--arch-env), not with --keep-package-archs (the package's own list stays)."""
    if spec.keep_package_archs:
        return []
    own = parse_arch_env(recipe.arch_env).name if recipe.arch_env else None
    return [found for found in survey.arch_vars if found.name not in recipe.extra_env and found.name != own]


def unknown_arch_form(name: str, why: str) -> str:
    """The warning for an arch variable whose form the build files do not tell."""
    return (
        f"the package's build reads its CUDA archs from {name}, in a form wheelbuild cannot tell "
        f"({why}): not set; give --arch-env {name}:FORM (dotted: 9.0;10.0, plain: 90;100, sm: sm_90;sm_100)"
    )


def compiled_archs(spec: BuildSpec, survey: Survey) -> tuple[int, ...]:
    """The archs each CUDA unit compiles: exactly the asked ones, or with --keep-package-archs
    those the package's build files name (an upper bound where they name them conditionally)."""
    if spec.keep_package_archs and survey.package_archs:
        return tuple(sorted({*survey.package_archs, *spec.archs}))
    return spec.archs


def arch_note(spec: BuildSpec, survey: Survey) -> str | None:
    """What the plan says of the package's own arch list, when it names one other than asked."""
    own = survey.package_archs
    if not own or set(own) == set(spec.archs):
        return None
    named = " ".join(f"sm_{a}" for a in own)
    if spec.keep_package_archs:
        return f"the package's build files name {named}: compiled as they say (--keep-package-archs)"
    asked = " ".join(f"sm_{a}" for a in spec.archs)
    return (
        f"the package's build files name {named} for nvcc; wheelbuild's nvcc compiles {asked} only "
        "(--keep-package-archs keeps theirs)"
    )


def std_note(spec: BuildSpec, survey: Survey) -> str | None:
    """What the plan says of the C++ standard the package's build files give, when they give one:
    the build raises it where the torch it compiles against requires a newer one."""
    if not survey.cxx_standards:
        return None
    named = ", ".join(survey.cxx_standards)
    if spec.keep_package_std:
        return f"the package's build files give {named}: kept as they say (--keep-package-std)"
    return (
        f"the package's build files give {named}: raised where torch {spec.variant.torch_version}'s "
        "headers require a newer standard (read from its ATen.h in the build; --keep-package-std keeps it)"
    )


def toolkit_note(variant: TorchVariant, compiler: CudaCompiler) -> str:
    """What the plan says of the toolkit that compiles this torch: its image, and why that one
    (torch's CUDA minor, or a newer minor of its major, which torch only warns of)."""
    where = (
        f"the {image_repository(compiler.version)} image (NVIDIA's PyPI wheels)"
        if compiler.major == 13
        else "the CUDA 12 layer beside the image's CUDA 13"
    )
    made = f"torch {variant.torch_version} is a CUDA {variant.cuda_version} build"
    if compiler.version == variant.cuda_version:
        return f"CUDA {compiler.version}, in {where}: {made}"
    return (
        f"CUDA {compiler.version}, in {where}: {made}, and a newer CUDA {variant.cuda_major} minor "
        "compiles for it (torch warns of the minor only; the wheel runs on torch's own CUDA runtime)"
    )


def torch_index(
    variant: TorchVariant, pythons_named: bool, console: Console, *, dry_run: bool
) -> TorchIndex | None:
    """torch's page on the variant's index (kept a day). When it cannot be read: an error, unless
    this is a dry run with the Pythons named, then None with a warning. A build refuses, before
    any container: its image's pip would fail on the same index after the setup was spent."""
    try:
        return read_torch_index(variant.index_url)
    except TorchIndexUnreachable as unreachable:
        if not (pythons_named and dry_run):
            raise
        console.warn(
            f"{unreachable.cause}; planned for the Pythons named without checking torch's wheels "
            "(build refuses until the index can be read)"
        )
        return None


def torch_held_here(spec: BuildSpec, unreachable: TorchIndexUnreachable, console: Console) -> BuildSpec:
    """A build whose torch index cannot be read: the spec for the torch and Pythons this machine's
    wheel cache holds from that index (spec/held_torch.py; the Pythons named, each held, else every
    one held), said so; else the index's error, naming what is held."""
    variant, _ = resolve_torch(spec.variant, None, spec.pythons or None, console, spec.recipe)
    held = {h.python: h for h in held_torch.held(cache_dir(), variant)}
    pythons = spec.pythons or tuple(held)
    if pythons and all(p in held for p in pythons):
        runs = ", ".join(f"{p} by run {held[p].run}" for p in pythons)
        console.warn(
            f"{unreachable.cause}; building for torch {variant.torch_version} from this machine's wheel "
            f"cache, which holds it ({runs}), without reading the index"
        )
        return replace(spec, variant=variant, pythons=pythons)
    others = held_torch.releases_held(cache_dir(), variant)
    if not others:  # nothing of this index here: the index's own error says it all
        raise unreachable
    lacking = ", ".join(p for p in pythons if p not in held) or "any Python"
    raise TorchIndexUnreachable(
        f"{unreachable.cause}, and this machine's wheel cache has no torch {variant.torch_version} from it "
        f"for {lacking}; it holds {', '.join(others)} from it (--torch {others[-1]}+{variant.tag})",
        unreachable.remedy,
    ) from None


def resolve_any_minor(
    variant: TorchVariant, pythons: Sequence[str] | None, console: Console, recipe: Recipe
) -> TorchVariant:
    """`--torch newest` made a CUDA tag: the one whose newest release is newest, each tag read on
    its own index (PyTorch's per tag, or the one --torch-index-url names for all). Without an
    index, the newest tag's release in wheelbuild's table, with a warning."""
    if not variant.any_minor:
        return variant
    given = variant.index_url != PYTORCH_INDEX.format(tag=variant.tag)
    candidates = []
    try:
        for tag in any_minor_tags():
            candidate = parse_variant(tag, variant.index_url if given else None)
            candidates.append((candidate, read_torch_index(candidate.index_url)))
    except TorchIndexUnreachable as unreachable:
        console.warn(
            f"{unreachable.cause}; --torch newest takes {variant.tag}, the newest CUDA wheelbuild compiles"
        )
        return replace(variant, any_minor=False)
    chosen, why = newest_of_any_minor(candidates, pythons, ceiling=recipe.torch_ceiling)
    console.info(why)
    return chosen


def resolve_torch(
    variant: TorchVariant,
    index: TorchIndex | None,
    pythons: Sequence[str] | None,
    console: Console,
    recipe: Recipe | None = None,
) -> tuple[TorchVariant, str]:
    """The release the build uses, and why: for a bare tag (cu130) the index's newest built with
    that CUDA and with a wheel for one of *pythons* (None: any CPython) that *recipe* compiles
    with; for a full variant, the one asked, its CUDA checked. Without the index, the table's
    release for the tag, with a warning naming its date. Raises BadVariant for a release past
    the recipe's torch ceiling."""
    ceiling = recipe.torch_ceiling if recipe is not None else None
    known = f"the newest {variant.tag} release wheelbuild knew of"
    if recipe is not None and ceiling is not None and ceiling.excludes(variant.torch_version):
        if not variant.newest:
            raise ceiling.refusal(recipe.name, variant)
        if index is None:  # the table's release is past it: the newest known to compile instead
            variant = replace(variant, torch_version=ceiling.last_good)
            known = f"the newest {variant.tag} release {recipe.name} compiles with that wheelbuild knew of"
    if index is None:
        if not variant.newest:
            return variant, f"torch {variant.torch_version}: as asked (its index could not be read)"
        why = (
            f"torch {variant.torch_version}: {known} on {DEFAULT_TORCH_AS_OF} "
            "(its own table; the index could not be read)"
        )
        console.warn(why)
        return replace(variant, newest=False), why
    if variant.newest:
        choice = newest_release(index, variant, pythons, ceiling=ceiling)
    else:
        choice = asked_release(index, variant, python=pythons[0] if pythons else None)
    console.info(choice.why)
    return replace(variant, torch_version=choice.version, newest=False), choice.why
