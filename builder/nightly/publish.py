"""The nightly's last step, :func:`publish_night`: only the wheels whose report says every check
and the gate passed are checked again and published (each variant's into its tree); a failed cell
is reported and the others still publish; then the coverage table (published / failed / skipped
per cell), as Markdown and as an HTML page beside each tree. Where the nightly publishes
(:func:`publish_target`) and the files a cell leaves (cell.json, schedule.json) are named here, as
the schedule and build steps in wheelbuild.nightly.night write them."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import NightIncomplete, PublishTargetMissing, ReportUnreadable, WheelbuildError
from ..gc import prune
from ..index import publish as publishing
from ..index import remote
from ..index import tree as index_files
from ..pipeline import check
from ..pipeline.statements import for_publish, subjects_check
from ..provenance.keyless import KeylessSigner, keyless_bundles
from ..report.build_report import REPORT_NAME, BuildReport, read_report, report_from_json
from ..spec.sources import cache_dir
from ..variants import parse_variant
from ..wheel.abi3 import stable_abi
from .coverage import CellOutcome, Row, coverage_html, coverage_markdown, coverage_rows, schedule_entries
from .matrix import Matrix
from .published import INDEX_URL_ENV, served_wheels

PUBLISH_TO_ENV = "NIGHTLY_PUBLISH_TO"
CELL_RECORD = "cell.json"
SCHEDULE_FILE = "schedule.json"
EARLIER_SCHEDULE_FILE = "plan.json"  # what the schedule was called before: still read
COVERAGE_PAGE = "coverage.html"


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


# ---------------------------------------------------------------------------------------------
# Publishing what passed


def report_verdict(report: BuildReport | Mapping[str, object], wheels: Sequence[str]) -> str | None:
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
    # A wheel passes when every record of it passed (an abi3 wheel has one per Python).
    passed = {g.wheel for g in report.gate if g.passed} - {g.wheel for g in report.gate if not g.passed}
    refused = [w for w in wheels if w not in passed]
    if refused:
        return f"the import gate did not pass {', '.join(refused)}"
    return None


def read_outcomes(dirs: Sequence[Path]) -> tuple[tuple[CellOutcome, ...], dict[str, object] | None]:
    """Each cell record under *dirs* judged by its report, and the night's schedule if one is there."""
    outcomes: dict[str, CellOutcome] = {}
    schedule = None
    for top in dirs:
        for path in [*sorted(top.rglob(EARLIER_SCHEDULE_FILE)), *sorted(top.rglob(SCHEDULE_FILE))]:
            schedule = json.loads(path.read_text())
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
    return tuple(outcomes.values()), schedule


@dataclass(frozen=True)
class NightResult:
    rows: tuple[Row, ...]
    pages: tuple[str, ...]  # where the coverage page went


# What the coverage table says of a cell's wheel that the upload server's index already lists.
HELD = "already on the index"


@dataclass(frozen=True)
class NightFiles:
    wheels: tuple[Path, ...]  # to publish
    inputs: dict[str, tuple[str, ...]]  # file name -> the inputs keys of the cells it serves
    # (cell id, file name) -> what the coverage table says of a cell's wheel that is not
    # published from its own build: another cell's abi3 file serves it, or it is HELD
    served: dict[tuple[str, str], str]


def one_file_per_name(cells: Sequence[CellOutcome], held: frozenset[str] = frozenset()) -> NightFiles:
    """The night's files of one variant (pure but for reading each wheel's report). An abi3 wheel
    is one file name for every Python, so a package's cells for several Pythons each build it,
    and the bytes differ (each build stamps its own). The first cell's file is published, with
    every such cell's inputs key beside it, so that the next night schedules none of them again (a
    published file is never replaced: a second file of that name would be refused and fail the
    whole variant). Any other name stays as given, and publish refuses two of one name whose
    bytes differ. A name in *held* (an upload server's index lists it) is not published again."""
    wheels: list[Path] = []
    inputs: dict[str, list[str]] = {}
    first: dict[str, str] = {}  # abi3 file name -> the cell whose file is published
    served: dict[tuple[str, str], str] = {}
    for cell in cells:
        for wheel in cell.wheels:
            keys = inputs.setdefault(wheel.name, [])
            if (key := check.inputs_key_beside(wheel)) and key not in keys:
                keys.append(key)
            if wheel.name in held:
                served[cell.id, wheel.name] = HELD
                continue
            if wheel.name in first:
                served[cell.id, wheel.name] = (
                    f"{wheel.name} (abi3: the file {first[wheel.name]} built, for every Python; "
                    "this cell's own build of it passed)"
                )
                continue
            if stable_abi(wheel.name) is not None:
                first[wheel.name] = cell.id
            wheels.append(wheel)
    return NightFiles(tuple(wheels), {name: tuple(keys) for name, keys in inputs.items() if keys}, served)


def _publish(
    wheels: tuple[Path, ...],
    inputs: Mapping[str, tuple[str, ...]],
    where: Path | remote.UploadEndpoint | remote.RsyncTarget,
    say: Callable[[str], None],
    keyless: KeylessSigner | None = None,
) -> Path | None:
    """Publish into one target; returns the tree whose coverage page to write (local or mirror).
    With *keyless*, a tree gets each statement signed keyless beside it too (an upload URL takes
    no files beside its wheels)."""
    # The cells' checks, on the copies publish makes; then each cell's statement, carried beside
    # its wheel, must name that copy.
    statements = for_publish(wheels, None, (), False)
    sidecars = publishing.Sidecars(
        inputs=inputs,
        statements=statements,
        torch_ranges={w.name: line for w in wheels if (line := check.torch_range_line(w))},
        sigstore_bundles=(
            keyless_bundles(statements, keyless)
            if keyless is not None and wheels and not isinstance(where, remote.UploadEndpoint)
            else {}
        ),
    )
    again = subjects_check(statements, check.copies_check(None, None))
    if isinstance(where, remote.UploadEndpoint):
        if wheels:
            sha256 = remote.upload(wheels, where, check=again)
            prune.record_published(wheels, where.url, sha256)  # gc keeps a run whose wheels were published
        return None
    if isinstance(where, remote.RsyncTarget):
        mirror = remote.mirror_dir(where, cache_dir())
        if wheels:
            result = remote.publish_rsync(wheels, where, mirror, say, sidecars, again)
            prune.record_published(wheels, str(where), result.sha256)
        return mirror
    if wheels:
        result = publishing.publish(wheels, where, sidecars=sidecars, check=again)
        prune.record_published(wheels, str(where), result.sha256)
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
    index_url: str | None = None,
    keyless: KeylessSigner | None = None,
) -> NightResult:
    """Publish every cell that passed (each variant's wheels into its tree), write the coverage
    table, and raise NightIncomplete when a cell failed (after the others are published). An
    upload URL's index (*index_url*, else NIGHTLY_INDEX_URL, else [publish] index) says which
    wheels it holds already: those are not uploaded again. With *keyless*, each statement
    published into a tree is signed keyless (Sigstore) beside it too."""
    target = publish_target(matrix, to, environ)
    index = index_url or environ.get(INDEX_URL_ENV) or matrix.index
    outcomes, schedule = read_outcomes(dirs)
    by_tag = _passing_by_variant(outcomes, schedule, say)
    several = len(by_tag) > 1
    published = _Published()
    for tag, passing in sorted(by_tag.items()):
        where = remote.target_for(target, tag, several=several)
        published.trees[tag] = where
        _publish_variant(tag, passing, where, published, say, _held_by(where, index, tag), keyless)
    judged = tuple(
        replace(o, wheels=(), failure=published.failed[o.id]) if o.id in published.failed else o
        for o in outcomes
    )
    rows = coverage_rows(schedule, judged, published.now)
    pages = _write_pages(rows, published, say)
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


def _passing_by_variant(
    outcomes: Sequence[CellOutcome], schedule: Mapping[str, object] | None, say: Callable[[str], None]
) -> dict[str, list[CellOutcome]]:
    """CUDA tag -> the cells that passed; every tag of the night is a key (a tree whose cells all
    failed still gets its coverage page)."""
    by_tag: dict[str, list[CellOutcome]] = {}
    for outcome in outcomes:
        by_tag.setdefault(parse_variant(outcome.torch).tag, [])
        if outcome.failure is None:
            by_tag[parse_variant(outcome.torch).tag].append(outcome)
        else:
            say(f"{outcome.id}: not published: {outcome.failure}")
    for entry in [e for part in ("build", "published", "skipped") for e in schedule_entries(schedule, part)]:
        by_tag.setdefault(parse_variant(entry["torch"]).tag, [])
    return by_tag


@dataclass
class _Published:
    """What publishing the night's variants did, filled one variant at a time."""

    now: dict[str, str] = field(default_factory=dict)  # cell id -> what was published
    failed: dict[str, str] = field(default_factory=dict)  # cell id -> why it was not
    trees: dict[str, Path | remote.RsyncTarget | remote.UploadEndpoint] = field(default_factory=dict)
    pages_at: dict[str, Path] = field(default_factory=dict)  # tag -> tree to write its page in


def _published_text(outcome: CellOutcome, served: Mapping[tuple[str, str], str]) -> str:
    """The coverage table's word on a cell that passed: its wheels published tonight, served by
    another cell's abi3 file, or (all of them) already on an upload server's index."""
    names = [w.name for w in outcome.wheels]
    if names and all(served.get((outcome.id, n)) == HELD for n in names):
        return (
            f"earlier: the index already holds {', '.join(names)} (an upload server keeps no inputs "
            "keys, so the cell was built again; a published file is never replaced)"
        )

    def said(name: str) -> str:
        text = served.get((outcome.id, name), name)
        return f"{name} ({HELD})" if text == HELD else text

    return "tonight: " + ", ".join(map(said, names))


def _held_by(
    where: Path | remote.UploadEndpoint | remote.RsyncTarget, index_url: str | None, tag: str
) -> frozenset[str]:
    """The wheels an upload server's index lists already (none for a tree: its inputs keys told
    the schedule what to skip, and publish takes a file it holds with the same bytes as done)."""
    if not isinstance(where, remote.UploadEndpoint):
        return frozenset()
    if not index_url:
        raise PublishTargetMissing(
            f"the target {where.url} is an upload URL, and no index URL says what it holds already "
            "(a file it holds is refused, never replaced, so each night's rebuild would fail)",
            f"set {INDEX_URL_ENV} (or [publish] index, or --index) to its index, "
            "e.g. https://wheels.example/{variant}/simple/",
        )
    return frozenset(served_wheels(index_url.replace("{variant}", tag)))


def _publish_variant(
    tag: str,
    passing: Sequence[CellOutcome],
    where: Path | remote.UploadEndpoint | remote.RsyncTarget,
    published: _Published,
    say: Callable[[str], None],
    held: frozenset[str] = frozenset(),
    keyless: KeylessSigner | None = None,
) -> None:
    good: list[CellOutcome] = []
    for outcome in passing:  # checked cell by cell: one bad cell does not stop the others
        try:
            check.check_wheels(outcome.wheels, None, None, on_note=say)
        except WheelbuildError as error:
            published.failed[outcome.id] = f"refused at publish (exit {error.exit_code}): {error.cause}"
            continue
        good.append(outcome)
    files = one_file_per_name(good, held)
    try:
        tree = _publish(files.wheels, files.inputs, where, say, keyless)
    except WheelbuildError as error:
        for outcome in good:
            published.failed[outcome.id] = (
                f"publish to {where} failed (exit {error.exit_code}): {error.cause}"
            )
        return
    for outcome in good:
        published.now[outcome.id] = _published_text(outcome, files.served)
        say(f"{outcome.id} ({where}): {published.now[outcome.id]}")
    if tree is not None:
        published.pages_at[tag] = tree


def _write_pages(rows: Sequence[Row], published: _Published, say: Callable[[str], None]) -> list[str]:
    """Each tree's coverage page (its variant's rows), pushed beside a remote tree's simple/."""
    pages = []
    for tag, tree in sorted(published.pages_at.items()):
        page = tree / COVERAGE_PAGE
        tree.mkdir(parents=True, exist_ok=True)
        mine = [r for r in rows if r.variant == tag]
        index_files.atomic_write(page, coverage_html(mine, f"wheelbuild nightly, {tag}").encode())
        where = published.trees[tag]
        if isinstance(where, remote.RsyncTarget):
            _push_page(page, where, say)
        pages.append(f"{where}/{COVERAGE_PAGE}")
    return pages
