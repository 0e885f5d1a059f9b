"""The command line's own click types and option classes: paths and text that refuse '', the rule
for options that take a list (repeated, the values add up), and an option renamed with its old
spelling still taken."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import SupportsIndex, SupportsInt

import click

from ..errors import OutOfRange
from ..spec import option_table

__all__ = [
    "GIVEN_PATH",
    "GIVEN_TEXT",
    "LIST_RULE",
    "REPEATABLE",
    "BoundedInt",
    "NearChoice",
    "RenamedOption",
    "joined_list",
]


class _GivenPath(click.Path):
    """click.Path that refuses '': Path('') is the current directory, which an empty value (an
    unset shell variable, most likely) never meant."""

    def convert(
        self, value: str | os.PathLike[str], param: click.Parameter | None, ctx: click.Context | None
    ) -> str | bytes | os.PathLike[str]:
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path would mean the current directory", param, ctx)
        return super().convert(value, param, ctx)


GIVEN_PATH = _GivenPath(path_type=Path)


class _GivenText(click.types.StringParamType):
    """Text that refuses '': an option given empty would otherwise mean its default."""

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = super().convert(value, param, ctx)
        if not text.strip():
            self.fail("is empty; leave the option out for its default", param, ctx)
        return text


GIVEN_TEXT = _GivenText()


class RenamedOption(click.Option):
    """An option whose first long name is its name and whose others are old spellings kept working
    (deprecated): accepted, never shown in help. `old_names` lists them for the tests that walk
    every command's help; given, it names them (an option with short names as well)."""

    def __init__(self, *args: object, old_names: tuple[str, ...] = (), **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.old_names = old_names or tuple(self.opts[1:])

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        shown, negatives = self.opts, self.secondary_opts
        self.opts = [name for name in shown if name not in self.old_names]
        self.secondary_opts = [name for name in negatives if name not in self.old_names]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts, self.secondary_opts = shown, negatives


# ---------------------------------------------------------------------------------------------
# The one rule for options that take a list: each may be given again, and the values add up
# (`--archs 100 --archs 120` is `--archs 100,120`); an option of one value keeps the last given.
LIST_RULE = "Options that take a list may be repeated: the values add up (--archs 100 --archs 120 is --archs 100,120)."
REPEATABLE = option_table.REPEATABLE  # the options table's help says it too


def joined_list(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> str | None:
    """A repeatable comma-list option (--archs, --threads) as one list: ('100', '120') -> '100,120';
    None when not given."""
    return ",".join(values) if values else None


class BoundedInt(click.IntRange):
    """click.IntRange whose out-of-range value is an OutOfRange error (as `--cpus 0` is), not a
    usage error: a number that is a number but not one the option takes has its own exit code."""

    def convert(
        self, value: SupportsInt | SupportsIndex, param: click.Parameter | None, ctx: click.Context | None
    ) -> int:
        number: int = click.INT.convert(value, param, ctx)  # not a whole number: a usage error
        try:
            converted: int = super().convert(number, param, ctx)
        except click.BadParameter:
            flag = param.opts[0] if param is not None and param.opts else "the value"
            if self.min is not None and self.max is not None:
                cause, wanted = f"is not from {self.min} to {self.max}", f"from {self.min} to {self.max}"
            elif self.min is not None:
                cause, wanted = f"is less than {self.min}", f"of {self.min} or more"
            else:
                cause, wanted = f"is more than {self.max}", f"of {self.max} or less"
            raise OutOfRange(
                f"{flag} {number} {cause}",
                f"give a whole number {wanted}, or leave {flag} out for its default",
            ) from None
        return converted


class NearChoice(click.Choice[str]):
    """click.Choice that names the nearest choice of a misspelled value (`--pin bilt`: did you mean
    built?)."""

    def convert(self, value: str, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as refused:
            near = difflib.get_close_matches(str(value), [str(c) for c in self.choices], n=1, cutoff=0.5)
            if not near:
                raise
            raise click.BadParameter(
                f"{refused.message.rstrip('.')} (did you mean {near[0]}?)", ctx, param
            ) from None


def split_list(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """A repeatable option whose values may also be comma-separated, as items: ('a,b', 'c') ->
    ('a', 'b', 'c'); empty entries dropped."""
    return tuple(item.strip() for value in values for item in value.split(",") if item.strip())
