"""The nightly matrix against what is published: which cells' build inputs no published wheel
was built from. A cell's inputs key is the one its build will have: the cell's request resolved as
build resolves it (pipeline/resolve.py, as a dry run: the release pinned, the switches its build
files call for, the torch chosen), with the image's inputs, for which the image store is asked a
local base's ID through its Protocol.
"""

from __future__ import annotations

from pathlib import Path

from ..image.options import ImageOptions, image_inputs
from ..image.ports import Images
from ..index import publish
from ..pipeline.resolve import resolve
from ..pipeline.results import inputs_key
from ..progress.console import Console
from ..recipes import resolve_recipe
from ..spec.build_spec import BuildSpec, PinMode, parse_archs, parse_ptx
from ..spec.sources import resolve_lookup
from ..variants import parse_variant
from .matrix import Cell

__all__ = ["cell_inputs_key", "cell_spec", "unpublished_cells"]


def cell_spec(cell: Cell, torch_index_url: str | None, output_dir: Path = Path(".")) -> BuildSpec:
    """What a nightly cell builds: `wheelbuild build` with the cell's arguments, gate included."""
    return BuildSpec(
        recipe=resolve_lookup(resolve_recipe(cell.package, version=cell.version), lambda _line: None),
        variant=parse_variant(cell.torch, torch_index_url),
        archs=parse_archs(cell.archs),
        ptx=parse_ptx(cell.archs),
        pythons=(cell.python,) if cell.python else (),
        output_dir=output_dir,
        torch_range=cell.torch_range,
        pin=PinMode(cell.pin),
    )


def cell_inputs_key(
    cell: Cell, options: ImageOptions, torch_index_url: str | None, images: Images, console: Console
) -> str:
    """The inputs key a build of *cell* (one named Python) will have. *images* is only asked
    when the base is a local tag (a pinned production base is its own identity)."""
    spec = cell_spec(cell, torch_index_url)
    resolved = resolve(spec, options, console, images, dry_run=True, elsewhere=True)
    inputs = image_inputs(images, options.for_variant(resolved.spec.variant))
    return inputs_key(resolved.spec, inputs, resolved.spec.pythons)


def unpublished_cells(
    cells: tuple[Cell, ...],
    tree: Path,
    options: ImageOptions,
    torch_index_url: str | None,
    images: Images,
    console: Console,
) -> tuple[Cell, ...]:
    """The cells whose build inputs no wheel in *tree* was built from: a quiet night (no new
    source, image, torch or tool) leaves none to build."""
    published = publish.published_inputs(tree)
    if not published:
        return cells
    return tuple(
        c for c in cells if cell_inputs_key(c, options, torch_index_url, images, console) not in published
    )
