"""The index's page for people (index.html at a tree's root): what each row says, the install
lines, escaping, and that publish writes it with an archs cache beside each wheel."""

from __future__ import annotations

import base64
import hashlib
import html
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version
from wheelbuild.index import index_page, routes
from wheelbuild.index import tree as index_tree
from wheelbuild.index.publish import Sidecars, publish
from wheelbuild.index.serve import _wants_page
from wheelbuild.index.yank import yank

from tests.indexkit import make_wheel

from .test_report_html import dom


def _dist(
    filename: str, *, yanked: str | None = None, archs: tuple[int, ...] | None = (100, 120)
) -> index_tree.Distribution:
    project, version = filename.split("-")[:2]
    return index_tree.Distribution(
        filename=filename,
        project=canonicalize_name(project),
        version=Version(version),
        sha256="a" * 64,
        size=123 * 1024**2,
        upload_time=datetime(2026, 11, 30, 9, 41, tzinfo=UTC),
        metadata_sha256="b" * 64,
        requires_python=">=3.9",
        yanked=yanked,
        archs=archs,
    )


FA = "flash_attn-2.8.3+cu128torch2.10-cp312-cp312-manylinux_2_28_x86_64.whl"


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("cu130torch2.11", ("cu130", "13.0", "2.11")),
        ("cu128torch2.10", ("cu128", "12.8", "2.10")),
        ("cu126torch2.9", ("cu126", "12.6", "2.9")),
        ("post1", None),
        ("", None),
        (None, None),
    ],
)
def test_the_variant_is_read_from_the_local_label(label: str | None, expected: object) -> None:
    assert routes.variant_of(label) == expected


@pytest.mark.parametrize(
    ("filename", "pythons"),
    [
        (FA, "3.12"),
        ("wbtiny-0.1-py3-none-any.whl", "3"),
        ("wbtiny-0.1-py2.py3-none-any.whl", "2, 3"),
        ("ext-1.0-cp39-abi3-manylinux_2_28_x86_64.whl", "3.9+ (abi3)"),
        ("ext-1.0-cp310.cp311-cp310.cp311-linux_x86_64.whl", "3.10, 3.11"),
    ],
)
def test_the_pythons_come_from_the_wheel_tags(filename: str, pythons: str) -> None:
    assert index_page.python_of(filename)[0] == pythons


def test_install_lines_go_through_the_wheels_route_pinned_to_its_release_without_a_label() -> None:
    uv, pip = index_page.install_lines(
        "flash-attn", "2.8.3+cu128torch2.10", "cu128-torch2.10", "http://wheels:8080/"
    )
    assert uv == "uv pip install --index http://wheels:8080/cu128-torch2.10/simple/ 'flash-attn==2.8.3'"
    assert pip == (
        "pip install --index-url http://wheels:8080/cu128-torch2.10/simple/ "
        "--extra-index-url https://pypi.org/simple 'flash-attn==2.8.3'"
    )
    # No PyTorch index: the torch the user has is kept, whichever index the build used.
    assert "pytorch" not in uv + pip
    # A wheel in no route (no wheelbuild label) is pinned exactly, from the whole index.
    assert (
        index_page.install_lines("wbtiny", "0.1.0", None)[0]
        == "uv pip install --index <tree-url>/simple/ 'wbtiny==0.1.0'"
    )


def test_a_row_per_wheel_with_variant_python_archs_size_date_and_install_lines() -> None:
    page = index_page.render(
        [
            _dist(FA),
            _dist("wbtiny-0.2.0-py3-none-any.whl", archs=()),
            _dist("wbtiny-0.10.0-py3-none-any.whl", archs=None),
        ]
    )
    parsed = dom(page)
    rows = [a for tag, a in parsed.elements if tag == "tr" and "wheel" in (a.get("class") or "")]
    assert [r["data-project"] for r in rows] == ["flash-attn", "wbtiny", "wbtiny"]
    text = " ".join(parsed.text)
    for expected in (
        "2.8.3+cu128torch2.10",
        "CUDA 12.8",
        "torch 2.10",
        "3.12",
        "sm_100, sm_120",
        "123.0 MiB",
        "2026-11-30 09:41 UTC",
    ):
        assert expected in text, expected
    # Newest first within a project (0.10.0 before 0.2.0); a pure wheel's archs "none", unknown "?".
    assert text.index("0.10.0") < text.index("0.2.0")
    assert re.search(r'<td class="archs">\?</td>.*<td class="archs">none</td>', page, re.S)
    # The platform has a column of its own, after the Python.
    assert "<th>Python</th><th>platform</th>" in page
    assert re.search(r'<td class="python">3\.12</td><td class="platform">manylinux_2_28_x86_64</td>', page)
    assert "cu128-torch2.10/simple/ &#x27;flash-attn==2.8.3&#x27;</code>" in page
    # The routes are listed once each, above the table, with the projects they hold.
    assert [a["data-route"] for tag, a in parsed.elements if tag == "li"] == ["cu128-torch2.10"]
    assert page == index_page.render(
        reversed(
            [
                _dist(FA),
                _dist("wbtiny-0.2.0-py3-none-any.whl", archs=()),
                _dist("wbtiny-0.10.0-py3-none-any.whl", archs=None),
            ]
        )
    )


def test_an_empty_index_says_so() -> None:
    page = index_page.render([])
    assert "No wheels are published here yet." in page and "0 wheel(s) of 0 project(s)" in page


def test_a_hostile_yank_reason_is_text_and_the_only_script_is_the_pages_own() -> None:
    hostile = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
    page = index_page.render([_dist(FA, yanked=hostile)])
    parsed = dom(page)
    assert [t for t, _ in parsed.elements].count("script") == 1
    assert "img" not in [t for t, _ in parsed.elements]
    assert not any(k.startswith("on") for _, attrs in parsed.elements for k in attrs)
    assert "yanked: " + hostile in " ".join(parsed.text)
    # The script runs under the page's CSP only because its hash is the one the CSP names.
    script = page.split("<script>")[1].split("</script>")[0]
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in index_page.CSP and index_page.CSP in page


def test_publish_writes_the_page_and_an_archs_cache_beside_each_wheel(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in", "wbtiny", "0.1.0+cu130torch2.11")
    root = tmp_path / "cu130"
    result = publish([wheel], root)
    assert result.written[-1] == "index.html"  # last: everything it points at is there first
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert (root / "files" / f"{wheel.name}.archs").read_text() == f"{sha}\n"  # pure Python: no SASS
    page = (root / "index.html").read_text()
    assert "CUDA 13.0" in page and '<td class="archs">none</td>' in page
    # A stale cache (another wheel's hash) is not trusted; yanking changes the page.
    (root / "files" / f"{wheel.name}.archs").write_text("f" * 64 + " 90\n")
    written = yank(root, wheel.name, "broken").written
    assert "index.html" in written and f"files/{wheel.name}.archs" in written
    assert "yanked: broken" in (root / "index.html").read_text()
    assert (root / "files" / f"{wheel.name}.archs").read_text() == f"{sha}\n"


@pytest.mark.parametrize(
    ("accept", "page"),
    [
        ("text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8", True),
        ("text/html", True),
        (None, False),
        ("*/*", False),
        # pip's and uv's Accept: the PEP 691 JSON first, text/html last
        (
            "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01",
            False,
        ),
    ],
)
def test_only_a_browser_gets_the_page_at_the_root(accept: str | None, page: bool) -> None:
    assert _wants_page(accept) is page


def test_the_page_shows_each_wheels_torch_range_which_publish_keeps_beside_it(tmp_path: Path) -> None:
    """What the build's torch range said (from the report beside the wheel, as publish reads it)
    goes beside the wheel in the tree and onto its row, escaped; a wheel without one shows none."""
    ranged = make_wheel(tmp_path / "in", "wbtiny", "0.1.0+cu130torch2.14", tag="cp311-cp311-linux_x86_64")
    plain = make_wheel(tmp_path / "in", "wbtiny", "0.2.0+cu130torch2.14", tag="cp311-cp311-linux_x86_64")
    line = "cp311: imports with torch 2.13.0; fails on 2.14.1: undefined symbol c10::f(int) <script>"
    publish([ranged, plain], tmp_path / "tree", sidecars=Sidecars(torch_ranges={ranged.name: line}))
    sidecar = tmp_path / "tree" / "files" / (ranged.name + index_tree.TORCH_RANGE_SUFFIX)
    assert sidecar.read_text() == line
    page = (tmp_path / "tree" / index_page.PAGE).read_text()
    assert page.count('<div class="range">') == 1
    assert f'<div class="range">{html.escape(line)}</div>' in page  # its own row's, escaped
    # A sidecar that is not a regular file is not read: the row shows no range.
    sidecar.unlink()
    sidecar.mkdir()
    distributions, _ = index_tree.scan(tmp_path / "tree")
    assert {d.filename: d.torch_range for d in distributions} == {ranged.name: None, plain.name: None}
