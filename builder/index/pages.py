"""The index's pages, rendered from its records: PEP 503 HTML and PEP 691 JSON (API 1.1) for
every project and the root list, with PEP 658/714 metadata hashes, PEP 592 yanks and PEP 700
sizes, upload times and versions. Pure (records in, page bytes out), so a remote target can list
its bucket into :class:`Distribution` records and upload the same pages as a local tree."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

from packaging.utils import (
    NormalizedName,
)
from packaging.version import Version

from .routes import routes_of

API_VERSION = "1.1"
FILES = "files"
SIMPLE = "simple"
# Beside a published wheel: its provenance, one DSSE envelope on one line (provenance/statement.py).
ENVELOPE_SUFFIX = ".intoto.jsonl"
# Beside it too, when published with --sigstore: the Statement signed keyless (provenance/keyless.py).
SIGSTORE_SUFFIX = ".sigstore.json"


@dataclass(frozen=True)
class Distribution:
    """One wheel as the index lists it."""

    filename: str
    project: NormalizedName
    version: Version
    sha256: str
    size: int
    upload_time: datetime  # aware, UTC
    metadata_sha256: str | None
    requires_python: str | None
    yanked: str | None  # None: not yanked; "" yanked without a reason
    archs: tuple[int, ...] | None = None  # SASS in its .so files (() none); None: not known
    statement: bool = False  # its provenance statement is beside it (<wheel>.intoto.jsonl)
    sigstore_bundle: bool = False  # that statement signed keyless is beside it (<wheel>.sigstore.json)
    torch_range: str | None = None  # "cp311: imports with torch 2.12.1-2.15.0; fails on ..."
    # Its unconditional torch requirements' specifiers ("==2.14.*"): which routes list it.
    torch_requirements: tuple[str, ...] = ()

    @property
    def routes(self) -> tuple[str, ...]:
        """The per-torch routes (routes.py) that list it: cu130-torch2.14, ..."""
        return routes_of(self.version.local, self.torch_requirements)


def _upload_time(moment: datetime) -> str:
    """PEP 700: yyyy-mm-ddThh:mm:ss.ffffffZ, in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _file_url(filename: str, depth: int = 2) -> str:
    # Relative to simple/<project>/ (depth 2) or <route>/simple/<project>/ (3); quoted, so a local
    # version's "+" reaches the server as "%2B".
    return "../" * depth + f"{FILES}/{quote(filename)}"


# Where the project page names it: a private key in PEP 691's JSON (a leading underscore is the
# index's own, no client reads it as a standard's), a data- attribute no installer reads in HTML.
STATEMENT_KEY = "_provenance"
STATEMENT_ATTRIBUTE = "data-wheelbuild-provenance"


def _json(document: object) -> bytes:
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode()


def _html(title: str, body: Iterable[str]) -> bytes:
    lines = [
        "<!DOCTYPE html>",
        "<html>",
        "  <head>",
        f'    <meta name="pypi:repository-version" content="{API_VERSION}">',
        f"    <title>{html.escape(title)}</title>",
        "  </head>",
        "  <body>",
        f"    <h1>{html.escape(title)}</h1>",
        *(f"    {line}" for line in body),
        "  </body>",
        "</html>",
    ]
    return ("\n".join(lines) + "\n").encode()


def _anchor(dist: Distribution, depth: int = 2) -> str:
    attrs = [f'href="{html.escape(_file_url(dist.filename, depth))}#sha256={dist.sha256}"']
    if dist.requires_python:
        attrs.append(f'data-requires-python="{html.escape(dist.requires_python)}"')
    if dist.metadata_sha256:
        attrs.append(f'data-dist-info-metadata="sha256={dist.metadata_sha256}"')
        attrs.append(f'data-core-metadata="sha256={dist.metadata_sha256}"')
    if dist.yanked is not None:
        attrs.append(f'data-yanked="{html.escape(dist.yanked)}"')
    if dist.statement:
        attrs.append(
            f'{STATEMENT_ATTRIBUTE}="{html.escape(_file_url(dist.filename + ENVELOPE_SUFFIX, depth))}"'
        )
    return f"<a {' '.join(attrs)}>{html.escape(dist.filename)}</a><br>"


def _file_json(dist: Distribution, depth: int = 2) -> dict[str, object]:
    metadata: dict[str, str] | bool = {"sha256": dist.metadata_sha256} if dist.metadata_sha256 else False
    entry: dict[str, object] = {
        "filename": dist.filename,
        "url": _file_url(dist.filename, depth),
        "hashes": {"sha256": dist.sha256},
    }
    if dist.requires_python:
        entry["requires-python"] = dist.requires_python
    entry["core-metadata"] = metadata
    entry["dist-info-metadata"] = metadata
    entry["size"] = dist.size
    entry["upload-time"] = _upload_time(dist.upload_time)
    # PEP 691: false, or the reason; a yank without a reason is plain true.
    entry["yanked"] = False if dist.yanked is None else (dist.yanked or True)
    if dist.statement:
        entry[STATEMENT_KEY] = _file_url(dist.filename + ENVELOPE_SUFFIX, depth)
    return entry


def _simple_pages(distributions: Iterable[Distribution], prefix: str, depth: int) -> dict[str, bytes]:
    """One simple index (``<prefix>simple/``): each project's page, then the list of projects."""
    projects: dict[NormalizedName, list[Distribution]] = {}
    for dist in distributions:
        projects.setdefault(dist.project, []).append(dist)
    meta = {"api-version": API_VERSION}
    pages: dict[str, bytes] = {}
    for project in sorted(projects):
        dists = sorted(projects[project], key=lambda d: (d.version, d.filename))
        versions = sorted({d.version for d in dists})
        pages[f"{prefix}{SIMPLE}/{project}/index.html"] = _html(
            f"Links for {project}", (_anchor(d, depth) for d in dists)
        )
        pages[f"{prefix}{SIMPLE}/{project}/index.json"] = _json(
            {
                "meta": meta,
                "name": project,
                "versions": [str(v) for v in versions],
                "files": [_file_json(d, depth) for d in dists],
            }
        )
    names = sorted(projects)
    pages[f"{prefix}{SIMPLE}/index.html"] = _html(
        "Simple index", (f'<a href="{quote(p)}/">{html.escape(p)}</a><br>' for p in names)
    )
    pages[f"{prefix}{SIMPLE}/index.json"] = _json({"meta": meta, "projects": [{"name": p} for p in names]})
    return pages


def routes_in(distributions: Iterable[Distribution]) -> dict[str, tuple[Distribution, ...]]:
    """Each per-torch route (routes.py) and the wheels it lists, by route name."""
    listed: dict[str, list[Distribution]] = {}
    for dist in distributions:
        for route in dist.routes:
            listed.setdefault(route, []).append(dist)
    return {route: tuple(listed[route]) for route in sorted(listed)}


def render(distributions: Iterable[Distribution]) -> dict[str, bytes]:
    """Every page of the index for these wheels: relative path -> bytes. Each route's pages come
    first, then the whole index's; within each, project pages before the list of projects (so a
    reader of a list never finds a project without its page)."""
    dists = tuple(distributions)
    pages: dict[str, bytes] = {}
    for route, listed in routes_in(dists).items():
        pages.update(_simple_pages(listed, f"{route}/", depth=3))
    pages.update(_simple_pages(dists, "", depth=2))
    return pages
