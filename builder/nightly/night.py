"""The nightly, as three steps that each CI job (and scripts/nightly) runs as one command:

- :func:`schedule_night`: the cells of wheelbuild.toml that can be built (a cell whose Python the
  torch release has no wheel for, or whose archs no compiler the image can get compiles, is
  skipped with the reason; a cell without `python` is one cell per default Python), less
  those whose inputs key the target's index already holds (a local tree read directly, a
  remote one over HTTP: ``files/<wheel>.inputs`` beside each wheel), and for an upload URL,
  which keeps no inputs keys, those whose wheel its index lists (held_cells).
- :func:`build_cell`: one cell's build through :func:`wheelbuild.pipeline.build.run_build`, import gate
  included, on the production base; its outcome written to ``<out>/cell.json``.
- :func:`publish_night` (wheelbuild.nightly.publish, named here too): only the wheels whose
  report says every check and the gate passed are checked again and published; a failed cell is
  reported, the others still publish; then the coverage table (published / failed / skipped per
  cell), as Markdown and as an HTML page.

The base is the production one unless the nightly's own --base-image (WHEELBUILD_NIGHTLY_BASE_IMAGE)
names another; WHEELBUILD_BASE_IMAGE, which scripts/setup exports for the test suite, is never read.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

from ..engine.ports import Engine
from ..errors import BadArgument, WheelbuildError
from ..host.ca_bundle import resolve_ca_bundle
from ..image.inputs import production_base
from ..image.options import ImageOptions, image_inputs
from ..image.ports import Images
from ..index import remote
from ..pipeline import build, preflight
from ..progress.console import Console
from ..recipes import known_recipes, resolve_recipe
from ..spec.build_spec import parse_archs
from ..spec.pythons import choose_pythons
from ..spec.requires_python import requires_python_of
from ..spec.sources import newest_release as newest_sdist
from ..spec.sources import prepare_source, resolve_lookup
from ..spec.torch_choice import newest_release, releases_by_rule
from ..spec.torch_releases import read_torch_index, torch_python_tags
from ..variants import CudaCompiler, arch_range, compiler_for, parse_torch_rule, parse_variant, supports_arch
from . import cell_specs
from .coverage import CellOutcome, Row, coverage_html, coverage_markdown, coverage_rows
from .matrix import Cell, Matrix, tracking
from .publish import CELL_RECORD, PUBLISH_TO_ENV, publish_night, publish_target, read_outcomes, report_verdict
from .published import (
    INDEX_URL_ENV,
    PublishedWheel,
    Release,
    covering_wheel,
    held_wheel,
    published_keys,
    published_torch_pins,
    remote_inputs,
    served_wheels,
)

# The nightly's own base image variable (`--base-image` of nightly schedule and build-cell): a base of
# the operator's (a mirror of manylinux_2_28, a local build of it) instead of production's. Not
# WHEELBUILD_BASE_IMAGE, which scripts/setup exports for the test suite's builds.
BASE_IMAGE_ENV = "WHEELBUILD_NIGHTLY_BASE_IMAGE"


# ---------------------------------------------------------------------------------------------
# Where a nightly builds and publishes


def image_options(environ: Mapping[str, str], base_image: str | None = None) -> ImageOptions:
    """The production base (manylinux_2_28 pinned by cibuildwheel), unless the nightly's own
    *base_image* is given; cu12x cells get the default CUDA 12 layer (no --cuda12-image)."""
    ca = environ.get("WHEELBUILD_CA_BUNDLE")
    return ImageOptions(
        base_image=base_image or None,
        ca_bundle=resolve_ca_bundle(Path(ca) if ca else None),
    )


def production_pythons() -> tuple[str, ...]:
    """The CPythons cibuildwheel builds in its pinned manylinux_2_28 image (read from the
    installed cibuildwheel, which ships image and list together): the schedule needs no Docker."""
    platforms = resources.files("cibuildwheel") / "resources" / "build-platforms.toml"
    table = tomllib.loads(platforms.read_text())
    tags = set()
    for entry in table["linux"]["python_configurations"]:
        name, _, platform = str(entry["identifier"]).partition("-")
        if platform == "manylinux_x86_64" and re.fullmatch(r"cp3\d+", name):
            tags.add(name)
    tags.discard("cp39")  # as engine.image_pythons: cibuildwheel's own env-dump interpreter
    return tuple(sorted(tags, key=lambda t: int(t[3:])))


# ---------------------------------------------------------------------------------------------
# The matrix, as the night reads it


def declared_matrix(
    declared: Matrix, track: str | None, torch_index_url: str | None, say: Callable[[str], None]
) -> Matrix:
    """wheelbuild.toml's matrix with --track latest's additions (each versioned package's newest
    release, each CUDA tag's newest torch) and every torch rule (cu130, cu130:newest-3..newest)
    read from its index: each cell names one torch release, as schedule, build-cell and the keys
    need it."""
    if track == "latest":
        versioned = sorted({c.package for c in declared.cells if c.version})
        newest: dict[str, str] = {}
        for torch in sorted({c.torch for c in declared.cells}):
            variant = parse_variant(torch.partition(":")[0], torch_index_url)
            index = read_torch_index(variant.index_url)
            newest[variant.tag] = (
                f"{newest_release(index, replace(variant, newest=True), None).version}+{variant.tag}"
            )
        declared = tracking(declared, {p: newest_sdist(p) for p in versioned}, newest)
    return with_torch_releases(declared, torch_index_url, say)


def with_torch_releases(matrix: Matrix, torch_index_url: str | None, say: Callable[[str], None]) -> Matrix:
    """The matrix with each cell's torch rule replaced by the releases it names today, one cell
    each (2.14.1+cu130); a full variant stays as written."""
    releases: dict[str, tuple[str, ...]] = {}
    for torch in dict.fromkeys(c.torch for c in matrix.cells):
        rule = parse_torch_rule(torch)
        if rule is None:
            releases[torch] = (torch,)
            continue
        index = read_torch_index(parse_variant(rule.tag, torch_index_url).index_url)
        chosen = releases_by_rule(index, rule)
        say(f"{torch}: {', '.join(c.version for c in chosen)} on {index.shown}")
        releases[torch] = tuple(f"{c.version}+{rule.tag}" for c in chosen)
    cells = tuple(replace(cell, torch=torch) for cell in matrix.cells for torch in releases[cell.torch])
    return replace(matrix, cells=tuple(dict.fromkeys(cells)))


# ---------------------------------------------------------------------------------------------
# Which cells can be built (pure)


@dataclass(frozen=True)
class Skipped:
    cell: Cell
    why: str


def _torch_problem(cell: Cell) -> str | None:
    """A known recipe that cannot compile against the cell's torch (its ceiling) says why."""
    if cell.package not in known_recipes():
        return None
    ceiling = resolve_recipe(cell.package, version=cell.version or None).torch_ceiling
    variant = parse_variant(cell.torch)
    if ceiling is None or not ceiling.excludes(variant.torch_version):
        return None
    return ceiling.refusal(cell.package, variant).cause


def _compiler_problem(cell: Cell, cuda12: CudaCompiler | None) -> str | None:
    variant = parse_variant(cell.torch)
    archs = parse_archs(cell.archs)
    if compiler_for(variant, archs, cuda12) is not None:
        return None
    same_major = compiler_for(variant, (), cuda12)
    if same_major is None:
        return f"torch {variant.tag} needs a CUDA {variant.cuda_major}.x compiler, which the image cannot get"
    missing = [a for a in archs if not supports_arch(same_major, a)]
    return f"CUDA {same_major.version} (for torch {variant.tag}) cannot compile " + ", ".join(
        f"sm_{a} (needs {arch_range(a)})" for a in missing
    )


def _python_problem(
    python: str, image: Sequence[str], tags: frozenset[str], requires_python: str | None, cell: Cell
) -> str | None:
    try:
        choose_pythons(
            image,
            tags,
            requires_python,
            (python,),
            package=cell.package,
            torch_version=parse_variant(cell.torch).torch_version,
        )
    except BadArgument as refused:
        # "--python cp310 cannot be built: cp310: torch ... has no cp310 wheel on ..."
        return refused.cause.partition("cannot be built: ")[2] or refused.cause
    return None


def feasible_cells(
    cells: Iterable[Cell],
    image: Sequence[str],
    torch_tags: Mapping[str, frozenset[str]],
    requires_python: Mapping[str, str | None],
    cuda12: CudaCompiler | None,
) -> tuple[tuple[Cell, ...], tuple[Skipped, ...]]:
    """The cells that can be built, each for one Python, and the others with why. *torch_tags*:
    cell.torch -> the Python tags torch has wheels for; *requires_python*: source_of(cell) ->
    the package's Requires-Python. A cell without a Python is one cell per image Python."""
    good: list[Cell] = []
    skipped: list[Skipped] = []
    for cell in cells:
        if problem := _torch_problem(cell) or _compiler_problem(cell, cuda12):
            skipped.append(Skipped(cell, problem))
            continue
        for python in (cell.python,) if cell.python else tuple(image):
            one = replace(cell, python=python)
            if one in good:  # two tables may name the same cell once expanded
                continue
            why = _python_problem(
                python, image, torch_tags[cell.torch], requires_python[source_of(cell)], one
            )
            if why:
                skipped.append(Skipped(one, why))
            else:
                good.append(one)
    return tuple(good), tuple(skipped)


# ---------------------------------------------------------------------------------------------
# The schedule


@dataclass(frozen=True)
class NightSchedule:
    build: tuple[Cell, ...]  # to build tonight
    published: tuple[Cell, ...]  # their inputs made a wheel the target holds (or see `held`)
    skipped: tuple[Skipped, ...]  # cannot be built
    keys: Mapping[str, str]  # cell id -> inputs key (build and published cells)
    # An upload URL's published cells: cell id -> the wheel of that name its index lists.
    held: Mapping[str, str] = field(default_factory=dict)
    # Cells a published wheel's proven torch range serves (pin = "proven"): id -> that wheel.
    covered: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "build": [_entry(c) | {"args": c.build_args(), "key": self.keys[c.id]} for c in self.build],
            "published": [
                _entry(c)
                | {"key": self.keys[c.id]}
                | ({"held": self.held[c.id]} if c.id in self.held else {})
                for c in self.published
            ],
            "skipped": [_entry(s.cell) | {"why": s.why} for s in self.skipped],
        }


def _entry(cell: Cell) -> dict[str, object]:
    """What the schedule says of any cell: its id and what the coverage table sorts it by."""
    return {
        "id": cell.id,
        "torch": cell.torch,
        "package": cell.package,
        "version": cell.version or "",
        "python": cell.python or "",
    }


def github_output(schedule: NightSchedule) -> str:
    """Lines for $GITHUB_OUTPUT: `cells` (a strategy.matrix value: id and the arguments as a
    JSON list, never a shell string) and `count`."""
    include = [{"id": c.id, "args": c.build_args()} for c in schedule.build]
    return f"cells={json.dumps({'include': include}, separators=(',', ':'))}\ncount={len(schedule.build)}"


def lines_output(schedule: NightSchedule) -> str:
    """`ID ["arg", ...]` per cell (scripts/nightly reads the ID only)."""
    return "\n".join(f"{c.id} {json.dumps(c.build_args())}" for c in schedule.build)


@dataclass(frozen=True)
class _Context:
    options: ImageOptions
    images: Images  # asked only when the base is not production's (--base-image)
    # source_of(cell) -> the recipe's project and release, when it names one (else the name of
    # the wheel is known only once it is built)
    releases: Mapping[str, tuple[str, str]]


def _image_pythons(options: ImageOptions, images: Images, console: Console) -> tuple[str, ...]:
    """The production image's CPythons from cibuildwheel's list; another base's from its
    build image (made or reused: the Pythons are what the image's Dockerfile finds there)."""
    if not options.base_image:
        return production_pythons()
    image = preflight.ensure_image(images, image_inputs(images, options), console)
    return tuple(images.image_pythons(image.tag))


def source_of(cell: Cell) -> str:
    """What a cell's Requires-Python is read from: the package at its version."""
    return f"{cell.package}=={cell.version or ''}"


def _feasible(
    matrix: Matrix,
    environ: Mapping[str, str],
    torch_index_url: str | None,
    console: Console,
    images: Images,
    base_image: str | None,
) -> tuple[tuple[Cell, ...], tuple[Skipped, ...], _Context]:
    say = console.info
    options = image_options(environ, base_image)
    image = _image_pythons(options, images, console)
    say(f"image {options.base_image or production_base()}: {', '.join(image)}")
    tags = {}
    for torch in sorted({c.torch for c in matrix.cells}):
        variant = parse_variant(torch, torch_index_url)
        tags[torch] = torch_python_tags(variant.index_url, variant.torch_version, on_line=say)
    requires: dict[str, str | None] = {}
    releases: dict[str, tuple[str, str]] = {}
    for cell in matrix.cells:
        if source_of(cell) not in requires:
            recipe = resolve_lookup(resolve_recipe(cell.package, version=cell.version), say)
            source = prepare_source(recipe.source, say)
            requires[source_of(cell)] = requires_python_of(source.project_dir / source.package)
            if recipe.version:
                releases[source_of(cell)] = (recipe.name, recipe.version)
    cuda12 = CudaCompiler.cuda12(options.cuda12_version)
    good, skipped = feasible_cells(matrix.cells, image, tags, requires, cuda12)
    return good, skipped, _Context(options, images, releases)


def schedule_night(
    matrix: Matrix,
    environ: Mapping[str, str],
    *,
    to: str | None,
    index_url: str | None,
    torch_index_url: str | None,
    console: Console,
    engine: Images,
    track: str | None = None,
    base_image: str | None = None,
) -> NightSchedule:
    """The night's schedule for the matrix as the file declares it (its torch rules and --track's
    additions are read from the indexes here, once there is a target)."""
    target = publish_target(matrix, to, environ)  # before any work: no target, no night
    matrix = declared_matrix(matrix, track, torch_index_url, console.info)
    good, skipped, context = _feasible(matrix, environ, torch_index_url, console, engine, base_image)
    keys = {
        c.id: cell_specs.cell_inputs_key(c, context.options, torch_index_url, context.images, console)
        for c in good
    }
    where = index_url or environ.get(INDEX_URL_ENV) or matrix.index
    tags = {parse_variant(c.torch).tag for c in good}
    published = published_keys(target, where, tags)
    held = held_cells(good, target, where, context.releases, torch_index_url)
    proven = [c for c in good if c.pin == "proven"]
    covered = covered_cells(
        proven, published_torch_pins(target, where, tags) if proven else (), context.releases
    )
    done = {c.id for c in good if keys[c.id] in published or c.id in held or c.id in covered}
    return NightSchedule(
        build=tuple(c for c in good if c.id not in done),
        published=tuple(c for c in good if c.id in done),
        skipped=skipped,
        keys=keys,
        held=held,
        covered=covered,
    )


def covered_cells(
    cells: Sequence[Cell], published: Sequence[PublishedWheel], releases: Mapping[str, tuple[str, str]]
) -> dict[str, str]:
    """Cell id -> the published wheel whose proven torch range serves it (--pin proven), said as
    the coverage table says it. Only a cell whose release is known: its wheel is named by it."""
    covered: dict[str, str] = {}
    for cell in cells:
        release = releases.get(source_of(cell))
        if release is None or cell.python is None:
            continue
        variant = parse_variant(cell.torch)
        wheel = covering_wheel(
            Release(*release, variant.label, cell.python), variant.torch_version, published
        )
        if wheel is not None:
            covered[cell.id] = f"{wheel.filename} (torch{wheel.torch}, its proven range)"
    return covered


def held_cells(
    cells: Sequence[Cell],
    target: str,
    index_url: str | None,
    releases: Mapping[str, tuple[str, str]],
    torch_index_url: str | None,
) -> dict[str, str]:
    """Cell id -> the wheel an upload URL's index already lists for it (held_wheel). Such a
    server keeps no inputs keys, and never takes a name it holds again, so building the cell
    would only make a file that publish must skip. Only a cell whose release is known: the
    wheel's name is then known before it is built."""
    held: dict[str, str] = {}
    served: dict[str, set[str]] = {}
    for cell in cells:
        variant = parse_variant(cell.torch, torch_index_url)
        where = remote.target_for(target, variant.tag, several=False)
        release = releases.get(source_of(cell))
        if not isinstance(where, remote.UploadEndpoint) or not index_url or not release or not cell.python:
            continue
        if variant.tag not in served:
            served[variant.tag] = served_wheels(index_url.replace("{variant}", variant.tag))
        wheel = held_wheel(Release(*release, variant.label, cell.python), served[variant.tag])
        if wheel is not None:
            held[cell.id] = wheel
    return held


# ---------------------------------------------------------------------------------------------
# One cell


def build_cell(
    matrix: Matrix,
    cell_id: str,
    out: Path,
    environ: Mapping[str, str],
    *,
    torch_index_url: str | None,
    console: Console,
    engine: Engine,
    run_build: build.RunBuild = build.run_build,
    track: str | None = None,
    base_image: str | None = None,
) -> build.BuildResult:
    """Build the cell named *cell_id* into *out* with *run_build* (the build's own, unless a test
    hands a fake through the CLI's seams) and record the outcome in ``out/cell.json`` (written on
    failure too, then the error is raised)."""
    matrix = declared_matrix(matrix, track, torch_index_url, console.info)
    good, skipped, context = _feasible(matrix, environ, torch_index_url, console, engine, base_image)
    cell = next((c for c in good if c.id == cell_id), None)
    if cell is None:
        why = next((s.why for s in skipped if s.cell.id == cell_id), None)
        raise BadArgument(
            f"cell {cell_id} " + (f"cannot be built: {why}" if why else "is not in the matrix"),
            "pick one that `wheelbuild nightly schedule` prints: " + ", ".join(c.id for c in good),
        )
    spec = cell_specs.cell_spec(cell, torch_index_url, out)
    record: dict[str, object] = {"id": cell.id, "torch": cell.torch, "args": cell.build_args()}
    out.mkdir(parents=True, exist_ok=True)
    try:
        result = run_build(spec, context.options, console, engine)
    except WheelbuildError as error:
        runs = sorted((out / "runs").glob("*")) if (out / "runs").is_dir() else []
        record |= {
            "status": "failed",
            "exit_code": error.exit_code,
            "error": error.cause,
            "run": runs[-1].relative_to(out).as_posix() if runs else None,
        }
        _write_json(out / CELL_RECORD, record)
        raise
    record |= {
        "status": "passed",
        "run": result.run_dir.relative_to(out).as_posix(),
        "wheels": [w.path.name for w in result.wheels],
    }
    _write_json(out / CELL_RECORD, record)
    return result


def _write_json(path: Path, value: object) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n")


__all__ = [
    "BASE_IMAGE_ENV",
    "CELL_RECORD",
    "INDEX_URL_ENV",
    "PUBLISH_TO_ENV",
    "CellOutcome",
    "NightSchedule",
    "Release",
    "Row",
    "Skipped",
    "build_cell",
    "coverage_html",
    "coverage_markdown",
    "coverage_rows",
    "feasible_cells",
    "github_output",
    "held_cells",
    "held_wheel",
    "image_options",
    "lines_output",
    "production_pythons",
    "publish_night",
    "publish_target",
    "published_keys",
    "read_outcomes",
    "remote_inputs",
    "report_verdict",
    "schedule_night",
]
