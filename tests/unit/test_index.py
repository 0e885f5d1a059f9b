"""wheelbuild.index.tree: the static index checked against PEP 503, 592, 658/714, 691 and 700."""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version
from wheelbuild.errors import InvalidWheel
from wheelbuild.index import tree

from tests.indexkit import check_tree, make_wheel, parse_page

FILE_KEYS = {
    "filename",
    "url",
    "hashes",
    "requires-python",
    "core-metadata",
    "dist-info-metadata",
    "size",
    "upload-time",
    "yanked",
}


def _tree(tmp_path: Path, *wheels: Path) -> Path:
    """A tree whose files/ holds *wheels*, as put there by hand (no sidecars yet)."""
    root = tmp_path / "tree"
    (root / "files").mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        (root / "files" / wheel.name).write_bytes(wheel.read_bytes())
    return root


def _regenerate(root: Path) -> tuple[str, ...]:
    return tree.write_plan(root, tree.index_changes(root))


def _project_json(root: Path, project: str) -> Any:
    return json.loads((root / "simple" / project / "index.json").read_bytes())


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        ("wbtiny", "wbtiny"),
        ("Flash_Attn", "flash-attn"),
        ("flash.attn", "flash-attn"),
        ("Foo.-_Bar__baz", "foo-bar-baz"),
        ("FLASH-ATTN", "flash-attn"),
    ],
)
def test_project_names_are_normalized_per_pep_503(name: str, normalized: str) -> None:
    assert tree.normalize(name) == normalized
    assert tree.is_project_name(normalized)


def test_a_wheels_project_page_is_at_its_normalized_name(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in", "Flash.Attn_X", "2.8.3")
    root = _tree(tmp_path, wheel)
    _regenerate(root)
    assert (root / "simple" / "flash-attn-x" / "index.html").is_file()
    root_page = parse_page((root / "simple" / "index.html").read_bytes())
    assert [(a.href, a.text) for a in root_page.anchors] == [("flash-attn-x/", "flash-attn-x")]
    assert _project_json(root, "flash-attn-x")["name"] == "flash-attn-x"


def test_links_carry_the_wheels_sha256_and_the_metadata_files_hash(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in")
    root = _tree(tmp_path, wheel)
    _regenerate(root)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("wbtiny-0.1.0+cu130torch2.11.dist-info/METADATA")
    # PEP 658: the .metadata file is the wheel's METADATA byte for byte.
    assert (root / "files" / (wheel.name + ".metadata")).read_bytes() == metadata
    meta_sha = hashlib.sha256(metadata).hexdigest()

    (anchor,) = parse_page((root / "simple/wbtiny/index.html").read_bytes()).anchors
    assert anchor.href == f"../../files/wbtiny-0.1.0%2Bcu130torch2.11-py3-none-any.whl#sha256={sha}"
    assert anchor.text == wheel.name
    assert anchor.attrs["data-dist-info-metadata"] == f"sha256={meta_sha}"
    assert anchor.attrs["data-core-metadata"] == f"sha256={meta_sha}"  # PEP 714's name

    (entry,) = _project_json(root, "wbtiny")["files"]
    assert entry["hashes"] == {"sha256": sha}
    assert entry["core-metadata"] == entry["dist-info-metadata"] == {"sha256": meta_sha}
    assert entry["url"] == "../../files/wbtiny-0.1.0%2Bcu130torch2.11-py3-none-any.whl"
    assert check_tree(root) == {"wbtiny": [wheel.name]}


def test_json_pages_have_exactly_the_pep_691_and_700_keys(tmp_path: Path) -> None:
    root = _tree(tmp_path, make_wheel(tmp_path / "in"))
    _regenerate(root)
    listing = json.loads((root / "simple/index.json").read_bytes())
    assert listing == {"meta": {"api-version": "1.1"}, "projects": [{"name": "wbtiny"}]}
    detail = _project_json(root, "wbtiny")
    assert set(detail) == {"meta", "name", "versions", "files"}
    assert detail["meta"] == {"api-version": "1.1"}
    (entry,) = detail["files"]
    assert set(entry) == FILE_KEYS
    assert entry["requires-python"] == ">=3.8"
    assert entry["size"] == (root / "files" / entry["filename"]).stat().st_size
    assert entry["yanked"] is False


def test_html_pages_declare_repository_version_1_1(tmp_path: Path) -> None:
    root = _tree(tmp_path, make_wheel(tmp_path / "in"))
    _regenerate(root)
    for page in ("simple/index.html", "simple/wbtiny/index.html"):
        assert parse_page((root / page).read_bytes()).meta == {"pypi:repository-version": "1.1"}


def test_requires_python_is_html_escaped_and_absent_when_metadata_has_none(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        make_wheel(tmp_path / "in", "a", "1.0", requires_python=">=3.9,<4,!=3.10.*"),
        make_wheel(tmp_path / "in", "b", "1.0", requires_python=None),
    )
    _regenerate(root)
    raw = (root / "simple/a/index.html").read_text()
    assert 'data-requires-python="&gt;=3.9,&lt;4,!=3.10.*"' in raw
    (anchor,) = parse_page(raw.encode()).anchors
    assert anchor.attrs["data-requires-python"] == ">=3.9,<4,!=3.10.*"
    (anchor,) = parse_page((root / "simple/b/index.html").read_bytes()).anchors
    assert "data-requires-python" not in anchor.attrs
    assert "requires-python" not in _project_json(root, "b")["files"][0]


@pytest.mark.parametrize(
    ("marker", "html_value", "json_value"),
    [
        (None, None, False),
        ("", "", True),
        ('miscompiled <sm_120> & "bad"', 'miscompiled <sm_120> & "bad"', 'miscompiled <sm_120> & "bad"'),
    ],
)
def test_yanked_files_carry_their_reason_per_pep_592(
    tmp_path: Path, marker: str | None, html_value: str | None, json_value: object
) -> None:
    wheel = make_wheel(tmp_path / "in")
    root = _tree(tmp_path, wheel)
    if marker is not None:
        (root / "files" / (wheel.name + ".yanked")).write_text(marker)
    _regenerate(root)
    (anchor,) = parse_page((root / "simple/wbtiny/index.html").read_bytes()).anchors
    assert anchor.attrs.get("data-yanked") == html_value
    assert ("data-yanked" in anchor.attrs) == (marker is not None)
    assert _project_json(root, "wbtiny")["files"][0]["yanked"] == json_value


def test_versions_are_sorted_per_pep_440_and_files_follow_them(tmp_path: Path) -> None:
    versions = ["1.10", "1.2", "1.0rc1", "1.0.post1", "1.0", "1.0+cu130torch2.11", "1!0.1"]
    root = _tree(tmp_path, *(make_wheel(tmp_path / "in", "vv", v) for v in versions))
    _regenerate(root)
    detail = _project_json(root, "vv")
    expected = sorted(versions, key=Version)
    assert detail["versions"] == [str(Version(v)) for v in expected]
    assert [f["filename"].split("-")[1] for f in detail["files"]] == expected
    check_tree(root)


def test_upload_time_is_the_files_mtime_in_utc_with_z(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in")
    root = _tree(tmp_path, wheel)
    moment = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
    ns = int(moment.timestamp()) * 10**9 + moment.microsecond * 1000
    os.utime(root / "files" / wheel.name, ns=(ns, ns))
    _regenerate(root)
    upload = _project_json(root, "wbtiny")["files"][0]["upload-time"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", upload)
    assert upload == "2026-03-04T05:06:07.890123Z"


def test_regeneration_lists_exactly_the_files_and_removes_stale_projects(tmp_path: Path) -> None:
    keep = make_wheel(tmp_path / "in", "keep", "1.0")
    gone = make_wheel(tmp_path / "in", "gone", "1.0")
    root = _tree(tmp_path, keep, gone)
    _regenerate(root)
    assert check_tree(root) == {"gone": [gone.name], "keep": [keep.name]}
    (root / "files" / gone.name).unlink()
    changed = _regenerate(root)
    assert "simple/gone/index.html" in changed
    assert not (root / "simple" / "gone").exists()
    assert check_tree(root) == {"keep": [keep.name]}


def test_regeneration_is_idempotent_and_writes_nothing_when_nothing_changed(tmp_path: Path) -> None:
    root = _tree(tmp_path, make_wheel(tmp_path / "in"))
    first = _regenerate(root)
    assert "simple/index.json" in first
    assert _regenerate(root) == ()


def test_missing_sidecars_are_made_and_a_stale_hash_cache_is_not_trusted(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in")
    root = _tree(tmp_path, wheel)
    written = _regenerate(root)
    cache = root / "files" / (wheel.name + ".sha256")
    assert f"files/{wheel.name}.sha256" in written
    assert f"files/{wheel.name}.metadata" in written
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert cache.read_text().split()[0] == sha
    # A cache that no longer matches the wheel's size and mtime is recomputed, not believed.
    stat = (root / "files" / wheel.name).stat()
    cache.write_text(f"{'0' * 64} {stat.st_size} {stat.st_mtime_ns + 1}\n")
    assert tree.file_sha256(root / "files" / wheel.name) == sha
    _regenerate(root)
    assert check_tree(root) == {"wbtiny": [wheel.name]}


def test_render_is_pure_and_deterministic() -> None:
    dist = tree.Distribution(
        filename="wbtiny-0.1.0-py3-none-any.whl",
        project=tree.parse_filename(Path("wbtiny-0.1.0-py3-none-any.whl"))[0],
        version=Version("0.1.0"),
        sha256="a" * 64,
        size=10,
        upload_time=datetime(2026, 1, 1, tzinfo=UTC),
        metadata_sha256="b" * 64,
        requires_python=None,
        yanked=None,
    )
    pages = tree.render([dist])
    assert pages == tree.render([dist])
    # Project pages come before the root list, so a reader of the root finds each page there.
    assert list(pages) == [
        "simple/wbtiny/index.html",
        "simple/wbtiny/index.json",
        "simple/index.html",
        "simple/index.json",
    ]
    empty = tree.render([])
    assert list(empty) == ["simple/index.html", "simple/index.json"]
    assert json.loads(empty["simple/index.json"]) == {"meta": {"api-version": "1.1"}, "projects": []}
    assert parse_page(empty["simple/index.html"]).anchors == []


def _bad_wheel(directory: Path, case: str) -> Path:
    if case == "file name":
        path = directory / "not-a-wheel.whl"
        path.write_bytes(b"x")
    elif case == "zip":
        path = directory / "wbtiny-1.0-py3-none-any.whl"
        path.write_bytes(b"not a zip")
    elif case == "project":
        path = make_wheel(directory / "src", "other", "1.0").rename(directory / "wbtiny-1.0-py3-none-any.whl")
    else:
        path = make_wheel(directory, "wbtiny", "1.0", metadata_version="1.1")
    return path


@pytest.mark.parametrize("case", ["file name", "zip", "project", "version"])
def test_read_wheel_refuses_what_is_not_a_consistent_wheel(tmp_path: Path, case: str) -> None:
    with pytest.raises(InvalidWheel) as raised:
        tree.read_wheel(_bad_wheel(tmp_path, case))
    assert case in raised.value.cause
    assert raised.value.exit_code == 52


def test_atomic_write_that_fails_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "tree" / "page.html"
    target.parent.mkdir()
    target.write_bytes(b"old")
    unreadable = tmp_path / "a-folder"  # its contents cannot be read: the write fails midway
    unreadable.mkdir()
    with pytest.raises(OSError):
        tree.atomic_write(target, unreadable)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["page.html"]
    tree.atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o644


def test_dot_files_and_other_sidecars_are_not_listed(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in")
    root = _tree(tmp_path, wheel)
    (root / "files" / f".{wheel.name}.abc.tmp").write_bytes(b"half a wheel")
    (root / "files" / ".hidden-1.0-py3-none-any.whl").write_bytes(b"x")
    (root / "files" / "notes.txt").write_text("hi")
    _regenerate(root)
    assert check_tree(root) == {"wbtiny": [wheel.name]}


def _elsewhere(tmp_path: Path) -> Path:
    """A folder outside the tree holding pages of its own."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for page in ("index.html", "index.json"):
        (outside / page).write_text("not the index's")
    return outside


def test_the_stale_sweep_removes_a_link_under_simple_never_what_it_points_at(tmp_path: Path) -> None:
    root = _tree(tmp_path, make_wheel(tmp_path / "in", "wbtiny", "0.1.0"))
    _regenerate(root)
    outside = _elsewhere(tmp_path)
    (root / "simple" / "gone").symlink_to(outside, target_is_directory=True)
    (root / "simple" / "dangling").symlink_to(tmp_path / "nowhere")
    changed = _regenerate(root)
    assert sorted(p.name for p in outside.iterdir()) == ["index.html", "index.json"]
    assert not (root / "simple" / "gone").is_symlink()
    assert not (root / "simple" / "dangling").is_symlink()
    assert {"simple/gone", "simple/dangling"} <= set(changed)
    check_tree(root)


def test_pages_are_never_written_through_a_link_under_simple(tmp_path: Path) -> None:
    root = _tree(tmp_path, make_wheel(tmp_path / "in", "wbtiny", "0.1.0"))
    outside = _elsewhere(tmp_path)
    (root / "simple").mkdir()
    (root / "simple" / "wbtiny").symlink_to(outside, target_is_directory=True)
    (root / "simple" / "index.json").symlink_to(outside / "index.json")
    _regenerate(root)
    assert {p.name: p.read_text() for p in outside.iterdir()} == {
        "index.html": "not the index's",
        "index.json": "not the index's",
    }
    project = root / "simple" / "wbtiny"
    assert project.is_dir() and not project.is_symlink()
    assert not (root / "simple" / "index.json").is_symlink()
    assert _project_json(root, "wbtiny")["name"] == "wbtiny"
    check_tree(root)


def test_a_files_folder_that_is_a_link_is_indexed_through_it(tmp_path: Path) -> None:
    """files/ on another volume, linked by the operator: a top folder may be a link."""
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "wbtiny-0.1.0-py3-none-any.whl").write_bytes(
        make_wheel(tmp_path / "in", "wbtiny", "0.1.0").read_bytes()
    )
    root = tmp_path / "tree"
    root.mkdir()
    (root / "files").symlink_to(volume, target_is_directory=True)
    _regenerate(root)
    assert (volume / "wbtiny-0.1.0-py3-none-any.whl.metadata").is_file()
    assert (root / "files").is_symlink()
    assert [f["filename"] for f in _project_json(root, "wbtiny")["files"]] == [
        "wbtiny-0.1.0-py3-none-any.whl"
    ]


def test_a_stale_page_that_is_a_link_is_removed_and_not_its_target(tmp_path: Path) -> None:
    root = _tree(tmp_path, make_wheel(tmp_path / "in", "wbtiny", "0.1.0"))
    _regenerate(root)
    outside = _elsewhere(tmp_path)
    (root / "simple" / "gone").mkdir()
    (root / "simple" / "gone" / "index.html").symlink_to(outside / "index.html")
    assert "simple/gone/index.html" in _regenerate(root)
    assert (outside / "index.html").read_text() == "not the index's"
    assert not (root / "simple" / "gone").exists()


def test_an_oversized_metadata_sidecar_left_by_an_old_publish_is_refused_not_loaded(tmp_path: Path) -> None:
    # A bomb published before members were capped left a huge files/<wheel>.metadata; a later
    # regeneration must not read it whole (nor serve it on): it names the file and what to do.
    wheel = make_wheel(tmp_path / "in")
    root = _tree(tmp_path, wheel)
    _regenerate(root)
    sidecar = root / "files" / (wheel.name + ".metadata")
    with sidecar.open("ab") as grow:
        grow.truncate(64 * 1024**2)  # sparse: 64 MiB on paper, nothing on disk
    with pytest.raises(InvalidWheel) as caught:
        tree.index_changes(root)
    assert sidecar.name in caught.value.cause and "by hand" in caught.value.remedy
