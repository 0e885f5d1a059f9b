"""The commands that check a wheel is what it claims to be: `diff` (two builds of the same
inputs, byte for byte) and `verify` (a wheel against its signed provenance statement, offline,
or rebuilt from it). They parse, call one function, and print."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import click

from ..errors import InvalidWheel, OriginNotChecked, WheelsDiffer
from ..pipeline import verify as verifying
from ..progress.console import Console
from ..provenance import signing
from ..spec.build_spec import DEFAULT_OUTPUT_DIR
from ..wheel.diff import dist_info_pairing, first_difference
from .options import ImageFlags, with_image_flags
from .params import GIVEN_PATH, REPEATABLE
from .seams import seams


@click.command("diff")
@click.argument("first", type=GIVEN_PATH)
@click.argument("second", type=GIVEN_PATH)
def diff_command(first: Path, second: Path) -> None:
    """Say whether two wheels are the same bytes and, if not, where they first differ: the
    member and, for a shared object, the ELF section (exit 70). Two versions of one release (other
    local labels) have their .dist-info folders paired, and what differs inside is listed.
    `diffoscope FIRST SECOND` shows everything that differs."""
    try:
        found = first_difference(first, second)
        paired = dist_info_pairing(first, second) if found is not None else None
    except (OSError, ValueError) as bad:
        raise InvalidWheel(
            f"cannot compare {first.name} and {second.name}: {bad}", "name two .whl files"
        ) from None
    if found is None:
        click.echo(f"{first.name} and {second.name} are the same bytes")
        return
    if paired is not None:
        click.echo(f"{paired.first} and {paired.second} paired; inside them:")
        for line in paired.differences or ("nothing differs but the folder's name",):
            click.echo(f"    {line}")
    deep = f"diffoscope {first} {second} shows every difference"
    raise WheelsDiffer(
        f"{first.name} and {second.name} differ: {found}",
        deep if shutil.which("diffoscope") else f"{deep} (not installed here: pip install diffoscope)",
    )


@click.command("verify")
@click.argument("wheel", type=GIVEN_PATH)
@click.option(
    "--key",
    "keys",
    multiple=True,
    type=GIVEN_PATH,
    help="The publisher's Ed25519 public key (PEM, raw, or an ssh-ed25519 line): a signature by one "
    f"of them is required; {REPEATABLE}.",
)
@click.option(
    "--statement", type=GIVEN_PATH, help="The statement [default: WHEEL.intoto.jsonl, else .intoto.json]."
)
@click.option("--source", type=GIVEN_PATH, help="The sdist or project the wheel was built from, to compare.")
@click.option(
    "--materials/--no-materials",
    default=True,
    show_default=True,
    help="Compare the inputs this machine has (images/ files, pins, the source) with the statement's.",
)
@click.option(
    "--rebuild", is_flag=True, help="Build the statement's inputs again (every unit compiled) and compare."
)
@click.option(
    "--output-dir",
    type=GIVEN_PATH,
    default=DEFAULT_OUTPUT_DIR,
    show_default=True,
    help="Where --rebuild builds.",
)
@with_image_flags
def verify_command(
    wheel: Path,
    keys: tuple[Path, ...],
    statement: Path | None,
    source: Path | None,
    materials: bool,
    rebuild: bool,
    output_dir: Path,
    image_flags: ImageFlags,
) -> None:
    """Check WHEEL against its provenance statement with no network: the signature (--key), that
    the statement is this wheel's (its sha256), the inputs this machine has; with --rebuild,
    build it again from the statement and compare the sha256 (exit codes 70-76). Without --key
    or --rebuild only the hashes are checked, not who made the wheel: exit 78."""
    trusted = [signing.load_verifying_key(key, os.environ) for key in keys]
    verdict = verifying.verify_wheel(
        wheel, statement=statement, keys=trusted, source=source, materials=materials
    )
    click.echo(f"{wheel.name}: sha256 {verdict.sha256}")
    click.echo(f"    statement {verdict.statement}: its subject is this wheel (file name and sha256 match)")
    click.echo(
        f"    signed by {verdict.signed_by}: its signature verifies"
        if verdict.signed_by
        else "    signer: not checked (no --key)"
    )
    seen = f"{len(verdict.matched)} the same here" + (
        f" ({', '.join(verdict.matched)})" if verdict.matched else ""
    )
    click.echo(
        f"    inputs: {seen}; {verdict.unseen} not here to compare"
        if materials
        else "    inputs: not compared"
    )
    for note in verdict.notes:
        click.echo(f"    note: {note}")
    if rebuild:
        console = Console()
        with seams().engine(sweep=False) as engine:
            build = verifying.builder(console, engine)
            rebuilt = verifying.rebuild(verdict, image_flags.options(), output_dir, source, build)
        click.echo(f"    rebuilt: the same sha256 ({rebuilt})")
    if verdict.signed_by:
        click.echo("verified")
    elif rebuild:
        # The same bytes built again from the statement's inputs: what it claims holds, whoever wrote it.
        click.echo(
            "verified by rebuilding: the statement's inputs make these bytes; the signer was not checked"
        )
    else:
        raise OriginNotChecked(
            f"{wheel.name}: its sha256 matches its statement, but who made them was not checked (no --key)",
            "give --key with the publisher's public key, or --rebuild; exit 78 means the hashes match "
            "and nothing more",
        )


COMMANDS = (diff_command, verify_command)
