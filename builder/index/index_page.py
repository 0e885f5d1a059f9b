"""The index's page for people: ``index.html`` at a tree's root, one row per wheel with what a
person picks by (project, version, variant: CUDA and torch, Python, CUDA archs, size, date,
yanked) and a copyable install line. `wheelbuild publish` writes it with the pages under
``simple/`` (so nginx serves it too) and `wheelbuild serve` answers a browser's ``/`` with it.

Pure: the index's :class:`~wheelbuild.index.pages.Distribution` records in, the page out, the same bytes
for the same records (a publish that changes nothing rewrites nothing). Every name comes from a
file someone published and is escaped. The page's only script (fixed text, allowed by its hash
in the page's Content-Security-Policy) puts the address the page was loaded from into the install
lines, so one page is right wherever the tree is served; without it they say ``<index-url>``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Iterable
from urllib.parse import quote

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..units import format_bytes
from .pages import ENVELOPE_SUFFIX, SIGSTORE_SUFFIX, Distribution, routes_in
from .routes import route_install_lines, route_name, variant_of

__all__ = ["PAGE", "install_lines", "python_of", "render"]

PAGE = "index.html"
PLACEHOLDER = "<index-url>"
TREE_PLACEHOLDER = "<tree-url>/"

# Fills every install line with this page's own address (…/simple/, or the tree's root before a
# route), and copies a line on click.
_SCRIPT = """
const base = new URL("simple/", document.baseURI).href;
const tree = new URL(".", document.baseURI).href;
for (const span of document.querySelectorAll(".index-url")) span.textContent = base;
for (const span of document.querySelectorAll(".tree-url")) span.textContent = tree;
for (const button of document.querySelectorAll("button.copy")) {
  button.addEventListener("click", async () => {
    const text = button.parentElement.querySelector("code").textContent;
    try { await navigator.clipboard.writeText(text); button.textContent = "copied"; }
    catch { getSelection().selectAllChildren(button.parentElement.querySelector("code")); }
  });
}
""".strip()
_SCRIPT_HASH = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
CSP = f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{_SCRIPT_HASH}'"


def _python(tag: Tag) -> str:
    digits = tag.interpreter[2:]
    if tag.interpreter.startswith(("cp", "py")) and digits.isdigit():
        version = f"{digits[0]}.{digits[1:]}" if len(digits) > 1 else digits
        return f"{version}+ (abi3)" if tag.abi == "abi3" else version
    return tag.interpreter


def python_of(filename: str) -> tuple[str, str]:
    """(Pythons, platforms) of a wheel file name: ("3.11", "manylinux_2_34_x86_64")."""
    try:
        _name, _version, _build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return "?", "?"
    pythons = sorted(
        {_python(t) for t in tags},
        key=lambda p: [int(x) if x.isdigit() else 0 for x in re.findall(r"\d+|\D+", p)],
    )
    return ", ".join(pythons), ", ".join(sorted({t.platform for t in tags}))


def install_lines(
    project: str, version: str, route: str | None, tree_url: str = TREE_PLACEHOLDER
) -> tuple[str, str]:
    """(uv, pip) lines installing this wheel. Through its route (…/cu130-torch2.14/simple/) with
    its release pinned and no label: the route lists only wheels that load with that torch, so
    an installed torch is kept. A wheel in no route (no wheelbuild label) is pinned exactly,
    label and all, from the whole index."""
    if route:
        return route_install_lines(f"{tree_url}{route}/simple/", f"'{project}=={Version(version).public}'")
    return route_install_lines(f"{tree_url}simple/", f"'{project}=={version}'")


def own_route(dist: Distribution) -> str | None:
    """The route of the torch the wheel was built for, when it is listed there."""
    variant = variant_of(dist.version.local)
    route = route_name(variant[0], variant[2]) if variant else None
    return route if route in dist.routes else None


def _archs(dist: Distribution) -> str:
    if dist.archs is None:
        return "?"
    return ", ".join(f"sm_{a}" for a in dist.archs) or "none"


def _command(line: str, cls: str) -> str:
    """One install line, escaped, with the tree's URL in a span the script fills."""
    escaped = html.escape(line).replace(
        html.escape(TREE_PLACEHOLDER), f'<span class="tree-url">{html.escape(TREE_PLACEHOLDER)}</span>'
    )
    return (
        f'<div class="cmd {cls}"><code>{escaped}</code><button class="copy" type="button">copy</button></div>'
    )


def _row(dist: Distribution) -> str:
    version = str(dist.version)
    variant = variant_of(dist.version.local)
    cuda, torch = (f"CUDA {variant[1]}", f"torch {variant[2]}") if variant else ("—", "—")
    pythons, platforms = python_of(dist.filename)
    uv, pip = install_lines(dist.project, version, own_route(dist))
    yanked = "—" if dist.yanked is None else ("yanked: " + dist.yanked if dist.yanked else "yanked")
    cells = [
        f'<td class="project">{html.escape(dist.project)}</td>',
        f'<td class="version">{html.escape(version)}</td>',
        f'<td class="variant">{html.escape(cuda)}<br>{html.escape(torch)}'
        + (f'<div class="range">{html.escape(dist.torch_range)}</div>' if dist.torch_range else "")
        + "</td>",
        f'<td class="python">{html.escape(pythons)}</td>',
        f'<td class="platform">{html.escape(platforms)}</td>',
        f'<td class="archs">{html.escape(_archs(dist))}</td>',
        f'<td class="size">{format_bytes(dist.size)}</td>',
        f'<td class="date">{dist.upload_time.strftime("%Y-%m-%d %H:%M")} UTC</td>',
        f'<td class="yanked">{html.escape(yanked)}</td>',
        f'<td class="install">{_command(uv, "uv")}{_command(pip, "pip")}'
        f'<a class="file" href="files/{_quote(dist.filename)}">{html.escape(dist.filename)}</a>'
        + (
            f' <a class="provenance" href="files/{_quote(dist.filename + ENVELOPE_SUFFIX)}">provenance</a>'
            if dist.statement
            else ""
        )
        + (
            f' <a class="sigstore" href="files/{_quote(dist.filename + SIGSTORE_SUFFIX)}">sigstore</a>'
            if dist.sigstore_bundle
            else ""
        )
        + "</td>",
    ]
    cls = "wheel yanked" if dist.yanked is not None else "wheel"
    return f'<tr class="{cls}" data-project="{html.escape(dist.project)}">' + "".join(cells) + "</tr>"


def _route_item(route: str, listed: tuple[Distribution, ...]) -> str:
    cuda_tag, _, torch = route.partition("-torch")
    uv, pip = route_install_lines(f"{TREE_PLACEHOLDER}{route}/simple/", "NAME")
    names = ", ".join(sorted({d.project for d in listed}))
    return (
        f'<li class="route" data-route="{html.escape(route)}"><b>torch {html.escape(torch)}</b> '
        f"(wheels built with {html.escape(cuda_tag)}): {html.escape(names)}"
        f"{_command(uv, 'uv')}{_command(pip, 'pip')}</li>"
    )


def _quote(filename: str) -> str:
    return html.escape(quote(filename))


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1d2330; }
h1 { font-size: 20px; margin: 0 0 4px; } .meta { color: #5a6273; margin: 0 0 14px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #d6dae2; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f1f3f7; } td.size, td.date { font-variant-numeric: tabular-nums; }
td.version, td.variant, td.archs, td.size, td.date { white-space: nowrap; }
td.platform { font-size: 12px; overflow-wrap: anywhere; max-width: 11em; }
tr.yanked td { background: #fdf1f0; } tr.yanked td.yanked { color: #b3261e; }
.cmd { display: flex; gap: 6px; align-items: center; margin: 0 0 3px; }
.cmd code { font: 12px ui-monospace, monospace; background: #f6f8fa; border: 1px solid #e3e6ec;
  padding: 2px 6px; user-select: all; white-space: nowrap; }
.cmd.pip code { color: #5a6273; }
button.copy { font-size: 11px; padding: 1px 6px; }
a.file, a.provenance { font-size: 11px; color: #5a6273; }
td.variant div.range { white-space: normal; max-width: 28em; font-size: 11px; color: #5a6273; }
"""


def render(distributions: Iterable[Distribution]) -> str:
    """The page listing *distributions*: newest version first within each project."""
    dists = sorted(
        distributions, key=lambda d: (d.project, [-x for x in d.version.release], str(d.version), d.filename)
    )
    # Sorting by the negated release puts newer releases first; pre-releases and labels only
    # order within a release, by their text, which is stable and good enough for a person.
    projects = sorted({d.project for d in dists})
    rows = "\n".join(map(_row, dists))
    routes = "\n".join(_route_item(route, listed) for route, listed in routes_in(dists).items())
    empty = '<tr class="empty"><td colspan="9">No wheels are published here yet.</td></tr>'
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        f"<title>wheelbuild index</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        "<h1>wheelbuild index</h1>\n"
        f'<p class="meta">{len(dists)} wheel(s) of {len(projects)} project(s). Pick the row of your '
        "CUDA and torch and copy its line; pip and uv read the index at "
        f'<a href="simple/"><span class="index-url">{html.escape(PLACEHOLDER)}</span></a>.</p>\n'
        + (
            '<h2>One index per torch</h2>\n<p class="meta">Each lists only the wheels that load with '
            "that torch, so an installed torch is kept and no version label is needed.</p>\n"
            f'<ul class="routes">\n{routes}\n</ul>\n'
            if routes
            else ""
        )
        + '<table class="wheels"><thead><tr><th>project</th><th>version</th><th>variant</th>'
        "<th>Python</th><th>platform</th><th>CUDA archs</th><th>size</th><th>date</th><th>yanked</th>"
        "<th>install</th></tr></thead>\n<tbody>\n"
        f"{rows or empty}\n</tbody></table>\n<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )
