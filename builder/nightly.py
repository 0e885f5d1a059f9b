"""The nightly, as three steps that each CI job (and scripts/nightly) runs as one command:

- :func:`plan_night`: the cells of wheelbuild.toml that can be built (a cell whose Python the
  torch release has no wheel for, or whose archs no compiler the image can get compiles, is
  skipped with the reason; a cell without `python` is one cell per default Python), less
  those whose inputs key the target's index already holds (a local tree read directly, a
  remote one over HTTP: ``files/<wheel>.inputs`` beside each wheel).
- :func:`build_cell`: one cell's build through :func:`wheelbuild.build.run_build`, import gate
  included, on the production base; its outcome written to ``<out>/cell.json``.
- :func:`publish_night`: only the wheels whose report says every check and the gate passed are
  checked again and published; a failed cell is reported, the others still publish; then the
  coverage table (published / failed / skipped per cell), as Markdown and as an HTML page.

The test base is out of reach: nightly reads WHEELBUILD_NIGHTLY_TEST_BASE (tests only), never
WHEELBUILD_BASE_IMAGE, which scripts/setup exports for the test suite.
"""

from __future__ import annotations

import html
import json
import re
import shlex
import subprocess
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from . import build, check, matrix_runs, preflight, prune
from .errors import (
    BadArgument,
    NightIncomplete,
    PublishedIndexUnreachable,
    PublishTargetMissing,
    ReportUnreadable,
    WheelbuildError,
)
from .index import index as index_files
from .index import publish as publishing
from .index import remote
from .matrix import Cell, Matrix
from .pythons import (
    IndexFile,
    anchors,
    choose_pythons,
    files_on_page,
    requires_python_of,
    torch_python_tags,
)
from .recipes import resolve_recipe
from .report import REPORT_NAME, BuildReport, read_report, report_from_json
from .run.image import production_base
from .run.ports import Engine, Images
from .run.reporter import Reporter
from .secrets import redact_url, without_credentials
from .sources import cache_dir, prepare_source, resolve_lookup
from .spec import parse_archs, resolve_ca_bundle
from .variants import CudaCompiler, arch_range, compiler_for, parse_variant, supports_arch

TEST_BASE_ENV = "WHEELBUILD_NIGHTLY_TEST_BASE"  # tests only: a local base instead of production
PUBLISH_TO_ENV = "NIGHTLY_PUBLISH_TO"
INDEX_URL_ENV = "NIGHTLY_INDEX_URL"
CELL_RECORD = "cell.json"
PLAN_FILE = "plan.json"
COVERAGE_PAGE = "coverage.html"
ACCEPT = f"{index_files.MEDIA_JSON}, text/html;q=0.1"


# ---------------------------------------------------------------------------------------------
# Where a nightly builds and publishes


def image_options(environ: Mapping[str, str]) -> preflight.ImageOptions:
    """The production base (manylinux_2_28 pinned by cibuildwheel), unless the test-only
    override is set; cu12x cells get the default CUDA 12 layer (no --cuda12-image)."""
    ca = environ.get("WHEELBUILD_CA_BUNDLE")
    return preflight.ImageOptions(
        base_image=environ.get(TEST_BASE_ENV) or None,
        ca_bundle=resolve_ca_bundle(Path(ca) if ca else None),
    )


def publish_target(matrix: Matrix, given: str | None, environ: Mapping[str, str]) -> str:
    """--to, else NIGHTLY_PUBLISH_TO, else the config's [publish] to; never a default folder."""
    to = given or environ.get(PUBLISH_TO_ENV) or matrix.declared_to
    if not to:
        raise PublishTargetMissing(
            "the nightly has no publish target: [publish] to is not set, and neither --to nor "
            f"{PUBLISH_TO_ENV} is given (a folder of the checkout would be gone by the next run)",
            f"set the repository variable {PUBLISH_TO_ENV} (e.g. ci@wheels.example:/srv/wheels/{{variant}}), "
            "or pass --to",
        )
    return to


def production_pythons() -> tuple[str, ...]:
    """The CPythons cibuildwheel builds in its pinned manylinux_2_28 image (read from the
    installed cibuildwheel, which ships image and list together): the plan needs no Docker."""
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
# Which cells can be built (pure)


@dataclass(frozen=True)
class Skipped:
    cell: Cell
    why: str


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
        if problem := _compiler_problem(cell, cuda12):
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
# What the target already holds


def _get(
    url: str, authorization: str | None, shown: str, *, missing_ok: bool = False
) -> tuple[bytes, str] | None:
    request = urllib.request.Request(url, headers={"Accept": ACCEPT})
    if authorization:  # *authorization* is only given for the index's own host
        request.add_unredirected_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.read(64 << 20), str(response.headers.get("Content-Type", ""))
    except urllib.error.HTTPError as error:
        if error.code == 404 and missing_ok:
            return None
        why = f"HTTP {error.code} {error.reason}"
    except OSError as error:
        why = str(error) or type(error).__name__
    raise PublishedIndexUnreachable(
        f"could not read {redact_url(shown)}: {why}",
        f"check {INDEX_URL_ENV} ([publish] index) and that the index is up; its credentials go in the URL",
    )


def _not_a_page(url: str) -> PublishedIndexUnreachable:
    return PublishedIndexUnreachable(
        f"{redact_url(url)} is not a PEP 691 index page", f"point {INDEX_URL_ENV} at the tree's simple/"
    )


def _project_links(body: bytes, content_type: str, url: str) -> list[str]:
    """The project pages an index's root links, relative to it: PEP 691 JSON or PEP 503 HTML."""
    if content_type.split(";")[0].strip().endswith("json"):
        try:
            entries = json.loads(body).get("projects", [])
            return [f"{e['name']}/" for e in entries if isinstance(e, dict) and "name" in e]
        except (ValueError, AttributeError, TypeError):
            raise _not_a_page(url) from None
    return [href for values in anchors(body) if (href := values.get("href"))]


def _files(body: bytes, content_type: str, url: str) -> tuple[IndexFile, ...]:
    try:
        return files_on_page(body, content_type)
    except ValueError:
        raise _not_a_page(url) from None


def remote_inputs(index_url: str) -> set[str]:
    """The inputs keys a served wheelhouse tree holds, read over HTTP from the index itself: the
    project list, each project's page, and ``<file>.inputs`` beside each wheel. An index that
    does not exist yet (404) holds none. Credentials in the URL go as an Authorization header."""
    bare, authorization = without_credentials(index_url)
    root = bare.rstrip("/") + "/"

    def auth(url: str) -> str | None:  # credentials never go to another host a page links
        return authorization if urlsplit(url).netloc == urlsplit(root).netloc else None

    page = _get(root, authorization, index_url, missing_ok=True)
    if page is None:
        return set()
    keys: set[str] = set()
    for href in _project_links(*page, index_url):
        project_url = urljoin(root, href)
        project = _get(project_url, auth(project_url), project_url)
        assert project is not None
        for file in _files(*project, project_url):
            if not file.filename.endswith(".whl") or not file.url:
                continue
            sidecar = urljoin(project_url, file.url.split("#")[0]) + index_files.INPUTS_SUFFIX
            found = _get(sidecar, auth(sidecar), sidecar, missing_ok=True)
            if found is not None:
                keys.add(found[0].decode().strip())
    return keys


def published_keys(to: str, index_url: str | None, tags: Iterable[str]) -> set[str]:
    """The inputs keys published in each variant's tree of *to*: a local tree read directly, a
    remote one (ssh tree or upload URL) over HTTP from *index_url* ({variant} in it)."""
    keys: set[str] = set()
    for tag in sorted(set(tags)):
        where = remote.target_for(to, tag, several=False)
        if isinstance(where, Path):
            keys |= publishing.published_inputs(where)
            continue
        if not index_url:
            raise PublishTargetMissing(
                f"the target {to} is remote, and no index URL says where to read what it holds",
                f"set {INDEX_URL_ENV} (or [publish] index) to its index, e.g. https://wheels.example/{{variant}}/simple/",
            )
        keys |= remote_inputs(index_url.replace("{variant}", tag))
    return keys


# ---------------------------------------------------------------------------------------------
# The plan


@dataclass(frozen=True)
class NightPlan:
    build: tuple[Cell, ...]  # to build tonight
    published: tuple[Cell, ...]  # their inputs made a wheel the target holds
    skipped: tuple[Skipped, ...]  # cannot be built
    keys: Mapping[str, str]  # cell id -> inputs key (build and published cells)

    def to_json(self) -> dict[str, Any]:
        return {
            "build": [
                {"id": c.id, "args": c.build_args(), "torch": c.torch, "key": self.keys[c.id]}
                for c in self.build
            ],
            "published": [{"id": c.id, "torch": c.torch, "key": self.keys[c.id]} for c in self.published],
            "skipped": [{"id": s.cell.id, "torch": s.cell.torch, "why": s.why} for s in self.skipped],
        }


def github_output(plan: NightPlan) -> str:
    """Lines for $GITHUB_OUTPUT: `cells` (a strategy.matrix value: id and the arguments as a
    JSON list, never a shell string) and `count`."""
    include = [{"id": c.id, "args": c.build_args()} for c in plan.build]
    return f"cells={json.dumps({'include': include}, separators=(',', ':'))}\ncount={len(plan.build)}"


def lines_output(plan: NightPlan) -> str:
    """`ID ["arg", ...]` per cell (scripts/nightly reads the ID only)."""
    return "\n".join(f"{c.id} {json.dumps(c.build_args())}" for c in plan.build)


@dataclass(frozen=True)
class _Context:
    options: preflight.ImageOptions
    images: Images  # asked only when the base is a local test base


def _image_pythons(options: preflight.ImageOptions, images: Images, reporter: Reporter) -> tuple[str, ...]:
    """The production image's CPythons from cibuildwheel's list; a local test base's from its
    build image (made or reused: the Pythons are what the image's Dockerfile finds there)."""
    if not options.base_image:
        return production_pythons()
    image = preflight.ensure_image(images, preflight.image_inputs(images, options), reporter)
    return tuple(images.image_pythons(image.tag))


def source_of(cell: Cell) -> str:
    """What a cell's Requires-Python is read from: the package at its version."""
    return f"{cell.package}=={cell.version or ''}"


def _feasible(
    matrix: Matrix,
    environ: Mapping[str, str],
    torch_index_url: str | None,
    reporter: Reporter,
    images: Images,
) -> tuple[tuple[Cell, ...], tuple[Skipped, ...], _Context]:
    say = reporter.info
    options = image_options(environ)
    image = _image_pythons(options, images, reporter)
    say(f"image {options.base_image or production_base()}: {', '.join(image)}")
    tags = {}
    for torch in sorted({c.torch for c in matrix.cells}):
        variant = parse_variant(torch, torch_index_url)
        tags[torch] = torch_python_tags(
            variant.index_url, variant.torch_version, cache=cache_dir(), on_line=say
        )
    requires: dict[str, str | None] = {}
    for cell in matrix.cells:
        if source_of(cell) not in requires:
            recipe = resolve_lookup(resolve_recipe(cell.package, version=cell.version), say)
            source = prepare_source(recipe.source, say)
            requires[source_of(cell)] = requires_python_of(source.project_dir / source.package)
    cuda12 = CudaCompiler.cuda12(options.cuda12_version)
    good, skipped = feasible_cells(matrix.cells, image, tags, requires, cuda12)
    return good, skipped, _Context(options, images)


def plan_night(
    matrix: Matrix,
    environ: Mapping[str, str],
    *,
    to: str | None,
    index_url: str | None,
    torch_index_url: str | None,
    reporter: Reporter,
    engine: Images,
) -> NightPlan:
    target = publish_target(matrix, to, environ)  # before any work: no target, no night
    good, skipped, context = _feasible(matrix, environ, torch_index_url, reporter, engine)
    keys = {
        c.id: matrix_runs.cell_inputs_key(c, context.options, torch_index_url, context.images) for c in good
    }
    where = index_url or environ.get(INDEX_URL_ENV) or matrix.index
    published = published_keys(target, where, (parse_variant(c.torch).tag for c in good))
    return NightPlan(
        build=tuple(c for c in good if keys[c.id] not in published),
        published=tuple(c for c in good if keys[c.id] in published),
        skipped=skipped,
        keys=keys,
    )


# ---------------------------------------------------------------------------------------------
# One cell


def build_cell(
    matrix: Matrix,
    cell_id: str,
    out: Path,
    environ: Mapping[str, str],
    *,
    torch_index_url: str | None,
    reporter: Reporter,
    engine: Engine,
) -> build.BuildResult:
    """Build the cell named *cell_id* into *out* and record the outcome in ``out/cell.json``
    (written on failure too, then the error is raised)."""
    good, skipped, context = _feasible(matrix, environ, torch_index_url, reporter, engine)
    cell = next((c for c in good if c.id == cell_id), None)
    if cell is None:
        why = next((s.why for s in skipped if s.cell.id == cell_id), None)
        raise BadArgument(
            f"cell {cell_id} " + (f"cannot be built: {why}" if why else "is not in the matrix"),
            "pick one that `wheelbuild nightly plan` prints: " + ", ".join(c.id for c in good),
        )
    spec = matrix_runs.cell_spec(cell, torch_index_url, out)
    record: dict[str, Any] = {"id": cell.id, "torch": cell.torch, "args": cell.build_args()}
    out.mkdir(parents=True, exist_ok=True)
    try:
        result = build.run_build(spec, context.options, reporter, engine)
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


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# Publishing what passed


def report_verdict(report: BuildReport | Mapping[str, Any], wheels: Sequence[str]) -> str | None:
    """None when the build report says every check passed and the import gate passed each
    wheel; else why not (pure)."""
    if not isinstance(report, BuildReport):
        report = report_from_json(report)
    if not wheels:
        return "the cell left no wheel"
    if report.checks:
        return f"its checks failed: {report.checks[0].cause or 'see the report'}"
    if not isinstance(report.gate, tuple):
        return "the import gate did not run"
    passed = {g.wheel for g in report.gate if g.passed}
    refused = [w for w in wheels if w not in passed]
    if refused:
        return f"the import gate did not pass {', '.join(refused)}"
    return None


@dataclass(frozen=True)
class CellOutcome:
    id: str
    torch: str
    wheels: tuple[Path, ...]  # those that passed (empty when the cell failed)
    failure: str | None


def read_outcomes(dirs: Sequence[Path]) -> tuple[tuple[CellOutcome, ...], dict[str, Any] | None]:
    """Each cell record under *dirs* judged by its report, and the night's plan if one is there."""
    outcomes: dict[str, CellOutcome] = {}
    plan = None
    for top in dirs:
        for path in sorted(top.rglob(PLAN_FILE)):
            plan = json.loads(path.read_text())
        for path in sorted(top.rglob(CELL_RECORD)):
            record = json.loads(path.read_text())
            cell_id, torch = str(record["id"]), str(record["torch"])
            if record.get("status") != "passed":
                why = f"exit {record.get('exit_code', '?')}: {record.get('error', 'no reason recorded')}"
                outcomes[cell_id] = CellOutcome(cell_id, torch, (), why)
                continue
            run = path.parent / str(record["run"])
            names = [str(n) for n in record.get("wheels", [])]
            report_path = run / REPORT_NAME
            missing = [n for n in names if not (run / n).is_file()]
            if not report_path.is_file() or missing:
                why = f"its report or wheels are missing ({', '.join(missing) or REPORT_NAME})"
                outcomes[cell_id] = CellOutcome(cell_id, torch, (), why)
                continue
            try:
                verdict = report_verdict(read_report(report_path), names)
            except ReportUnreadable as unreadable:
                verdict = unreadable.cause
            wheels = () if verdict else tuple(run / n for n in names)
            outcomes[cell_id] = CellOutcome(cell_id, torch, wheels, verdict)
    return tuple(outcomes.values()), plan


@dataclass(frozen=True)
class Row:
    id: str
    variant: str  # cu130
    status: str  # published | failed | skipped
    detail: str


def coverage_rows(
    plan: Mapping[str, Any] | None, outcomes: Sequence[CellOutcome], published_now: Mapping[str, str]
) -> tuple[Row, ...]:
    """One row per cell of the night (pure). *published_now*: cell id -> what was published
    (a failed publish makes the cell a failure with that reason in *outcomes*)."""
    rows: dict[str, Row] = {}

    def tag(torch: str) -> str:
        return parse_variant(torch).tag

    for entry in (plan or {}).get("published", []):
        rows[entry["id"]] = Row(
            entry["id"], tag(entry["torch"]), "published", "earlier: its inputs are unchanged"
        )
    for entry in (plan or {}).get("build", []):
        rows[entry["id"]] = Row(
            entry["id"], tag(entry["torch"]), "failed", "no record: its build did not finish"
        )
    for outcome in outcomes:
        if outcome.failure is not None:
            rows[outcome.id] = Row(outcome.id, tag(outcome.torch), "failed", outcome.failure)
        elif outcome.id in published_now:
            rows[outcome.id] = Row(outcome.id, tag(outcome.torch), "published", published_now[outcome.id])
    for entry in (plan or {}).get("skipped", []):
        rows[entry["id"]] = Row(entry["id"], tag(entry["torch"]), "skipped", entry["why"])
    order = {"published": 0, "failed": 1, "skipped": 2}
    return tuple(sorted(rows.values(), key=lambda r: (order[r.status], r.id)))


def _counts(rows: Sequence[Row]) -> str:
    return ", ".join(f"{sum(r.status == s for r in rows)} {s}" for s in ("published", "failed", "skipped"))


def coverage_markdown(rows: Sequence[Row]) -> str:
    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|")

    lines = [f"## wheelbuild nightly: {_counts(rows)}", "", "| cell | status | detail |", "|---|---|---|"]
    lines += [f"| {cell(r.id)} | {r.status} | {cell(r.detail)} |" for r in rows]
    return "\n".join(lines) + "\n"


def coverage_html(rows: Sequence[Row], title: str = "wheelbuild nightly") -> str:
    body = "".join(
        f'<tr class="{r.status}"><td>{html.escape(r.id)}</td><td>{r.status}</td><td>{html.escape(r.detail)}</td></tr>\n'
        for r in rows
    )
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>\n'
        "<style>td{padding:2px 8px}.published{background:#dfd}.failed{background:#fdd}.skipped{color:#777}</style>"
        f"</head>\n<body><h1>{html.escape(title)}: {_counts(rows)}</h1>\n"
        f"<table><tr><th>cell</th><th>status</th><th>detail</th></tr>\n{body}</table></body></html>\n"
    )


@dataclass(frozen=True)
class NightResult:
    rows: tuple[Row, ...]
    pages: tuple[str, ...]  # where the coverage page went


def _publish(
    wheels: tuple[Path, ...],
    where: Path | remote.UploadEndpoint | remote.RsyncTarget,
    say: Callable[[str], None],
) -> Path | None:
    """Publish into one target; returns the tree whose coverage page to write (local or mirror)."""
    inputs = {w.name: key for w in wheels if (key := check.inputs_key_beside(w))}
    if isinstance(where, remote.UploadEndpoint):
        if wheels:
            remote.upload(wheels, where)
            prune.record_published(wheels, where.url)  # gc keeps a run whose wheels were published
        return None
    if isinstance(where, remote.RsyncTarget):
        mirror = remote.mirror_dir(where, cache_dir())
        if wheels:
            remote.publish_rsync(wheels, where, mirror, say, inputs)
            prune.record_published(wheels, str(where))
        return mirror
    if wheels:
        publishing.publish(wheels, where, inputs=inputs)
        prune.record_published(wheels, str(where))
    return where


def _push_page(page: Path, where: remote.RsyncTarget, say: Callable[[str], None]) -> None:
    """The coverage page beside the remote tree's simple/ (rsync renames it into place)."""
    args = [
        "rsync",
        "-a",
        "-e",
        shlex.join(where.ssh()),
        str(page),
        f"{where.host}:{where.path.rstrip('/')}/",
    ]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        say(f"warning: the coverage page did not reach {where}: {done.stderr.strip()[-300:]}")


def publish_night(
    dirs: Sequence[Path],
    matrix: Matrix,
    environ: Mapping[str, str],
    *,
    to: str | None,
    say: Callable[[str], None],
) -> NightResult:
    """Publish every cell that passed (each variant's wheels into its tree), write the coverage
    table, and raise NightIncomplete when a cell failed (after the others are published)."""
    target = publish_target(matrix, to, environ)
    outcomes, plan = read_outcomes(dirs)
    by_tag: dict[str, list[CellOutcome]] = {}
    for outcome in outcomes:
        by_tag.setdefault(parse_variant(outcome.torch).tag, [])
        if outcome.failure is None:
            by_tag[parse_variant(outcome.torch).tag].append(outcome)
        else:
            say(f"{outcome.id}: not published: {outcome.failure}")
    for entry in [e for part in ("build", "published", "skipped") for e in (plan or {}).get(part, [])]:
        by_tag.setdefault(parse_variant(entry["torch"]).tag, [])
    several = len(by_tag) > 1
    published_now: dict[str, str] = {}
    failed: dict[str, str] = {}
    trees: dict[str, Path | remote.RsyncTarget | remote.UploadEndpoint] = {}
    pages_at: dict[str, Path] = {}
    for tag, passing in sorted(by_tag.items()):
        where = remote.target_for(target, tag, several=several)
        trees[tag] = where
        good: list[CellOutcome] = []
        for outcome in passing:  # checked cell by cell: one bad cell does not stop the others
            try:
                check.check_wheels(outcome.wheels, None, None, on_note=say)
            except WheelbuildError as error:
                failed[outcome.id] = f"refused at publish (exit {error.exit_code}): {error.cause}"
                continue
            good.append(outcome)
        wheels = tuple(w for o in good for w in o.wheels)
        try:
            tree = _publish(wheels, where, say)
        except WheelbuildError as error:
            for outcome in good:
                failed[outcome.id] = f"publish to {where} failed (exit {error.exit_code}): {error.cause}"
            continue
        for outcome in good:
            published_now[outcome.id] = "tonight: " + ", ".join(w.name for w in outcome.wheels)
            say(f"{outcome.id}: published {len(outcome.wheels)} wheel(s) to {where}")
        if tree is not None:
            pages_at[tag] = tree
    judged = tuple(replace(o, wheels=(), failure=failed[o.id]) if o.id in failed else o for o in outcomes)
    rows = coverage_rows(plan, judged, published_now)
    pages = []
    for tag, tree in sorted(pages_at.items()):
        page = tree / COVERAGE_PAGE
        tree.mkdir(parents=True, exist_ok=True)
        mine = [r for r in rows if r.variant == tag]
        index_files.atomic_write(page, coverage_html(mine, f"wheelbuild nightly, {tag}").encode())
        where = trees[tag]
        if isinstance(where, remote.RsyncTarget):
            _push_page(page, where, say)
        pages.append(f"{where}/{COVERAGE_PAGE}")
    if summary := environ.get("GITHUB_STEP_SUMMARY"):
        with open(summary, "a", encoding="utf-8") as file:
            file.write(coverage_markdown(rows))
    result = NightResult(rows=rows, pages=tuple(pages))
    bad = [r for r in rows if r.status == "failed"]
    if bad:
        raise NightIncomplete(
            f"{len(bad)} cell(s) failed: {', '.join(r.id for r in bad)}; the others were published",
            "see each failed cell's build report and log (the coverage table says why); "
            "the next night builds them again",
            details=coverage_markdown(rows),
        )
    return result


__all__ = [
    "CELL_RECORD",
    "INDEX_URL_ENV",
    "PUBLISH_TO_ENV",
    "TEST_BASE_ENV",
    "CellOutcome",
    "NightPlan",
    "Row",
    "Skipped",
    "build_cell",
    "coverage_html",
    "coverage_markdown",
    "coverage_rows",
    "feasible_cells",
    "github_output",
    "image_options",
    "lines_output",
    "plan_night",
    "production_pythons",
    "publish_night",
    "publish_target",
    "published_keys",
    "read_outcomes",
    "remote_inputs",
    "report_verdict",
]
