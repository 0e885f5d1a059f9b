"""A build, as the pipeline reads: spec -> plan -> image -> attempt -> wheels -> report."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from builder import engine
from builder.cgroup import host_memory_available
from builder.errors import BadArgument, CompilerUnavailable, Interrupted
from builder.image import NO_CUDA12, Image, ImageInputs, production_base
from builder.planner import Plan, default_memory, plan_build
from builder.reporter import Reporter
from builder.sources import prepare_source
from builder.spec import BuildSpec, format_bytes
from builder.variants import CudaCompiler, compiler_for
from builder.wheels import CudaArchs, archs_in_wheel


@dataclass(frozen=True)
class ImageOptions:
    base_image: str | None  # None: production manylinux_2_28 pinned by cibuildwheel
    ca_bundle: Path | None
    cuda12_image: str | None = None
    cuda12_version: str = "12.8"


@dataclass(frozen=True)
class BuiltWheel:
    path: Path
    sha256: str
    size: int
    archs: dict[str, CudaArchs]  # per extension module

    @property
    def sass(self) -> frozenset[int]:
        return frozenset().union(*(a.sass for a in self.archs.values()))


@dataclass(frozen=True)
class BuildResult:
    run_id: str
    run_dir: Path
    image: Image
    plan: Plan
    wheels: tuple[BuiltWheel, ...]
    report: Path


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def image_inputs(client: Any, options: ImageOptions) -> ImageInputs:
    base = options.base_image or production_base()
    # A base pinned by digest is its own identity; a local tag is identified by its image ID.
    base_id = "" if "@sha256:" in base else engine.local_image_id(client, base)
    return ImageInputs.load(
        base_image=base,
        base_id=base_id,
        ca_bundle=options.ca_bundle,
        cuda12_image=options.cuda12_image,
        cuda12_version=options.cuda12_version,
    )


def ensure_image(client: Any, options: ImageOptions, reporter: Reporter) -> Image:
    inputs = image_inputs(client, options)
    image = engine.ensure_image(client, inputs, reporter.log)
    reporter.info(f"image {image.tag} ({'reused' if image.reused else 'built'})")
    return image


def _compiler(spec: BuildSpec, inputs: ImageInputs) -> CudaCompiler:
    cuda12 = None
    if inputs.cuda12_image != NO_CUDA12:
        cuda12 = CudaCompiler(version=inputs.cuda12_version, home=f"/usr/local/cuda-{inputs.cuda12_version}")
    compiler = compiler_for(spec.variant, cuda12)
    if compiler is None:
        raise CompilerUnavailable(
            f"torch {spec.variant} needs a CUDA {spec.variant.cuda_major}.x compiler (12.8 or newer for "
            f"sm_100/sm_120); the image has only CUDA 13.1, and torch refuses an nvcc of another major",
            "build where NVIDIA's registry is reachable with --cuda12-image "
            "nvidia/cuda:12.8.1-devel-rockylinux8@sha256:<digest>, or use --torch cu130",
        )
    return compiler


def _inspect(path: Path) -> BuiltWheel:
    data = path.read_bytes()
    return BuiltWheel(
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        archs=archs_in_wheel(path),
    )


def run_build(spec: BuildSpec, options: ImageOptions, reporter: Reporter) -> BuildResult:
    run_id = new_run_id()
    run_dir = spec.output_dir / "runs" / run_id
    reporter.step(
        f"wheelbuild {spec.recipe.name} for torch {spec.variant}, archs {spec.archs} (run {run_id})"
    )

    client = engine.connect()
    if swept := engine.sweep_orphans(client):
        reporter.info(f"removed {swept} container(s) left by earlier runs whose process is gone")
    gpus = engine.resolve_gpus(client, spec.gpus)
    if not gpus and spec.gpus.value == "auto":
        reporter.info("no NVIDIA runtime in the Docker daemon: building without a GPU (compiling needs none)")

    inputs = image_inputs(client, options)
    compiler = _compiler(spec, inputs)  # before any work: no image build for an impossible variant
    source = prepare_source(spec.recipe.source, reporter.info)

    reporter.step("image")
    image = ensure_image(client, options, reporter)
    available = engine.image_pythons(client, image.tag)
    pythons = spec.pythons or tuple(available)
    missing = [p for p in pythons if p not in available]
    if missing or not pythons:
        raise BadArgument(
            f"the image has no interpreter for {', '.join(missing) or 'any Python'} "
            f"(it has {', '.join(available) or 'none'})",
            "pick --python from those, or build on a base image that has it",
        )

    memory = spec.memory or default_memory(host_memory_available())
    cpus = spec.cpus or float(len(os.sched_getaffinity(0)))
    plan = plan_build(
        memory=memory,
        cpus=cpus,
        archs=len(spec.archs),
        job_memory_per_arch=spec.recipe.job_memory_per_arch,
        max_jobs=spec.max_jobs,
        nvcc_threads=spec.nvcc_threads,
    )
    reporter.step(f"plan: {format_bytes(plan.memory)} memory, {plan.cpus:g} CPUs")
    for reason in plan.reasons:
        reporter.info(reason)

    run_dir.mkdir(parents=True, exist_ok=True)
    config = engine.AttemptConfig(
        run_id=run_id,
        attempt=1,
        image=image.tag,
        project_dir=source.project_dir,
        package=source.package,
        identifiers=tuple(f"{p}-manylinux_x86_64" for p in pythons),
        memory=plan.memory,
        cpus=plan.cpus,
        gpus=gpus,
        build_env=spec.recipe.build_env(spec.archs, plan.max_jobs, plan.nvcc_threads),
        cuda_home=compiler.home,
        torch_requirement=spec.variant.requirement,
        torch_minor=spec.variant.torch_minor,
        torch_cuda_major=spec.variant.cuda_major,
        torch_index_url=spec.variant.index_url,
        output_dir=run_dir,
        log_path=run_dir / "build.log",
    )
    reporter.step(f"attempt 1: cibuildwheel for {', '.join(pythons)} in {image.tag} (log: {config.log_path})")
    try:
        result = engine.run_attempt(client, config, reporter.log)
    except KeyboardInterrupt:
        removed = engine.interrupt_cleanup(client, run_id)
        raise Interrupted(
            f"interrupted; stopped cibuildwheel and removed {removed} container(s) of run {run_id}",
            "nothing of this run is left running; rerun the same command to start again",
        ) from None
    engine.raise_for_failure(result)

    wheels = tuple(_inspect(path) for path in result.wheels)
    report = run_dir / "build-report.json"
    report.write_text(
        json.dumps(
            {
                "run_id": run_id,
                "recipe": {
                    "name": spec.recipe.name,
                    "version": spec.recipe.version,
                    "source": asdict(spec.recipe.source),
                },
                "torch": {
                    "variant": str(spec.variant),
                    "index_url": _redact(spec.variant.index_url),
                },
                "archs": list(spec.archs),
                "pythons": list(pythons),
                "image": {"tag": image.tag, "id": image.id, "labels": image.labels},
                "plan": asdict(plan),
                "attempts": [
                    {
                        "attempt": result.attempt,
                        "returncode": result.returncode,
                        "duration_s": round(result.duration_s, 1),
                        "memory_limit_seen": result.memory_limit_seen,
                    }
                ],
                "wheels": [
                    {
                        "file": w.path.name,
                        "sha256": w.sha256,
                        "size": w.size,
                        "cuda": {
                            m: {"sass": sorted(a.sass), "ptx": sorted(a.ptx)} for m, a in w.archs.items()
                        },
                    }
                    for w in wheels
                ],
            },
            indent=2,
        )
        + "\n"
    )
    return BuildResult(run_id=run_id, run_dir=run_dir, image=image, plan=plan, wheels=wheels, report=report)


def _redact(url: str) -> str:
    """Drop credentials from a URL before it reaches a log or a report."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
