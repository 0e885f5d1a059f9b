"""The command line: parses, calls one function, prints. No logic lives here."""

from __future__ import annotations

import functools
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TypeVar

import click

from . import build as build_pipeline
from . import calibrate as calibrating
from . import check, config, matrix, matrix_runs, preflight, prune, report_html
from .errors import BadArgument, BadHtpasswd, DoctorFound, WheelbuildError
from .index import publish as publishing
from .index import remote
from .index import serve as serving
from .plan.planner import format_plan
from .recipes import known_recipes, resolve_recipe
from .run import doctor, gc
from .run.attempt import SHARED_CACHE_ENV
from .run.engine import DockerEngine
from .run.reporter import Reporter
from .sources import cache_dir, newest_release, newest_torch
from .spec import (
    DEFAULT_OUTPUT_DIR,
    MAX_CPUS,
    BuildSpec,
    GpuMode,
    Resources,
    check_cpus,
    parse_archs,
    parse_env,
    parse_python,
    resolve_ca_bundle,
)
from .units import format_bytes, parse_memory
from .variants import DEFAULT_ARCHS, parse_variant
from .wheel.wheels import WheelInfo


def _fail(error: WheelbuildError) -> NoReturn:
    """The one place a WheelbuildError is shown: its details, cause and remedy, then its exit code."""
    if error.details:
        click.echo(error.details, err=True)
    click.echo(f"error: {error.cause}", err=True)
    click.echo(f"remedy: {error.remedy}", err=True)
    sys.exit(error.exit_code)


class _Wheelbuild(click.Group):
    """Renders every WheelbuildError a command raises (here, not only in `run`, so that a command
    run in process, e.g. by click's CliRunner, says the same). `wheelbuild flash-attn ...` is the
    short form of `wheelbuild build flash-attn ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] in known_recipes():
            args = ["build", *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except WheelbuildError as error:
            _fail(error)


class _GivenPath(click.Path):
    """click.Path that refuses '': Path('') is the current directory, which an empty value (an
    unset shell variable, most likely) never meant."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path would mean the current directory", param, ctx)
        return super().convert(value, param, ctx)


_PATH = _GivenPath(path_type=Path)


class _GivenText(click.types.StringParamType):
    """Text that refuses '': an option given empty would otherwise mean its default."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = super().convert(value, param, ctx)
        if not text.strip():
            self.fail("is empty; leave the option out for its default", param, ctx)
        return text


_TEXT = _GivenText()


# ---------------------------------------------------------------------------------------------
# Options that several commands take, each declared once: a group is one decorator; an option
# whose help differs per command is a factory that takes its help.

_TORCH_INDEX_ENV = "WHEELBUILD_TORCH_INDEX_URL"
_F = TypeVar("_F", bound=Callable[..., Any])


def _options(*options: Any) -> Any:
    """Several click options as one decorator, shown in --help in the order listed."""

    def apply(f: Any) -> Any:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


def _torch_option(help: str, **kwargs: Any) -> Callable[[_F], _F]:
    """--torch: the torch variant (cu130, cu128, ... or 2.11.0+cu130)."""
    return click.option("--torch", "torch_variant", help=help, **kwargs)


def _torch_index_option(help: str, **kwargs: Any) -> Callable[[_F], _F]:
    """--torch-index-url (WHEELBUILD_TORCH_INDEX_URL): the index torch comes from."""
    return click.option("--torch-index-url", envvar=_TORCH_INDEX_ENV, help=help, **kwargs)


def _track_option(help: str, **kwargs: Any) -> Callable[[_F], _F]:
    """--track latest: the matrix with each package's newest release and each tag's newest torch."""
    return click.option("--track", type=click.Choice(["latest"]), help=help, **kwargs)


@dataclass(frozen=True)
class ImageFlags:
    """--base-image, --ca-bundle and --cuda12-image as given, handed to a command as one value."""

    base_image: str | None
    ca_bundle: Path | None
    cuda12_image: str | None

    def options(self) -> preflight.ImageOptions:
        """The image options a build with these flags uses (the CA bundle checked, or the host's)."""
        return preflight.ImageOptions(
            base_image=self.base_image,
            ca_bundle=resolve_ca_bundle(self.ca_bundle),
            cuda12_image=self.cuda12_image,
        )


_image_flags = _options(
    click.option(
        "--base-image",
        envvar="WHEELBUILD_BASE_IMAGE",
        type=_TEXT,
        help="Base for the build image [default: manylinux_2_28 pinned by cibuildwheel; "
        "tests use scripts/make-base-image].",
    ),
    click.option(
        "--ca-bundle",
        envvar="WHEELBUILD_CA_BUNDLE",
        type=_PATH,
        help="PEM bundle trusted inside builds (TLS proxies) [default: the host's bundle].",
    ),
    click.option(
        "--cuda12-image",
        envvar="WHEELBUILD_CUDA12_IMAGE",
        type=_TEXT,
        help="NVIDIA CUDA 12.8+ devel image (pinned by digest) whose compiler serves cu12x variants.",
    ),
)


def with_image_flags(f: Any) -> Any:
    """The image flags (build, plan, doctor, calibrate, gc, image build, matrix), passed to the
    command as one ImageFlags argument named `image_flags`."""

    @functools.wraps(f)
    def command(
        *args: Any, base_image: str | None, ca_bundle: Path | None, cuda12_image: str | None, **kwargs: Any
    ) -> Any:
        return f(*args, image_flags=ImageFlags(base_image, ca_bundle, cuda12_image), **kwargs)

    return _image_flags(command)


def _build_option(key: str, *decls: str, **kwargs: Any) -> Any:
    """A build option with the WHEELBUILD_* variable builder/config.py names for its key."""
    return click.option(*decls, envvar=config.BY_KEY[key].env, show_envvar=True, **kwargs)


# Every option of `build`, which `plan` takes too: each also from WHEELBUILD_<KEY> and from
# [tool.wheelbuild] (builder/config.py lists the same keys; a test keeps the two in step).
_build_flags = (
    _torch_option(
        "cu130, cu128, ... or 2.11.0+cu130.",
        envvar=config.BY_KEY["torch"].env,
        show_envvar=True,
        default="cu130",
        show_default=True,
    ),
    _torch_index_option(
        "Index to install torch from [default: PyTorch's index for the variant].",
        show_envvar=True,
        type=_TEXT,
    ),
    _build_option(
        "archs",
        "--archs",
        default=",".join(map(str, DEFAULT_ARCHS)),
        show_default=True,
        help="CUDA SM archs.",
    ),
    _build_option(
        "python",
        "--python",
        "pythons",
        multiple=True,
        help="3.11 or cp311; repeatable (the variable: space-separated) [default: every one in the image].",
    ),
    _build_option("version", "--version", "recipe_version", help="Release of a known recipe (flash-attn)."),
    _build_option(
        "arch-env",
        "--arch-env",
        help="Env var a generic extension reads its arch list from (like FLASH_ATTN_CUDA_ARCHS).",
    ),
    _build_option(
        "memory",
        "--memory",
        help="Container memory limit, docker units (12g) [default: host available minus a reserve].",
    ),
    _build_option("cpus", "--cpus", type=float, help="Container CPUs [default: all of this process's]."),
    _build_option(
        "max-jobs",
        "--max-jobs",
        type=click.IntRange(min=1, max=MAX_CPUS),
        help="MAX_JOBS for ninja [default: from memory and CPUs].",
    ),
    _build_option(
        "nvcc-threads",
        "--nvcc-threads",
        type=click.IntRange(min=1, max=MAX_CPUS),
        help="NVCC_THREADS [default: planned from memory, CPUs and the recipe's model].",
    ),
    _build_option(
        "env",
        "--env",
        "env_pairs",
        multiple=True,
        help="KEY=VALUE for the build's environment; repeatable (the variable: space-separated).",
    ),
    _build_option(
        "gpus", "--gpus", type=click.Choice([m.value for m in GpuMode]), default="auto", show_default=True
    ),
    _build_option("output-dir", "--output-dir", type=_PATH, default=DEFAULT_OUTPUT_DIR, show_default=True),
    _build_option(
        "admission",
        "--admission",
        is_flag=True,
        help="Admit compiles by memory: MAX_JOBS up to the CPUs, each compile waiting until its predicted peak fits.",
    ),
    _build_option(
        "rebuild", "--rebuild", is_flag=True, help="Build even if a finished build had exactly these inputs."
    ),
    _build_option(
        "gate",
        "--gate/--no-gate",
        default=True,
        show_default=True,
        help="Install and import each wheel in a fresh container of the base image before calling it done "
        "(--no-gate: publish then checks it statically only).",
    ),
    _build_option(
        "quiet",
        "-q",
        "--quiet",
        is_flag=True,
        help="Hide the build log (it is still written to the run's build.log).",
    ),
    with_image_flags,
    click.option(
        "--config-file",
        type=_PATH,
        envvar="WHEELBUILD_CONFIG_FILE",
        show_envvar=True,
        help="TOML file whose [tool.wheelbuild] table sets these options [default: ./wheelbuild.toml "
        "when present]; PACKAGE/pyproject.toml's [tool.wheelbuild] ranks below it.",
    ),
)


def build_flags(f: Any) -> Any:
    return click.argument("package", required=False)(_options(*_build_flags)(f))


_FILES = "wheelbuild.config"  # ctx.meta key: the FileConfig the command's options were read with
_ORIGINS: dict[click.core.ParameterSource | None, config.Origin] = {
    click.core.ParameterSource.COMMANDLINE: config.Origin.COMMAND_LINE,
    click.core.ParameterSource.ENVIRONMENT: config.Origin.ENVIRONMENT,
    click.core.ParameterSource.DEFAULT_MAP: config.Origin.FILE,
}


class _Configured(click.Command):
    """A command whose options may come from files: [tool.wheelbuild] becomes click's default_map
    before the arguments are parsed, so click itself ranks command line > WHEELBUILD_* > file >
    default and records each value's source. PACKAGE and --config-file are read first, with
    click's own parser, because they say which files to read."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            opts, _, _ = self.make_parser(ctx).parse_args(args=list(args))
        except click.UsageError:
            return super().parse_args(ctx, args)  # click says what is wrong, as without files
        help_option = self.get_help_option(ctx)
        asked_help = help_option is not None and opts.get(help_option.name or "") is True
        if not asked_help and not ctx.resilient_parsing:  # --help works beside a broken file
            given = next(p for p in self.params if p.name == "config_file")
            raw, _source = given.consume_value(ctx, opts)  # not given: None, or click 8.3's UNSET
            config_file = given.type_cast_value(ctx, raw) if isinstance(raw, str) else None
            package = opts.get("package")
            files = config.load_config(
                config.find_project(package if isinstance(package, str) else None, known_recipes()),
                config_file,
            )
            ctx.default_map = {**(ctx.default_map or {}), **files.default_map()}
            ctx.meta[_FILES] = files
        return super().parse_args(ctx, args)


def _provenance() -> list[str]:
    """Each build option's value and where it came from, by click's record of its source."""
    ctx = click.get_current_context()
    files: config.FileConfig = ctx.meta.get(_FILES, config.FileConfig())
    resolved = [
        config.Resolved(
            option,
            ctx.params[option.param],
            _ORIGINS.get(ctx.get_parameter_source(option.param), config.Origin.DEFAULT),
        )
        for option in config.OPTIONS
    ]
    read = ", ".join(files.files) or "none"
    return [
        f"options (command line > WHEELBUILD_* > file > default; files: {read}):",
        *config.provenance(resolved, files),
    ]


@click.group(cls=_Wheelbuild, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="wheelbuild")
def main() -> None:
    """Build CUDA extension wheels in a reproducible, memory-limited CUDA 13.1 container."""


@main.command(cls=_Configured)
@build_flags
def build(
    package: str | None,
    torch_variant: str,
    torch_index_url: str | None,
    archs: str,
    pythons: tuple[str, ...],
    recipe_version: str | None,
    arch_env: str | None,
    memory: str | None,
    cpus: float | None,
    max_jobs: int | None,
    nvcc_threads: int | None,
    env_pairs: tuple[str, ...],
    gpus: str,
    output_dir: Path,
    admission: bool,
    rebuild: bool,
    gate: bool,
    quiet: bool,
    image_flags: ImageFlags,
    config_file: Path | None,  # read before parsing, by _Configured
) -> None:
    """Build PACKAGE's wheel: a known recipe (flash-attn, wbdemo), a project path, or an sdist
    (path, or URL with #sha256=). Without PACKAGE: the bundled example, wbdemo. Options also come
    from WHEELBUILD_* variables and [tool.wheelbuild] (see `wheelbuild plan`)."""
    spec = BuildSpec(
        recipe=resolve_recipe(package, version=recipe_version, arch_env=arch_env).with_env(
            parse_env(env_pairs)
        ),
        variant=parse_variant(torch_variant, torch_index_url),
        archs=parse_archs(archs),
        pythons=tuple(parse_python(p) for p in pythons),
        gpus=GpuMode(gpus),
        resources=_resources(memory, cpus, max_jobs, nvcc_threads),
        output_dir=output_dir.resolve(),
        rebuild=rebuild,
        admission=admission,
        gate=gate,
    )
    options = image_flags.options()
    reporter = Reporter(quiet=quiet)
    files: config.FileConfig = click.get_current_context().meta.get(_FILES, config.FileConfig())
    if files.values:  # a value the command line did not name: say where it came from
        reporter.info(f"options from files: {files.described()} (`wheelbuild plan` shows each one's source)")
    with DockerEngine(sweep=False) as engine:  # run_build sweeps, and says what it removed
        result = build_pipeline.run_build(spec, options, reporter, engine)
    reporter.step(f"built {len(result.wheels)} wheel(s) in {result.run_dir}")
    for wheel in result.wheels:
        click.echo(f"{wheel.path}")
        _echo_modules(wheel)
        click.echo(f"    requires {', '.join(wheel.torch_requirements)}")
        click.echo(f"    sha256 {wheel.sha256}, {format_bytes(wheel.size)}")
        click.echo(f"    import gate: {result.gate_summary(wheel)}")
    click.echo(f"report: {result.report}")


def _resources(
    memory: str | None, cpus: float | None, max_jobs: int | None, nvcc_threads: int | None
) -> Resources:
    """--memory, --cpus, --max-jobs and --nvcc-threads, checked; None: the planner's to derive."""
    return Resources(
        memory=parse_memory(memory) if memory is not None else None,
        cpus=check_cpus(cpus),
        max_jobs=max_jobs,
        nvcc_threads=nvcc_threads,
    )


def _echo_modules(wheel: WheelInfo) -> None:
    for module in wheel.modules:
        sass = ", ".join(f"sm_{a}" for a in sorted(module.archs.sass)) or "none"
        ptx = ", ".join(f"compute_{a}" for a in sorted(module.archs.ptx)) or "none"
        cudart = ", ".join(module.cudart) or "no libcudart"
        click.echo(f"    {module.member}: SASS {sass}; PTX {ptx}; links {cudart}")


@main.command(cls=_Configured)
@build_flags
def plan(
    package: str | None,
    torch_variant: str,
    torch_index_url: str | None,
    archs: str,
    recipe_version: str | None,
    arch_env: str | None,
    memory: str | None,
    cpus: float | None,
    max_jobs: int | None,
    nvcc_threads: int | None,
    **_build_only: object,  # the other build options: checked by click, shown below, used by build
) -> None:
    """Print the plan (MAX_JOBS, NVCC_THREADS, container limit) and its reasoning, without
    building, then every build option and where its value came from (command line,
    WHEELBUILD_*, [tool.wheelbuild], default): `wheelbuild plan flash-attn --memory 64g --cpus 128`."""
    variant = parse_variant(torch_variant, torch_index_url)
    recipe = resolve_recipe(package, version=recipe_version, arch_env=arch_env)
    planned = preflight.plan_for(
        recipe,
        parse_archs(archs),
        _resources(memory, cpus, max_jobs, nvcc_threads),
        toolkit=preflight.toolkit_for(variant),
    )
    click.echo(format_plan(planned))
    for line in _provenance():
        click.echo(line)


@main.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {check, status, found, remedy}.")
@_torch_index_option("The torch index to reach [default: PyTorch's cu130 index].", type=_TEXT)
@with_image_flags
def doctor_command(as_json: bool, torch_index_url: str | None, image_flags: ImageFlags) -> None:
    """Check that this machine can build, one line each (ok / warn / fail, with a remedy): Docker,
    its memory limit, NVIDIA, free disk, the CA bundle, the torch index, PyPI, NVIDIA's CUDA
    downloads, sccache's shared storage, the base image. Exits non-zero when a build would fail."""
    with DockerEngine(sweep=False, timeout=30) as engine:
        checks = doctor.diagnose(
            lambda: engine.facts(image_flags.base_image),
            os.environ,
            shared_cache_env=SHARED_CACHE_ENV,
            cache=cache_dir(),
            ca_bundle=image_flags.ca_bundle,
            torch_index_url=torch_index_url,
            cuda12_image=image_flags.cuda12_image,
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
@_torch_option("Variant whose headers and nvcc to use.", default="cu130", show_default=True)
@_torch_index_option("Index to take torch from.", type=_TEXT)
@click.option("--version", "recipe_version", help="Release of the recipe [default: its default].")
@click.option(
    "--archs",
    "archs_options",
    multiple=True,
    help="Archs compiled at once; repeatable (--archs 100,120 --archs 100) [default: 100,120].",
)
@click.option("--threads", default="1", show_default=True, help="NVCC_THREADS values, e.g. 1,2.")
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Units to sample across families.",
)
@click.option(
    "--unit",
    "unit_names",
    multiple=True,
    help="Measure this unit (file name); repeatable; overrides --sample.",
)
@click.option("--memory", help="Each compile's container limit [default: this machine's, less a reserve].")
@click.option(
    "--compare",
    type=_PATH,
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
    with DockerEngine() as engine:
        result = calibrating.run_calibration(
            recipe=resolve_recipe(package, version=recipe_version),
            variant=parse_variant(torch_variant, torch_index_url),
            archs_options=[parse_archs(a) for a in archs_options] or [DEFAULT_ARCHS],
            threads_options=thread_values,
            sample=sample,
            unit_names=unit_names,
            memory=parse_memory(memory) if memory is not None else None,
            options=image_flags.options(),
            reporter=Reporter(),
            engine=engine,
            reference=compare,
        )
    for line in result.comparisons:
        click.echo(f"compared: {line}")
    click.echo(f"measurements: {result.measured}")
    click.echo(f"profile: {result.profile} ({result.model.source})")


@main.command("gc")
@click.option(
    "--output-dir",
    type=_PATH,
    default=DEFAULT_OUTPUT_DIR,
    show_default=True,
    help="The builds' output dir: its runs/ is pruned; the published trees in it are read, never touched.",
)
@click.option(
    "--keep-runs",
    type=click.IntRange(min=0),
    default=gc.DEFAULT_KEEP_RUNS,
    show_default=True,
    help="Keep the newest N runs (and stored results); a run whose wheels were published is always kept.",
)
@click.option(
    "--caches",
    is_flag=True,
    help="Also remove the compiler, pip and torch-download caches (wheelbuild-sccache, "
    "wheelbuild-pip-cache, wheelbuild-torch-wheels) that no container mounts.",
)
@click.option(
    "-n", "--dry-run", is_flag=True, help="Say what would be removed and how much it frees; remove nothing."
)
@click.option(
    "--scope",
    envvar=gc.SCOPE_ENV,
    hidden=True,
    help="Tests only: the name prefix of the images and volumes gc sees.",
)
@with_image_flags
def gc_command(
    output_dir: Path,
    keep_runs: int,
    caches: bool,
    dry_run: bool,
    scope: str | None,
    image_flags: ImageFlags,
) -> None:
    """Remove old runs, stored results, build images and calibrate's torch volumes; keep what a
    published wheel or the newest runs need, the current inputs' image, and all a container uses.
    The image flags name the current inputs, as for build."""
    options = prune.GcOptions(
        output_dir=output_dir.resolve(),
        store=cache_dir() / "results",
        keep_runs=keep_runs,
        caches=caches,
        scope=gc.parse_scope(scope),
        image_options=image_flags.options(),
    )
    reporter = Reporter()
    with DockerEngine(sweep=False).connect() as engine:  # a dry run removes nothing, not even orphans
        planned = prune.collect(engine, options, reporter.step)
        for decision in planned.decisions:
            click.echo(decision.line(dry_run))
        if dry_run or not planned.removals:
            click.echo(gc.summary(planned))
            return
        reporter.step(f"removing {len(planned.removals)} item(s)")
        removals = prune.execute(engine, planned, options, reporter.info)
    click.echo(gc.summary(planned, removals))
    gc.check(removals)


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
def image_build(image_flags: ImageFlags, with_cuda12: bool) -> None:
    """Build the image for these inputs, or reuse it if its content-hash tag exists."""
    reporter = Reporter()
    options = replace(image_flags.options(), cuda12_redist=with_cuda12)
    with DockerEngine().connect() as engine:
        inputs = preflight.image_inputs(engine, options)
        built = preflight.ensure_image(engine, inputs, reporter)
    click.echo(built.tag)


@image.command("ls")
def image_ls() -> None:
    """List wheelbuild images and the inputs their labels record."""
    with DockerEngine().connect() as engine:
        images = engine.list_images()
    if not images:
        click.echo("no wheelbuild images; `wheelbuild image build` or `wheelbuild build` makes one")
    for found in images:
        labels = found.labels
        click.echo(
            f"{found.tag}  {found.id[7:19]}  base {labels.get('org.opencontainers.image.base.name', '?')}  "
            f"cuda {labels.get('org.wheelbuild.cuda.version', '?')}  "
            f"cuda12 {found.cuda12_image or 'none'}"
            + (f" ({found.cuda12_pins})" if found.cuda12_pins else "")
        )


@main.command()
@click.argument("wheels", nargs=-1, required=True, type=_PATH)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per wheel, in a list).")
def inspect(wheels: tuple[Path, ...], as_json: bool) -> None:
    """Show what a wheel really holds: name, version, tags, sha256, its torch requirement, the
    CUDA runtime and the SASS/PTX archs of every extension module (read from .nv_fatbin)."""
    infos = [check.inspect_or_refuse(path) for path in wheels]
    if as_json:
        click.echo(
            json.dumps(
                [{**info.to_json(), "gate": check.describe_gate(info.path)} for info in infos], indent=2
            )
        )
        return
    for info in infos:
        click.echo(info.path.name)
        click.echo(f"    {info.name} {info.version}; tags {', '.join(info.tags)}")
        click.echo(f"    sha256 {info.sha256}, {format_bytes(info.size)}")
        click.echo(f"    requires {', '.join(info.torch_requirements) or 'no torch'}")
        _echo_modules(info)
        gate = check.describe_gate(info.path)
        click.echo(f"    import gate {gate['status']}: {gate['detail']}")


@main.command("report")
@click.argument("run", type=_PATH)
def report_command(run: Path) -> None:
    """Write build-report.html for a run (its folder, wheelhouse/runs/<run-id>, or its
    build-report.json) and print its path: memory over time per attempt, units, attempts."""
    click.echo(report_html.write_beside(run / "build-report.json" if run.is_dir() else run))


@main.command("publish")
@click.argument("wheels", nargs=-1, required=True, type=_PATH)
@click.option(
    "--to",
    "target",
    default=remote.DEFAULT_TO,
    show_default=True,
    help="A wheelhouse tree: a directory or [user@]host:path (ssh+rsync), where {variant} stands "
    "for the wheels' CUDA tag; or an http(s) upload URL (pypiserver, devpi; credentials from "
    "TWINE_USERNAME/TWINE_PASSWORD or keyring).",
)
@_torch_option("Variant the wheels were built for [default: the build report beside them].")
@click.option("--archs", help="SASS that must be present [default: the build report's, else 100,120].")
def publish_command(
    wheels: tuple[Path, ...], target: str, torch_variant: str | None, archs: str | None
) -> None:
    """Check wheels (archs, version label, torch pin), then add them to a wheelhouse tree and
    regenerate its static index (PEP 503/691/658/700, under a lock, atomically)."""
    remote.parse_target(target)  # a bad --to fails before the wheels are read
    groups = check.check_wheels(
        wheels,
        parse_variant(torch_variant) if torch_variant is not None else None,
        parse_archs(archs) if archs is not None else None,
        on_note=lambda note: click.echo(f"note: {note}", err=True),
    )
    for tag, (_variant, paths) in groups.items():
        _publish_to(remote.target_for(target, tag, several=len(groups) > 1), paths)


def _publish_to(where: Path | remote.UploadEndpoint | remote.RsyncTarget, wheels: tuple[Path, ...]) -> None:
    inputs = {w.name: key for w in wheels if (key := check.inputs_key_beside(w))}
    if isinstance(where, remote.UploadEndpoint):
        remote.upload(wheels, where)
        prune.record_published(wheels, where.url)  # gc keeps a run whose wheels were published
        for wheel in wheels:
            click.echo(f"uploaded {wheel.name} to {where.url}")
        return
    if isinstance(where, remote.RsyncTarget):
        mirror = remote.mirror_dir(where, cache_dir())
        result = remote.publish_rsync(wheels, where, mirror, Reporter().info, inputs)
    else:
        result = publishing.publish(wheels, where, inputs=inputs)
    prune.record_published(wheels, str(where))
    for name in result.added:
        click.echo(f"added {name}")
    for name in result.present:
        click.echo(f"already there, same sha256: {name}")
    click.echo(f"index: {where}/simple ({len(result.pages)} page(s) written)")


@main.command()
@click.argument("target")
@click.option(
    "--wheelhouse",
    "root",
    required=True,
    type=_PATH,
    help="The tree, e.g. wheelhouse/cu130.",
)
@click.option("--reason", default="", help="Why (shown by pip and uv).")
@click.option("--undo", is_flag=True, help="Take a yank back.")
def yank(target: str, root: Path, reason: str, undo: bool) -> None:
    """Yank (PEP 592) the wheels TARGET names: a file name, or PROJECT==VERSION. Installers skip
    a yanked file unless it is pinned exactly; nothing is deleted."""
    result = publishing.unyank(root, target) if undo else publishing.yank(root, target, reason)
    for name in result.changed:
        click.echo(f"{'unyanked' if undo else 'yanked'} {name}")
    for name in result.unchanged:
        click.echo(f"unchanged {name}")


@main.command()
@click.argument("directory", required=False, type=_PATH)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free one."
)
@click.option("--htpasswd", type=_PATH, help="Require basic auth (bcrypt or {SHA} entries).")
@click.option("--access-log", type=_PATH, help="Also append the access log here.")
def serve(
    directory: Path | None, host: str, port: int, htpasswd: Path | None, access_log: Path | None
) -> None:
    """Serve a wheelhouse tree over HTTP for pip and uv (PEP 691 by Accept, Range requests,
    404 for unknown projects). DIRECTORY defaults to the one tree under ./wheelhouse."""
    if not host.strip():
        raise BadArgument(
            f"--host {host!r} is empty, which would listen on every interface",
            "give the address to listen on: --host 127.0.0.1, or --host 0.0.0.0 to serve every interface on purpose",
        )
    if htpasswd is not None and not _is_file(htpasswd):  # a directory, or /dev/zero read forever
        raise BadHtpasswd(
            f"--htpasswd {htpasswd} is not a file",
            "give a file of user:hash lines (htpasswd -B makes bcrypt ones)",
        )
    if access_log is not None:
        _check_access_log(access_log)
    root = directory or publishing.only_tree(Path("wheelhouse"))
    try:  # serve looks for the index with is_file(), which raises (not False) on a name too long
        (root / "simple" / "index.html").stat()
    except (FileNotFoundError, NotADirectoryError):
        pass  # serve says there is no index, and what to do
    except OSError as error:
        raise BadArgument(
            f"{root} cannot be served: {error.strerror or error}",
            "name a tree, e.g. wheelbuild serve wheelhouse/cu130",
        ) from None
    serving.serve(root, host=host, port=port, htpasswd=htpasswd, access_log=access_log, echo_log=True)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the file system
        return False


def _check_access_log(path: Path) -> None:
    """Open the access log as the server will (append), so that a directory or an unwritable path
    is refused before the server starts, not as a traceback from its logging setup."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as error:
        raise BadArgument(
            f"--access-log {path} cannot be written: {error.strerror or error}",
            "name a file in a directory you can write, e.g. --access-log serve-access.log",
        ) from None


@main.command("matrix")
@click.option("--config", type=_PATH, default=Path("wheelbuild.toml"), show_default=True)
@click.option(
    "--format",
    "output",
    type=click.Choice(["github", "lines", "publish-to"]),
    default="github",
    show_default=True,
    help="github: a strategy.matrix JSON value; lines: `ID ARGS...` per cell (scripts/nightly); "
    "publish-to: where the wheels go.",
)
@click.option(
    "--skip-published",
    type=_PATH,
    help="A wheelhouse tree: leave out cells whose build inputs (source, image, torch, archs, "
    "Python, tools) made a wheel it holds.",
)
@_torch_index_option("As for build (part of the inputs).", type=_TEXT)
@_track_option(
    "latest: add each versioned package's newest release on the index (WHEELBUILD_SIMPLE_INDEX) "
    "and each CUDA tag's newest torch on its torch index."
)
@with_image_flags
def matrix_command(
    config: Path,
    output: str,
    skip_published: Path | None,
    track: str | None,
    torch_index_url: str | None,
    image_flags: ImageFlags,
) -> None:
    """Print the nightly matrix wheelbuild.toml declares: one cell per package, version, torch
    variant, Python and arch list."""
    declared = _declared_matrix(config, track, torch_index_url)
    cells = declared.cells
    if skip_published and output != "publish-to":
        options = image_flags.options()
        with DockerEngine() as engine:  # asked only for a local base's image ID
            cells = matrix_runs.unpublished_cells(cells, skip_published, options, torch_index_url, engine)
        click.echo(
            f"matrix: {len(declared.cells) - len(cells)} of {len(declared.cells)} cell(s) already published",
            err=True,
        )
    if output == "github":
        click.echo(matrix.github_matrix(cells))
    elif output == "lines":
        for cell in cells:
            click.echo(f"{cell.id} {shlex.join(cell.build_args())}")
    else:
        click.echo(declared.publish_to)


# ---------------------------------------------------------------------------------------------
# wheelbuild nightly: the workflow's three jobs (and scripts/nightly), logic in wheelbuild.nightly.

_nightly_config = click.option(
    "--config", type=click.Path(path_type=Path), default=Path("wheelbuild.toml"), show_default=True
)
_nightly_torch_index = _torch_index_option("As for build (part of the inputs).")
_nightly_track = _track_option(
    "latest: add each versioned package's newest release and each CUDA tag's newest torch.",
    envvar="WHEELBUILD_NIGHTLY_TRACK",
)
_nightly_to = click.option(
    "--to", help="The publish target [default: NIGHTLY_PUBLISH_TO, else [publish] to]."
)


def _declared_matrix(config: Path, track: str | None, torch_index_url: str | None) -> matrix.Matrix:
    declared = matrix.load_matrix(config)
    if track != "latest":
        return declared
    versioned = sorted({c.package for c in declared.cells if c.version})
    variants = {parse_variant(c.torch, torch_index_url) for c in declared.cells}
    torches = {v.tag: newest_torch(v.tag, v.index_url) for v in variants}
    return matrix.tracking(
        declared, {p: newest_release(p) for p in versioned}, {t: v for t, v in torches.items() if v}
    )


@main.group()
def nightly() -> None:
    """The nightly: plan the cells, build one cell, publish what passed (see README, Nightly).
    Builds use the production base; WHEELBUILD_BASE_IMAGE is ignored here."""


@nightly.command("plan")
@_nightly_config
@click.option(
    "--format",
    "output",
    type=click.Choice(["github", "lines", "json"]),
    default="json",
    show_default=True,
    help="github: `cells=` and `count=` lines for $GITHUB_OUTPUT; lines: `ID [args]` per cell; json: the plan.",
)
@_nightly_to
@click.option(
    "--index",
    "index_url",
    help="A remote target's index URL [default: NIGHTLY_INDEX_URL, else [publish] index].",
)
@click.option(
    "--save",
    type=click.Path(path_type=Path),
    help="Also write the plan as JSON here (publish-night reads it).",
)
@_nightly_torch_index
@_nightly_track
def nightly_plan(
    config: Path,
    output: str,
    to: str | None,
    index_url: str | None,
    save: Path | None,
    torch_index_url: str | None,
    track: str | None,
) -> None:
    """The cells to build tonight: those that can be built, less those already published."""
    from . import nightly as night

    reporter = Reporter(sys.stderr)
    with DockerEngine() as engine:  # asked only for a local test base
        planned = night.plan_night(
            _declared_matrix(config, track, torch_index_url),
            os.environ,
            to=to,
            index_url=index_url,
            torch_index_url=torch_index_url,
            reporter=reporter,
            engine=engine,
        )
    for skipped in planned.skipped:
        reporter.info(f"skipped {skipped.cell.id}: {skipped.why}")
    reporter.info(
        f"{len(planned.build)} cell(s) to build, {len(planned.published)} already published, "
        f"{len(planned.skipped)} skipped"
    )
    document = json.dumps(planned.to_json(), indent=2)
    if save:
        save.parent.mkdir(parents=True, exist_ok=True)
        save.write_text(document + "\n")
    text = {"github": night.github_output, "lines": night.lines_output}.get(output)
    printed = text(planned) if text else document
    if printed:  # no cell, no line: scripts/nightly counts lines
        click.echo(printed)


@nightly.command("build-cell")
@click.argument("cell_id")
@_nightly_config
@click.option("--out", type=click.Path(path_type=Path), required=True, help="The cell's output folder.")
@click.option("-q", "--quiet", is_flag=True, help="Leave out cibuildwheel's lines (they are in build.log).")
@_nightly_torch_index
@_nightly_track
def nightly_build_cell(
    cell_id: str, config: Path, out: Path, quiet: bool, torch_index_url: str | None, track: str | None
) -> None:
    """Build one cell of the plan (import gate included) on the production base; OUT/cell.json
    records the outcome, a failure too."""
    from . import nightly as night

    with DockerEngine(sweep=False) as engine:  # run_build sweeps, and says what it removed
        result = night.build_cell(
            _declared_matrix(config, track, torch_index_url),
            cell_id,
            out,
            os.environ,
            torch_index_url=torch_index_url,
            reporter=Reporter(quiet=quiet),
            engine=engine,
        )
    for wheel in result.wheels:
        click.echo(f"built {wheel.path}")


@nightly.command("publish-night")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@_nightly_config
@_nightly_to
def nightly_publish_night(dirs: tuple[Path, ...], config: Path, to: str | None) -> None:
    """Publish the wheels of every cell under DIRS whose report says all checks and the gate
    passed; report the others; write the coverage table ($GITHUB_STEP_SUMMARY, coverage.html)."""
    from . import nightly as night

    result = night.publish_night(
        dirs, matrix.load_matrix(config), os.environ, to=to, say=Reporter(sys.stderr).info
    )
    click.echo(night.coverage_markdown(result.rows), nl=False)
    for page in result.pages:
        click.echo(f"coverage page: {page}")


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run() -> None:
    """Entry point: renders every WheelbuildError once, as cause and remedy, with its exit code."""
    signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM cleans up exactly like Ctrl-C
    try:
        main.main(standalone_mode=False)
    except WheelbuildError as error:  # raised outside a command (the group's own arguments)
        _fail(error)
    except click.exceptions.Abort:
        click.echo("error: interrupted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("error: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
