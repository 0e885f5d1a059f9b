"""wheelbuild.spec.pythons.torch_python_tags against the real `wheelbuild serve` over HTTP (no Docker): stand-in
torch wheels published into a wheelhouse tree, their Python tags read from the served page (PEP 691
JSON; the HTML form says the same), yanks and other platforms left out, credentials in the URL sent
as Basic auth and never shown, the answer cached so that a second call needs no server."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import bcrypt
import pytest
from wheelbuild.errors import TorchIndexUnreachable
from wheelbuild.index.project_pages import files_on_page
from wheelbuild.index.publish import publish
from wheelbuild.index.reader import HttpRefused
from wheelbuild.index.yank import yank
from wheelbuild.spec.pythons import choose_pythons
from wheelbuild.spec.remote_wheel import remote_metadata
from wheelbuild.spec.torch_choice import newest_release
from wheelbuild.spec.torch_releases import python_tags, read_torch_index, torch_python_tags
from wheelbuild.variants import DEFAULT_TORCH, DEFAULT_TORCH_AS_OF, parse_variant

from tests.indexkit import make_wheel
from tests.runkit import wheelbuild
from tests.serving import read_log, request, running_server

CUDA_13_0 = ('cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"',)  # as torch 2.14.1 says
LINUX = "manylinux_2_28_x86_64"


SECRET = "alice-s3cr3t-pw"


# Each test reads and writes a cache dir of its own (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("own_cache")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """torch 2.11.0 (PyPI-style names) for cp311, cp313 and free-threaded cp313t, not cp312; cp310
    published and then yanked; cp312 only for Windows and aarch64, and in torch 2.12.0; and a
    PyTorch-style 2.10.0 with local labels."""
    made = tmp_path / "made"
    wheels = [
        make_wheel(made, "torch", "2.11.0", tag=f"cp311-cp311-{LINUX}"),
        make_wheel(made, "torch", "2.11.0", tag=f"cp313-cp313-{LINUX}"),
        make_wheel(made, "torch", "2.11.0", tag=f"cp313-cp313t-{LINUX}"),
        make_wheel(made, "torch", "2.11.0", tag=f"cp310-cp310-{LINUX}"),
        make_wheel(made, "torch", "2.11.0", tag="cp312-cp312-win_amd64"),
        make_wheel(made, "torch", "2.11.0", tag="cp312-cp312-manylinux_2_28_aarch64"),
        make_wheel(made, "torch", "2.12.0", tag=f"cp312-cp312-{LINUX}"),
        make_wheel(made, "torch", "2.10.0+cu128", tag=f"cp311-cp311-{LINUX}"),
        make_wheel(made, "torch", "2.10.0+cu126", tag=f"cp312-cp312-{LINUX}"),
        make_wheel(made, "torchvision", "2.11.0", tag=f"cp312-cp312-{LINUX}"),
    ]
    root = tmp_path / "tree"
    publish(wheels, root)
    yank(root, f"torch-2.11.0-cp310-cp310-{LINUX}.whl", "broken build")
    return root


def _torch_page_hits(log: Path, count: int) -> list[str]:
    return [hit.path for hit in read_log(log, at_least=count) if "/torch/" in hit.path]


def test_torch_tags_come_from_the_served_page_once_then_from_the_cache(
    tree: Path, tmp_path: Path, own_cache: Path
) -> None:
    log = tmp_path / "access.log"
    said: list[str] = []
    with running_server(tree, access_log=log) as url:
        assert torch_python_tags(url, "2.11.0", on_line=said.append) == {"cp311", "cp313", "cp313t"}
        assert _torch_page_hits(log, 1) == ["/simple/torch/"]  # one request
        # the page's HTML form (PEP 503) says the same
        html = request(url, "/simple/torch/", {"Accept": "text/html"})
        assert html.headers["content-type"].startswith("text/html")
        assert python_tags(files_on_page(html.body, html.headers["content-type"]), "2.11.0") == {
            "cp311",
            "cp313",
            "cp313t",
        }
        # PEP 440 equality: a plain version matches local labels, a labelled one only itself
        assert torch_python_tags(url, "2.10.0") == {"cp311", "cp312"}
        assert torch_python_tags(url, "2.10.0+cu128") == {"cp311"}
        assert torch_python_tags(url, "2.9.0") == frozenset()  # not on the kept page: asked again next time
    assert said == [f"torch 2.11.0 on {url.rstrip('/')} has wheels for cp311, cp313, cp313t"]
    assert len(list((own_cache / "torch-index").glob("*.json"))) == 1  # the page, kept once

    # The server is gone: the cached answers need no request, an uncached one fails typed.
    assert torch_python_tags(url, "2.11.0", on_line=said.append) == {"cp311", "cp313", "cp313t"}
    assert said[-1].endswith("(cached)")
    assert torch_python_tags(url, "2.10.0+cu128") == {"cp311"}
    with pytest.raises(TorchIndexUnreachable) as caught:
        torch_python_tags(url, "2.9.0")
    assert caught.value.exit_code == 25
    assert f"{url.rstrip('/')}/torch/" in caught.value.cause
    assert "--torch-index-url" in caught.value.remedy and "--python" in caught.value.remedy

    # A day later the cache is stale: the index is asked again.
    for entry in (own_cache / "torch-index").glob("*.json"):
        record = json.loads(entry.read_text())
        entry.write_text(json.dumps({**record, "fetched": record["fetched"] - 86400}))
    with pytest.raises(TorchIndexUnreachable):
        torch_python_tags(url, "2.11.0")


def test_the_default_pythons_of_an_image_against_the_served_torch(tree: Path) -> None:
    with running_server(tree) as url:
        tags = torch_python_tags(url, "2.11.0")
    choice = choose_pythons(
        ("cp310", "cp311", "cp312", "cp313"),
        tags,
        ">=3.11",
        None,
        package="flash-attn",
        torch_version="2.11.0",
        index_url=url,
    )
    assert choice.pythons == ("cp311", "cp313")
    assert [str(x) for x in choice.left_out] == [
        f"cp310: torch 2.11.0 has no cp310 wheel on {url}, and flash-attn requires Python >=3.11",
        f"cp312: torch 2.11.0 has no cp312 wheel on {url}",
    ]


@pytest.fixture
def htpasswd(tmp_path: Path) -> Path:
    path = tmp_path / "htpasswd"
    path.write_text(f"alice:{bcrypt.hashpw(SECRET.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    return path


def test_credentials_in_the_url_are_sent_and_never_shown(
    tree: Path, htpasswd: Path, tmp_path: Path, own_cache: Path
) -> None:
    log = tmp_path / "access.log"
    with running_server(tree, htpasswd=htpasswd, access_log=log) as url:
        with_auth = url.replace("http://", f"http://alice:{SECRET}@")
        said: list[str] = []
        assert torch_python_tags(with_auth, "2.11.0", on_line=said.append) == {"cp311", "cp313", "cp313t"}
        assert SECRET not in said[0] and "http://***@127.0.0.1" in said[0]

        for refused in (url, url.replace("http://", "http://alice:wrong-pw@")):
            # a release the kept page lacks, so that the index is asked again
            with pytest.raises(TorchIndexUnreachable) as caught:
                torch_python_tags(refused, "2.16.0")
            assert "HTTP 401" in caught.value.cause and "credentials" in caught.value.cause
            assert "wrong-pw" not in str(caught.value)
    assert [hit.status for hit in read_log(log, at_least=3)] == [200, 401, 401]

    # Nothing on disk holds the password, nor a hash of it.
    hashed = hashlib.sha256(with_auth.encode()).hexdigest()[:16]
    basic = base64.b64encode(f"alice:{SECRET}".encode()).decode()
    for entry in own_cache.rglob("*"):
        for text in (entry.name, entry.read_text() if entry.is_file() else ""):
            assert SECRET not in text and hashed not in text and basic not in text and "alice" not in text


CUDA_PINS = {
    "2.15.0": 'cuda-toolkit[cublas,nvtx]==13.2.2; platform_system == "Linux"',
    "2.14.1": CUDA_13_0[0],
    "2.13.0": CUDA_13_0[0],
    "2.10.0": 'nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"',
}


def _pypi_like(tmp_path: Path, big: int = 0) -> Path:
    """Stand-in torch releases named as PyPI names them (no CUDA label), each pinning its CUDA
    runtime as torch's METADATA does; *big* bytes of incompressible payload in each wheel."""
    made, root = tmp_path / "made-pypi", tmp_path / "tree-pypi"
    extra = {"torch/lib/libpayload.so": os.urandom(big)} if big else None
    wheels = [
        make_wheel(
            made, "torch", version, tag=f"{python}-{python}-{LINUX}", requires_dist=(pin,), extra_files=extra
        )
        for version, pin in CUDA_PINS.items()
        for python in ("cp311", "cp313")
    ]
    publish(wheels, root)
    return root


def test_a_bare_tag_means_the_newest_release_built_with_its_cuda(tmp_path: Path, own_cache: Path) -> None:
    log = tmp_path / "access.log"
    with running_server(_pypi_like(tmp_path), access_log=log) as url:
        index = read_torch_index(url)
        choice = newest_release(index, parse_variant("cu130"), ("cp311", "cp313"))
        assert choice.version == "2.14.1"
        assert choice.why == (
            f"torch 2.14.1: newest on {url.rstrip('/')} built with CUDA 13.0 with cp311, cp313 wheels "
            "(2.15.0 is CUDA 13.2)"
        )
        assert newest_release(index, parse_variant("cu128"), ("cp311",)).version == "2.10.0"
        hits = read_log(log, at_least=1 + 4)
    # The index serves METADATA apart (PEP 658): one small request per release read, no wheel.
    metadata = [h.path for h in hits if h.path.endswith(".metadata")]
    assert len(metadata) == len(set(metadata)) == 4  # each release once, each answer kept
    assert not [h for h in hits if h.path.endswith(".whl")]
    # Kept for good: without the server, the same answers from the cache.
    assert newest_release(index, parse_variant("cu130"), ("cp311",)).version == "2.14.1"


def test_a_wheels_metadata_is_read_through_byte_ranges_not_whole(tmp_path: Path, own_cache: Path) -> None:
    """An index that does not serve METADATA apart (PyPI's for torch 2.15.0): the zip's directory
    and the one member, a few hundred KiB of an 8 MiB wheel."""
    log = tmp_path / "access.log"
    with running_server(_pypi_like(tmp_path, big=8 << 20), access_log=log) as url:
        index = read_torch_index(url)
        bare = replace(index, files=tuple(replace(f, metadata=False) for f in index.files))
        release = bare.release("2.15.0")
        assert release is not None
        assert bare.cuda_of(release, python="cp311") == "13.2"
        hits = [h for h in read_log(log, at_least=3) if h.path.endswith(".whl")]
    assert hits and all(h.status == 206 and h.range for h in hits)
    assert sum(h.bytes for h in hits) < 1 << 20


def test_a_server_without_byte_ranges_is_refused_not_downloaded(tmp_path: Path) -> None:
    """http.server answers every GET whole (200): the reader stops after what it asked for."""
    import http.server
    import threading

    made = tmp_path / "plain"
    wheel = make_wheel(
        made, "torch", "2.15.0", tag=f"cp311-cp311-{LINUX}", extra_files={"big": os.urandom(4 << 20)}
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(made))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(HttpRefused) as caught:
            remote_metadata(f"http://127.0.0.1:{server.server_port}/{wheel.name}", wheel.name)
    finally:
        server.shutdown()
    assert "does not serve byte ranges" in caught.value.why


def test_plan_names_the_newest_release_and_without_the_index_the_tables_with_its_date(
    tmp_path: Path, own_cache: Path
) -> None:
    with running_server(_pypi_like(tmp_path)) as url:
        done = wheelbuild("plan", "wbdemo", "--torch", "cu130", env={"WHEELBUILD_TORCH_INDEX_URL": url})
        # A release asked for whose CUDA is another than its tag's: refused before anything else.
        wrong = wheelbuild(
            "plan", "wbdemo", "--torch", "2.10.0+cu130", env={"WHEELBUILD_TORCH_INDEX_URL": url}
        )
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith("torch: ")]
    assert said == [
        f"torch: torch 2.14.1: newest on {url.rstrip('/')} built with CUDA 13.0 with cp311, cp313 wheels "
        "(2.15.0 is CUDA 13.2)"
    ]
    # The server is gone and nothing was kept for this URL: the table, said as such, with its date.
    # With a Python named, build goes on (the install will tell), and so does its dry run.
    gone = wheelbuild(
        "plan",
        "wbdemo",
        "--torch",
        "cu130",
        "--python",
        "3.11",
        env={"WHEELBUILD_TORCH_INDEX_URL": url + "x/"},
    )
    assert gone.returncode == 0, gone.stderr
    table = f"torch {DEFAULT_TORCH['cu130']}: the newest cu130 release wheelbuild knew of on {DEFAULT_TORCH_AS_OF}"
    assert f"warning: {table}" in gone.stderr
    assert f"torch: {table}" in gone.stdout
    # Without one, build cannot choose its Pythons and refuses (25); plan refuses as build does.
    unnamed = wheelbuild("plan", "wbdemo", "--torch", "cu130", env={"WHEELBUILD_TORCH_INDEX_URL": url + "x/"})
    assert unnamed.returncode == 25, unnamed.stderr
    assert wrong.returncode == 11
    assert f"torch 2.10.0 on {url.rstrip('/')} is built with CUDA 12.8, not 13.0 (cu130)" in wrong.stderr
