"""wheelbuild.index.publish: wheels into a tree under a lock; the index stays whole through a full disk, a
SIGKILL at any write, and two publishers at once (real processes, real filesystem)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from wheelbuild.errors import (
    BadArgument,
    InvalidWheel,
    NotPublished,
    WheelConflict,
)
from wheelbuild.index import tree as index_tree
from wheelbuild.index.publish import Sidecars, publish, published_inputs, reindex
from wheelbuild.index.yank import unyank, yank

from tests.indexkit import check_tree, make_wheel, parse_page, python_child, temp_files, tree_with_one_wheel

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return tree_with_one_wheel(tmp_path)


def test_publish_copies_wheels_writes_sidecars_and_the_index(tmp_path: Path) -> None:
    a = make_wheel(tmp_path / "in", "wbtiny", "0.1.0+cu130torch2.11")
    b = make_wheel(tmp_path / "in", "flash_attn", "2.8.3+cu130torch2.11", tag="cp312-cp312-linux_x86_64")
    root = tmp_path / "cu130"
    result = publish([a, b], root)
    assert result.added == (a.name, b.name)
    assert result.present == ()
    assert set(result.pages) == {
        "simple/index.html",
        "simple/index.json",
        "simple/wbtiny/index.html",
        "simple/wbtiny/index.json",
        "simple/flash-attn/index.html",
        "simple/flash-attn/index.json",
    }
    for wheel in (a, b):
        published = root / "files" / wheel.name
        assert published.read_bytes() == wheel.read_bytes()
        assert published.with_name(wheel.name + ".metadata").is_file()
    assert check_tree(root) == {"flash-attn": [b.name], "wbtiny": [a.name]}
    assert temp_files(root) == []


def test_the_inputs_key_of_each_build_is_kept_beside_its_wheel(tmp_path: Path) -> None:
    a = make_wheel(tmp_path / "in", "wbtiny", "0.1.0+cu130torch2.11")
    b = make_wheel(tmp_path / "in", "wbtiny", "0.2.0+cu130torch2.11")
    root = tmp_path / "cu130"
    assert published_inputs(root) == set()
    publish([a, b], root, sidecars=Sidecars(inputs={a.name: ("a" * 64,)}))  # b came without a build report
    assert (root / "files" / f"{a.name}.inputs").read_text() == "a" * 64 + "\n"
    assert not (root / "files" / f"{b.name}.inputs").exists()
    assert published_inputs(root) == {"a" * 64}
    assert check_tree(root) == {"wbtiny": [a.name, b.name]}  # the sidecar is no page's business


def test_an_inputs_key_that_is_not_one_hex_digest_is_refused_where_written_and_where_read(
    tmp_path: Path,
) -> None:
    wheel = make_wheel(tmp_path / "in")
    one, other = "a" * 64, "b" * 64
    for key in (f"{one}\n{other}", f"{one}\r", "key-a", one.upper()):
        with pytest.raises(BadArgument) as refused:
            publish([wheel], tmp_path / "tree", sidecars=Sidecars(inputs={wheel.name: (key,)}))
        assert refused.value.exit_code == 13 and "is not a sha256 hex digest" in refused.value.cause
        assert not (tmp_path / "tree").exists()
    # A sidecar someone else wrote: one line that is no key and it names none, not the others.
    root = tmp_path / "tree"
    publish([wheel], root, sidecars=Sidecars(inputs={wheel.name: (one,)}))
    assert published_inputs(root) == {one}
    (root / "files" / f"{wheel.name}.inputs").write_text(f"{one}\n{other}\nnot a key\n")
    assert published_inputs(root) == set()
    with pytest.raises(ValueError, match="line 3"):
        index_tree.inputs_keys(f"{one}\n{other}\nnot a key\n")


def test_the_same_wheel_again_is_a_no_op(tmp_path: Path, tree: Path) -> None:
    wheel = make_wheel(tmp_path / "old", "oldpkg", "1.0")  # byte-identical rebuild
    before = {p: p.stat().st_mtime_ns for p in tree.rglob("*") if p.is_file() and p.name != ".lock"}
    result = publish([wheel], tree)
    assert result.added == ()
    assert result.present == (wheel.name,)
    assert result.written == ()
    assert {p: p.stat().st_mtime_ns for p in before} == before


def test_a_different_wheel_under_a_published_name_is_refused_and_nothing_is_copied(
    tmp_path: Path, tree: Path
) -> None:
    fresh = make_wheel(tmp_path / "new", "fresh", "1.0")
    clash = make_wheel(tmp_path / "new", "oldpkg", "1.0", payload="rebuilt with other flags")
    published = tree / "files" / clash.name
    before = published.read_bytes()
    with pytest.raises(WheelConflict) as raised:
        publish([fresh, clash], tree)
    assert raised.value.exit_code == 51
    assert clash.name in raised.value.cause
    assert published.read_bytes() == before
    assert not (tree / "files" / fresh.name).exists()  # every wheel is checked before any is copied
    assert check_tree(tree) == {"oldpkg": [clash.name]}


@pytest.mark.parametrize(
    ("name", "version", "tag"),
    [
        ("Foo_Bar", "0.1.0+cu130torch2.11", "py3-none-any"),  # the project's case
        ("foo_bar", "0.1.0.0+cu130torch2.11", "py3-none-any"),  # one version, spelled longer
        ("foo_bar", "0.1.0+cu130torch2.11", "1-py3-none-any"),  # a build tag: installers prefer it
        ("foo.bar", "0.1+cu130torch2.11", "py2.py3-none-any"),  # tags that include py3-none-any
    ],
)
def test_a_published_distribution_is_never_replaced_under_another_spelling(
    tmp_path: Path, name: str, version: str, tag: str
) -> None:
    root = tmp_path / "cu130"
    first = make_wheel(tmp_path / "first", "foo_bar", "0.1.0+cu130torch2.11")
    publish([first], root)
    other = make_wheel(tmp_path / "other", name, version, tag=tag, payload="rebuilt with other flags")
    assert other.name != first.name
    with pytest.raises(WheelConflict) as raised:
        publish([other], root)
    assert raised.value.exit_code == 51
    assert f"already published as {first.name}" in raised.value.cause
    assert sorted(p.name for p in (root / "files").glob("*.whl")) == [first.name]
    # Both at once, into an empty tree: refused too, before anything is copied.
    with pytest.raises(WheelConflict, match="were both given"):
        publish([first, other], tmp_path / "fresh")
    assert not (tmp_path / "fresh").exists()


def test_another_platform_of_a_published_version_is_its_own_distribution(tmp_path: Path) -> None:
    root = tmp_path / "cu130"
    publish([make_wheel(tmp_path / "a", "foo_bar", "0.1.0", tag="cp312-cp312-linux_x86_64")], root)
    other = make_wheel(tmp_path / "b", "Foo_Bar", "0.1.0", tag="cp313-cp313-linux_x86_64")
    assert publish([other], root).added == (other.name,)


@pytest.mark.parametrize("tag", ["py3-none-linux x86_64", "py3-none-linux%5fx86_64", "py3-none-linux'x86_64"])
def test_a_name_the_server_would_not_answer_for_is_refused(tmp_path: Path, tag: str) -> None:
    wheel = make_wheel(tmp_path / "in", tag=tag)
    with pytest.raises(InvalidWheel) as refused:
        publish([wheel], tmp_path / "tree")
    assert refused.value.exit_code == 52 and "its name cannot be served" in refused.value.cause
    assert not (tmp_path / "tree").exists()


def test_two_different_wheels_of_one_name_in_one_call_are_refused(tmp_path: Path) -> None:
    one = make_wheel(tmp_path / "a", "dup", "1.0", payload="a")
    two = make_wheel(tmp_path / "b", "dup", "1.0", payload="b")
    with pytest.raises(WheelConflict):
        publish([one, two], tmp_path / "tree")
    assert not (tmp_path / "tree" / "files").exists()


def test_an_invalid_wheel_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    bad = tmp_path / "wbtiny-1.0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InvalidWheel):
        publish([make_wheel(tmp_path / "in"), bad], tmp_path / "tree")
    assert not (tmp_path / "tree").exists()


PUBLISH_IN_A_CHILD = """
import sys
from pathlib import Path
from wheelbuild.errors import WheelbuildError
from wheelbuild.index.publish import publish
try:
    publish([Path(sys.argv[1])], Path(sys.argv[2]))
except WheelbuildError as error:
    print(error.exit_code, error.cause)
"""


@pytest.mark.parametrize("shape", ["fifo", "link to a device"])
def test_a_fifo_or_device_named_like_a_wheel_is_refused_unread(tmp_path: Path, shape: str) -> None:
    wheel = tmp_path / "wbtiny-1.0-py3-none-any.whl"
    if shape == "fifo":
        os.mkfifo(wheel)  # no writer: opening it to read would block for ever
    else:
        wheel.symlink_to("/dev/zero")  # a read that never ends
    # In a child, so that a publish that blocks fails this test instead of hanging the suite.
    child = python_child(PUBLISH_IN_A_CHILD, str(wheel), str(tmp_path / "tree"))
    try:
        said, err = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        pytest.fail("publish blocked on a file that is not a regular one")
    assert child.returncode == 0, err
    assert said.startswith("52 wbtiny-1.0-py3-none-any.whl is not a usable wheel: it is not a regular"), said
    assert not (tmp_path / "tree").exists()


@pytest.mark.parametrize("sidecar", [".sha256", ".archs", ".yanked", ".metadata"])
def test_a_fifo_planted_as_a_published_wheels_sidecar_never_blocks_a_publish(
    tmp_path: Path, tree: Path, sidecar: str
) -> None:
    published = tree / "files" / "oldpkg-1.0-py3-none-any.whl"
    (published.parent / (published.name + sidecar)).unlink(missing_ok=True)
    os.mkfifo(published.parent / (published.name + sidecar))  # no writer: a read blocks for ever
    wheel = make_wheel(tmp_path / "in", "newpkg", "1.0")
    child = python_child(PUBLISH_IN_A_CHILD, str(wheel), str(tree))
    try:
        said, err = child.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        pytest.fail(f"publish blocked on the {sidecar} FIFO")
    assert child.returncode == 0, err
    if sidecar == ".metadata":  # what would be served to every client: refused, said what to do
        assert said.startswith(f"52 {published.parent / (published.name + sidecar)} is not a regular file"), (
            said
        )
        return
    assert said == "", said
    assert check_tree(tree) == {"newpkg": [wheel.name], "oldpkg": [published.name]}
    yanked = [
        a.attrs.get("data-yanked")
        for a in parse_page((tree / "simple/oldpkg/index.html").read_bytes()).anchors
    ]
    assert yanked == ([""] if sidecar == ".yanked" else [None])  # a marker, even one that is not read


def test_yank_and_unyank_by_file_name_and_by_project_version(tmp_path: Path, tree: Path) -> None:
    wheels = [
        make_wheel(tmp_path / "in", "flash_attn", "2.8.3+cu130torch2.11", tag=f"cp3{n}-cp3{n}-linux_x86_64")
        for n in (11, 12)
    ]
    publish(wheels, tree)
    result = yank(tree, "Flash-Attn==2.8.3+cu130torch2.11", "miscompiled\nfor sm_120")
    assert result.changed == tuple(sorted(w.name for w in wheels))
    assert set(result.written) == {
        "simple/flash-attn/index.html",
        "simple/flash-attn/index.json",
        "cu130-torch2.11/simple/flash-attn/index.html",
        "cu130-torch2.11/simple/flash-attn/index.json",
        "index.html",
    }
    for page in ("simple/flash-attn/index.html", "cu130-torch2.11/simple/flash-attn/index.html"):
        anchors = parse_page((tree / page).read_bytes()).anchors
        assert [a.attrs["data-yanked"] for a in anchors] == ["miscompiled for sm_120"] * 2
    assert yank(tree, wheels[0].name, "miscompiled for sm_120").unchanged == (wheels[0].name,)

    assert unyank(tree, wheels[0].name).changed == (wheels[0].name,)
    anchors = parse_page((tree / "simple/flash-attn/index.html").read_bytes()).anchors
    assert ["data-yanked" in a.attrs for a in anchors] == [False, True]
    check_tree(tree)


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("oldpkg==9.9", NotPublished),
        ("nothere-1.0-py3-none-any.whl", NotPublished),
        ("oldpkg", BadArgument),
        ("oldpkg==not a version", BadArgument),
    ],
)
def test_yank_of_what_is_not_published_says_so(tree: Path, target: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        yank(tree, target, "x")


def test_reindex_after_a_wheel_was_removed_by_hand(tmp_path: Path, tree: Path) -> None:
    extra = make_wheel(tmp_path / "in", "extra", "1.0")
    publish([extra], tree)
    (tree / "files" / extra.name).unlink()
    written = reindex(tree)
    assert "simple/extra/index.html" in written
    assert check_tree(tree) == {"oldpkg": ["oldpkg-1.0-py3-none-any.whl"]}
