"""What the commands share: how an error is shown, the group that renders it, path and text
types that refuse '', the option groups several commands take, and the build options' files."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TypedDict, TypeVar, Unpack

import click

from ..errors import WheelbuildError
from ..host.ca_bundle import resolve_ca_bundle
from ..host.gpu import GpuMode
from ..recipes import chosen_package, default_package, known_recipes
from ..run import image_options
from ..spec import config
from ..spec.build_spec import DEFAULT_OUTPUT_DIR, MAX_CPUS, TORCH_RANGE_OLDER
from ..variants import DEFAULT_ARCHS
from .params import GIVEN_PATH, GIVEN_TEXT, REPEATABLE, joined_list


def fail_with(error: WheelbuildError) -> NoReturn:
    """The one place a WheelbuildError is shown: its details, cause and remedy, then its exit code."""
    if error.details:
        click.echo(error.details, err=True)
    click.echo(f"error: {error.cause}", err=True)
    click.echo(f"remedy: {error.remedy}", err=True)
    sys.exit(error.exit_code)


class WheelbuildGroup(click.Group):
    """Renders every WheelbuildError a command raises (here, not only in `run`, so that a command
    run in process, e.g. by click's CliRunner, says the same). `wheelbuild flash-attn ...` is the
    short form of `wheelbuild build flash-attn ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] in known_recipes():
            args = ["build", *args]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except WheelbuildError as error:
            fail_with(error)


# ---------------------------------------------------------------------------------------------
# Options that several commands take, each declared once: a group is one decorator; an option
# whose help differs per command is a factory that takes its help.

_TORCH_INDEX_ENV = "WHEELBUILD_TORCH_INDEX_URL"
_F = TypeVar("_F", bound=Callable[..., object])
CommandFunction = Callable[..., object]
Decorator = Callable[[CommandFunction], CommandFunction]


class OptionSettings(TypedDict, total=False):
    """What a shared option's command may set besides its help (click.option's own keywords)."""

    default: object
    envvar: str
    show_default: bool | str
    show_envvar: bool
    is_flag: bool
    multiple: bool
    type: click.ParamType[object] | type[object]
    callback: Callable[[click.Context, click.Parameter, tuple[str, ...]], object]


def _options(*options: Decorator) -> Decorator:
    """Several click options as one decorator, shown in --help in the order listed."""

    def apply(f: CommandFunction) -> CommandFunction:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


def torch_option(help: str, **kwargs: Unpack[OptionSettings]) -> Callable[[_F], _F]:
    """--torch: the torch variant (cu130, cu128, ... or 2.11.0+cu130)."""
    return click.option("--torch", "torch_variant", help=help, **kwargs)


def torch_index_option(help: str, **kwargs: Unpack[OptionSettings]) -> Callable[[_F], _F]:
    """--torch-index-url (WHEELBUILD_TORCH_INDEX_URL): the index torch comes from."""
    kwargs.setdefault("show_envvar", True)
    return click.option("--torch-index-url", envvar=_TORCH_INDEX_ENV, help=help, **kwargs)


def track_option(help: str, **kwargs: Unpack[OptionSettings]) -> Callable[[_F], _F]:
    """--track latest: the matrix with each package's newest release and each tag's newest torch."""
    kwargs.setdefault("show_envvar", True)
    return click.option("--track", type=click.Choice(["latest"]), help=help, **kwargs)


@dataclass(frozen=True)
class ImageFlags:
    """--base-image, --ca-bundle and --cuda12-image as given, handed to a command as one value."""

    base_image: str | None
    ca_bundle: Path | None
    cuda12_image: str | None
    base_image_from: str = ""  # where base_image was set: --base-image, WHEELBUILD_BASE_IMAGE, a file

    def options(self) -> image_options.ImageOptions:
        """The image options a build with these flags uses (the CA bundle checked, or the host's)."""
        return image_options.ImageOptions(
            base_image=self.base_image,
            ca_bundle=resolve_ca_bundle(self.ca_bundle),
            cuda12_image=self.cuda12_image,
        )


_image_flags = _options(
    click.option(
        "--base-image",
        envvar="WHEELBUILD_BASE_IMAGE",
        show_envvar=True,
        type=GIVEN_TEXT,
        help="Base for the build image [default: manylinux_2_28 pinned by cibuildwheel; "
        "tests use scripts/make-base-image].",
    ),
    click.option(
        "--ca-bundle",
        envvar="WHEELBUILD_CA_BUNDLE",
        show_envvar=True,
        type=GIVEN_PATH,
        help="PEM bundle trusted inside builds (TLS proxies) [default: the host's bundle].",
    ),
    click.option(
        "--cuda12-image",
        envvar="WHEELBUILD_CUDA12_IMAGE",
        show_envvar=True,
        type=GIVEN_TEXT,
        help="NVIDIA CUDA 12.8+ devel image (pinned by digest) whose compiler serves cu12x variants.",
    ),
)


def with_image_flags(f: CommandFunction) -> CommandFunction:
    """The image flags (build, plan, doctor, calibrate, gc, image build, matrix), passed to the
    command as one ImageFlags argument named `image_flags`."""

    @functools.wraps(f)
    def command(
        *args: object,
        base_image: str | None,
        ca_bundle: Path | None,
        cuda12_image: str | None,
        **kwargs: object,
    ) -> object:
        flags = ImageFlags(base_image, ca_bundle, cuda12_image, option_source("base-image"))
        return f(*args, image_flags=flags, **kwargs)

    return _image_flags(command)


def _config_file_option(help: str) -> Decorator:
    """--config-file (WHEELBUILD_CONFIG_FILE): where a ConfiguredCommand reads [tool.wheelbuild]."""
    return click.option(
        "--config-file", type=GIVEN_PATH, envvar="WHEELBUILD_CONFIG_FILE", show_envvar=True, help=help
    )


def reads_build_config(f: CommandFunction) -> CommandFunction:
    """--config-file for a ConfiguredCommand that shares some of build's options (doctor, gc), so
    that it reads them from the same files as build. The file is read before parsing; the command
    itself is not passed it."""

    @functools.wraps(f)
    def command(*args: object, config_file: Path | None, **kwargs: object) -> object:
        return f(*args, **kwargs)

    return _config_file_option(
        "TOML file whose [tool.wheelbuild] table sets this command's options that build takes too, "
        "as for build [default: ./wheelbuild.toml when present]."
    )(command)


def _build_option(
    key: str, *decls: str, help: str | None = None, **kwargs: Unpack[OptionSettings]
) -> Decorator:
    """A build option with the WHEELBUILD_* variable builder/spec/config.py names for its key."""
    return click.option(*decls, envvar=config.BY_KEY[key].env, show_envvar=True, help=help, **kwargs)


# Every option of `build`, which `plan` takes too: each also from WHEELBUILD_<KEY> and from
# [tool.wheelbuild] (builder/spec/config.py lists the same keys; a test keeps the two in step).
_build_flags = (
    torch_option(
        "cu130, cu128, ... or 2.11.0+cu130.",
        envvar=config.BY_KEY["torch"].env,
        show_envvar=True,
        default="cu130",
        show_default=True,
    ),
    torch_index_option(
        "Index to install torch from [default: PyTorch's index for the variant].",
        show_envvar=True,
        type=GIVEN_TEXT,
    ),
    _build_option(
        "archs",
        "--archs",
        multiple=True,
        callback=joined_list,
        default=(",".join(map(str, DEFAULT_ARCHS)),),
        show_default=True,
        help="CUDA SM archs to compile SASS for, plain numbers, comma-separated (120+PTX: its PTX too; a "
        f"package's own 90a or 100f variant is kept); {REPEATABLE} (the variable: space-separated).",
    ),
    _build_option(
        "python",
        "--python",
        "pythons",
        multiple=True,
        help=f"3.11 or cp311; {REPEATABLE} (the variable: space-separated) [default: every one in the image].",
    ),
    _build_option(
        "version",
        "--version",
        "recipe_version",
        help="Release of a known recipe (flash-attn 2.8.3) to build; not wheelbuild's own version, which "
        "`wheelbuild --version` prints.",
    ),
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
        help=f"KEY=VALUE for the build's environment; {REPEATABLE} (the variable: space-separated).",
    ),
    _build_option(
        "gpus",
        "--gpus",
        type=click.Choice([m.value for m in GpuMode]),
        default="auto",
        show_default=True,
        help="Pass the GPUs to the build's containers and the import gate (its GPU smoke test needs one): "
        "auto (when Docker has the NVIDIA runtime), all (fail without it), none. Compiling needs none.",
    ),
    _build_option(
        "output-dir",
        "--output-dir",
        type=GIVEN_PATH,
        default=DEFAULT_OUTPUT_DIR,
        show_default=True,
        help="Where each run's folder goes (OUTPUT_DIR/runs/<run-id>: wheels, build.log, build-report.json).",
    ),
    _build_option(
        "admission",
        "--admission/--no-admission",
        default=True,
        show_default=True,
        help="Admit compiles by memory: MAX_JOBS up to the CPUs, each compile waiting until its predicted "
        "peak fits. --no-admission: the static plan alone.",
    ),
    _build_option(
        "cicc-gate",
        "--cicc-gate/--no-cicc-gate",
        default=True,
        show_default=True,
        help="With admission, admit each cicc on its own too: a compile waits at its cost outside cicc, "
        "each cicc until its own peak fits. --no-cicc-gate: admit each compile at its whole peak.",
    ),
    _build_option(
        "dist",
        "--dist",
        type=GIVEN_TEXT,
        help="Send compiles to this sccache-dist scheduler (http://HOST:PORT); its token from "
        "$WHEELBUILD_DIST_TOKEN or --dist-token-file.",
    ),
    _build_option(
        "dist-network", "--dist-network", type=GIVEN_TEXT, help="Docker network the build joins to reach it."
    ),
    _build_option(
        "dist-token-file", "--dist-token-file", type=GIVEN_PATH, help="File holding the scheduler's token."
    ),
    _build_option(
        "dist-servers",
        "--dist-servers",
        type=GIVEN_TEXT,
        help="The build servers, COUNTxCORESxMEMORY (2x16x64g), for the plan.",
    ),
    _build_option(
        "keep-package-archs",
        "--keep-package-archs",
        is_flag=True,
        help="Compile the archs the package's own build files name (an arch-specific kernel) instead of "
        "exactly --archs; the check then allows their extra SASS.",
    ),
    _build_option(
        "build-network",
        "--build-network",
        is_flag=True,
        help="Keep the network on while the package builds (by default the build container is taken "
        "off it, so no setup.py fetches a prebuilt binary); for a package that truly needs it.",
    ),
    _build_option(
        "compiler-cache",
        "--compiler-cache/--no-compiler-cache",
        default=True,
        show_default=True,
        help="Compile through the machine's sccache (retries and rebuilds resume from it); "
        "--no-compiler-cache compiles every unit for real.",
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
        "torch-range",
        "--torch-range/--no-torch-range",
        default=True,
        show_default=True,
        help="After the gate, load each wheel under the torch releases around its own (same CUDA major: "
        "the newest patch of each minor, every newer one and --torch-range-older older ones), each "
        "checked first against that torch's exported symbols, and report the range it loads with.",
    ),
    _build_option(
        "torch-range-older",
        "--torch-range-older",
        type=click.IntRange(min=0, max=20),
        default=TORCH_RANGE_OLDER,
        show_default=True,
        help="How many minors older than the build's torch the range tries.",
    ),
    _build_option(
        "pin",
        "--pin",
        type=click.Choice(["built", "proven"]),
        default="built",
        show_default=True,
        help="What the wheel requires of torch: the minor it was built with (torch==2.14.*), or the "
        "contiguous range it loaded with (torch>=2.12,<2.15; needs --torch-range).",
    ),
    _build_option(
        "verbose",
        "-v/-q",
        "--verbose/--quiet",
        default=False,
        help="Show cibuildwheel's full log as it runs (the run's build.log has it either way), or "
        "not: the default prints the steps, a status line at least every 15 s and the summaries.",
    ),
    with_image_flags,
    _config_file_option(
        "TOML file whose [tool.wheelbuild] table sets these options [default: ./wheelbuild.toml "
        "when present]; PACKAGE/pyproject.toml's [tool.wheelbuild] ranks below it."
    ),
)


_example_option = click.option(
    "--example",
    is_flag=True,
    help="Build the bundled example extension, wbdemo, instead of a project (the same as PACKAGE wbdemo).",
)


def build_flags(f: CommandFunction) -> CommandFunction:
    """build's options (plan takes them too), PACKAGE and --example passed to the command as one
    `package`: what to build (recipes.chosen_package: PACKAGE, the example, or `.`)."""

    @functools.wraps(f)
    def command(*args: object, package: str | None, example: bool, **kwargs: object) -> object:
        return f(*args, package=chosen_package(package, example=example), **kwargs)

    return click.argument("package", required=False)(_options(_example_option, *_build_flags)(command))


CONFIG_FILES_KEY = (
    "wheelbuild.spec.config"  # ctx.meta key: the FileConfig the command's options were read with
)
_ORIGINS: dict[click.core.ParameterSource | None, config.Origin] = {
    click.core.ParameterSource.COMMANDLINE: config.Origin.COMMAND_LINE,
    click.core.ParameterSource.ENVIRONMENT: config.Origin.ENVIRONMENT,
    click.core.ParameterSource.DEFAULT_MAP: config.Origin.FILE,
}


class ConfiguredCommand(click.Command):
    """A command whose options may come from files: [tool.wheelbuild] becomes click's default_map
    before the arguments are parsed, so click itself ranks command line > WHEELBUILD_* > file >
    default and records each value's source. PACKAGE (when the command takes one) and
    --config-file are read first, with click's own parser, because they say which files to read.
    A command with only some of build's options (doctor, gc) takes the keys it has and has the
    file checked whole, so that it reads the file exactly as build does."""

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
            named = opts.get("package")
            package = default_package(
                named if isinstance(named, str) else None, example=opts.get("example") is True
            )
            files = config.load_config(config.find_project(package, known_recipes()), config_file)
            ctx.default_map = {**(ctx.default_map or {}), **files.default_map()}
            ctx.meta[CONFIG_FILES_KEY] = files
        return super().parse_args(ctx, args)


def _files(ctx: click.Context) -> config.FileConfig:
    files: config.FileConfig = ctx.meta.get(CONFIG_FILES_KEY, config.FileConfig())
    return files


def _resolved(ctx: click.Context, option: config.Option) -> config.Resolved:
    return config.Resolved(
        option,
        ctx.params[option.param],
        _ORIGINS.get(ctx.get_parameter_source(option.param), config.Origin.DEFAULT),
    )


def option_source(key: str) -> str:
    """Where the current command's value of a build option came from, as a user would name it:
    `--base-image`, `WHEELBUILD_BASE_IMAGE`, `wheelbuild.toml's base-image`; '' for the default."""
    ctx = click.get_current_context()
    item = _resolved(ctx, config.BY_KEY[key])
    named = config.source_name(item, _files(ctx))
    return f"{named}'s {key}" if item.origin is config.Origin.FILE else named


def provenance() -> list[str]:
    """Each build option's value and where it came from, by click's record of its source."""
    ctx = click.get_current_context()
    files = _files(ctx)
    resolved = [_resolved(ctx, option) for option in config.OPTIONS]
    read = ", ".join(files.files) or "none"
    return [
        f"options (command line > WHEELBUILD_* > file > default; files: {read}):",
        *config.provenance(resolved, files),
    ]
