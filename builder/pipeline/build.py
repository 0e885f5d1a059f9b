"""`wheelbuild build`, as the pipeline reads: the request resolved once (resolve.py: release
pinned, compiler, source, torch, then the image and the Pythons) -> stored result? -> plan ->
attempts (tenacity: an OOM kill retries at half the parallelism) -> stamp and check -> import
gate -> torch range -> report -> ready to publish. Every step reads the Resolution.

The report's format is report/build_report.py's; the nightly's matrix against what is published
is nightly/cell_specs.py's.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from ..attempt.config import AttemptConfig, shared_cache_env, wheel_cache_bound
from ..attempt.outcome import AttemptResult
from ..engine.ports import Engine
from ..errors import Interrupted
from ..image.options import ImageOptions
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
from ..spec import held_torch
from ..spec.build_spec import BuildSpec, PinMode, format_archs
from ..spec.sources import cache_dir
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
from .preflight import new_run_id
from .range_gate import pinned_to_ranges, torch_ranges
from .resolve import Resolution, plan_of, resolve
from .stages import BuildResult, Checked, Run
from .statements import build_facts, run_redactor, write_statements

__all__ = ["BuildResult", "RunBuild", "run_build", "stamp_and_check"]


# ---------------------------------------------------------------------------------------------
# The pipeline


def run_build(request: BuildSpec, options: ImageOptions, console: Console, engine: Engine) -> BuildResult:
    """Build *request*'s wheels, check and gate them, write the report: the pipeline, step by step,
    with a status line at least every 15 s however long a step stays silent."""
    with console.heartbeat():
        return _pipeline(request, options, console, engine)


def _pipeline(request: BuildSpec, options: ImageOptions, console: Console, engine: Engine) -> BuildResult:
    run, resolved = _start(request, options, console, engine)
    store = cache_dir() / "results"
    stored = None if resolved.spec.rebuild else results.lookup(store, resolved.key)
    if stored:
        return _reuse(run, resolved, store, stored, console)
    plan = _plan(resolved, console)
    run.dir.mkdir(parents=True, exist_ok=True)
    attempts = _run_attempts(run, resolved, plan, console, engine)
    # Which torch the wheel cache now holds: a later build may need no index for it.
    held_torch.record(cache_dir(), resolved.spec.variant, attempts[-1][1].locked_files, run.id)
    zero = time.monotonic() - attempts[-1][1].duration_s  # when the last attempt began
    if learned := _remember(run, resolved, attempts[-1]):
        console.info(f"model for the next plan: {learned}")
    checked = _check_and_gate(run, resolved, attempts[-1][1].wheels, console, engine, zero)
    checked = _torch_range(run, resolved, checked, console, engine, zero)
    uses = abi3_uses(
        [w.path.name for w in checked.wheels], resolved.pythons, dict(attempts[-1][1].reused_wheels)
    )
    for use in uses:
        reused = f"; {', '.join(use.reused_under)} reused it" if use.reused_under else ""
        console.info(
            f"{use.wheel}: one wheel for every Python ({use.tag}), built under {use.built_under}{reused}"
        )
    report = run.dir / REPORT_NAME
    write_report(report, _report(run, resolved, attempts, checked, uses))
    report_html.write_beside(report)  # build-report.html: the same record as a picture
    # Beside each wheel, what went into it: <wheel>.intoto.json (statements.py)
    facts = build_facts(
        resolved.spec, resolved.inputs, resolved.key, resolved.pythons, resolved.date, attempts[-1], run.id
    )
    write_statements(checked.wheels, facts, run_redactor(resolved.spec, os.environ))
    return _ready_to_publish(run, resolved, attempts[-1][0], checked, store, report, uses)


def _start(
    request: BuildSpec, options: ImageOptions, console: Console, engine: Engine
) -> tuple[Run, Resolution]:
    """A run id and the request resolved (resolve.py): every check before a container, which
    `plan` runs too; then the run's reaper started, orphans swept and the GPU question asked;
    then the image."""
    run_id = new_run_id()
    torch = f"{request.variant.tag} (the newest release)" if request.variant.newest else str(request.variant)
    archs = format_archs(request.archs, request.ptx)
    console.step(f"wheelbuild {request.recipe.name} for torch {torch}, archs {archs} (run {run_id})")
    gpus = False

    def before_image(spec: BuildSpec) -> None:
        nonlocal gpus
        engine.start_reaper(run_id)  # removes the run's containers if this process is killed
        if swept := engine.sweep_orphans():
            console.info(f"removed {swept} container(s) left by earlier runs whose process is gone")
        gpus = engine.resolve_gpus(spec.gpus)
        if not gpus and spec.gpus.value == "auto":
            console.info(
                "no NVIDIA runtime in the Docker daemon: building without a GPU (compiling needs none)"
            )

    resolved = resolve(request, options, console, engine, before_image=before_image)
    return Run(options, run_id, request.output_dir / "runs" / run_id, gpus), resolved


def _reuse(run: Run, resolved: Resolution, store: Path, stored: list[Path], console: Console) -> BuildResult:
    """Unchanged inputs: the stored wheels copied into this run, with the stored report as this
    run's (its attempts are the earlier run's, and it says so)."""
    run.dir.mkdir(parents=True, exist_ok=True)
    for wheel in stored:
        shutil.copy2(wheel, run.dir / wheel.name)
        statement = wheel.with_name(wheel.name + STATEMENT_SUFFIX)  # the build's that made it
        if statement.is_file():
            shutil.copy2(statement, run.dir / statement.name)
    report = run.dir / REPORT_NAME
    earlier = read_report(store / resolved.key / REPORT_NAME)
    from_run = earlier.run_id or "?"
    write_report(
        report,
        replace(earlier, run_id=run.id, inputs_key=resolved.key, reused=Reused(resolved.key, from_run)),
    )
    report_html.write_beside(report)
    console.step(
        f"unchanged inputs: reusing the wheel(s) of run {from_run} (key {resolved.key[:12]}; --rebuild builds anew)"
    )
    gates = earlier.gate if isinstance(earlier.gate, tuple) else ()
    passed = {g.wheel for g in gates if g.passed} - {g.wheel for g in gates if not g.passed}
    return BuildResult(
        run_id=run.id,
        run_dir=run.dir,
        image=resolved.image,
        plan=None,
        wheels=tuple(inspect_wheel(run.dir / w.name) for w in stored),
        report=report,
        gate={wheel: f"passed in run {from_run}" for wheel in passed},
        abi3=tuple(Abi3Use(a.wheel, a.tag, a.built_under, a.reused_under) for a in earlier.abi3 or ()),
        ranges=earlier.torch_range or (),
    )


def _plan(resolved: Resolution, console: Console) -> Plan:
    """The plan (resolve.plan_of, which `plan` prints), said; a peak over the limit a warning."""
    plan = plan_of(resolved)
    console.step(f"plan: {format_bytes(plan.memory)} memory, {plan.cpus:g} CPUs")
    for reason in (*plan.reasons, resolved.arch_note, resolved.std_note, f"toolkit: {resolved.toolkit_note}"):
        if reason:
            console.info(reason)
    if over := over_budget(plan):
        console.warn(over)
    return plan


def _run_attempts(
    run: Run, resolved: Resolution, plan: Plan, console: Console, engine: Engine
) -> list[tuple[Plan, AttemptResult]]:
    """The attempts (attempts.py); Ctrl-C stops cibuildwheel and removes the run's containers."""
    with _interruptible(
        engine,
        run,
        "; stopped cibuildwheel and",
        "nothing of this run is left running; rerun the same command to start again",
    ):
        return attempts_until_built(
            engine, plan, lambda number, current: _attempt_config(run, resolved, number, current), console
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


def _attempt_config(run: Run, resolved: Resolution, number: int, plan: Plan) -> AttemptConfig:
    spec = resolved.spec
    return AttemptConfig(
        run_id=run.id,
        attempt=number,
        image=resolved.image.tag,
        project_dir=resolved.source.project_dir,
        package=resolved.source.package,
        identifiers=tuple(f"{p}-manylinux_x86_64" for p in resolved.pythons),
        memory=plan.memory,
        cpus=plan.cpus,
        gpus=run.gpus,
        # SOURCE_DATE_EPOCH: the build backend and auditwheel date their zip entries by it too.
        build_env={
            **spec.recipe.build_env(
                spec.archs, plan.max_jobs, plan.nvcc_threads, spec.variant.label, ptx=spec.ptx
            ),
            "SOURCE_DATE_EPOCH": str(resolved.date.epoch),
        },
        cuda_home=resolved.compiler.home,
        torch=spec.variant,
        output_dir=run.dir,
        log_path=run.dir / "build.log",
        pass_env=shared_cache_env(os.environ),
        dist=spec.dist,
        admission=admission_file(plan),
        # The wrapper's ledger and what the watcher measured, kept with the run's files.
        admit_dir=run.dir / f"admit-{number}" if plan.admission_budget is not None else None,
        ninja_order=ninja_order_file(plan),
        nvcc_archs=None if spec.keep_package_archs else spec.archs,
        nvcc_ptx=spec.ptx,
        nvcc_threads=plan.nvcc_threads,
        keep_package_std=spec.keep_package_std,
        build_requires=resolved.survey.build_requires,
        offline_build=resolved.network == "off",
        wheel_cache_bound=wheel_cache_bound(os.environ),
        recache=not spec.compiler_cache,
    )


def _remember(run: Run, resolved: Resolution, attempt: tuple[Plan, AttemptResult]) -> str | None:
    """The last attempt's measurements kept for the next plan of this release and toolkit."""
    plan, result = attempt
    measured = result.measurement(plan, run.id, resolved.archs)
    if measured is None:
        return None
    recipe, toolkit = resolved.spec.recipe, resolved.compiler.version
    families = recipe.units.families if recipe.units else None
    where = learned_path(cache_dir(), recipe.name, recipe.version, toolkit, recipe.extra_env)
    return remember(plan, measured, families, toolkit, where)


def _check_and_gate(
    run: Run,
    resolved: Resolution,
    built: tuple[Path, ...],
    console: Console,
    engine: Engine,
    zero: float,
) -> Checked:
    """Stamp and check the wheels (archs, label, torch pin, symbol versions, an abi3 wheel's tag
    against the build's Pythons), then, if all is well and the gate is on, install and import
    each in a fresh base container: an abi3 wheel once under each Python it was built for."""
    console.step("stamp and check")
    pythons = resolved.pythons
    wheels, problems = stamp_and_check(built, resolved.spec, resolved.date.epoch)
    abi_findings = {w.path.name: check_wheel_abi(w.path) for w in wheels}
    problems += [error for abi in abi_findings.values() for error in abi.errors()]
    problems += [error for w in wheels if (error := unserved_problem(w.path.name, pythons)) is not None]
    gates: tuple[GateResult, ...] = ()
    phases: tuple[PhaseRecord, ...] = ()
    if resolved.spec.gate and not problems:
        started = time.monotonic()
        remedy = f"the built wheels are in {run.dir}, not yet loaded; rerun the same command"
        with _interruptible(engine, run, " during the import gate;", remedy):
            gates = import_gate(
                engine, wheels, abi_findings, resolved.spec, run.options, run.gpus, run.id, run.dir, console,
                pythons,
            )  # fmt: skip
        problems += [error for error in map(gate_failure, gates) if error is not None]
        phases = (_phase(GATE_PHASE, zero, started),)
    return Checked(wheels, abi_findings, gates, problems, phases=phases)


def _phase(step: str, zero: float, started: float) -> PhaseRecord:
    """*step*, from *started* to now, in seconds since *zero* (the last attempt's start)."""
    return PhaseRecord(step, None, round(started - zero, 1), round(time.monotonic() - zero, 1))


def _torch_range(
    run: Run, resolved: Resolution, checked: Checked, console: Console, engine: Engine, zero: float
) -> Checked:
    """Once the gate passed every wheel: each against the torch releases around its own
    (range_gate.py); with --pin proven, each wheel then requires the range it loaded with."""
    spec = resolved.spec
    if checked.problems or not (spec.gate and spec.torch_range):
        return checked
    if resolved.torch_index is None:
        console.warn("the torch range was not tried: torch's index could not be read")
        return checked
    gate = GateRun(engine, spec, run.options, run.gpus, run.id, run.dir, console)
    started = time.monotonic()
    remedy = f"the wheels in {run.dir} passed the import gate; rerun with --no-torch-range to skip the range"
    with _interruptible(engine, run, " during the torch range;", remedy):
        ranges = torch_ranges(gate, resolved.torch_index, checked.wheels, checked.abi, resolved.pythons)
    checked = replace(
        checked, ranges=ranges, phases=(*checked.phases, _phase(TORCH_RANGE_PHASE, zero, started))
    )
    if spec.pin is not PinMode.PROVEN:
        return checked
    wheels, problems = pinned_to_ranges(checked.wheels, ranges, spec, console, resolved.date.epoch)
    return replace(checked, wheels=wheels, problems=checked.problems + problems)


def _report(
    run: Run,
    resolved: Resolution,
    attempts: list[tuple[Plan, AttemptResult]],
    checked: Checked,
    uses: tuple[Abi3Use, ...],
) -> BuildReport:
    spec, image = resolved.spec, resolved.image
    return BuildReport(
        run_id=run.id,
        inputs_key=resolved.key,
        recipe=RecipeRecord(
            name=spec.recipe.name,
            version=spec.recipe.version,
            source=SourceRecord(
                location=redact_url(source_location(spec.recipe.source)),
                sha256=source_pin(spec.recipe.source),
                date_epoch=resolved.date.epoch,
                date_from=resolved.date.why,
            ),
        ),
        torch=TorchRecord(
            variant=str(spec.variant),
            index_url=redact_url(spec.variant.index_url),
            chosen=resolved.torch_why,
            pin=spec.pin.value,
        ),
        archs=spec.archs,
        pythons=resolved.pythons,
        image=ImageRecord(tag=image.tag, id=image.id, labels=image.labels, seconds=resolved.imaged.seconds),
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
            switches=resolved.switches,
            nvcc_rewrites=attempts[-1][1].nvcc_rewrites,
            keep_package_std=spec.keep_package_std,
            std_raised=attempts[-1][1].std_raises,
            link_checks=attempts[-1][1].link_checks,
            network=resolved.network,
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
    resolved: Resolution,
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
    if resolved.spec.gate:  # a wheel that was never loaded is not stored as done
        results.save(store, resolved.key, tuple(w.path for w in checked.wheels), report)
    return BuildResult(
        run_id=run.id,
        run_dir=run.dir,
        image=resolved.image,
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
