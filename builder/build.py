"""A build, as the pipeline reads: spec -> plan -> image -> attempt -> stamp -> check -> report."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import tenacity

from . import cgroup, cuda_redist, publish, report_html, results
from .abi import AbiReport, check_wheel_abi
from .attempt import AttemptConfig, AttemptResult, Failed, OOMKilled, Outcome, classify, shared_cache_env
from .calibration import load_calibrated
from .check import Expectation, check_wheel, first_problem
from .cuda_redist import CudaLayer
from .errors import (
    CompilerUnavailable,
    Interrupted,
    OutOfMemory,
    TorchIndexUnreachable,
    WheelbuildError,
)
from .gate import GateResult, plan_gate
from .gate import failure as gate_failure
from .gate import read_result as read_gate
from .image import IMAGES_DIR, NO_CUDA12, Image, ImageInputs, production_base
from .matrix import Cell
from .planner import (
    Plan,
    admission_costs,
    container_limit,
    explain_container_limit,
    plan_build,
    with_admission,
)
from .ports import Engine, GateJob, ImageIds, Images
from .pythons import PythonChoice, choose_pythons, requires_python_of, torch_python_tags
from .recipes import Recipe, resolve_recipe, source_location, source_pin
from .report import (
    REPORT_NAME,
    BuildReport,
    CheckRecord,
    GateRecord,
    GateSkipped,
    ImageRecord,
    PlanRecord,
    RecipeRecord,
    Reused,
    SourceRecord,
    TorchRecord,
    WheelRecord,
    attempt_record,
    read_report,
    write_report,
)
from .reporter import Reporter
from .results import source_key
from .secrets import redact_url
from .sources import PreparedSource, cache_dir, prepare_source, resolve_lookup
from .spec import BuildSpec, Resources, parse_archs
from .stamp import stamp_wheel
from .units import format_bytes
from .variants import (
    CUDA13_VERSION,
    CudaCompiler,
    TorchVariant,
    arch_range,
    compiler_for,
    parse_variant,
    supports_arch,
)
from .wheels import WheelInfo, inspect_wheel


@dataclass(frozen=True)
class ImageOptions:
    base_image: str | None  # None: production manylinux_2_28 pinned by cibuildwheel
    ca_bundle: Path | None
    cuda12_image: str | None = None
    cuda12_version: str = "12.8"
    # Add the CUDA 12 layer made from NVIDIA's pinned redist archives (what a cu12x build needs,
    # unless cuda12_image names an NVIDIA devel image instead).
    cuda12_redist: bool = False

    def for_variant(self, variant: TorchVariant) -> ImageOptions:
        """The options a build of `variant` needs: cu12x gets the CUDA 12 layer without a flag."""
        wants = variant.cuda_major == 12 and self.cuda12_image is None
        return replace(self, cuda12_redist=self.cuda12_redist or wants)


@dataclass(frozen=True)
class BuildResult:
    run_id: str
    run_dir: Path
    image: Image
    plan: Plan | None  # None when the wheels were reused from an earlier build
    wheels: tuple[WheelInfo, ...]
    report: Path
    gate: Mapping[str, str]  # wheel file name -> the import gate's one-line summary

    def gate_summary(self, wheel: WheelInfo) -> str:
        return self.gate.get(wheel.path.name, "not run (--no-gate): publish checks it statically only")


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def image_inputs(images: ImageIds, options: ImageOptions) -> ImageInputs:
    base = options.base_image or production_base()
    # A base pinned by digest is its own identity; a local tag is identified by its image ID.
    base_id = "" if "@sha256:" in base else images.local_image_id(base)
    layer = cuda12_layer() if options.cuda12_redist and options.cuda12_image is None else None
    return ImageInputs.load(
        base_image=base,
        base_id=base_id,
        ca_bundle=options.ca_bundle,
        cuda12_image=options.cuda12_image,
        cuda12_version=options.cuda12_version,
        cuda12_layer=layer,
    )


def cuda12_layer() -> CudaLayer:
    """The CUDA 12 layer's pins: images/cuda-12.8-redist.toml, or the file WHEELBUILD_CUDA12_PINS names."""
    return cuda_redist.load_layer(cuda_redist.pins_path(IMAGES_DIR, os.environ))


def ensure_cuda12_layer(images: Images, inputs: ImageInputs, reporter: Reporter) -> None:
    """Make the CUDA 12 layer's image when the build image needs it and lacks it: the archives
    are downloaded once per host (cached by sha256), verified and unpacked. An unreachable
    server fails here, before the sdist, the image or any container."""
    layer = inputs.cuda12_layer
    if layer is None or images.local_image_id(inputs.tag) or images.local_image_id(layer.tag):
        return
    reporter.step(f"CUDA {layer.release} compiler layer from NVIDIA's redistributable archives")
    tree = cuda_redist.prepare_tree(layer, cuda_redist.redist_url(os.environ), cache_dir(), reporter.info)
    images.ensure_cuda_layer_image(layer, tree, reporter.log)


def ensure_image(images: Images, inputs: ImageInputs, reporter: Reporter) -> Image:
    ensure_cuda12_layer(images, inputs, reporter)
    image = images.ensure_image(inputs, reporter.log)
    reporter.info(f"image {image.tag} ({'reused' if image.reused else 'built'})")
    return image


def toolkit_for(variant: TorchVariant, cuda12_version: str = "12.8") -> str:
    """The CUDA version that compiles for `variant` (a calibrated profile is per toolkit)."""
    return CUDA13_VERSION if variant.cuda_major == 13 else cuda12_version


def compiler_in_image(variant: TorchVariant, archs: tuple[int, ...], inputs: ImageInputs) -> CudaCompiler:
    """The image's compiler for this variant and these archs (one table decides: variants.ARCH_SUPPORT)."""
    cuda12 = None
    if inputs.cuda12_image != NO_CUDA12:
        cuda12 = CudaCompiler.cuda12(inputs.cuda12_version)
    compiler = compiler_for(variant, archs, cuda12)
    if compiler is not None:
        return compiler
    same_major = [c for c in (compiler_for(variant, (), cuda12),) if c is not None]
    if not same_major:
        raise CompilerUnavailable(
            f"torch {variant} needs a CUDA {variant.cuda_major}.x compiler; the image has only CUDA 13.1, "
            "and torch refuses an nvcc of another major",
            "let wheelbuild add the CUDA 12 layer from NVIDIA's archives (the default for cu12x), "
            "or pass --cuda12-image nvidia/cuda:12.8.1-devel-rockylinux8@sha256:<digest>",
        )
    compiler = same_major[0]
    missing = [a for a in archs if not supports_arch(compiler, a)]
    raise CompilerUnavailable(
        f"torch {variant} builds with CUDA {compiler.version}, which cannot compile "
        + ", ".join(f"sm_{a} (needs {arch_range(a)})" for a in missing),
        "drop those archs from --archs, or pick a torch variant whose CUDA compiles them",
    )


@dataclass(frozen=True)
class PythonConstraints:
    torch_tags: frozenset[str] | None  # the Pythons the variant's torch has wheels for; None: unknown
    requires_python: str | None  # the package's

    def choose(self, image: tuple[str, ...], spec: BuildSpec) -> PythonChoice:
        return choose_pythons(
            image,
            self.torch_tags,
            self.requires_python,
            spec.pythons,
            package=spec.recipe.name,
            torch_version=spec.variant.torch_version,
            index_url=spec.variant.index_url,
        )


def python_constraints(spec: BuildSpec, source: PreparedSource, reporter: Reporter) -> PythonConstraints:
    """Which Pythons can work at all: those the variant's torch has a wheel for on its index (read
    once, cached for a day) and the package's Requires-Python allows. Pythons asked for by name
    that cannot work fail here, before any container. torch_tags is None when the index could not
    be read and the Pythons were named (the install will tell)."""
    requires_python = requires_python_of(source.project_dir / source.package)
    try:
        torch_tags: frozenset[str] | None = torch_python_tags(
            spec.variant.index_url, spec.variant.torch_version, cache=cache_dir(), on_line=reporter.info
        )
    except TorchIndexUnreachable as unreachable:
        if not spec.pythons:
            raise
        reporter.warn(f"{unreachable.cause}; building for the Pythons named without checking torch's wheels")
        torch_tags = None
    constraints = PythonConstraints(torch_tags, requires_python)
    if spec.pythons:
        # The image is not known yet: offer what torch has wheels for.
        offered = {t for t in torch_tags or () if re.fullmatch(r"cp3\d+", t)} | set(spec.pythons)
        constraints.choose(tuple(sorted(offered, key=lambda t: int(t[3:]))), spec)
    return constraints


GATE_MEMORY = 6 * 1024**3  # pip installing torch and importing it; a smoke test's small tensors

# Bumped whenever what happens to a wheel after cibuildwheel changes, so that results stored
# by an earlier wheelbuild are not reused as if they had been through it.
POSTPROCESS = "stamp+check+gate-1"


def expectation(spec: BuildSpec) -> Expectation:
    return Expectation(archs=spec.archs, variant=spec.variant)


def stamp_and_check(
    paths: tuple[Path, ...], spec: BuildSpec
) -> tuple[tuple[WheelInfo, ...], list[WheelbuildError]]:
    """Label and pin each built wheel (METADATA and RECORD rewritten together), then judge it."""
    wheels = tuple(inspect_wheel(stamp_wheel(path, spec.variant)) for path in paths)
    problems = [problem for wheel in wheels for problem in check_wheel(wheel, expectation(spec))]
    return wheels, problems


def inputs_key(spec: BuildSpec, inputs: ImageInputs, pythons: tuple[str, ...]) -> str:
    """The content hash of everything that decides what a build's wheels hold: source, image
    inputs, torch variant and index, archs, Pythons, the build's env, the tools (not MAX_JOBS or
    NVCC_THREADS, which change how fast, not what)."""
    return results.result_key(
        source=source_key(spec.recipe.source),
        image_inputs=inputs.sha256,
        variant=str(spec.variant),
        index_url=spec.variant.index_url,
        archs=spec.archs,
        pythons=pythons,
        env=spec.recipe.build_env(spec.archs, 1, 1, spec.variant.label),
        tools={
            "wheelbuild": f"{_version()}+{results.code_digest(Path(__file__).resolve().parent)[:16]}",
            "cibuildwheel": _version("cibuildwheel"),
            "postprocess": POSTPROCESS,
        },
    )


def cell_spec(cell: Cell, torch_index_url: str | None, output_dir: Path = Path(".")) -> BuildSpec:
    """What a nightly cell builds: `wheelbuild build` with the cell's arguments, gate included."""
    return BuildSpec(
        recipe=resolve_lookup(resolve_recipe(cell.package, version=cell.version), lambda _line: None),
        variant=parse_variant(cell.torch, torch_index_url),
        archs=parse_archs(cell.archs),
        pythons=(cell.python,) if cell.python else (),
        output_dir=output_dir,
    )


def cell_inputs_key(cell: Cell, options: ImageOptions, torch_index_url: str | None, images: ImageIds) -> str:
    """The inputs key a build of *cell* (one named Python) will have. *images* is only asked
    when the base is a local tag (a pinned production base is its own identity)."""
    spec = cell_spec(cell, torch_index_url)
    inputs = image_inputs(images, options.for_variant(spec.variant))
    return inputs_key(spec, inputs, spec.pythons)


def unpublished_cells(
    cells: tuple[Cell, ...], tree: Path, options: ImageOptions, torch_index_url: str | None, images: ImageIds
) -> tuple[Cell, ...]:
    """The cells whose build inputs no wheel in *tree* was built from: a quiet night (no new
    source, image, torch or tool) leaves none to build."""
    published = publish.published_inputs(tree)
    if not published:
        return cells
    return tuple(c for c in cells if cell_inputs_key(c, options, torch_index_url, images) not in published)


def plan_for(
    recipe: Recipe,
    archs: tuple[int, ...],
    resources: Resources,
    root: Path = Path("/"),
    toolkit: str = CUDA13_VERSION,
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
    if cpus is None:
        cpus = own.effective_cpus or float(len(os.sched_getaffinity(0)))
    return plan_build(
        budget=budget,
        cpus=cpus,
        archs=len(archs),
        model=load_calibrated(cache_dir(), recipe.name, recipe.version, toolkit) or recipe.memory_model,
        max_jobs=resources.max_jobs,
        nvcc_threads=resources.nvcc_threads,
        budget_reason=why,
    )


def run_build(spec: BuildSpec, options: ImageOptions, reporter: Reporter, engine: Engine) -> BuildResult:
    run_id = new_run_id()
    run_dir = spec.output_dir / "runs" / run_id
    reporter.step(
        f"wheelbuild {spec.recipe.name} for torch {spec.variant}, archs {spec.archs} (run {run_id})"
    )

    # A release the recipe does not pin is found on the index and pinned now, before any work.
    spec = replace(spec, recipe=resolve_lookup(spec.recipe, reporter.info))
    engine.start_reaper(run_id)  # removes the run's containers if this process is killed
    if swept := engine.sweep_orphans():
        reporter.info(f"removed {swept} container(s) left by earlier runs whose process is gone")
    gpus = engine.resolve_gpus(spec.gpus)
    if not gpus and spec.gpus.value == "auto":
        reporter.info("no NVIDIA runtime in the Docker daemon: building without a GPU (compiling needs none)")

    inputs = image_inputs(engine, options.for_variant(spec.variant))
    # Before any work: no download and no image build for an impossible variant or arch.
    compiler = compiler_in_image(spec.variant, spec.archs, inputs)
    ensure_cuda12_layer(engine, inputs, reporter)
    source = prepare_source(spec.recipe.source, reporter.info)
    constraints = python_constraints(spec, source, reporter)

    reporter.step("image")
    image = ensure_image(engine, inputs, reporter)
    choice = constraints.choose(tuple(engine.image_pythons(image.tag)), spec)
    for left in choice.left_out:
        reporter.info(f"not building for {left}")
    pythons = choice.pythons

    key = inputs_key(spec, inputs, pythons)
    store = cache_dir() / "results"
    reused = None if spec.rebuild else results.lookup(store, key)
    if reused:
        run_dir.mkdir(parents=True, exist_ok=True)
        for wheel in reused:
            shutil.copy2(wheel, run_dir / wheel.name)
        report = run_dir / REPORT_NAME
        earlier = read_report(store / key / REPORT_NAME)
        from_run = earlier.run_id or "?"
        write_report(report, replace(earlier, run_id=run_id, inputs_key=key, reused=Reused(key, from_run)))
        report_html.write_beside(report)
        reporter.step(
            f"unchanged inputs: reusing the wheel(s) of run {from_run} (key {key[:12]}; --rebuild builds anew)"
        )
        wheels = tuple(inspect_wheel(run_dir / w.name) for w in reused)
        gate = {
            g.wheel: f"passed in run {from_run}"
            for g in (earlier.gate if isinstance(earlier.gate, tuple) else ())
            if g.passed
        }
        return BuildResult(
            run_id=run_id, run_dir=run_dir, image=image, plan=None, wheels=wheels, report=report, gate=gate
        )

    plan = plan_for(spec.recipe, spec.archs, spec.resources, toolkit=compiler.version)
    if spec.admission:
        plan = with_admission(plan, keep_jobs=spec.resources.max_jobs is not None)
    reporter.step(f"plan: {format_bytes(plan.memory)} memory, {plan.cpus:g} CPUs")
    for reason in plan.reasons:
        reporter.info(reason)

    run_dir.mkdir(parents=True, exist_ok=True)

    def attempt_config(number: int, current: Plan) -> AttemptConfig:
        return AttemptConfig(
            run_id=run_id,
            attempt=number,
            image=image.tag,
            project_dir=source.project_dir,
            package=source.package,
            identifiers=tuple(f"{p}-manylinux_x86_64" for p in pythons),
            memory=current.memory,
            cpus=current.cpus,
            gpus=gpus,
            build_env=spec.recipe.build_env(
                spec.archs, current.max_jobs, current.nvcc_threads, spec.variant.label
            ),
            cuda_home=compiler.home,
            torch=spec.variant,
            output_dir=run_dir,
            log_path=run_dir / "build.log",
            pass_env=shared_cache_env(os.environ),
            admission=None
            if current.admission_budget is None
            else (current.admission_budget, json.dumps(admission_costs(current), separators=(",", ":"))),
        )

    try:
        attempts = _attempts(engine, plan, attempt_config, reporter)
    except KeyboardInterrupt:
        removed = engine.interrupt_cleanup(run_id)
        raise Interrupted(
            f"interrupted; stopped cibuildwheel and removed {removed} container(s) of run {run_id}",
            "nothing of this run is left running; rerun the same command to start again",
        ) from None
    plan, result = attempts[-1]

    reporter.step("stamp and check")
    wheels, problems = stamp_and_check(result.wheels, spec)
    abi_reports = {w.path.name: check_wheel_abi(w.path) for w in wheels}
    problems += [error for abi in abi_reports.values() for error in abi.errors()]
    gates: tuple[GateResult, ...] = ()
    if spec.gate and not problems:
        try:
            gates = import_gate(engine, wheels, abi_reports, spec, options, gpus, run_id, run_dir, reporter)
        except KeyboardInterrupt:
            removed = engine.interrupt_cleanup(run_id)
            raise Interrupted(
                f"interrupted during the import gate; removed {removed} container(s) of run {run_id}",
                f"the built wheels are in {run_dir}, not yet loaded; rerun the same command",
            ) from None
        problems += [error for error in map(gate_failure, gates) if error is not None]
    report = run_dir / REPORT_NAME
    write_report(
        report,
        BuildReport(
            run_id=run_id,
            inputs_key=key,
            recipe=RecipeRecord(
                name=spec.recipe.name,
                version=spec.recipe.version,
                source=SourceRecord(
                    location=redact_url(source_location(spec.recipe.source)),
                    sha256=source_pin(spec.recipe.source),
                ),
            ),
            torch=TorchRecord(variant=str(spec.variant), index_url=redact_url(spec.variant.index_url)),
            archs=spec.archs,
            pythons=pythons,
            image=ImageRecord(tag=image.tag, id=image.id, labels=image.labels),
            plan=PlanRecord.of(plan),
            attempts=tuple(attempt_record(p, r, attempts[:i]) for i, (p, r) in enumerate(attempts)),
            wheels=tuple(WheelRecord.of(w) for w in wheels),
            checks=tuple(CheckRecord(error=type(p).__name__, cause=p.cause) for p in problems),
            abi=tuple(abi.to_json() for abi in abi_reports.values()),
            gate=tuple(GateRecord.of(g) for g in gates) if spec.gate else GateSkipped(),
        ),
    )
    report_html.write_beside(report)  # build-report.html: the same record as a picture
    if problem := first_problem(problems):
        # The wheels stay in the run directory for a look; they are neither stored nor reused.
        problem.details = f"{problem.details}\nwheels and report kept in {run_dir}".strip()
        raise problem
    if spec.gate:  # a wheel that was never loaded is not stored as done
        results.save(store, key, tuple(w.path for w in wheels), report)
    return BuildResult(
        run_id=run_id,
        run_dir=run_dir,
        image=image,
        plan=plan,
        wheels=wheels,
        report=report,
        gate={g.wheel: g.summary for g in gates},
    )


def import_gate(
    engine: Engine,
    wheels: tuple[WheelInfo, ...],
    abi_reports: Mapping[str, AbiReport],
    spec: BuildSpec,
    options: ImageOptions,
    gpus: bool,
    run_id: str,
    run_dir: Path,
    reporter: Reporter,
) -> tuple[GateResult, ...]:
    """Each wheel installed with what it declares (torch from the variant's index) into a fresh
    venv, in a fresh container of the base image, and every extension module and top-level
    package imported; the recipe's smoke test where a GPU is."""
    base = options.base_image or production_base()
    reporter.step(f"import gate: each wheel installed and imported in a fresh {base} container")
    index = spec.variant.index_url
    cache_key = hashlib.sha256(f"{redact_url(index)} {spec.variant.requirement}".encode()).hexdigest()[:16]
    found = []
    for wheel in wheels:
        abi = abi_reports[wheel.path.name]
        plan = plan_gate(wheel.path, abi, spec.archs, spec.recipe.smoke_test, spec.recipe.import_packages)
        job = GateJob(
            run_id=run_id,
            image=base,
            wheel=wheel.path,
            spec=plan.to_json(spec.variant.requirement),
            torch_index_url=index,
            torch_cache_key=cache_key,
            ca_bundle=options.ca_bundle,
            gpus=gpus,
            memory=GATE_MEMORY,
            log_path=run_dir / "gate.log",
            images_dir=IMAGES_DIR,
        )
        output, tail = engine.run_gate(job, reporter.log)
        answer = output or {
            "python": plan.python,
            "install_error": f"the gate's container ended without an answer:\n{tail}",
        }
        result = read_gate(wheel.path.name, answer, abi)
        if result.smoke and result.smoke.get("status") == "skipped" and not gpus:
            # It ran (its imports are checked too) and found no GPU: say why there is none.
            reason = "the Docker daemon has no NVIDIA runtime, so no GPU reaches the gate"
            result = replace(result, smoke={**result.smoke, "reason": reason})
        reporter.info(f"{wheel.path.name}: {result.summary}")
        found.append(result)
    return tuple(found)


def _attempts(
    engine: Engine, plan: Plan, configure: Callable[[int, Plan], AttemptConfig], reporter: Reporter
) -> list[tuple[Plan, AttemptResult]]:
    """Attempts until one succeeds: an OOM kill retries at half the parallelism, keeping every
    finished unit (sccache has them, so the retry resumes rather than restarts). Attempt n runs
    plan.halved(n - 1). Any other failure is final, and so is an OOM kill of the smallest plan."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_result(lambda outcome: isinstance(outcome, OOMKilled)),
        stop=lambda state: plan.halved(state.attempt_number) is None,
        before_sleep=lambda state: _say_retry(state, plan.halved(state.attempt_number), reporter),
        retry_error_callback=lambda state: state.outcome,  # stopped: the last outcome decides
    )
    done: list[tuple[Plan, Outcome]] = []
    for attempt in retrying:
        number = attempt.retry_state.attempt_number
        current = plan.halved(number - 1)
        assert current is not None  # the stop ends the loop first
        done.append((current, _attempt(engine, number, current, configure(number, current), reporter)))
        attempt.retry_state.set_result(done[-1][1])
    last, outcome = done[-1]
    if isinstance(outcome, OOMKilled):
        raise OutOfMemory(
            f"even the smallest plan (MAX_JOBS={last.max_jobs}, NVCC_THREADS={last.nvcc_threads}) was "
            f"OOM-killed in {format_bytes(last.memory)} after {len(done)} attempt(s)",
            f"give the build more memory than {format_bytes(last.memory)} (--memory), or fewer archs",
            details=outcome.error.details,
        )
    if isinstance(outcome, Failed):
        raise outcome.error
    return [(p, o.result) for p, o in done]


def _attempt(engine: Engine, number: int, plan: Plan, config: AttemptConfig, reporter: Reporter) -> Outcome:
    reporter.step(
        f"attempt {number}: MAX_JOBS={plan.max_jobs}, NVCC_THREADS={plan.nvcc_threads}, "
        f"{format_bytes(plan.memory)} (log: {config.log_path})"
    )
    with reporter.build_view(plan.memory) as view:
        return classify(engine.run_attempt(config, view.line, view.memory))


def _say_retry(state: tenacity.RetryCallState, smaller: Plan | None, reporter: Reporter) -> None:
    assert state.outcome is not None and smaller is not None
    killed: OOMKilled = state.outcome.result()
    reporter.warn(
        f"attempt {state.attempt_number} was OOM-killed ({'; '.join(killed.result.oom.fired)}); "
        f"retrying at MAX_JOBS={smaller.max_jobs}, NVCC_THREADS={smaller.nvcc_threads}, "
        "keeping every unit that finished"
    )


def _version(package: str = "wheelbuild") -> str:
    return importlib.metadata.version(package)
