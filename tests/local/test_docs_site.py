"""The docs site in real headless Chromium: built here with `mkdocs build --strict` (so this test
does not depend on scripts/test having built site/), served over HTTP on 127.0.0.1, every page
loaded: it shows its heading and title, every stylesheet, script and image it asks for answers,
its theme is painted, and every link into the site and every anchor resolves to a built file
and an element of it. The reference pages show the tables made from the code."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from wheelbuild import errors

from tests.browser import chromium, count_near, require_chromium

REPO = Path(__file__).resolve().parents[2]

# What each page shows, measured in the page: its heading, title, links, ids, and what it loaded.
MEASURE = """JSON.stringify({
  title: document.title,
  heading: (() => { const h = document.querySelector('article h1');
    if (!h) return null; const box = h.getBoundingClientRect();
    return {text: h.textContent.replace('¶', '').trim(), width: box.width, height: box.height}; })(),
  links: [...document.querySelectorAll('a[href]')].map(a => a.href),
  ids: [...document.querySelectorAll('[id]')].map(e => e.id).concat(
    [...document.querySelectorAll('a[name]')].map(a => a.name)),
  resources: performance.getEntriesByType('resource').map(r => ({name: r.name, status: r.responseStatus})),
  stylesheets: document.styleSheets.length,
  tableRows: document.querySelectorAll('article table tbody tr').length,
  headings: [...document.querySelectorAll('article h2')].map(h => h.textContent.replace('¶', '').trim()),
  header: (() => { const h = document.querySelector('header.md-header');
    if (!h) return null; const box = h.getBoundingClientRect();
    return {color: getComputedStyle(h).backgroundColor, height: box.height}; })(),
})"""


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # the test reads statuses in the page
        pass


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    pytest.importorskip("mkdocs", reason="mkdocs is the [docs] extra: scripts/setup --tests installs it")
    site = tmp_path_factory.mktemp("docs") / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return site


@pytest.fixture(scope="module")
def served(built_site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(built_site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _pages(site: Path) -> list[str]:
    return sorted(str(p.relative_to(site)) for p in site.rglob("*.html"))


@pytest.fixture(scope="module")
def measured(built_site: Path, served: str) -> dict[str, dict[str, Any]]:
    """Every page of the site, as Chromium loaded it; the home page's header also screenshot."""

    found: dict[str, dict[str, Any]] = {}
    with chromium() as page:
        for name in _pages(built_site):
            page.goto(f"{served}/{name}")
            found[name] = json.loads(page.evaluate(MEASURE))
            if name == "index.html":
                header = built_site.parent / "header.png"
                page.screenshot(header, clip={"x": 0, "y": 0, "width": 1100, "height": 48})
                found[name]["header_png"] = str(header)
    return found


def test_every_docs_page_is_built(built_site: Path) -> None:
    sources = {str(p.relative_to(REPO / "docs").with_suffix(".html")) for p in (REPO / "docs").rglob("*.md")}
    assert len(sources) >= 15, sources
    assert sources <= set(_pages(built_site))


def test_every_page_loads_with_its_heading_title_and_resources(measured: dict[str, dict[str, Any]]) -> None:
    for name, seen in measured.items():
        heading = seen["heading"]
        assert heading is not None and heading["text"], f"{name}: no heading"
        assert heading["width"] > 100 and heading["height"] > 10, f"{name}: heading not laid out: {heading}"
        assert seen["title"].endswith("wheelbuild"), f"{name}: title {seen['title']!r}"
        if name in ("index.html", "404.html"):  # their title is the site's name alone
            assert seen["title"] == "wheelbuild", f"{name}: title {seen['title']!r}"
        else:
            assert seen["title"].startswith(heading["text"]), (
                f"{name}: {seen['title']!r} vs {heading['text']!r}"
            )
        assert seen["stylesheets"] >= 1, f"{name}: no stylesheet"
        broken = [r for r in seen["resources"] if r["status"] not in (0, 200)]  # 0: not an HTTP load
        assert broken == [], f"{name}: {broken}"
        assert len(seen["resources"]) >= 2, f"{name}: {seen['resources']}"  # theme's CSS and JS


def test_the_theme_is_painted(measured: dict[str, dict[str, Any]]) -> None:
    home = measured["index.html"]
    assert home["header"] is not None and home["header"]["height"] > 30, home["header"]
    rgb = tuple(int(v) for v in home["header"]["color"].removeprefix("rgb(").rstrip(")").split(",")[:3])
    assert rgb != (255, 255, 255) and rgb != (0, 0, 0), rgb
    assert count_near(Path(home["header_png"]), (rgb[0], rgb[1], rgb[2]), tolerance=16) > 1100 * 48 // 2


def test_every_internal_link_and_anchor_resolves(
    built_site: Path, served: str, measured: dict[str, dict[str, Any]]
) -> None:
    checked, unresolved = 0, []
    for name, seen in measured.items():
        for href in seen["links"]:
            url = urlsplit(href)
            if f"{url.scheme}://{url.netloc}" != served:
                continue  # another site: not fetched here (no network), not ours to check
            path = unquote(url.path).lstrip("/") or "index.html"
            if path.endswith("/"):
                path += "index.html"
            checked += 1
            if not (built_site / path).is_file():
                unresolved.append(f"{name}: {href} (no file {path})")
            elif url.fragment and path in measured and unquote(url.fragment) not in measured[path]["ids"]:
                unresolved.append(f"{name}: {href} (no element #{url.fragment} in {path})")
            elif url.fragment and path not in measured:
                unresolved.append(f"{name}: {href} (an anchor into {path}, which is not a page)")
    assert unresolved == []
    assert checked > 200, checked  # the navigation alone links every page from every page


def test_the_reference_pages_show_the_tables_made_from_the_code(measured: dict[str, dict[str, Any]]) -> None:
    cli = measured["reference/cli.html"]
    assert {
        "wheelbuild build",
        "wheelbuild publish",
        "wheelbuild nightly schedule",
        "wheelbuild dist server",
    } <= set(cli["headings"])
    codes = {cls.exit_code for cls in errors.WheelbuildError.__subclasses__()}
    assert measured["reference/exit-codes.html"]["tableRows"] >= len(codes) + 1  # and click's 2
    from wheelbuild.spec.option_table import OPTIONS

    assert measured["reference/options.html"]["tableRows"] >= len(OPTIONS)


def test_the_reference_shows_no_old_spelling(built_site: Path) -> None:
    """Renamed options keep their old names working, hidden: the reference shows them nowhere,
    neither as a name, nor as a switch's default, nor among a variable's readers."""
    from wheelbuild.spec.option_table import OPTIONS

    old = {flag for option in OPTIONS for flag in option.old_flags}
    assert "--cicc-gate" in old and "--no-cicc-gate" in old
    for page in ("reference/cli.html", "reference/options.html"):
        text = (built_site / page).read_text()
        shown = {flag for flag in old if re.search(rf"{re.escape(flag)}(?![\w-])", text)}
        assert not shown, (page, shown)


def _readme_links() -> list[str]:
    readme = (REPO / "README.md").read_text()
    return re.findall(r"\]\((docs/[^)\s]+)\)", readme)


def test_the_readme_is_short_and_its_links_into_docs_name_pages() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 200
    links = _readme_links()
    assert len(links) >= 15, links  # every guide, the concepts, reference, architecture, benchmarks
    assert [link for link in links if not (REPO / link.split("#")[0]).is_file()] == []


def test_the_readmes_anchors_into_docs_resolve(measured: dict[str, dict[str, Any]]) -> None:
    anchored = [link.removeprefix("docs/").split("#") for link in _readme_links() if "#" in link]
    assert anchored, "the README links to a section of a page"
    missing = [
        f"{page}#{anchor}"
        for page, anchor in anchored
        if anchor not in measured[page.removesuffix(".md") + ".html"]["ids"]
    ]
    assert missing == []
