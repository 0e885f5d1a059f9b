"""wheelbuild.index.routes and the route folders of a published tree: one index per torch
variant, listing only the wheels that load with that torch (real wheels, real trees)."""

from __future__ import annotations

from pathlib import Path

import pytest
from wheelbuild.index import routes
from wheelbuild.index.publish import publish, reindex

from tests.indexkit import check_tree, make_wheel, parse_page


@pytest.mark.parametrize(
    ("local", "requirements", "expected"),
    [
        ("cu130torch2.14", ("==2.14.*",), ("cu130-torch2.14",)),
        # a proven range widens the requirement: listed under every torch minor it admits
        (
            "cu130torch2.14",
            (">=2.12,<2.16",),
            ("cu130-torch2.12", "cu130-torch2.13", "cu130-torch2.14", "cu130-torch2.15"),
        ),
        ("cu130torch2.14", (">=2.14.1,<=2.15.0",), ("cu130-torch2.14", "cu130-torch2.15")),
        ("cu128torch2.10", ("~=2.10.0",), ("cu128-torch2.10",)),
        # built for a torch and loading with it, without a requirement: its own route
        ("cu130torch2.11", (), ("cu130-torch2.11",)),
        # two requirements must both admit a minor
        ("cu130torch2.13", (">=2.12", "<2.14"), ("cu130-torch2.12", "cu130-torch2.13")),
        # a requirement that refuses the torch it was built with: no route trusts it
        ("cu130torch2.14", ("==2.13.*",), ()),
        # no wheelbuild label: nobody knows which torch it was built for
        (None, ("==2.14.*",), ()),
        ("local7", ("==2.14.*",), ()),
        # a specifier no installer could read
        ("cu130torch2.14", ("=<2.15",), ()),
    ],
)
def test_routes_of_a_wheel(
    local: str | None, requirements: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    assert routes.routes_of(local, requirements) == expected


def test_torch_requirements_reads_only_unconditional_torch_requirements() -> None:
    metadata = (
        b"Metadata-Version: 2.1\nName: wbdemo\nVersion: 0.1.0+cu130torch2.14\n"
        b"Requires-Dist: torch==2.14.*\n"
        b"Requires-Dist: Torch (>=2.12)\n"
        b"Requires-Dist: torch<3; sys_platform == 'win32'\n"
        b"Requires-Dist: torchvision==0.29.*\n"
        b"Requires-Dist: not a requirement at all\n\n"
    )
    assert routes.torch_requirements(metadata) == ("==2.14.*", ">=2.12")


@pytest.mark.parametrize(
    ("version", "cuda", "expected"),
    [
        ("2.14.1+cu130", "13.0", "cu130-torch2.14"),
        ("2.15.0", "13.2", "cu132-torch2.15"),
        ("2.10.0+cu128", "12.8", "cu128-torch2.10"),
        ("2.14.1+cpu", None, None),
        ("not-a-version", "13.0", None),
    ],
)
def test_the_route_of_an_installed_torch(version: str, cuda: str | None, expected: str | None) -> None:
    assert routes.torch_route(version, cuda) == expected


def test_route_install_lines_take_everything_else_from_pypi() -> None:
    uv, pip = routes.route_install_lines("http://idx/cu130-torch2.14/simple/", "wbdemo")
    assert uv == "uv pip install --index http://idx/cu130-torch2.14/simple/ wbdemo"
    assert pip == (
        "pip install --index-url http://idx/cu130-torch2.14/simple/ --extra-index-url https://pypi.org/simple wbdemo"
    )


def _listed(root: Path, route: str) -> dict[str, list[str]]:
    return check_tree(root, route=route)


def test_a_tree_lists_each_wheel_under_the_routes_of_the_torch_it_loads_with(tmp_path: Path) -> None:
    old = make_wheel(tmp_path / "in", "wbdemo", "0.1.0+cu130torch2.13", requires_dist=("torch==2.13.*",))
    new = make_wheel(tmp_path / "in", "wbdemo", "0.1.0+cu130torch2.14", requires_dist=("torch>=2.14,<2.16",))
    other = make_wheel(tmp_path / "in", "wbother", "1.0+cu130torch2.14", requires_dist=("torch==2.14.*",))
    root = tmp_path / "cu130"
    publish([old, new, other], root)
    # the whole index has every wheel; each route only those for its torch, linked to the same files
    assert check_tree(root) == {"wbdemo": [old.name, new.name], "wbother": [other.name]}
    assert sorted(p.name for p in root.iterdir() if routes.ROUTE.match(p.name)) == [
        "cu130-torch2.13",
        "cu130-torch2.14",
        "cu130-torch2.15",
    ]
    assert _listed(root, "cu130-torch2.13") == {"wbdemo": [old.name]}
    assert _listed(root, "cu130-torch2.14") == {"wbdemo": [new.name], "wbother": [other.name]}
    assert _listed(root, "cu130-torch2.15") == {"wbdemo": [new.name]}
    href = parse_page((root / "cu130-torch2.13/simple/wbdemo/index.html").read_bytes()).anchors[0].href
    assert href.startswith(f"../../../files/{old.name.replace('+', '%2B')}#sha256=")


def test_a_route_goes_when_its_last_wheel_goes(tmp_path: Path) -> None:
    old = make_wheel(tmp_path / "in", "wbdemo", "0.1.0+cu130torch2.13", requires_dist=("torch==2.13.*",))
    new = make_wheel(tmp_path / "in", "wbdemo", "0.1.0+cu130torch2.14", requires_dist=("torch==2.14.*",))
    root = tmp_path / "cu130"
    publish([old, new], root)
    assert (root / "cu130-torch2.13/simple/wbdemo/index.html").is_file()
    (root / "files" / old.name).unlink()  # removed by hand, then the index is regenerated
    reindex(root)
    assert not (root / "cu130-torch2.13").exists()
    assert _listed(root, "cu130-torch2.14") == {"wbdemo": [new.name]}
    assert check_tree(root) == {"wbdemo": [new.name]}


def test_a_route_folder_planted_as_a_link_is_never_written_through(tmp_path: Path) -> None:
    new = make_wheel(tmp_path / "in", "wbdemo", "0.1.0+cu130torch2.14", requires_dist=("torch==2.14.*",))
    root = tmp_path / "cu130"
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "simple").mkdir(parents=True)
    keep = elsewhere / "simple" / "index.html"
    keep.write_bytes(b"not ours\n")
    root.mkdir()
    (root / "cu130-torch2.14").symlink_to(elsewhere, target_is_directory=True)
    publish([new], root)
    assert keep.read_bytes() == b"not ours\n"
    assert sorted(p.name for p in elsewhere.rglob("*")) == ["index.html", "simple"]
