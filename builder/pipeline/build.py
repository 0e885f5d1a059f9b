"""`wheelbuild build`, as the pipeline reads: preflight (spec pinned, image inputs, compiler,
source, Pythons) -> image -> stored result? -> plan -> attempts (tenacity: an OOM kill retries at
half the parallelism) -> stamp and check -> import gate -> report -> ready to publish.

What build shares with calibrate (image inputs, image, compiler, plan) is preflight.py's; the
report's format is report/build_report.py's; the nightly's matrix against what is published is nightly/cell_specs.py's.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from ..attempt.config import AttemptConfig, network_while_building, shared_cache_env, wheel_cache_bound
from ..attempt.outcome import AttemptResult
from ..engine.ports import Engine
from ..errors import Interrupted
from ..image.options import ImageOptions, image_inputs
from ..plan.admission import admission_file
from ..plan.learned import learned_path, remember
from ..plan.planner import Plan, ninja_order_file, over_budget
from ..progress.console import Console
from ..provenance.statement import STATEMENT_SUFFIX
from ..recipes import source_location, source_pin
from ..report import page as report_html
from ..report.attempt_records import (
    GATE_PHASE,
    TORCH_RANGE_PHASE,
    AttemptRecord,
    PhaseRecord,
    PlanRecord,
    attempt_record,
)
from ..report.build_report import (
    REPORT_NAME,
    Abi3Record,
    BuildReport,
    CheckRecord,
    ContractRecord,
    GateRecord,
    GateSkipped,
    ImageRecord,
    RecipeRecord,
    Reused,
    SourceRecord,
    TorchRecord,
    WheelRecord,
    read_report,
    write_report,
)
from ..secrets import redact_url
from ..spec.build_spec import BuildSpec, PinMode, format_archs
from ..spec.pythons import admitted_by
from ..spec.sources import cache_dir, source_date
from ..units import format_bytes
from ..wheel.abi import check_wheel_abi
from ..wheel.abi3 import Abi3Use, abi3_uses, unserved_problem
from ..wheel.contents import inspect_wheel
from ..wheel.gate import GateResult, summary_of
from ..wheel.gate import failure as gate_failure
from . import results
from .attempts import attempts_until_built
from .check import first_problem, stamp_and_check
from .import_gate import GateRun, import_gate
from .prebuild import Prebuilt, constraints, plan_of, prebuild, torch_chosen
from .preflight import (
    arch_note,
    compiled_archs,
    ensure_cuda12_layer,
    ensure_image,
    new_run_id,
)
from .range_gate import pinned_to_ranges, torch_ranges
from .results import inputs_key
from .stages import BuildResult, Checked, Ready, Run
from .statements import build_facts, run_redactor, write_statements

__all__ = ["BuildResult", "RunBuild", "run_build", "stamp_and_check"]


# ---------------------------------------------------------------------------------------------
# The pipeline


def run_build(spec: BuildSpec, options: ImageOptions, console: Console, engine: Engine) -> BuildResult:
    """Build *spec*'s wheels, check and gate them, write the report: the pipeline, step by step,
    with a status line at least every 15 s however long a step stays silent."""
    with console.heartbeat():
        return _pipeline(spec, options, console, engine)


def _pipeline(spec: BuildSpec, options: ImageOptions, console: Console, engine: Engine) -> BuildResult:
    run, prebuilt = _start(spec, options, console, engine)
    run, ready = _preflight(run, prebuilt, console, engine)
    store = cache_dir() / "results"
    stored = None if run.spec.rebuild else results.lookup(store, ready.key)
    if stored:
        return _reuse(run, ready, store, stored, console)
    plan = _plan(run.spec, ready, console)
    run.dir.mkdir(parents=True, exist_ok=True)
    attempts = _run_attempts(run, ready, plan, console, engine)
    zero = time.monotonic() - attempts[-1][1].duration_s  # when the last attempt began
    if learned := _remember(run, ready, attempts[-1]):
        console.info(f"model for the next plan: {learned}")
    checked = _check_and_gate(run, ready, attempts[-1][1].wheels, console, engine, zero)
    checked = _torch_range(run, ready, checked, console, engine, zero)
    uses = abi3_uses(
        [w.path.name for w in checked.wheels], ready.pythons, dict(attempts[-1][1].reused_wheels)
    )
    for use in uses:
        reused = f"; {', '.join(use.reused_under)} reused it" if use.reused_under else ""
        console.info(
            f"{use.wheel}: one wheel for every Python ({use.tag}), built under {use.built_under}{reused}"
        )
    report = run.dir / REPORT_NAME
    write_report(report, _report(run, ready, attempts, checked, uses))
    report_html.write_beside(report)  # build-report.html: the same record as a picture
    # Beside each wheel, what went into it: <wheel>.intoto.json (statements.py)
    facts = build_facts(run.spec, ready.inputs, ready.key, ready.pythons, ready.date, attempts[-1], run.id)
    write_statements(checked.wheels, facts, run_redactor(run.spec, os.environ))
    return _ready_to_publish(run, ready, attempts[-1][0], checked, store, report, uses)


def _start(spec: BuildSpec, options: ImageOptions, console: Console, engine: Engine) -> tuple[Run, Prebuilt]:
    """A run id, every check before a container (prebuild.py, which `plan` runs too), then the
    run's reaper started, orphans swept, and the GPU question asked."""
    run_id = new_run_id()
    torch = f"{spec.variant.tag} (the newest release)" if spec.variant.newest else str(spec.variant)
    archs = format_archs(spec.archs, spec.ptx)
    console.step(f"wheelbuild {spec.recipe.name} for torch {torch}, archs {archs} (run {run_id})")
    prebuilt = prebuild(spec, options, console, engine)
    engine.start_reaper(run_id)  # removes the run's containers if this process is killed
    if swept := engine.sweep_orphans():
        console.info(f"removed {swept} container(s) left by earlier runs whose process is gone")
    gpus = engine.resolve_gpus(prebuilt.spec.gpus)
    if not gpus and spec.gpus.value == "auto":
        console.info("no NVIDIA runtime in the Docker daemon: building without a GPU (compiling needs none)")
    return Run(prebuilt.spec, options, run_id, spec.output_dir / "runs" / run_id, gpus), prebuilt


def _preflight(run: Run, prebuilt: Prebuilt, console: Console, engine: Engine) -> tuple[Run, Ready]:
    """After the checks: the image's inputs, the CUDA 12 layer, the image, and the torch release
    and Pythons the image's interpreters allow (when none were named)."""
    spec, index, requires_python = run.spec, prebuilt.index, prebuilt.requires_python
    inputs = image_inputs(engine, run.options.for_variant(spec.variant))
    started = time.monotonic()
    ensure_cuda12_layer(engine, inputs, console)
    console.step("image")
    image = ensure_image(engine, inputs, console)
    image_s = round(time.monotonic() - started, 1)
    in_image = tuple(engine.image_pythons(image.tag))
    torch_why = prebuilt.torch_why
    if torch_why is None:
        spec, torch_why = torch_chosen(spec, index, admitted_by(requires_python, in_image), console)
    choice = constraints(spec, index, requires_python).choose(in_image, spec)
    for left in choice.left_out:
        console.info(f"not building for {left}")
    key = inputs_key(spec, inputs, choice.pythons)
    source = prebuilt.source
    ready = Ready(
        inputs, prebuilt.compiler, source, image, choice.pythons, key, prebuilt.survey, prebuilt.switches,
        torch_why, index, source_date(source),
        network_while_building(spec.build_network, spec.dist, os.environ), image_s,
    )  # fmt: skip
    return replace(run, spec=spec), ready


def _reuse(run: Run, ready: Ready, store: Path, stored: list[Path], console: Console) -> BuildResult:
    """Unchanged inputs: the stored wheels copied into this run, with the stored report as this
    run's (its attempts are the earlier run's, and it says so)."""
    run.dir.mkdir(parents=True, exist_ok=True)
    for wheel in stored:
        shutil.copy2(wheel, run.dir / wheel.name)
        statement = wheel.with_name(wheel.name + STATEMENT_SUFFIX)  # the build's that made it
        if statement.is_file():
            shutil.copy2(statement, run.dir / statement.name)
    report = run.dir / REPORT_NAME
    earlier = read_report(store / ready.key / REPORT_NAME)
    from_run = earlier.run_id or "?"
    write_report(
        report, replace(earlier, run_id=run.id, inputs_key=ready.key, reused=Reused(ready.key, from_run))
    )
    report_html.write_beside(report)
    console.step(
        f"unchanged inputs: reusing the wheel(s) of run {from_run} (key {ready.key[:12]}; --rebuild builds anew)"
    )
    gates = earlier.gate if isinstance(earlier.gate, tuple) else ()
    passed = {g.wheel for g in gates if g.passed} - {g.wheel for g in gates if not g.passed}
    return BuildResult(
        run_id=run.id,
        run_dir=run.dir,
        image=ready.image,
        plan=None,
        wheels=tuple(inspect_wheel(run.dir / w.name) for w in stored),
        report=report,
        gate={wheel: f"passed in run {from_run}" for wheel in passed},
        abi3=tuple(Abi3Use(a.wheel, a.tag, a.built_under, a.reused_under) for a in earlier.abi3 or ()),
        ranges=earlier.torch_range or (),
    )


def _plan(spec: BuildSpec, ready: Ready, console: Console) -> Plan:
    """The plan (prebuild.plan_of, which `plan` prints), said; a peak over the limit a warning."""
    plan = plan_of(spec, ready.compiler.version, ready.survey)
    console.step(f"plan: {format_bytes(plan.memory)} memory, {plan.cpus:g} CPUs")
    for reason in (*plan.reasons, arch_note(spec, ready.survey)):
        if reason:
            console.info(reason)
    if over := over_budget(plan):
        console.warn(over)
    return plan


def _run_attempts(
    run: Run, ready: Ready, plan: Plan, console: Console, engine: Engine
) -> list[tuple[Plan, AttemptResult]]:
    """The attempts (attempts.py); Ctrl-C stops cibuildwheel and removes the run's containers."""
    with _interruptible(
        engine,
        run,
        "; stopped cibuildwheel and",
        "nothing of this run is left running; rerun the same command to start again",
    ):
        return attempts_until_built(
            engine, plan, lambda number, current: _attempt_config(run, ready, number, current), console
        )


@contextmanager
def _interruptible(engine: Engine, run: Run, during: str, remedy: str) -> Iterator[None]:
    """Ctrl-C in the block: the run's containers removed, and said (Interrupted, exit 130)."""
    try:
        yield
    except KeyboardInterrupt:
        removed = engine.interrupt_cleanup(run.id)
        raise Interrupted(
            f"interrupted{during} removed {removed} container(s) of run {run.id}", remedy
        ) from None


def _attempt_config(run: Run, ready: Ready, number: int, plan: Plan) -> AttemptConfig:
    spec = run.spec
    return AttemptConfig(
        run_id=run.id,
        attempt=number,
        image=ready.image.tag,
        project_dir=ready.source.project_dir,
        package=ready.source.package,
        identifiers=tuple(f"{p}-manylinux_x86_64" for p in ready.pythons),
        memory=plan.memory,
        cpus=plan.cpus,
        gpus=run.gpus,
        # SOURCE_DATE_EPOCH: the build backend and auditwheel date their zip entries by it too.
        build_env={
            **spec.recipe.build_env(
                spec.archs, plan.max_jobs, plan.nvcc_threads, spec.variant.label, ptx=spec.ptx
            ),
            "SOURCE_DATE_EPOCH": str(ready.date.epoch),
        },
        cuda_home=ready.compiler.home,
        torch=spec.variant,
        output_dir=run.dir,
        log_path=run.dir / "build.log",
        pass_env=shared_cache_env(os.environ),
        dist=spec.dist,
        admission=admission_file(plan),
        ninja_order=ninja_order_file(plan),
        nvcc_archs=None if spec.keep_package_archs else spec.archs,
        nvcc_ptx=spec.ptx,
        nvcc_threads=plan.nvcc_threads,
        build_requires=ready.survey.build_requires,
        offline_build=ready.network == "off",
        wheel_cache_bound=wheel_cache_bound(os.environ),
        recache=not spec.compiler_cache,
    )


def _remember(run: Run, ready: Ready, attempt: tuple[Plan, AttemptResult]) -> str | None:
    """The last attempt's measurements kept for the next plan of this release and toolkit."""
    plan, result = attempt
    measured = result.measurement(plan, run.id, compiled_archs(run.spec, ready.survey))
    if measured is None:
        return None
    recipe, toolkit = run.spec.recipe, ready.compiler.version
    families = recipe.units.families if recipe.units else None
    where = learned_path(cache_dir(), recipe.name, recipe.version, toolkit, recipe.extra_env)
    return remember(plan, measured, families, toolkit, where)


def _check_and_gate(
    run: Run,
    ready: Ready,
    built: tuple[Path, ...],
    console: Console,
    engine: Engine,
    zero: float,
) -> Checked:
    """Stamp and check the wheels (archs, label, torch pin, symbol versions, an abi3 wheel's tag
    against the build's Pythons), then, if all is well and the gate is on, install and import
    each in a fresh base container: an abi3 wheel once under each Python it was built for."""
    console.step("stamp and check")
    pythons = ready.pythons
    wheels, problems = stamp_and_check(built, run.spec, ready.date.epoch)
    abi_reports = {w.path.name: check_wheel_abi(w.path) for w in wheels}
    problems += [error for abi in abi_reports.values() for error in abi.errors()]
    problems += [error for w in wheels if (error := unserved_problem(w.path.name, pythons)) is not None]
    gates: tuple[GateResult, ...] = ()
    phases: tuple[PhaseRecord, ...] = ()
    if run.spec.gate and not problems:
        started = time.monotonic()
        remedy = f"the built wheels are in {run.dir}, not yet loaded; rerun the same command"
        with _interruptible(engine, run, " during the import gate;", remedy):
            gates = import_gate(
                engine, wheels, abi_reports, run.spec, run.options, run.gpus, run.id, run.dir, console,
                pythons,
            )  # fmt: skip
        problems += [error for error in map(gate_failure, gates) if error is not None]
        phases = (_phase(GATE_PHASE, zero, started),)
    return Checked(wheels, abi_reports, gates, problems, phases=phases)


def _phase(step: str, zero: float, started: float) -> PhaseRecord:
    """*step*, from *started* to now, in seconds since *zero* (the last attempt's start)."""
    return PhaseRecord(step, None, round(started - zero, 1), round(time.monotonic() - zero, 1))


def _torch_range(
    run: Run, ready: Ready, checked: Checked, console: Console, engine: Engine, zero: float
) -> Checked:
    """Once the gate passed every wheel: each against the torch releases around its own
    (range_gate.py); with --pin proven, each wheel then requires the range it loaded with."""
    spec = run.spec
    if checked.problems or not (spec.gate and spec.torch_range):
        return checked
    if ready.torch_index is None:
        console.warn("the torch range was not tried: torch's index could not be read")
        return checked
    gate = GateRun(engine, spec, run.options, run.gpus, run.id, run.dir, console)
    started = time.monotonic()
    remedy = f"the wheels in {run.dir} passed the import gate; rerun with --no-torch-range to skip the range"
    with _interruptible(engine, run, " during the torch range;", remedy):
        ranges = torch_ranges(gate, ready.torch_index, checked.wheels, checked.abi, ready.pythons)
    checked = replace(
        checked, ranges=ranges, phases=(*checked.phases, _phase(TORCH_RANGE_PHASE, zero, started))
    )
    if spec.pin is not PinMode.PROVEN:
        return checked
    wheels, problems = pinned_to_ranges(checked.wheels, ranges, spec, console, ready.date.epoch)
    return replace(checked, wheels=wheels, problems=checked.problems + problems)


def _report(
    run: Run,
    ready: Ready,
    attempts: list[tuple[Plan, AttemptResult]],
    checked: Checked,
    uses: tuple[Abi3Use, ...],
) -> BuildReport:
    spec, image = run.spec, ready.image
    return BuildReport(
        run_id=run.id,
        inputs_key=ready.key,
        recipe=RecipeRecord(
            name=spec.recipe.name,
            version=spec.recipe.version,
            source=SourceRecord(
                location=redact_url(source_location(spec.recipe.source)),
                sha256=source_pin(spec.recipe.source),
                date_epoch=ready.date.epoch,
                date_from=ready.date.why,
            ),
        ),
        torch=TorchRecord(
            variant=str(spec.variant),
            index_url=redact_url(spec.variant.index_url),
            chosen=ready.torch_why,
            pin=spec.pin.value,
        ),
        archs=spec.archs,
        pythons=ready.pythons,
        image=ImageRecord(tag=image.tag, id=image.id, labels=image.labels, seconds=ready.image_s),
        plan=PlanRecord.of(attempts[-1][0]),
        attempts=_attempt_records(attempts, checked.phases),
        wheels=tuple(WheelRecord.of(w) for w in checked.wheels),
        checks=tuple(CheckRecord(error=type(p).__name__, cause=p.cause) for p in checked.problems),
        abi=tuple(abi.to_json() for abi in checked.abi.values()),
        gate=tuple(GateRecord.of(g) for g in checked.gates) if spec.gate else GateSkipped(),
        abi3=tuple(Abi3Record.of(use, checked.gates) for use in uses) or None,
        torch_range=checked.ranges or None,
        contract=ContractRecord(
            keep_package_archs=spec.keep_package_archs,
            ptx=spec.ptx,
            switches=ready.switches,
            nvcc_rewrites=attempts[-1][1].nvcc_rewrites,
            link_checks=attempts[-1][1].link_checks,
            network=ready.network,
        ),
    )


def _attempt_records(
    attempts: list[tuple[Plan, AttemptResult]], after: tuple[PhaseRecord, ...]
) -> tuple[AttemptRecord, ...]:
    """Each attempt as the report keeps it; the last one's phases go on to the gate and the range."""
    records = [attempt_record(p, r, attempts[:i]) for i, (p, r) in enumerate(attempts)]
    records[-1] = replace(records[-1], phases=(*records[-1].phases, *after))
    return tuple(records)


def _ready_to_publish(
    run: Run,
    ready: Ready,
    plan: Plan,
    checked: Checked,
    store: Path,
    report: Path,
    uses: tuple[Abi3Use, ...],
) -> BuildResult:
    """The first problem raised (the wheels stay in the run folder for a look, neither stored nor
    reused); else the wheels stored under their inputs key, if the gate loaded them."""
    if problem := first_problem(checked.problems):
        problem.details = f"{problem.details}\nwheels and report kept in {run.dir}".strip()
        raise problem
    if run.spec.gate:  # a wheel that was never loaded is not stored as done
        results.save(store, ready.key, tuple(w.path for w in checked.wheels), report)
    return BuildResult(
        run_id=run.id,
        run_dir=run.dir,
        image=ready.image,
        plan=plan,
        wheels=checked.wheels,
        report=report,
        gate={
            wheel.path.name: summary_of(found)
            for wheel in checked.wheels
            if (found := [g for g in checked.gates if g.wheel == wheel.path.name])
        },
        abi3=uses,
        ranges=checked.ranges,
    )


# What runs a build: run_build, or what a test hands the CLI in its place (cli/seams.py).
RunBuild = Callable[[BuildSpec, ImageOptions, Console, Engine], BuildResult]
