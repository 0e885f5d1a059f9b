"""The nightly's commands: matrix (the declared cells) and nightly schedule, build-cell and
publish-night (the workflow's three jobs; their logic is wheelbuild.nightly.night's)."""

from __future__ import annotations

import copy
import json
import os
import shlex
import sys
from pathlib import Path

import click

from ..nightly import cell_specs, matrix
from ..nightly.night import declared_matrix
from ..progress.console import Console
from ..provenance import keyless
from .options import ImageFlags, sigstore_option, torch_index_option, track_option, with_image_flags
from .params import GIVEN_PATH, GIVEN_TEXT, NearChoice, RenamedOption
from .seams import seams

MATRIX_FILE_HELP = (
    "The nightly's matrix: its [[build]] tables and [publish] (the file whose [tool.wheelbuild] build "
    "reads too)."
)


# The matrix file, for `matrix` and the nightly's jobs alike ('' is refused: a shell's unset variable).
_nightly_config = click.option(
    "--config-file",
    "--config",  # its old name, still taken
    "config_file",
    cls=RenamedOption,
    type=GIVEN_PATH,
    default=Path("wheelbuild.toml"),
    show_default=True,
    help=MATRIX_FILE_HELP,
)


@click.command("matrix")
@_nightly_config
@click.option(
    "--format",
    "output",
    type=NearChoice(["github", "lines", "publish-to"]),
    default="github",
    show_default=True,
    help="github: a strategy.matrix JSON value; lines: `ID ARGS...` per cell (scripts/nightly); "
    "publish-to: where the wheels go.",
)
@click.option(
    "--skip-published",
    type=GIVEN_PATH,
    help="A wheelhouse tree: leave out cells whose build inputs (source, image, torch, archs, "
    "Python, tools) made a wheel it holds.",
)
@torch_index_option("As for build (part of the inputs).", type=GIVEN_TEXT)
@track_option(
    "latest: add each versioned package's newest release on the index (WHEELBUILD_SIMPLE_INDEX) "
    "and each CUDA tag's newest torch on its torch index."
)
@with_image_flags
def matrix_command(
    config_file: Path,
    output: str,
    skip_published: Path | None,
    track: str | None,
    torch_index_url: str | None,
    image_flags: ImageFlags,
) -> None:
    """Print the nightly matrix wheelbuild.toml declares: one cell per package, version, torch
    variant, Python and arch list."""
    declared = _declared_matrix(config_file, track, torch_index_url)
    cells = declared.cells
    if skip_published and output != "publish-to":
        options = image_flags.options()
        with seams().engine() as engine:  # asked only for a local base's image ID
            cells = cell_specs.unpublished_cells(
                cells, skip_published, options, torch_index_url, engine, Console(sys.stderr)
            )
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
# wheelbuild nightly: the workflow's three jobs (and scripts/nightly), logic in wheelbuild.nightly.night.

_nightly_torch_index = torch_index_option("As for build (part of the inputs).")
_nightly_track = track_option(
    "latest: add each versioned package's newest release and each CUDA tag's newest torch.",
    envvar="WHEELBUILD_NIGHTLY_TRACK",
)
_nightly_to = click.option(
    "--to", "target", help="The publish target [default: NIGHTLY_PUBLISH_TO, else [publish] to]."
)
_nightly_base = click.option(
    "--base-image",
    envvar="WHEELBUILD_NIGHTLY_BASE_IMAGE",  # the nightly's own: never WHEELBUILD_BASE_IMAGE
    show_envvar=True,
    help="Build on this base (a mirror or local build of manylinux_2_28) instead of production's "
    "[default: cibuildwheel's pinned manylinux_2_28].",
)
_nightly_index = click.option(
    "--index",
    "index_url",
    help="A remote target's index URL [default: NIGHTLY_INDEX_URL, else [publish] index].",
)


def _declared_matrix(config: Path, track: str | None, torch_index_url: str | None) -> matrix.Matrix:
    """The matrix the file declares, tracked and with its torch rules read from the index; what
    was looked up goes to stderr."""
    return declared_matrix(matrix.load_matrix(config), track, torch_index_url, Console(sys.stderr).info)


@click.group()
def nightly() -> None:
    """The nightly: schedule the cells, build one cell, publish what passed (see docs/guides/nightly.md).
    Builds use the production base, or the nightly's own --base-image; WHEELBUILD_BASE_IMAGE is
    ignored here."""


@nightly.command("schedule")
@_nightly_config
@click.option(
    "--format",
    "output",
    type=NearChoice(["github", "lines", "json"]),
    default="json",
    show_default=True,
    help="github: `cells=` and `count=` lines for $GITHUB_OUTPUT; lines: `ID [args]` per cell; json: the schedule.",
)
@_nightly_to
@_nightly_index
@click.option(
    "--save",
    type=click.Path(path_type=Path),
    help="Also write the schedule as JSON here (publish-night reads it).",
)
@_nightly_torch_index
@_nightly_track
@_nightly_base
def nightly_schedule(
    config_file: Path,
    output: str,
    target: str | None,
    index_url: str | None,
    save: Path | None,
    torch_index_url: str | None,
    track: str | None,
    base_image: str | None,
) -> None:
    """The cells to build tonight: those that can be built, less those already published."""
    from ..nightly import night

    console = Console(sys.stderr)
    with seams().engine() as engine:  # asked only for a --base-image's Pythons
        scheduled = night.schedule_night(
            matrix.load_matrix(config_file),
            os.environ,
            to=target,
            index_url=index_url,
            torch_index_url=torch_index_url,
            console=console,
            engine=engine,
            track=track,
            base_image=base_image,
        )
    for skipped in scheduled.skipped:
        console.info(f"skipped {skipped.cell.id}: {skipped.why}")
    console.info(
        f"{len(scheduled.build)} cell(s) to build, {len(scheduled.published)} already published, "
        f"{len(scheduled.skipped)} skipped"
    )
    document = json.dumps(scheduled.to_json(), indent=2)
    if save:
        save.parent.mkdir(parents=True, exist_ok=True)
        save.write_text(document + "\n")
    text = {"github": night.github_output, "lines": night.lines_output}.get(output)
    printed = text(scheduled) if text else document
    if printed:  # no cell, no line: scripts/nightly counts lines
        click.echo(printed)


# `nightly plan`, the schedule's name before the word plan meant the build's plan alone: it still
# runs the schedule, with click's deprecation warning, and is left out of the help.
_nightly_plan = copy.copy(nightly_schedule)
_nightly_plan.name = "plan"
_nightly_plan.hidden = True
_nightly_plan.deprecated = "use `wheelbuild nightly schedule`"
nightly.add_command(_nightly_plan, "plan")


@nightly.command("build-cell")
@click.argument("cell_id")
@_nightly_config
@click.option("--out", type=click.Path(path_type=Path), required=True, help="The cell's output folder.")
@click.option(
    "-v/-q",
    "--verbose/--quiet",
    default=False,
    help="Show cibuildwheel's full log (build.log has it either way), or not: steps, status lines and summaries.",
)
@_nightly_torch_index
@_nightly_track
@_nightly_base
def nightly_build_cell(
    cell_id: str,
    config_file: Path,
    out: Path,
    verbose: bool,
    torch_index_url: str | None,
    track: str | None,
    base_image: str | None,
) -> None:
    """Build one cell of the schedule (import gate included) on the production base, or --base-image;
    OUT/cell.json records the outcome, a failure too."""
    from ..nightly import night

    with seams().engine(sweep=False) as engine:  # run_build sweeps, and says what it removed
        result = night.build_cell(
            matrix.load_matrix(config_file),
            cell_id,
            out,
            os.environ,
            torch_index_url=torch_index_url,
            console=Console(show_log=verbose),
            engine=engine,
            run_build=seams().run_build,
            track=track,
            base_image=base_image,
        )
    for wheel in result.wheels:
        click.echo(f"built {wheel.path}")


@nightly.command("publish-night")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@_nightly_config
@_nightly_to
@_nightly_index
@sigstore_option
def nightly_publish_night(
    dirs: tuple[Path, ...], config_file: Path, target: str | None, index_url: str | None, sigstore: bool
) -> None:
    """Publish the wheels of every cell under DIRS whose report says all checks and the gate
    passed; report the others; write the coverage table ($GITHUB_STEP_SUMMARY, coverage.html).
    An upload URL's index says which wheels it holds already: those are not uploaded again."""
    from ..nightly import night

    result = night.publish_night(
        dirs,
        matrix.load_matrix(config_file),
        os.environ,
        to=target,
        say=Console(sys.stderr).info,
        index_url=index_url,
        keyless=keyless.sigstore_signer() if sigstore else None,
    )
    click.echo(night.coverage_markdown(result.rows), nl=False)
    for page in result.pages:
        click.echo(f"coverage page: {page}")


COMMANDS = (matrix_command, nightly)
