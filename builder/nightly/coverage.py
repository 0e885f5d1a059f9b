"""The nightly's coverage table: one row per cell of the night (published, failed or skipped,
and why), and per package release a torch x Python grid saying which pairs have a wheel and
which have none, and why; as Markdown (the job summary) and HTML (the page beside each tree's
simple/). Pure: the night's schedule and outcomes in, rows and text out.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from ..variants import parse_variant

__all__ = [
    "CellOutcome",
    "Grid",
    "Row",
    "coverage_grids",
    "coverage_html",
    "coverage_markdown",
    "coverage_rows",
    "schedule_entries",
]


@dataclass(frozen=True)
class CellOutcome:
    """What one cell of the night came to: the wheels that passed, or why it failed."""

    id: str
    torch: str
    wheels: tuple[Path, ...]  # those that passed (empty when the cell failed)
    failure: str | None


@dataclass(frozen=True)
class Row:
    id: str
    variant: str  # cu130
    status: str  # published | failed | skipped
    detail: str
    # What the per-release grid places it by (empty in a schedule written before the grid).
    package: str = ""
    release: str = ""  # the package's version, "" for a path or an sdist
    python: str = ""  # cp311
    torch: str = ""  # 2.14.1+cu130


def schedule_entries(schedule: Mapping[str, object] | None, part: str) -> list[Mapping[str, str]]:
    """The cells of one part of the night's schedule (build, published, skipped), as `nightly schedule` wrote them."""
    found = (schedule or {}).get(part, [])
    return [entry for entry in found if isinstance(entry, dict)] if isinstance(found, list) else []


def coverage_rows(
    schedule: Mapping[str, object] | None, outcomes: Sequence[CellOutcome], published_now: Mapping[str, str]
) -> tuple[Row, ...]:
    """One row per cell of the night (pure). *published_now*: cell id -> what was published
    (a failed publish makes the cell a failure with that reason in *outcomes*)."""
    rows: dict[str, Row] = {}
    placed = {
        str(e["id"]): e
        for part in ("build", "published", "skipped")
        for e in schedule_entries(schedule, part)
    }

    def row(cell_id: str, torch: str, status: str, detail: str) -> Row:
        where = placed.get(cell_id, {})
        return Row(
            cell_id,
            parse_variant(torch).tag,
            status,
            detail,
            package=str(where.get("package", "")),
            release=str(where.get("version", "")),
            python=str(where.get("python", "")),
            torch=torch,
        )

    for entry in schedule_entries(schedule, "published"):
        if entry.get("covered"):
            why = f"{entry['covered']} serves it"
        elif entry.get("held"):
            why = f"the index already holds {entry['held']}"
        else:
            why = "its inputs are unchanged"
        rows[entry["id"]] = row(entry["id"], entry["torch"], "published", f"earlier: {why}")
    for entry in schedule_entries(schedule, "build"):
        rows[entry["id"]] = row(entry["id"], entry["torch"], "failed", "no record: its build did not finish")
    for outcome in outcomes:
        if outcome.failure is not None:
            rows[outcome.id] = row(outcome.id, outcome.torch, "failed", outcome.failure)
        elif outcome.id in published_now:
            rows[outcome.id] = row(outcome.id, outcome.torch, "published", published_now[outcome.id])
    for entry in schedule_entries(schedule, "skipped"):
        rows[entry["id"]] = row(entry["id"], entry["torch"], "skipped", entry["why"])
    order = {"published": 0, "failed": 1, "skipped": 2}
    return tuple(sorted(rows.values(), key=lambda r: (order[r.status], r.id)))


@dataclass(frozen=True)
class Grid:
    """One package release's cells as torch x Python: which pairs have a wheel, and why not."""

    title: str  # flash-attn 2.8.3
    pythons: tuple[str, ...]
    lines: tuple[tuple[str, tuple[Row | None, ...]], ...]  # (torch, the row per Python or None)


def coverage_grids(rows: Sequence[Row]) -> tuple[Grid, ...]:
    """Per package release, a torch x Python grid of the night's rows (pure)."""
    releases: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        if row.package and row.python:
            releases.setdefault((row.package, row.release), []).append(row)
    grids = []
    for (package, release), mine in sorted(releases.items()):
        pythons = tuple(sorted({r.python for r in mine}, key=lambda p: (len(p), p)))
        torches = sorted({r.torch for r in mine}, key=_torch_order)
        at = {(r.torch, r.python): r for r in mine}
        lines = tuple((torch, tuple(at.get((torch, p)) for p in pythons)) for torch in torches)
        grids.append(Grid(" ".join(p for p in (package, release) if p), pythons, lines))
    return tuple(grids)


def _torch_order(torch: str) -> tuple[object, ...]:
    variant = parse_variant(torch)
    return (variant.tag, Version(variant.torch_version))


_MARK = {"published": "wheel", "failed": "failed", "skipped": "none"}


def _grid_cell(row: Row | None) -> str:
    if row is None:
        return "-"
    return _MARK[row.status] if row.status == "published" else f"{_MARK[row.status]}: {row.detail}"


def _counts(rows: Sequence[Row]) -> str:
    return ", ".join(f"{sum(r.status == s for r in rows)} {s}" for s in ("published", "failed", "skipped"))


def coverage_markdown(rows: Sequence[Row]) -> str:
    def cell(text: str) -> str:
        return " ".join(text.split()).replace("|", "\\|")

    lines = [f"## wheelbuild nightly: {_counts(rows)}", "", "| cell | status | detail |", "|---|---|---|"]
    lines += [f"| {cell(r.id)} | {r.status} | {cell(r.detail)} |" for r in rows]
    for grid in coverage_grids(rows):
        lines += ["", f"### {cell(grid.title)}: torch x Python", ""]
        lines += [f"| torch | {' | '.join(grid.pythons)} |", "|---" * (len(grid.pythons) + 1) + "|"]
        lines += [
            f"| {torch} | {' | '.join(cell(_grid_cell(r)) for r in found)} |" for torch, found in grid.lines
        ]
    return "\n".join(lines) + "\n"


def coverage_html(rows: Sequence[Row], title: str = "wheelbuild nightly") -> str:
    body = "".join(
        f'<tr class="{r.status}"><td>{html.escape(r.id)}</td><td>{r.status}</td><td>{html.escape(r.detail)}</td></tr>\n'
        for r in rows
    )
    grids = "".join(_grid_html(grid) for grid in coverage_grids(rows))
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>\n'
        "<style>td{padding:2px 8px}.published{background:#dfd}.failed{background:#fdd}.skipped{color:#777}</style>"
        f"</head>\n<body><h1>{html.escape(title)}: {_counts(rows)}</h1>\n"
        f"<table><tr><th>cell</th><th>status</th><th>detail</th></tr>\n{body}</table>\n{grids}</body></html>\n"
    )


def _grid_html(grid: Grid) -> str:
    head = "".join(f"<th>{html.escape(p)}</th>" for p in grid.pythons)
    lines = "".join(
        f"<tr><th>{html.escape(torch)}</th>"
        + "".join(f'<td class="{r.status if r else ""}">{html.escape(_grid_cell(r))}</td>' for r in found)
        + "</tr>\n"
        for torch, found in grid.lines
    )
    return (
        f"<h2>{html.escape(grid.title)}: torch x Python</h2>\n"
        f"<table><tr><th>torch</th>{head}</tr>\n{lines}</table>\n"
    )
