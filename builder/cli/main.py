"""The command line: parses, calls one function, prints. No logic lives here."""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Unpack

import click

from ..attempt.config import DEFAULT_WHEEL_CACHE_BOUND, SHARED_CACHE_ENV, wheel_cache_bound
from ..doctor import checks as doctor
from ..errors import BadArgument, DoctorFound, PlanOverBudget, WheelbuildError
from ..gc import decisions, prune
from ..image import options as image_options
from ..image.inputs import image_table
from ..image.names import PREFIX, checked_prefix
from ..pipeline import calibrate as calibrating
from ..pipeline import check, preflight
from ..pipeline.dry_run import plan_document, plan_lines
from ..pipeline.resolve import plan_of, resolve
from ..plan.planner import over_budget
from ..progress.console import Console
from ..recipes import resolve_recipe
from ..report import page as report_html
from ..spec import config
from ..spec.build_spec import DEFAULT_OUTPUT_DIR, parse_archs
from ..spec.sources import cache_dir
from ..units import format_bytes, parse_memory
from ..variants import CUDA13_TOOLKITS, DEFAULT_ARCHS, DEFAULT_TOOLKIT, parse_variant
from . import dist as cli_dist
from . import index as cli_index
from . import nightly as cli_nightly
from . import verify as cli_verify
from .build_spec import BuildOptions, build_spec
from .like import finish_like, take_like
from .options import (
    CONFIG_FILES_KEY,
    ConfiguredCommand,
    ImageFlags,
    WheelbuildGroup,
    build_flags,
    fail_with,
    provenance,
    provenance_records,
    reads_build_config,
    torch_index_option,
    torch_option,
    with_image_flags,
)
from .params import (
    GIVEN_PATH,
    GIVEN_TEXT,
    LIST_RULE,
    REPEATABLE,
    BoundedInt,
    NearChoice,
    joined_list,
    split_list,
)
from .seams import seams
from .wheel_lines import echo_built, echo_modules


@click.group(cls=WheelbuildGroup, epilog=LIST_RULE, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    package_name="wheelbuild",
    help="Show wheelbuild's own version and exit (a recipe's release is build's --version).",
)
def main() -> None:
    """Build CUDA extension wheels in a reproducible, memory-limited CUDA 13.1 container."""
    checked_prefix(PREFIX)  # WHEELBUILD_DOCKER_PREFIX, read at import: refused here, before any command


@main.command(cls=ConfiguredCommand)
@click.option(
    "--install",
    is_flag=True,
    help="With --like: install the gated wheel into that environment, its torch held where it is.",
)
@build_flags
def build(
    install: bool,
    verbose: bool,
    image_flags: ImageFlags,
    config_file: Path | None,
    **given: Unpack[BuildOptions],
) -> None:
    """Build PACKAGE's wheel: a project path, an sdist (path, or URL#sha256=), a recipe (flash-attn,
    flash-attn==2.8.3.post2) or a name on the index as pip takes one (causal-conv1d==1.7.0,
    mamba-ssm: its newest release), pinned by the sha256 the index lists; without it, the project
    in this folder. Options also come from WHEELBUILD_*, [tool.wheelbuild]."""
    console = _say_option_files(Console(show_log=verbose))
    if install and given["like"] is None:
        raise BadArgument(
            "--install installs into the environment --like names, and none was named", "add --like PATH"
        )
    like = take_like(given, console)
    spec = build_spec(given)  # config_file: read before parsing, by ConfiguredCommand
    with seams().engine(sweep=False) as engine:  # run_build sweeps, and says what it removed
        result = seams().run_build(spec, image_flags.options(), console, engine)
    echo_built(result, console)
    if like is not None:
        finish_like(like, result, console, install=install)


def _say_option_files(console: Console) -> Console:
    """Where values the command line did not name came from, when files set any."""
    files: config.FileConfig = click.get_current_context().meta.get(CONFIG_FILES_KEY, config.FileConfig())
    if files.values:
        console.info(f"options from files: {files.described()} (`wheelbuild plan` shows each one's source)")
    return console


@main.command(cls=ConfiguredCommand)
@click.option(
    "--strict",
    is_flag=True,
    help="A predicted peak over the memory limit is an error (exit 28), not a warning.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the whole dry run as one JSON object (docs/guides/plan-and-memory.md lists its fields).",
)
@build_flags
def plan(
    strict: bool,
    as_json: bool,
    verbose: bool,
    image_flags: ImageFlags,
    config_file: Path | None,
    **given: Unpack[BuildOptions],
) -> None:
    """The dry run of build: every check build makes before its first container (the same errors
    and exit codes; the source and torch's index are read as build reads them), then the plan
    that will run (MAX_JOBS, NVCC_THREADS, container limit, predicted peak and time), the wheels
    it would make, one line each, and the torch, toolkit and C++ standard chosen; with -v also
    why each number, and where each option's value came from (command line, WHEELBUILD_*,
    [tool.wheelbuild], default); --json, all of it as one object:
    `wheelbuild plan flash-attn --memory 64g --cpus 128`. PACKAGE as for build: without it, the
    project in this folder; --example, the bundled one."""
    # What was looked up goes to stderr with -v; the plan on stdout says each choice once.
    console = Console(sys.stderr, notes=verbose)
    take_like(given, console)
    spec = build_spec(given)
    with seams().engine(sweep=False) as engine:  # asked at most whether the CUDA 12 layer's image is here
        resolved = resolve(spec, image_flags.options(), console, engine, dry_run=True)
    planned = plan_of(resolved)
    over = over_budget(planned)
    if as_json:
        click.echo(json.dumps(plan_document(resolved, planned, provenance_records(), over), indent=2))
    else:
        for line in plan_lines(resolved, planned, verbose=verbose, options=provenance()):
            click.echo(line)
    if over:
        if strict:
            raise PlanOverBudget(
                over, "give more --memory, or fewer --max-jobs; or drop --strict to plan anyway"
            )
        console.warn(over)


@main.command("doctor", cls=ConfiguredCommand)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {check, status, found, remedy}.")
@torch_index_option("The torch index to reach [default: PyTorch's cu130 index].", type=GIVEN_TEXT)
@with_image_flags
@reads_build_config
def doctor_command(as_json: bool, torch_index_url: str | None, image_flags: ImageFlags) -> None:
    """Check that this machine can build, one line each (ok / warn / fail, with a remedy): Docker,
    its memory limit, NVIDIA, free disk, the CA bundle, the torch index, PyPI, NVIDIA's CUDA
    downloads, sccache's shared storage, the base image. Exits non-zero when a build would fail."""
    with seams().engine(sweep=False, timeout=30) as engine:
        checks = doctor.diagnose(
            lambda: engine.facts(image_flags.base_image),
            os.environ,
            shared_cache_env=SHARED_CACHE_ENV,
            cache=cache_dir(),
            ca_bundle=image_flags.ca_bundle,
            torch_index_url=torch_index_url,
            cuda12_image=image_flags.cuda12_image,
            base_image_source=image_flags.base_image_from,
        )
    if as_json:
        click.echo(json.dumps([c.to_json() for c in checks], indent=2))
    else:
        for found in checks:
            click.echo(found.line())
    failing = doctor.failed(checks)
    if failing:
        raise DoctorFound(
            f"{len(failing)} check(s) would fail a build: {', '.join(c.check for c in failing)}",
            "do what each fail line's remedy says, then run wheelbuild doctor again",
        )


@main.command()
@click.argument("package")
@torch_option("Variant whose headers and nvcc to use.", default="cu130", show_default=True)
@torch_index_option("Index to take torch from.", type=GIVEN_TEXT)
@click.option(
    "--version",
    "recipe_version",
    help="Release of the recipe [default: its default]; not wheelbuild's own (`wheelbuild --version`).",
)
@click.option(
    "--archs",
    "archs_options",
    multiple=True,
    help="Archs compiled at once, one set per --archs; repeatable, the sets add up (--archs 100,120 "
    "--archs 100 measures both) [default: 100,120].",
)
@click.option(
    "--threads",
    multiple=True,
    callback=joined_list,
    default=("1",),
    show_default=True,
    help=f"NVCC_THREADS values to measure, comma-separated (1,2); {REPEATABLE}.",
)
@click.option(
    "--sample",
    type=BoundedInt(min=1),
    default=2,
    show_default=True,
    help="Units to sample across families.",
)
@click.option(
    "--unit",
    "unit_names",
    multiple=True,
    callback=split_list,
    help=f"Measure this unit (file name), or several separated by commas; {REPEATABLE}; overrides --sample.",
)
@click.option("--memory", help="Each compile's container limit [default: this machine's, less a reserve].")
@click.option(
    "--compare",
    type=GIVEN_PATH,
    help="A calibration table in the same format (e.g. shared/calibration) to set the numbers against.",
)
@with_image_flags
def calibrate(
    package: str,
    torch_variant: str,
    torch_index_url: str | None,
    recipe_version: str | None,
    archs_options: tuple[str, ...],
    threads: str,
    sample: int,
    unit_names: tuple[str, ...],
    memory: str | None,
    compare: Path | None,
    image_flags: ImageFlags,
) -> None:
    """Compile a sample of the recipe's real units alone, each in its own container, measure peak
    memory and time, and write the profile the planner then prefers (`wheelbuild plan` says so)."""
    thread_values = tuple(sorted({int(t) for t in threads.split(",") if t.strip().isdigit() and int(t) > 0}))
    if not thread_values:
        raise BadArgument(f"--threads {threads!r} names no thread count", "write e.g. --threads 1,2")
    with seams().engine() as engine:
        result = calibrating.run_calibration(
            recipe=resolve_recipe(package, version=recipe_version),
            variant=parse_variant(torch_variant, torch_index_url),
            archs_options=[parse_archs(a) for a in archs_options] or [DEFAULT_ARCHS],
            threads_options=thread_values,
            sample=sample,
            unit_names=unit_names,
            memory=parse_memory(memory) if memory is not None else None,
            options=image_flags.options(),
            console=Console(),
            engine=engine,
            reference=compare,
        )
    for line in result.comparisons:
        click.echo(f"compared: {line}")
    click.echo(f"measurements: {result.measured}")
    click.echo(f"profile: {result.profile} ({result.model.source})")


@main.command("gc", cls=ConfiguredCommand)
@click.option(
    "--output-dir",
    type=GIVEN_PATH,
    default=DEFAULT_OUTPUT_DIR,
    show_default=True,
    help="The builds' output dir: its runs/ is pruned; the published trees in it are read, never touched.",
)
@click.option(
    "--keep-runs",
    type=BoundedInt(min=0),
    default=decisions.DEFAULT_KEEP_RUNS,
    show_default=True,
    help="Keep the newest N runs (and stored results); a run whose wheels were published is always kept.",
)
@click.option(
    "--caches",
    is_flag=True,
    help="Also remove the compiler, pip and torch-download caches (wheelbuild-sccache, "
    "wheelbuild-pip-cache, wheelbuild-torch-wheels) that no container mounts. Without it the "
    "torch-wheels cache is pruned to its bound (WHEELBUILD_WHEEL_CACHE_BOUND, 40g): the least "
    "recently used trees go.",
)
@click.option(
    "-n", "--dry-run", is_flag=True, help="Say what would be removed and how much it frees; remove nothing."
)
@with_image_flags
@reads_build_config
def gc_command(
    output_dir: Path,
    keep_runs: int,
    caches: bool,
    dry_run: bool,
    image_flags: ImageFlags,
) -> None:
    """Remove old runs, stored results, build and dist-fleet images and calibrate's torch volumes;
    keep what a published wheel or the newest runs need, the current inputs' images, and all a
    container uses.
    The image flags name the current inputs, as for build."""
    options = prune.GcOptions(
        output_dir=output_dir.resolve(),
        store=cache_dir() / "results",
        keep_runs=keep_runs,
        caches=caches,
        scope=decisions.Scope(),
        image_options=image_flags.options(),
        wheel_cache_bound=wheel_cache_bound(os.environ) or DEFAULT_WHEEL_CACHE_BOUND,
    )
    console = Console()
    with seams().engine(sweep=False).connect() as engine:  # a dry run removes nothing, not even orphans
        decided = prune.collect(engine, options, console.step, console.warn)
        for decision in decided.decisions:
            click.echo(decision.line(dry_run))
        if dry_run or not decided.removals:
            click.echo(decisions.summary(decided))
            return
        console.step(f"removing {len(decided.removals)} item(s)")
        removals = prune.execute(engine, decided, options, console.info)
    click.echo(decisions.summary(decided, removals))
    decisions.check(removals)


@main.group()
def image() -> None:
    """Build or list wheelbuild's CUDA build images."""


@image.command("build")
@with_image_flags
@click.option(
    "--cuda12",
    "with_cuda12",
    is_flag=True,
    help="Add the CUDA 12.8 compiler from NVIDIA's pinned redist archives (what cu12x builds use; "
    "WHEELBUILD_CUDA_REDIST_URL names a mirror).",
)
@click.option(
    "--toolkit",
    type=NearChoice(CUDA13_TOOLKITS),
    default=DEFAULT_TOOLKIT,
    show_default=True,
    help="The CUDA 13 toolkit the image carries (a build picks the one its torch needs: 13.2 for "
    "torch built with CUDA 13.2).",
)
def image_build(image_flags: ImageFlags, with_cuda12: bool, toolkit: str) -> None:
    """Build the image for these inputs, or reuse it if its content-hash tag exists."""
    console = Console()
    options = replace(image_flags.options(), cuda12_redist=with_cuda12, toolkit=toolkit)
    with seams().engine().connect() as engine:
        inputs = image_options.image_inputs(engine, options)
        built = preflight.ensure_image(engine, inputs, console)
    click.echo(built.tag)


@image.command("ls")
def image_ls() -> None:
    """List wheelbuild images: tag, ID, size, and the inputs their labels record (base, CUDA, the
    CUDA 12 layer)."""
    with seams().engine().connect() as engine:
        images = engine.list_images()
    if not images:
        click.echo("no wheelbuild images; `wheelbuild image build` or `wheelbuild build` makes one")
    else:
        click.echo("\n".join(image_table(images)))


@main.command()
@click.argument("wheels", nargs=-1, required=True, type=GIVEN_PATH)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per wheel, in a list).")
def inspect(wheels: tuple[Path, ...], as_json: bool) -> None:
    """Show what a wheel really holds: name, version, tags, sha256, its torch requirement, the
    CUDA runtime and the SASS/PTX archs of every extension module (read from .nv_fatbin)."""
    infos = [check.inspect_or_refuse(path) for path in wheels]
    if as_json:
        click.echo(json.dumps([check.describe_wheel(info) for info in infos], indent=2))
        return
    for info in infos:
        click.echo(info.path.name)
        click.echo(f"    {info.name} {info.version}; tags {', '.join(info.tags)}")
        click.echo(f"    sha256 {info.sha256}, {format_bytes(info.size)}")
        click.echo(f"    requires {', '.join(info.torch_requirements) or 'no torch'}")
        echo_modules(info)
        gate = check.describe_gate(info.path)
        click.echo(f"    import gate {gate['status']}: {gate['detail']}")
        for found in check.describe_torch_range(info.path):
            click.echo(f"    torch range under {found['python']}: {found['summary']}")


@main.command("report")
@click.argument("run", type=GIVEN_PATH)
def report_command(run: Path) -> None:
    """Write build-report.html for a run (its folder, wheelhouse/runs/<run-id>, or its
    build-report.json) and print its path: memory over time per attempt, units, attempts."""
    click.echo(report_html.write_beside(run / "build-report.json" if run.is_dir() else run))


# The command groups kept in their own modules: the index's (publish, yank, serve) and the
# nightly's (matrix, nightly schedule/build-cell/publish-night) and the sccache-dist fleet's.
for _command in (*cli_index.COMMANDS, *cli_nightly.COMMANDS, *cli_dist.COMMANDS, *cli_verify.COMMANDS):
    main.add_command(_command)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run() -> None:
    """Entry point: renders every WheelbuildError once, as cause and remedy, with its exit code."""
    signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM cleans up exactly like Ctrl-C
    try:
        main.main(standalone_mode=False)
    except WheelbuildError as error:  # raised outside a command (the group's own arguments)
        fail_with(error)
    except click.exceptions.Abort:
        click.echo("error: interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("error: interrupted", err=True)
        sys.exit(130)
    except click.UsageError as error:  # click's own (an unknown option, a value out of range): one style
        command = error.ctx.command_path if error.ctx is not None else "wheelbuild"
        click.echo(f"error: {error.format_message()}", err=True)
        click.echo(f"remedy: see `{command} --help` for what it takes", err=True)
        sys.exit(error.exit_code)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
