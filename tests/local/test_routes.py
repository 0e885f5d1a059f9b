"""Install for the torch you have, without a label: real pip and real uv against `wheelbuild serve`'s
per-torch routes, in venvs that already hold torch 2.13 or 2.14. No Docker; seconds.

The torch wheels here are stand-ins (pure-Python wheels named torch 2.13.0 and 2.14.1, served by a
second wheelbuild server that plays PyPI): what is tested is which wheel the installers pick and
that they leave torch alone, which does not need torch's 900 MB."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from wheelbuild.index.publish import publish
from wheelbuild.index.routes import PYPI_SIMPLE, route_install_lines

from tests.indexkit import make_wheel
from tests.serving import clean_env, request, run_ok, running_server, serve_process, uv_binary

BUILT_FOR = {"2.13.0": "0.1.0+cu130torch2.13", "2.14.1": "0.1.0+cu130torch2.14"}


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """(our tree's URL, the stand-in PyPI's URL, our tree): wbdemo built for torch 2.13 and for
    2.14, each requiring the torch minor it was built with, as wheelbuild stamps it."""
    base = tmp_path_factory.mktemp("routes")
    ours = base / "cu130"
    wheels = [
        make_wheel(base / "in", "wbdemo", version, requires_dist=(f"torch=={torch.rsplit('.', 1)[0]}.*",))
        for torch, version in BUILT_FOR.items()
    ]
    publish(wheels, ours)
    standin = base / "pypi"
    publish([make_wheel(base / "torch-in", "torch", torch) for torch in BUILT_FOR], standin)
    with running_server(ours) as url, running_server(standin) as pypi:
        yield url, pypi, ours


def _venv_with_torch(tmp_path: Path, torch: str, pypi: str, env: dict[str, str]) -> str:
    venv = tmp_path / f"venv-torch{torch}"
    run_ok([sys.executable, "-m", "venv", str(venv)], env, tmp_path)
    python = str(venv / "bin" / "python")
    run_ok([python, "-m", "pip", "install", "--index-url", pypi, f"torch=={torch}"], env, tmp_path)
    return python


def _installed(python: str, env: dict[str, str], cwd: Path) -> dict[str, str]:
    code = "import importlib.metadata as m; print(m.version('torch'), m.version('wbdemo'))"
    torch, wbdemo = run_ok([python, "-c", code], env, cwd).stdout.split()
    return {"torch": torch, "wbdemo": wbdemo}


def _route_url(url: str, torch: str) -> str:
    minor = torch.rsplit(".", 1)[0]
    return url.removesuffix("simple/") + f"cu130-torch{minor}/simple/"


@pytest.mark.parametrize("torch", sorted(BUILT_FOR))
def test_pip_installs_the_wheel_for_the_installed_torch_from_its_route_and_keeps_torch(
    indexes: tuple[str, str, Path], tmp_path: Path, torch: str
) -> None:
    url, pypi, _tree = indexes
    env = clean_env(tmp_path)
    python = _venv_with_torch(tmp_path, torch, pypi, env)
    # The line wheelbuild prints, with the stand-in in PyPI's place.
    _uv, pip = route_install_lines(_route_url(url, torch), "wbdemo")
    args = pip.replace(PYPI_SIMPLE, pypi).split()
    assert args[:2] == ["pip", "install"]
    run_ok([python, "-m", *args], env, tmp_path)
    assert _installed(python, env, tmp_path) == {"torch": torch, "wbdemo": BUILT_FOR[torch]}


@pytest.mark.parametrize("torch", sorted(BUILT_FOR))
def test_uv_installs_the_wheel_for_the_installed_torch_from_its_route_and_keeps_torch(
    indexes: tuple[str, str, Path], tmp_path: Path, torch: str
) -> None:
    url, pypi, _tree = indexes
    env = clean_env(tmp_path)
    python = _venv_with_torch(tmp_path, torch, pypi, env)
    uv, _pip = route_install_lines(_route_url(url, torch), "wbdemo")
    args = uv.split()
    assert args[:3] == ["uv", "pip", "install"]
    # uv's default index (PyPI) becomes the stand-in; the route is asked first, as printed.
    run_ok([uv_binary(), *args[1:], "--python", python, "--default-index", pypi], env, tmp_path)
    assert _installed(python, env, tmp_path) == {"torch": torch, "wbdemo": BUILT_FOR[torch]}


def test_the_whole_index_would_change_torch_which_is_why_routes_exist(
    indexes: tuple[str, str, Path], tmp_path: Path
) -> None:
    url, pypi, _tree = indexes
    env = clean_env(tmp_path)
    python = _venv_with_torch(tmp_path, "2.13.0", pypi, env)
    run_ok(
        [python, "-m", "pip", "install", "--index-url", url, "--extra-index-url", pypi, "wbdemo"],
        env,
        tmp_path,
    )
    # pip takes the highest version: the 2.14 wheel, and torch 2.14.1 with it.
    assert _installed(python, env, tmp_path) == {"torch": "2.14.1", "wbdemo": BUILT_FOR["2.14.1"]}


def test_serve_names_each_route_with_its_install_line(indexes: tuple[str, str, Path]) -> None:
    _url, _pypi, tree = indexes
    with serve_process(tree) as served:
        assert served.process.stdout is not None
        lines = [served.process.stdout.readline().strip() for _ in BUILT_FOR]
    base = served.url.removesuffix("simple/")
    assert lines == [
        f"{route}: pip install --index-url {base}{route}/simple/ --extra-index-url {PYPI_SIMPLE} NAME"
        for route in ("cu130-torch2.13", "cu130-torch2.14")
    ]


def test_route_pages_are_served_and_a_route_that_is_a_link_is_not(tmp_path: Path) -> None:
    root = tmp_path / "cu130"
    wheel = make_wheel(tmp_path / "in", "wbdemo", BUILT_FOR["2.14.1"], requires_dist=("torch==2.14.*",))
    publish([wheel], root)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "simple").mkdir(parents=True)
    (elsewhere / "simple" / "index.html").write_bytes(b"<html>not ours</html>\n")
    (root / "cu130-torch2.11").symlink_to(elsewhere, target_is_directory=True)
    with running_server(root) as url:
        page = request(url, "/cu130-torch2.14/simple/wbdemo/")
        assert page.status == 200 and wheel.name.replace("+", "%2B").encode() in page.body
        moved = request(url, "/cu130-torch2.14/simple/WBDemo")
        assert (moved.status, moved.headers["location"]) == (301, "/cu130-torch2.14/simple/wbdemo/")
        assert request(url, "/cu130-torch2.14").headers["location"] == "/cu130-torch2.14/simple/"
        assert request(url, "/cu130-torch2.11/simple/").status == 404
        assert request(url, "/cu130-torch2.13/simple/").status == 404
