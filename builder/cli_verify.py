"""The commands that check a wheel is what it claims to be: `diff` (two builds of the same
inputs, byte for byte). They parse, call one function, and print."""

from __future__ import annotations

from pathlib import Path

import click

from .cli_options import GIVEN_PATH
from .errors import InvalidWheel, WheelsDiffer
from .wheel.diff import first_difference


@click.command("diff")
@click.argument("first", type=GIVEN_PATH)
@click.argument("second", type=GIVEN_PATH)
def diff_command(first: Path, second: Path) -> None:
    """Say whether two wheels are the same bytes and, if not, where they first differ: the
    member and, for a shared object, the ELF section (exit 70). `diffoscope FIRST SECOND` shows
    everything that differs."""
    try:
        found = first_difference(first, second)
    except (OSError, ValueError) as bad:
        raise InvalidWheel(
            f"cannot compare {first.name} and {second.name}: {bad}", "name two .whl files"
        ) from None
    if found is None:
        click.echo(f"{first.name} and {second.name} are the same bytes")
        return
    raise WheelsDiffer(
        f"{first.name} and {second.name} differ: {found}",
        f"diffoscope {first} {second} shows every difference",
    )


COMMANDS = (diff_command,)
