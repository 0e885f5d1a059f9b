"""A package named as pip names it (NAME, NAME==VERSION, NAME>=X), looked up on a real PEP 691
index served on 127.0.0.1 (WHEELBUILD_SIMPLE_INDEX): the release the name asks for, pinned by the
sha256 the index lists; a yanked release only when pinned with ==; a name the index does not have,
a release it lacks, and an sdist whose bytes are not the listed ones each refused in one line
with their own exit code. tests/local/test_sources_lookup.py does the same against PyPI itself."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument, SourceUnavailable, UnknownPackage
from wheelbuild.recipes import RemoteSdist, resolve_recipe
from wheelbuild.spec.sources import prepare_source, resolve_lookup

MEDIA = "application/vnd.pypi.simple.v1+json"


def _sdist(name: str, version: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = b"from setuptools import setup\nsetup()\n"
        info = tarfile.TarInfo(f"{name}-{version}/setup.py")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, bytes]]:
    """An index with wbpkg 1.0, 1.1 (yanked) and 2.0rc1 (a pre-release); 1.0's listed sha256 is
    the bytes served unless a test swaps them."""
    files = {f"wbpkg-{v}.tar.gz": _sdist("wbpkg", v) for v in ("1.0", "1.1", "2.0rc1")}
    listed = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/simple/wbpkg/":
                page = {
                    "meta": {"api-version": "1.1"},
                    "name": "wbpkg",
                    "files": [
                        {
                            "filename": n,
                            "url": f"/files/{n}",
                            "hashes": {"sha256": listed[n]},
                            "yanked": "1.1" in n,
                        }
                        for n in files
                    ],
                }
                self._answer(json.dumps(page).encode(), MEDIA)
            elif self.path.startswith("/files/") and self.path[7:] in files:
                self._answer(files[self.path[7:]], "application/octet-stream")
            else:
                self.send_error(404)

        def _answer(self, body: bytes, media: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("WHEELBUILD_SIMPLE_INDEX", f"http://127.0.0.1:{server.server_address[1]}/simple")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    try:
        yield files
    finally:
        server.shutdown()


def _looked_up(package: str) -> tuple[str | None, RemoteSdist]:
    recipe = resolve_lookup(resolve_recipe(package), lambda _line: None)
    assert isinstance(recipe.source, RemoteSdist)
    return recipe.version, recipe.source


def test_a_bare_name_is_the_newest_final_release_not_yanked_and_verified(index: dict[str, bytes]) -> None:
    version, source = _looked_up("wbpkg")
    assert version == "1.0" and source.url.endswith("/files/wbpkg-1.0.tar.gz")  # not 1.1 (yanked), not 2.0rc1
    assert source.sha256 == hashlib.sha256(index["wbpkg-1.0.tar.gz"]).hexdigest()
    prepared = prepare_source(source, lambda _line: None)
    assert (prepared.project_dir / prepared.package).read_bytes() == index["wbpkg-1.0.tar.gz"]


def test_a_specifier_and_a_pin_take_what_they_name_a_pin_even_yanked(index: dict[str, bytes]) -> None:
    assert _looked_up("wbpkg>=0.9,<1.1")[0] == "1.0"
    assert _looked_up("wbpkg==1.1")[0] == "1.1"  # yanked, but pinned
    assert _looked_up("WBPKG==2.0rc1")[0] == "2.0rc1"


def test_what_the_index_cannot_serve_is_refused_in_one_line_each(index: dict[str, bytes]) -> None:
    with pytest.raises(UnknownPackage) as unknown:
        _looked_up("wbpgk")  # a typo
    assert unknown.value.exit_code == 10 and "wbpgk is not on the index" in unknown.value.cause
    with pytest.raises(UnknownPackage) as near:
        _looked_up("causal-conv1")  # a typo of a name wheelbuild knows: the nearest is said
    assert near.value.remedy.startswith("did you mean causal-conv1d? ")
    with pytest.raises(BadArgument) as missing:
        _looked_up("wbpkg==3.0")
    assert "has no sdist" in missing.value.cause and "1.0" in missing.value.remedy  # the releases it has
    index["wbpkg-1.0.tar.gz"] = _sdist("wbpkg", "1.0-tampered")
    with pytest.raises(SourceUnavailable) as tampered:
        prepare_source(_looked_up("wbpkg")[1], lambda _line: None)
    assert "sha256" in tampered.value.cause
