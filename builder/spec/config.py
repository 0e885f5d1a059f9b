"""Build options from files, and where each value came from. Files in, values out (tomllib
to read; no Docker, no click: the CLI turns `FileConfig.default_map()` into click's default_map
and click's parameter sources into `Origin`). The options, their keys and kinds are the rows of
spec/option_table.py; nothing here names one option's key but to show its value.

Precedence is the command line, then WHEELBUILD_* variables, then files, then defaults. Files,
highest first:

    ./wheelbuild.toml, or the file --config-file names     [tool.wheelbuild]
    PACKAGE/pyproject.toml, when PACKAGE is a project dir  [tool.wheelbuild]

The table is `[tool.wheelbuild]` in both, as cibuildwheel reads `[tool.cibuildwheel]` from any
config file, so it can never clash with wheelbuild.toml's `[[build]]` and `[publish]` (the
nightly's matrix). Keys are the long option names (`max-jobs`); a relative path is taken from
the file's own folder. Secrets are never read from a file.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from ..bounded import FileRefused, read_bounded
from ..errors import ConfigKeyUnknown, ConfigUnreadable, ConfigValueInvalid, WheelbuildError
from ..secrets import SECRET_NAME, SECRET_VALUE, redact_url
from .option_table import BY_KEY, NO_SECRETS, OPTIONS, Kind, Option

__all__ = [
    "MAX_CONFIG",
    "FileConfig",
    "Kind",
    "Option",
    "Origin",
    "Resolved",
    "find_project",
    "load_config",
    "provenance",
    "read_toml",
    "source_name",
]

MAX_CONFIG = 1024**2  # a config is a few lines; a device or a huge file is a mistake
TABLE = "[tool.wheelbuild]"
DEFAULT_FILE = Path("wheelbuild.toml")
# wheelbuild.toml is wheelbuild's own file, so a stray top-level table is a typo; these are the
# tables it has (build, publish: builder/nightly/matrix.py; tool.wheelbuild: here).
_OWN_FILE_TABLES = ("build", "publish", "tool")


@dataclass(frozen=True)
class FileConfig:
    """The options files set, by key: (the value as the CLI takes it, the file that set it)."""

    values: Mapping[str, tuple[object, str]] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # the files read, lowest first
    options: tuple[Option, ...] = field(default=OPTIONS, repr=False)  # the table the keys are from

    def default_map(self) -> dict[str, object]:
        """click's default_map: an arch list as the one value of the repeatable --archs."""
        by_key = {option.key: option for option in self.options}
        return {
            by_key[key].param: (value,) if by_key[key].kind is Kind.ARCHS else value
            for key, (value, _file) in self.values.items()
        }

    def described(self) -> str:
        """`archs, max-jobs from wheelbuild.toml; cpus from ext/pyproject.toml`."""
        by_file: dict[str, list[str]] = {}
        for key, (_value, file) in self.values.items():
            by_file.setdefault(file, []).append(key)
        return "; ".join(f"{', '.join(keys)} from {file}" for file, keys in by_file.items())

    def source(self, key: str) -> str:
        return self.values[key][1] if key in self.values else ""


class Origin(StrEnum):
    COMMAND_LINE = "command line"
    ENVIRONMENT = "environment"
    FILE = "file"
    LIKE = "like"  # read from the environment --like names
    DEFAULT = "default"


@dataclass(frozen=True)
class Resolved:
    option: Option
    value: object  # as the CLI parsed it
    origin: Origin


def read_toml(path: Path, *, remedy: str, missing: str) -> dict[str, object]:
    """A small TOML file, refused (ConfigUnreadable) when it is a directory, a device, huge, binary,
    nested past the parser's recursion or unreadable: config files are input like any other."""
    try:
        return tomllib.loads(read_bounded(path, MAX_CONFIG).decode())
    except FileRefused as refused:
        why = f"is over {MAX_CONFIG} bytes: not a config file" if refused.too_big else "is not a regular file"
        raise ConfigUnreadable(f"{path} {why}", remedy) from None
    except FileNotFoundError:
        raise ConfigUnreadable(f"{path} does not exist", missing) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigUnreadable(f"{path} is not valid TOML: {error}", "fix the file") from None
    except ValueError as error:  # an integer past Python's 4,300 digits, which tomllib converts
        raise ConfigUnreadable(
            f"{path} holds a value no setting takes: {str(error)[:120]}", "fix the file"
        ) from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise ConfigUnreadable(f"{path} nests deeper than any config needs", "fix the file") from None
    except OSError as error:
        raise ConfigUnreadable(
            f"{path} cannot be read: {error.strerror or error}", "check the path"
        ) from None


def _nearest(key: str, known: Iterable[str]) -> str | None:
    found = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return found[0] if found else None


def _unknown(
    label: str, where: str, key: str, known: Sequence[str], examples: Mapping[str, Option] = BY_KEY
) -> ConfigKeyUnknown:
    nearest = _nearest(key, known)
    if nearest is None:
        remedy = f"use one of: {', '.join(known)}"
    elif nearest in examples:
        remedy = f"did you mean {nearest!r}? e.g. {nearest} = {examples[nearest].example}"
    else:
        remedy = f"did you mean {nearest!r}?"
    return ConfigKeyUnknown(f"{label}: {where} has no key {key!r}", remedy)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _typed(option: Option, value: object, label: str, base: Path) -> object:
    """The file's value as the CLI takes it, or ConfigValueInvalid naming the file and key."""
    out: object = None
    if option.kind in (Kind.TEXT, Kind.PATH) and isinstance(value, str) and value.strip():
        out = str(base / value) if option.kind is Kind.PATH else value
    elif option.kind is Kind.INT and isinstance(value, int) and not isinstance(value, bool):
        out = value
    elif option.kind is Kind.NUMBER and isinstance(value, int | float) and not isinstance(value, bool):
        out = float(value)
    elif option.kind is Kind.BOOL and isinstance(value, bool):
        out = value
    elif option.kind is Kind.ARCHS:
        if isinstance(value, str) and value.strip():
            out = value
        elif isinstance(value, list) and value and all(isinstance(v, int | str) for v in value):
            out = ",".join(str(v) for v in value)
    elif option.kind is Kind.STRINGS:
        items = [value] if isinstance(value, str) else value
        if isinstance(items, list) and items and all(isinstance(v, str) and v.strip() for v in items):
            out = tuple(items)
    elif (
        option.kind is Kind.TABLE
        and isinstance(value, dict)
        and all(isinstance(v, str) for v in value.values())
    ):
        _env_names(option, value, label)
        out = tuple(f"{k}={v}" for k, v in value.items())
    if out is None:
        raise ConfigValueInvalid(
            f"{label}: {TABLE} {option.key} must be {option.kind.value}, not {_short(value)}",
            f"write e.g. {option.key} = {option.example}",
        )
    if option.choices and out not in option.choices:
        near = difflib.get_close_matches(str(out), list(option.choices), n=1, cutoff=0.5)
        raise ConfigValueInvalid(
            f"{label}: {TABLE} {option.key} is {_short(value)}, not one of {', '.join(option.choices)}",
            f'did you mean {option.key} = "{near[0]}"?'
            if near
            else f"write e.g. {option.key} = {option.example}",
        )
    _refuse_secrets(option, value, label)
    if option.check is not None:
        try:
            option.check(out)
        except WheelbuildError as error:
            if isinstance(error, ConfigValueInvalid):
                raise ConfigValueInvalid(
                    f"{label}: {TABLE} {option.key}: {error.cause}", error.remedy
                ) from None
            raise ConfigValueInvalid(
                f"{label}: {TABLE} {option.key} = {_short(value)}: {error.cause}",
                f"{error.remedy} (as {option.key} = {option.example})",
            ) from None
    return out


def _env_names(option: Option, table: dict[str, object], label: str) -> None:
    """An env table's key with '=' in it is no variable's name: {"A=B" = "x"} would be read as
    A=B=x, the variable A. (Other bad names reach parse_env, which refuses them as --env does.)"""
    for name in table:
        if "=" in name:
            raise ConfigValueInvalid(
                f"{label}: {TABLE} {option.key} sets {_short(name)}, which is not an environment "
                f"variable name ('=' would end it: it would set {name.partition('=')[0]})",
                f"name each variable with letters, digits and _, e.g. {option.key} = {option.example}",
            )


def _refuse_secrets(option: Option, value: object, label: str) -> None:
    if isinstance(value, dict):  # env: names and values both
        for name, text in value.items():
            if SECRET_NAME.search(name) or (isinstance(text, str) and SECRET_VALUE.search(text)):
                raise ConfigValueInvalid(
                    f"{label}: {TABLE} {option.key} sets {name}, which looks like a credential", NO_SECRETS
                )
    elif isinstance(value, str) and SECRET_VALUE.search(value):
        raise ConfigValueInvalid(f"{label}: {TABLE} {option.key} looks like a credential", NO_SECRETS)


def _options_table(data: dict[str, object], label: str, own_file: bool) -> dict[str, object]:
    if own_file:  # wheelbuild's own file: a top-level typo (`[tool.wheelbiuld]`) is refused too
        for key in data:
            if key == "wheelbuild":
                raise ConfigKeyUnknown(
                    f"{label}: the top level has no table [wheelbuild]", f"write it as {TABLE}"
                )
            if key not in _OWN_FILE_TABLES:
                raise _unknown(label, "the top level", key, _OWN_FILE_TABLES)
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigValueInvalid(f"{label}: tool is not a table", "write [tool.wheelbuild]")
    if own_file:
        for key in tool:
            if key != "wheelbuild":
                raise _unknown(label, "[tool]", key, ("wheelbuild",))
    table = tool.get("wheelbuild", {})
    if not isinstance(table, dict):
        raise ConfigValueInvalid(f"{label}: {TABLE} is not a table", f"write {TABLE}, then key = value lines")
    return table


def _read(path: Path, label: str, options: Sequence[Option], *, missing: str) -> dict[str, object]:
    data = read_toml(path, remedy="name a TOML file, e.g. --config-file wheelbuild.toml", missing=missing)
    table = _options_table(data, label, own_file=path.name != "pyproject.toml")
    by_key = {option.key: option for option in options}
    old_keys = {old: option for option in options for old in option.old_names}
    values: dict[str, object] = {}
    for key, value in table.items():
        if SECRET_NAME.search(key):
            raise ConfigValueInvalid(f"{label}: {TABLE} {key} looks like a credential", NO_SECRETS)
        option = by_key.get(key) or old_keys.get(key)
        if option is None:
            raise _unknown(label, TABLE, key, tuple(by_key), by_key)
        if option.key in values:  # its name and an old one
            old = next(name for name in option.old_names if name in table)
            raise ConfigValueInvalid(
                f"{label}: {TABLE} sets {option.key} twice ({old} is its old name)",
                f"keep {option.key} alone",
            )
        values[option.key] = _typed(option, value, label, path.parent)
    return values


def find_project(package: str | None, recipes: Iterable[str]) -> Path | None:
    """PACKAGE's folder when it is a local project with a pyproject.toml (a recipe name wins, as
    in resolve_recipe); None for a recipe, an sdist, a URL or the bundled example."""
    if package is None or not package.strip() or "://" in package:
        return None
    if package.lower().replace("_", "-") in set(recipes):
        return None
    folder = Path(package.partition("#")[0]).expanduser()
    try:
        return folder if (folder / "pyproject.toml").is_file() else None
    except OSError:  # a name too long: resolve_recipe says what is wrong with it
        return None


def load_config(
    project: Path | None,
    config_file: Path | None,
    *,
    cwd: Path = Path(),
    options: tuple[Option, ...] = OPTIONS,
) -> FileConfig:
    """The options [tool.wheelbuild] sets, by the keys of `options`: the project's pyproject.toml
    under the config file (--config-file, else ./wheelbuild.toml when there is one). A given
    config file must exist."""
    layers: list[tuple[Path, Path]] = []  # (path as the user names it, path to open)
    if project is not None:
        layers.append((project / "pyproject.toml", project / "pyproject.toml"))
    if config_file is not None:
        layers.append((config_file, config_file))
    elif (cwd / DEFAULT_FILE).exists() or (cwd / DEFAULT_FILE).is_symlink():
        layers.append((DEFAULT_FILE, cwd / DEFAULT_FILE))
    values: dict[str, tuple[object, str]] = {}
    for shown, path in layers:
        label = str(shown)
        read = _read(path, label, options, missing="check the path given to --config-file")
        values.update({key: (value, label) for key, value in read.items()})
    return FileConfig(values=values, files=tuple(str(shown) for shown, _ in layers), options=options)


def _shown(option: Option, value: object) -> str:
    if value is None or value == ():
        return option.unset
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if option.kind is Kind.TABLE and isinstance(value, tuple):  # names only: values may be private
        return ", ".join(str(pair).partition("=")[0] for pair in value) + " (values not shown)"
    if isinstance(value, tuple):
        return " ".join(map(str, value))
    if option.key == "torch-index-url":
        return redact_url(str(value))
    return str(value)


def source_name(item: Resolved, files: FileConfig) -> str:
    """Where a value came from as the user gave it: `--memory`, `WHEELBUILD_MEMORY` or the file
    (`wheelbuild.toml`); '' for the default."""
    return {
        Origin.COMMAND_LINE: item.option.flag,
        Origin.ENVIRONMENT: item.option.env,
        Origin.FILE: files.source(item.option.key),
        Origin.LIKE: "--like",
        Origin.DEFAULT: "",
    }[item.origin]


def shown_value(item: Resolved) -> str:
    """An option's value as `plan` shows it (a credential never: see _shown)."""
    return _shown(item.option, item.value)


def provenance(resolved: Iterable[Resolved], files: FileConfig) -> list[str]:
    """One line per option: its value and where it came from, e.g.
    `memory     64g      from WHEELBUILD_MEMORY` or `python  every one in the image  (default)`."""
    rows = []
    for item in resolved:
        option = item.option
        named = source_name(item, files)
        rows.append((option.key, _shown(option, item.value), f"from {named}" if named else "(default)"))
    keys = max((len(k) for k, _, _ in rows), default=0)
    width = max((len(v) for _, v, _ in rows), default=0)
    return [f"  {key:<{keys}}  {value:<{width}}  {where}" for key, value, where in rows]
