"""What the commands share: how an error is shown, the group that renders it, the option groups
several commands take, build's options made from the rows of spec/option_table.py (each row one
click option: table_option), and the files those options are read from."""

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
from ..image import options as image_options
from ..recipes import chosen_package, default_package, known_recipes
from ..spec import config, option_table
from ..spec.option_table import LIST_KINDS
from .params import GIVEN_PATH, GIVEN_TEXT, BoundedInt, NearChoice, RenamedOption, joined_list


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
# Options that several commands take, each declared once: build's are the option table's rows; a
# group is one decorator; an option whose help differs per command is a factory that takes its help.

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
    callback: (
        Callable[[click.Context, click.Parameter, tuple[str, ...]], object]
        | Callable[[click.Context, click.Parameter, str | None], object]
    )


def _options(*options: Decorator) -> Decorator:
    """Several click options as one decorator, shown in --help in the order listed."""

    def apply(f: CommandFunction) -> CommandFunction:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


def _decls(option: option_table.Option) -> list[str]:
    """A row's names as click takes them: its short names (-v/-q), its switch (--gate/--no-gate),
    its old names, then its parameter when click would not derive it from the switch."""
    old = [f"--{name}/--no-{name}" if option.off else f"--{name}" for name in option.old_names]
    decls = [option.switch, *old]
    if option.short:
        decls.insert(0, option.short)
    if option.param != option.key.replace("-", "_"):
        decls.append(option.param)
    return decls


def _click_type(option: option_table.Option) -> click.ParamType[object] | None:
    """The click type for a row's kind; None where click's own (a flag, text that may be empty)."""
    if option.choices:
        return NearChoice(list(option.choices))
    if option.kind is config.Kind.INT:
        return BoundedInt(*option.bounds) if option.bounds else click.INT
    if option.kind is config.Kind.NUMBER:
        return click.FLOAT
    if option.kind is config.Kind.PATH:
        return GIVEN_PATH
    if option.kind is config.Kind.TEXT and option.refuse_empty:
        return GIVEN_TEXT
    return None


class _RowSettings(OptionSettings, total=False):
    """What a row sets of click.option's keywords, besides those a shared option may."""

    help: str
    hidden: bool
    cls: type[click.Option]
    old_names: tuple[str, ...]  # RenamedOption's


def _index_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """--torch-index-url checked before anything reads it: a URL a request can go to."""
    if value is not None:
        option_table.checked_index_url(value)
    return value


def table_option(option: option_table.Option) -> Decorator:
    """One row of the options table (spec/option_table.py) as a click option: its names, help,
    type, default and WHEELBUILD_* variable, repeatable when it takes a list."""
    settings: _RowSettings = {"envvar": option.env, "show_envvar": True, "help": option.help}
    if (param_type := _click_type(option)) is not None:
        settings["type"] = param_type
    listed = option.kind in LIST_KINDS
    if listed:
        settings["multiple"] = True
    if option.kind is config.Kind.ARCHS:
        settings["callback"] = joined_list
    if option.key == "torch-index-url":
        settings["callback"] = _index_url
    if option.kind is config.Kind.BOOL and not option.off:
        settings["is_flag"] = True
    if option.default is not None:
        settings["default"] = (option.default,) if listed else option.default
        if option.show_default:
            settings["show_default"] = True
    if option.hidden:
        settings["hidden"] = True
    if option.old_names:
        settings["cls"] = RenamedOption
        settings["old_names"] = option.old_flags
    return click.option(*_decls(option), **settings)


def torch_option(help: str, **kwargs: Unpack[OptionSettings]) -> Callable[[_F], _F]:
    """--torch: the torch variant (cu130, cu128, ... or 2.11.0+cu130), with this command's help."""
    return click.option(*_decls(option_table.BY_KEY["torch"]), help=help, **kwargs)


def torch_index_option(help: str, **kwargs: Unpack[OptionSettings]) -> Callable[[_F], _F]:
    """--torch-index-url (WHEELBUILD_TORCH_INDEX_URL): the index torch comes from, with this
    command's help."""
    option = option_table.BY_KEY["torch-index-url"]
    kwargs.setdefault("show_envvar", True)
    return click.option(*_decls(option), envvar=option.env, help=help, callback=_index_url, **kwargs)


def track_option(help: str, **kwargs: Unpack[OptionSettings]) -> Callable[[_F], _F]:
    """--track latest: the matrix with each package's newest release and each tag's newest torch."""
    kwargs.setdefault("show_envvar", True)
    return click.option("--track", type=NearChoice(["latest"]), help=help, **kwargs)


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


IMAGE_KEYS = ("base-image", "ca-bundle", "cuda12-image")  # the table's rows with_image_flags takes
_image_flags = _options(*(table_option(option_table.BY_KEY[key]) for key in IMAGE_KEYS))


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


_build_config_file = _config_file_option(
    "TOML file whose [tool.wheelbuild] table sets these options [default: ./wheelbuild.toml "
    "when present]; PACKAGE/pyproject.toml's [tool.wheelbuild] ranks below it."
)
_example_option = click.option(
    "--example",
    is_flag=True,
    help="Build the bundled example extension, wbdemo, instead of a project (the same as PACKAGE wbdemo).",
)


def _table_flags(options: tuple[option_table.Option, ...]) -> list[Decorator]:
    """The table's options in its order; the image's rows as with_image_flags, where the first
    of them stands, so that the command gets them as one ImageFlags."""
    flags: list[Decorator] = []
    for option in options:
        if option.key not in IMAGE_KEYS:
            flags.append(table_option(option))
        elif option.key == IMAGE_KEYS[0]:
            flags.append(with_image_flags)
    return flags


def table_flags(options: tuple[option_table.Option, ...]) -> Decorator:
    """Every option of a table, then --config-file; PACKAGE and --example passed to the command as
    one `package`: what to build (recipes.chosen_package: PACKAGE, the example, or `.`). The
    command is a ConfiguredCommand given the same table (`option_table=`)."""

    def apply(f: CommandFunction) -> CommandFunction:
        @functools.wraps(f)
        def command(*args: object, package: str | None, example: bool, **kwargs: object) -> object:
            return f(*args, package=chosen_package(package, example=example), **kwargs)

        flags = _options(_example_option, *_table_flags(options), _build_config_file)
        return click.argument("package", required=False)(flags(command))

    return apply


def build_flags(f: CommandFunction) -> CommandFunction:
    """build's options (plan takes them too): the rows of spec/option_table.py, each also from
    WHEELBUILD_<KEY> and from [tool.wheelbuild]."""
    return table_flags(option_table.OPTIONS)(f)


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
    file checked whole, so that it reads the file exactly as build does. `option_table` is the
    table whose keys the files may set (build's, unless a command is given another)."""

    def __init__(
        self,
        *args: object,
        option_table: tuple[option_table.Option, ...] = option_table.OPTIONS,
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.option_table = option_table

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
            project = config.find_project(package, known_recipes())
            files = config.load_config(project, config_file, options=self.option_table)
            ctx.default_map = {**(ctx.default_map or {}), **files.default_map()}
            ctx.meta[CONFIG_FILES_KEY] = files
        return super().parse_args(ctx, args)


def _files(ctx: click.Context) -> config.FileConfig:
    files: config.FileConfig = ctx.meta.get(CONFIG_FILES_KEY, config.FileConfig())
    return files


def _table(ctx: click.Context) -> tuple[option_table.Option, ...]:
    command = ctx.command
    return command.option_table if isinstance(command, ConfiguredCommand) else option_table.OPTIONS


LIKE_KEY = "wheelbuild.like"  # ctx.meta key: the parameters --like set (cli/like.py)


def _resolved(ctx: click.Context, option: option_table.Option) -> config.Resolved:
    if option.param in ctx.meta.get(LIKE_KEY, ()):
        origin = config.Origin.LIKE
    else:
        origin = _ORIGINS.get(ctx.get_parameter_source(option.param), config.Origin.DEFAULT)
    return config.Resolved(option, ctx.params[option.param], origin)


def option_source(key: str) -> str:
    """Where the current command's value of a build option came from, as a user would name it:
    `--base-image`, `WHEELBUILD_BASE_IMAGE`, `wheelbuild.toml's base-image`; '' for the default."""
    ctx = click.get_current_context()
    item = _resolved(ctx, next(option for option in _table(ctx) if option.key == key))
    named = config.source_name(item, _files(ctx))
    return f"{named}'s {key}" if item.origin is config.Origin.FILE else named


def provenance() -> list[str]:
    """Each build option's value and where it came from, by click's record of its source."""
    ctx = click.get_current_context()
    files = _files(ctx)
    resolved = [_resolved(ctx, option) for option in _table(ctx)]
    read = ", ".join(files.files) or "none"
    return [
        f"options (command line > WHEELBUILD_* > file > default; files: {read}):",
        *config.provenance(resolved, files),
    ]


def provenance_records() -> list[dict[str, object]]:
    """provenance() for `plan --json`: each build option's key, value as shown, and source
    (a flag, a variable, a file's key; "" for the default)."""
    ctx = click.get_current_context()
    files = _files(ctx)
    return [
        {"key": item.option.key, "value": config.shown_value(item), "from": config.source_name(item, files)}
        for item in (_resolved(ctx, option) for option in _table(ctx))
    ]


def sigstore_option(f: _F) -> _F:
    """--sigstore: publish's and the nightly's keyless signing (provenance/keyless.py)."""
    return click.option(
        "--sigstore",
        is_flag=True,
        help="Also sign each published statement keyless with Sigstore (<wheel>.sigstore.json beside it), "
        "with the job's ambient OIDC identity (GitHub Actions: `permissions: id-token: write`).",
    )(f)
