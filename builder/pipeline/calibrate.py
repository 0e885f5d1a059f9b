"""`wheelbuild calibrate RECIPE`, as the pipeline reads: source -> image -> torch headers ->
one container per (unit, archs, NVCC_THREADS) -> measurements -> calibrated profile.

The measurements accumulate in <cache>/profiles/<recipe>-<version>-cuda<toolkit>.measured.tsv
(a later run replaces the rows it measures again and keeps the others); the profile the planner
then prefers is fitted from all of them (builder/plan/calibration.py says how).
"""

from __future__ import annotations

import shutil
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..engine.ports import CalibrationEngine, UnitCompile
from ..errors import BadArgument, CompileFailed, Interrupted
from ..image import options as image_options
from ..plan.calibration import (
    Measurement,
    calibrated_model,
    compare_with,
    measurements_tsv,
    profile_path,
    profile_tsv,
    read_measurements,
    sample_units,
)
from ..plan.memory_model import MemoryModel, UnitCost
from ..progress.console import Console
from ..recipes import IndexLookup, Recipe, RemoteSdist
from ..recipes.base import UnitRecipe
from ..spec.build_spec import BuildSpec, Resources
from ..spec.sources import cache_dir
from ..units import format_bytes
from ..variants import TorchVariant
from . import preflight
from .resolve import resolve

__all__ = ["CalibrationResult", "run_calibration"]


@dataclass(frozen=True)
class CalibrationResult:
    measurements: tuple[Measurement, ...]  # this run's
    profile: Path
    measured: Path
    model: MemoryModel
    comparisons: tuple[str, ...]


def _unpacked(sdist: Path) -> Path:
    """The sdist unpacked once beside itself; its single top directory."""
    target = sdist.parent / "unpacked"
    if not target.is_dir():
        partial = sdist.parent / ".unpacking"
        shutil.rmtree(partial, ignore_errors=True)
        with tarfile.open(sdist) as archive:
            archive.extractall(partial, filter="data")
        partial.rename(target)
    (top,) = [p for p in target.iterdir() if p.is_dir()]
    return top


def run_calibration(
    recipe: Recipe,
    variant: TorchVariant,
    archs_options: Sequence[tuple[int, ...]],
    threads_options: Sequence[int],
    sample: int,
    unit_names: Sequence[str],
    memory: int | None,
    options: image_options.ImageOptions,
    console: Console,
    engine: CalibrationEngine,
    reference: Path | None = None,
) -> CalibrationResult:
    if recipe.units is None:
        raise BadArgument(
            f"{recipe.name} cannot be calibrated: wheelbuild does not know how to compile its units alone",
            "calibrate a recipe that declares its units (flash-attn)",
        )
    units_spec = recipe.units
    if not isinstance(recipe.source, RemoteSdist | IndexLookup):
        raise BadArgument(
            f"{recipe.name}: calibration unpacks a release's sdist", "calibrate a known release"
        )
    # Resolved as a build of every arch asked would be (resolve.py, as `plan` does): the release
    # pinned, the sdist downloaded, and the torch a build compiles against (the newest it takes).
    archs = tuple(sorted(set().union(*archs_options)))
    resolved = resolve(BuildSpec(recipe, variant, archs), options, console, engine, dry_run=True)
    recipe, variant, source = resolved.spec.recipe, resolved.spec.variant, resolved.source
    run_id = preflight.new_run_id()
    engine.connect()
    inputs = image_options.image_inputs(engine, options.for_variant(variant))
    compiler = resolved.compiler  # its toolkit is the one options.for_variant gave the image
    source_dir = _unpacked(source.project_dir / source.package)

    most_archs = max(len(a) for a in archs_options)
    chosen = _chosen_units(recipe, unit_names, sample, most_archs)
    plan = preflight.plan_for(recipe, archs_options[0], Resources(memory=memory))
    jobs = [(u, a, t) for u in chosen for a in archs_options for t in threads_options if t <= len(a)]
    console.step(
        f"calibrate {recipe.name} {recipe.version} on CUDA {compiler.version}: {len(jobs)} compile(s) of "
        f"{len(chosen)} unit(s), one at a time, each in its own container of {format_bytes(plan.memory)} "
        f"(run {run_id})"
    )
    image = preflight.ensure_image(engine, inputs, console)
    volume = engine.ensure_torch_headers(image.tag, variant.requirement, variant.index_url, console.info)
    job = UnitCompile(
        run_id=run_id, image=image.tag, source_dir=source_dir, torch_volume=volume, unit="",
        flags=units_spec.nvcc_flags, include_dirs=units_spec.include_dirs, archs=(),
        threads=1, memory=plan.memory, cpus=plan.cpus, cuda_home=compiler.home,
    )  # fmt: skip
    measured = _measure(engine, job, jobs, console)
    profile, measured_path, model = _save_profile(recipe, units_spec, compiler.version, image.tag, measured)
    comparisons: tuple[str, ...] = ()
    if reference is not None and reference.is_file():
        comparisons = tuple(compare_with(measured, reference.read_text(), reference.name))
    return CalibrationResult(
        measurements=tuple(measured),
        profile=profile,
        measured=measured_path,
        model=model,
        comparisons=comparisons,
    )


def _chosen_units(recipe: Recipe, unit_names: Sequence[str], sample: int, most_archs: int) -> list[UnitCost]:
    """The units named (by file name, as the profile lists them), else a sample of each family."""
    assert recipe.units is not None
    if not unit_names:
        return list(sample_units(recipe.memory_model, recipe.units.families, sample, most_archs))
    by_file = {u.name.rsplit("/", 1)[-1]: u for u in recipe.memory_model.units}
    unknown = [n for n in unit_names if n.rsplit("/", 1)[-1] not in by_file]
    if unknown:
        raise BadArgument(f"{recipe.name} has no unit {', '.join(unknown)}", "name units as its profile does")
    return [by_file[n.rsplit("/", 1)[-1]] for n in unit_names]


def _measure(
    engine: CalibrationEngine,
    job: UnitCompile,
    jobs: Sequence[tuple[UnitCost, tuple[int, ...], int]],
    console: Console,
) -> list[Measurement]:
    """Each (unit, archs, threads) compiled alone, one after another, in *job*'s container; on
    Ctrl-C the run's containers are removed and nothing is saved."""
    measured: list[Measurement] = []
    try:
        for number, (unit, archs, threads) in enumerate(jobs, 1):
            label = f"{unit.name} archs {','.join(map(str, archs))} threads {threads}"
            console.step(f"[{number}/{len(jobs)}] {label}")
            started = time.monotonic()
            result = engine.compile_unit_alone(replace(job, unit=unit.name, archs=archs, threads=threads))
            if result.returncode != 0 and not result.oom:
                raise CompileFailed(
                    f"{label} failed to compile (exit {result.returncode})",
                    "the recipe's unit flags may not match this release's setup.py; see the log above",
                    details="\n".join(result.log_tail),
                )
            measured.append(
                Measurement(unit=unit.name, archs=archs, threads=threads, peak=result.peak, wall_s=result.wall_s, oom=result.oom)
            )  # fmt: skip
            console.info(
                f"{label}: peak {format_bytes(result.peak)}{' (OOM-killed at the limit)' if result.oom else ''}, "
                f"{result.wall_s:.1f} s compiling ({time.monotonic() - started:.0f} s with the container)"
            )
    except KeyboardInterrupt:
        removed = engine.interrupt_cleanup(job.run_id)
        raise Interrupted(
            f"interrupted; removed {removed} container(s) of calibration run {job.run_id}",
            "rerun to measure again; measurements of this run were not saved",
        ) from None
    return measured


def _save_profile(
    recipe: Recipe, units_spec: UnitRecipe, cuda: str, image: str, measured: Sequence[Measurement]
) -> tuple[Path, Path, MemoryModel]:
    """This run's measurements merged over earlier ones (a re-measured compile replaces its old
    line), and the profile scaled from them, both written to the cache."""
    profile = profile_path(cache_dir(), recipe.name, recipe.version, cuda)
    measured_path = profile.with_suffix(".measured.tsv")
    earlier = read_measurements(measured_path.read_text()) if measured_path.is_file() else []
    keys = {(m.unit, m.archs, m.threads) for m in measured}
    every = [m for m in earlier if (m.unit, m.archs, m.threads) not in keys] + list(measured)
    header = [
        f"{recipe.name} {recipe.version}: single units compiled alone by wheelbuild calibrate, each in its own",
        f"container (cgroup), nvcc from CUDA {cuda} in image {image}; peak = the cgroup's peak",
        "(page cache included), wall = nvcc's own time. Flags: the recipe's (builder/recipes).",
    ]
    model = calibrated_model(recipe.memory_model, every, units_spec.families, cuda)
    profile.parent.mkdir(parents=True, exist_ok=True)
    measured_path.write_text(measurements_tsv(every, header))
    profile.write_text(profile_tsv(model, [*header, f"Scaled from {recipe.memory_model.describe()}."]))
    return profile, measured_path, model
