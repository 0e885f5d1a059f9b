"""wheelbuild.nightly.night against an index read over HTTP from a real `serve` (or a static server)
on 127.0.0.1: published inputs keys, held cells, basic auth, proven ranges and a rule-based matrix
of stand-in torch releases. The pure parts are in tests/unit/test_nightly.py."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from wheelbuild.cli.main import main
from wheelbuild.errors import (
    PublishedIndexUnreachable,
)
from wheelbuild.index.publish import Sidecars, publish
from wheelbuild.nightly import night as nightly
from wheelbuild.nightly import published
from wheelbuild.nightly.matrix import Cell, parse_matrix
from wheelbuild.nightly.night import (
    coverage_rows,
    held_cells,
    publish_night,
    published_keys,
    remote_inputs,
    source_of,
)
from wheelbuild.pipeline import check

from tests.indexkit import make_wheel
from tests.serving import running_server
from tests.unit.test_nightly import _cell_dir, _key


def _tree_with(tmp_path: Path, keys: dict[str, str]) -> Path:
    tree = tmp_path / "tree"
    wheels = [
        make_wheel(tmp_path / "w", payload=name, version=f"0.{i}.0+cu130torch2.11")
        for i, name in enumerate(keys)
    ]
    publish(
        wheels,
        tree,
        sidecars=Sidecars(inputs={w.name: (keys[name],) for w, name in zip(wheels, keys, strict=True)}),
    )
    return tree


def test_published_keys_are_read_from_a_local_tree_and_over_http_from_the_served_index(
    tmp_path: Path,
) -> None:
    tree = _tree_with(tmp_path, {"a": _key("a"), "b": _key("b")})
    assert published_keys(str(tmp_path / "{variant}"), None, []) == set()
    assert published_keys(str(tree), None, ["cu130"]) == {_key("a"), _key("b")}
    with running_server(tree) as url:
        assert remote_inputs(url) == {_key("a"), _key("b")}
        assert published_keys("ci@wheels.example:/srv/{variant}", url, ["cu130"]) == {_key("a"), _key("b")}
        assert remote_inputs(url.replace("/simple/", "/nothing-here/")) == set()  # no index yet


def test_cells_an_upload_servers_index_holds_are_not_built_again(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    wheel = make_wheel(tmp_path / "w", version="0.1.0+cu130torch2.11", tag="cp311-cp311-linux_x86_64")
    publish([wheel], tree)
    cells = [Cell("wbtiny", "0.1.0", "2.11.0+cu130", python, "100,120") for python in ("cp311", "cp312")]
    releases = {source_of(c): ("wbtiny", "0.1.0") for c in cells}
    with running_server(tree) as url:
        held = held_cells(cells, "https://upload.example/{variant}/", url, releases, None)
        assert held == {cells[0].id: wheel.name}
        # A tree is scheduled by its inputs keys; an unknown release cannot be matched by name.
        assert held_cells(cells, str(tmp_path / "{variant}"), url, releases, None) == {}
        assert held_cells(cells, "https://upload.example/{variant}/", url, {}, None) == {}
    schedule = {"published": [{"id": cells[0].id, "torch": "cu130", "key": "k", "held": wheel.name}]}
    (row,) = coverage_rows(schedule, [], {})
    assert row.detail == f"earlier: the index already holds {wheel.name}"


def test_an_abi3_wheel_the_cells_of_several_pythons_built_is_published_once_for_all_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The per-cell re-check needs SASS in a real wheel (the integration test); these pass it.
    monkeypatch.setattr(check, "check_wheels", lambda *_args, **_kwargs: {})
    night = tmp_path / "night"
    abi3 = "cp39-abi3-linux_x86_64"
    cp311, cp313 = (_cell_dir(night, f"wbabi-cu130-{py}-100.120", tag=abi3) for py in ("cp311", "cp313"))
    _cell_dir(night, "wbdemo-cu130-cp312-100.120")  # a wheel of one Python beside them
    name = f"wbtiny-0.1.0+cu130torch2.11-{abi3}.whl"
    built = [cell / "runs" / "r1" / name for cell in (cp311, cp313)]
    assert built[0].read_bytes() != built[1].read_bytes()  # each build stamps its own file
    summary = tmp_path / "summary.md"
    to = str(tmp_path / "wheelhouse" / "{variant}")
    matrix = parse_matrix({"build": [{"package": "wbabi", "torch": ["cu130"]}]})
    for _night in range(2):  # publishing the same night again changes nothing
        publish_night([night], matrix, {"GITHUB_STEP_SUMMARY": str(summary)}, to=to, say=lambda _line: None)
    tree = tmp_path / "wheelhouse" / "cu130"
    assert sorted(p.name for p in (tree / "files").glob("*.whl")) == [
        "wbtiny-0.1.0+cu130torch2.11-cp312-none-any.whl",
        name,
    ]
    assert (tree / "files" / name).read_bytes() == built[0].read_bytes()
    keys = {_key("wbabi-cu130-cp311-100.120"), _key("wbabi-cu130-cp313-100.120")}
    assert set((tree / "files" / f"{name}.inputs").read_text().split()) == keys
    # The next night schedules neither Python's cell again, whether it reads the tree or its index.
    assert keys <= published_keys(str(tree), None, ["cu130"])
    with running_server(tree) as url:
        assert keys <= remote_inputs(url)
    table = summary.read_text()
    assert "3 published, 0 failed" in table, table
    assert (
        f"| wbabi-cu130-cp313-100.120 | published | tonight: {name} (abi3: the file "
        "wbabi-cu130-cp311-100.120 built, for every Python; this cell's own build of it passed) |"
    ) in table


def test_a_static_server_of_the_tree_is_read_too(tmp_path: Path) -> None:
    """nginx-like: directories answer their index.html (PEP 503 HTML), files as they are."""
    import functools
    import http.server
    import threading

    tree = _tree_with(tmp_path, {"a": _key("a")})
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tree))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert remote_inputs(f"http://127.0.0.1:{server.server_address[1]}/simple/") == {_key("a")}
    finally:
        server.shutdown()
        server.server_close()


def test_an_index_behind_basic_auth_is_read_with_the_urls_credentials_and_refusal_is_typed(
    tmp_path: Path,
) -> None:
    import base64

    tree = _tree_with(tmp_path, {"a": _key("a")})
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text("ci:{SHA}" + base64.b64encode(hashlib.sha1(b"s3cret").digest()).decode() + "\n")
    with running_server(tree, htpasswd=htpasswd) as url:
        assert remote_inputs(url.replace("http://", "http://ci:s3cret@")) == {_key("a")}
        with pytest.raises(PublishedIndexUnreachable, match="HTTP 401") as caught:
            remote_inputs(url.replace("http://", "http://ci:wrong@"))
        assert "wrong" not in caught.value.cause


def test_a_cell_a_published_wheels_proven_range_serves_is_not_built_again(tmp_path: Path) -> None:
    """pin = "proven": the wheel built with torch 2.13 that loaded with 2.12 to 2.14 serves the
    cells of 2.12.1 and 2.14.1 (read from its METADATA, in the tree and over HTTP), not 2.15.0's,
    another Python's or another release's."""
    wheel = make_wheel(
        tmp_path / "w",
        version="0.1.0+cu130torch2.13",
        tag="cp311-cp311-linux_x86_64",
        requires_dist=("torch>=2.12,<2.15",),
    )
    publish([wheel], tmp_path / "cu130")
    cells = [
        Cell("wbtiny", "0.1.0", torch, python, "120", pin="proven")
        for torch, python in (
            ("2.12.1+cu130", "cp311"),
            ("2.14.1+cu130", "cp311"),
            ("2.15.0+cu130", "cp311"),
            ("2.14.1+cu130", "cp312"),
        )
    ]
    releases = {source_of(c): ("wbtiny", "0.1.0") for c in cells}
    tree = published.published_torch_pins(str(tmp_path / "{variant}"), None, ["cu130"])
    assert nightly.covered_cells(cells, tree, releases) == {
        c.id: f"{wheel.name} (torch>=2.12,<2.15, its proven range)" for c in cells[:2]
    }
    with running_server(tmp_path / "cu130") as url:
        served = published.published_torch_pins("https://upload.example/{variant}/", url, ["cu130"])
    assert served == tree
    assert nightly.covered_cells(cells, served, {}) == {}  # an unknown release is not matched by name
    assert nightly.covered_cells([replace(cells[0], version="0.2.0")], tree, releases) == {}


def test_the_nightly_plans_a_rule_based_matrix_against_a_served_index_of_stand_in_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wheelbuild nightly schedule` as the workflow runs it (production base: no Docker), its torch
    rules read from a real `wheelbuild serve` of stand-in torch wheels named as PyPI names them,
    each pinning its CUDA runtime as torch's METADATA does; one wheel already published whose
    proven range covers one cell."""
    made = tmp_path / "made"
    pins = {
        "2.15.0": "cuda-toolkit[cudart]==13.2.2",
        "2.14.1": "cuda-toolkit[cudart]==13.0.3",
        "2.13.0": "cuda-toolkit[cudart]==13.0.3",
        "2.12.1": "cuda-toolkit[cudart]==13.0.2",
        "2.10.0": "nvidia-cuda-runtime-cu12==12.8.90",
    }
    torches = [
        make_wheel(made, "torch", v, tag="cp311-cp311-manylinux_2_28_x86_64", requires_dist=(pin,))
        for v, pin in pins.items()
    ]
    publish(torches, tmp_path / "torch-index")
    config = tmp_path / "wheelbuild.toml"
    config.write_text(
        '[[build]]\npackage = "wbdemo"\ntorch = ["cu130:newest-2..newest", "cu128"]\npython = ["3.11"]\n'
        'archs = ["120"]\npin = "proven"\n'
    )
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(nightly.BASE_IMAGE_ENV, raising=False)
    with running_server(tmp_path / "torch-index") as url:
        done = CliRunner().invoke(
            main,
            ["nightly", "schedule", "--config-file", str(config), "--to", str(tmp_path / "out" / "{variant}"),
             "--torch-index-url", url],
        )  # fmt: skip
    assert done.exit_code == 0, done.output
    schedule = json.loads(done.stdout)
    built = sorted(c["torch"] for c in schedule["build"])
    # cu130's three newest minors of CUDA 13.0 (2.15.0 is 13.2); cu128's newest, which
    # the image's CUDA 12 layer builds.
    assert built == ["2.10.0+cu128", "2.12.1+cu130", "2.13.0+cu130", "2.14.1+cu130"]
    assert all(c["args"][-2:] == ["--pin", "proven"] for c in schedule["build"])
    assert schedule["skipped"] == [] and schedule["published"] == []
    assert "cu130:newest-2..newest: 2.12.1, 2.13.0, 2.14.1 on" in done.stderr
