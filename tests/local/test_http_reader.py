"""index/reader.py, the one HTTP reader, against real HTTP servers on 127.0.0.1: each kind's cap
refuses a body over it whether the server says its size, lies about it or says nothing
(chunked, or until it closes); a URL's credentials reach its server and never an error's text;
redirects are followed, within a limit; a server that never answers fails within the timeout, as
each caller's own typed error. And no module of builder/ but the reader opens a URL itself."""

from __future__ import annotations

import ast
import base64
import hashlib
import http.server
import io
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from wheelbuild.errors import (
    PublishedIndexUnreachable,
    SourceUnavailable,
    TorchIndexUnreachable,
)
from wheelbuild.index import reader
from wheelbuild.index.reader import HttpRefused, Kind, TooLarge

BUILDER = Path(__file__).resolve().parents[2] / "builder"
SMALL = Kind("a test document", 1000, 10.0)
SECRET = "pa55-s3cret"
TOKEN = "tok-s3cret"

Route = Callable[["_Handler"], None]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[str, Route] = {}
        self.seen: list[tuple[str, str | None, str | None]] = []  # path, Authorization, User-Agent
        self.release = threading.Event()  # what a handler that holds its answer back waits for

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked answers need it
    server: _Server

    def _answer(self) -> None:
        path = self.path.split("?", 1)[0]
        self.server.seen.append((path, self.headers.get("Authorization"), self.headers.get("User-Agent")))
        route = self.server.routes.get(path)
        try:
            if route is None:
                self.send_error(404)
            else:
                route(self)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader stopped reading at its cap and hung up: what these tests want

    do_GET = do_HEAD = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd
    finally:
        httpd.release.set()
        httpd.shutdown()
        httpd.server_close()


def _body(data: bytes, *, length: str | None = None, content_type: str = "text/plain") -> Route:
    """Answer *data*; Content-Length says *length* (its true size by default)."""

    def route(handler: _Handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", length if length is not None else str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return route


def _chunked(data: bytes, *, length: str | None = None) -> Route:
    """Answer *data* in 100-byte chunks, no Content-Length (or one that lies: *length*)."""

    def route(handler: _Handler) -> None:
        handler.send_response(200)
        handler.send_header("Transfer-Encoding", "chunked")
        if length is not None:
            handler.send_header("Content-Length", length)
        handler.end_headers()
        for at in range(0, len(data), 100):
            part = data[at : at + 100]
            handler.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        handler.wfile.write(b"0\r\n\r\n")

    return route


def _until_closed(data: bytes) -> Route:
    """Answer *data* and close: no Content-Length, no chunks, the end of the body is the end of
    the connection."""

    def route(handler: _Handler) -> None:
        handler.close_connection = True
        handler.send_response(200)
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(data)

    return route


def _redirect(to: str, code: int = 302) -> Route:
    def route(handler: _Handler) -> None:
        handler.send_response(code)
        handler.send_header("Location", to)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return route


# --- caps ------------------------------------------------------------------------------------


def test_a_body_within_the_cap_is_read_whole_with_its_status_and_headers(server: _Server) -> None:
    server.routes["/page"] = _body(b"x" * 1000, content_type="application/vnd.pypi.simple.v1+json")
    answer = reader.fetch(f"{server.url}/page", SMALL)
    assert (answer.body, answer.status) == (b"x" * 1000, 200)
    assert answer.content_type == "application/vnd.pypi.simple.v1+json"


def test_a_body_over_the_cap_that_says_so_is_refused_before_it_is_read(server: _Server) -> None:
    def says_huge(handler: _Handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(10 << 30))
        handler.end_headers()
        handler.wfile.write(b"x" * 100)
        handler.wfile.flush()
        server.release.wait()  # the rest never comes: a reader that waited for it would time out

    server.routes["/huge"] = says_huge
    with pytest.raises(TooLarge) as caught:
        reader.fetch(f"http://ci:{SECRET}@127.0.0.1:{server.server_address[1]}/huge?token={TOKEN}", SMALL)
    assert caught.value.cap == 1000 and caught.value.status == 200
    assert caught.value.url == f"http://***@127.0.0.1:{server.server_address[1]}/huge?token=***"
    assert caught.value.why == (
        f"{caught.value.url} sent more than 1000 bytes (1000 B), the cap for a test document"
    )


@pytest.mark.parametrize(
    "route",
    [
        pytest.param(_chunked(b"y" * 5000), id="chunked-without-length"),
        pytest.param(_chunked(b"y" * 5000, length="10"), id="chunked-with-a-lying-length"),
        pytest.param(_until_closed(b"y" * 5000), id="until-closed"),
    ],
)
def test_a_body_over_the_cap_that_does_not_say_so_is_refused_at_the_cap(
    server: _Server, route: Route
) -> None:
    server.routes["/page"] = route
    with pytest.raises(TooLarge) as caught:
        reader.fetch(f"{server.url}/page", SMALL)
    assert caught.value.cap == 1000 and f"{server.url}/page" in caught.value.why
    sink = io.BytesIO()
    with pytest.raises(TooLarge):
        reader.download(f"{server.url}/page", sink, SMALL)
    assert len(sink.getvalue()) <= 1000  # nothing past the cap was written


def test_a_length_that_understates_the_body_gives_only_what_it_says(server: _Server) -> None:
    """HTTP ends the body where Content-Length says: the bytes after it are never read."""
    server.routes["/short"] = _body(b"z" * 5000, length="10")
    assert reader.fetch(f"{server.url}/short", SMALL).body == b"z" * 10


def test_a_download_is_streamed_into_the_file_and_hashed(server: _Server) -> None:
    data = bytes(range(256)) * 4000  # over a MiB: more than one block
    server.routes["/sdist.tar.gz"] = _chunked(data)
    sink = io.BytesIO()
    heard: list[int] = []
    found = reader.download(f"{server.url}/sdist.tar.gz", sink, reader.SDIST, on_bytes=heard.append)
    assert (found, sink.getvalue()) == (hashlib.sha256(data).hexdigest(), data)
    assert heard[-1] == len(data) and heard == sorted(heard)


def test_every_kind_has_a_cap_and_a_timeout() -> None:
    kinds = [v for v in vars(reader).values() if isinstance(v, Kind)]
    assert {k.what for k in kinds} >= {
        "a project page",
        "an index's list of projects",
        "a METADATA file",
        "an sdist",
        "a wheel",
        "an archive",
    }
    assert all(k.cap > 0 and k.timeout_s > 0 for k in kinds)


# --- credentials, user-agent --------------------------------------------------------------------


def test_credentials_reach_the_server_as_a_header_and_never_an_error(server: _Server) -> None:
    server.routes["/ok"] = _body(b"fine")
    server.routes["/big"] = _chunked(b"b" * 5000)
    base = f"http://ci:{SECRET}@127.0.0.1:{server.server_address[1]}"
    assert reader.fetch(f"{base}/ok?token={TOKEN}", SMALL).body == b"fine"
    path, authorization, agent = server.seen[-1]
    assert path == "/ok" and authorization == "Basic " + base64.b64encode(f"ci:{SECRET}".encode()).decode()
    assert agent == reader.user_agent() and agent.startswith("wheelbuild")
    whys = []
    for url in (f"{base}/missing?token={TOKEN}", f"{base}/big?token={TOKEN}"):
        with pytest.raises(HttpRefused) as caught:
            reader.fetch(url, SMALL)
        whys.append(caught.value.why)
    assert whys[0] == "HTTP 404 Not Found"
    for why in whys:
        assert SECRET not in why and TOKEN not in why, why


def test_a_refused_password_says_so(server: _Server) -> None:
    def refuse(handler: _Handler) -> None:
        handler.send_error(401)

    server.routes["/private"] = refuse
    with pytest.raises(HttpRefused) as caught:
        reader.fetch(f"http://ci:{SECRET}@127.0.0.1:{server.server_address[1]}/private", SMALL)
    assert caught.value.status == 401
    assert caught.value.why == "HTTP 401 Unauthorized (the credentials in the URL are missing or refused)"


# --- redirects ---------------------------------------------------------------------------------


def test_a_redirect_is_followed_and_the_credentials_stay_with_the_first_host(server: _Server) -> None:
    server.routes["/old"] = _redirect("/between", 301)
    server.routes["/between"] = _redirect(f"{server.url}/new")
    server.routes["/new"] = _body(b"moved")
    answer = reader.fetch(f"http://ci:{SECRET}@127.0.0.1:{server.server_address[1]}/old", SMALL)
    assert answer.body == b"moved"
    assert [(path, auth is not None) for path, auth, _agent in server.seen] == [
        ("/old", True),
        ("/between", False),
        ("/new", False),
    ]


def test_redirects_past_the_limit_are_refused(server: _Server) -> None:
    for hop in range(reader.MAX_REDIRECTS + 2):
        server.routes[f"/hop{hop}"] = _redirect(f"/hop{hop + 1}")
    server.routes[f"/hop{reader.MAX_REDIRECTS + 2}"] = _body(b"too far")
    with pytest.raises(HttpRefused) as caught:
        reader.fetch(f"{server.url}/hop0", SMALL)
    assert caught.value.status == 302 and f"more than {reader.MAX_REDIRECTS} redirects" in caught.value.why
    assert len(server.seen) == reader.MAX_REDIRECTS + 1


def test_a_redirect_to_another_scheme_is_refused(server: _Server, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("local file")
    server.routes["/elsewhere"] = _redirect(f"ftp://127.0.0.1:{server.server_address[1]}/x")
    server.routes["/local"] = _redirect((tmp_path / "secret").as_uri())
    for path in ("/elsewhere", "/local"):
        with pytest.raises(HttpRefused) as caught:
            reader.fetch(f"{server.url}{path}", SMALL)
        assert caught.value.status == 302, caught.value.why
    assert [path for path, _auth, _agent in server.seen] == ["/elsewhere", "/local"]


# --- a server that never answers ---------------------------------------------------------------


@pytest.fixture
def silent() -> Iterator[str]:
    """A server that takes connections (the kernel does) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_silent_server_times_out_as_a_refusal(silent: str) -> None:
    with pytest.raises(HttpRefused) as caught:
        reader.fetch(f"{silent}/page", replace(SMALL, timeout_s=0.3))
    assert (caught.value.status, caught.value.why) == (0, "timed out")
    with pytest.raises(HttpRefused) as probed:
        reader.probe(f"{silent}/", method="HEAD", timeout=0.3)
    assert probed.value.why == "timed out"


def test_a_silent_server_is_each_callers_own_error(
    silent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wheelbuild.doctor.facts import reach
    from wheelbuild.nightly.published import remote_inputs
    from wheelbuild.spec.sources import _download, _files
    from wheelbuild.spec.torch_releases import read_torch_index

    for name in ("PROJECT_PAGE", "PROJECT_LIST", "SDIST"):
        monkeypatch.setattr(reader, name, replace(getattr(reader, name), timeout_s=0.3))
    with pytest.raises(TorchIndexUnreachable) as torch:
        read_torch_index(silent, cache=tmp_path / "cache", timeout=0.3)
    assert torch.value.exit_code == 25 and "timed out" in torch.value.cause
    with pytest.raises(SourceUnavailable) as looked:
        _files(f"{silent}/simple", "flash-attn")
    assert looked.value.exit_code == 15
    assert looked.value.cause == f"could not look up flash-attn at {silent}/simple/flash-attn/: timed out"
    with pytest.raises(SourceUnavailable) as downloaded:
        _download(f"{silent}/x.tar.gz", tmp_path / "x.tar.gz", lambda _line: None)
    assert downloaded.value.cause == f"could not download {silent}/x.tar.gz: timed out"
    assert not list(tmp_path.glob("*x.tar.gz*")) and not list(tmp_path.glob("tmp*"))
    with pytest.raises(PublishedIndexUnreachable) as published:
        remote_inputs(f"{silent}/simple/")
    assert published.value.exit_code == 59 and published.value.cause.endswith(": timed out")
    assert reach(f"{silent}/", timeout=0.3).error == "timed out"


# --- a cap is each caller's own error ------------------------------------------------------------


def test_an_oversized_answer_is_each_callers_own_error(
    server: _Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wheelbuild.spec.sources import _download
    from wheelbuild.spec.torch_releases import read_torch_index

    server.routes["/simple/torch/"] = _chunked(b"<a href='x'>x</a>" * 100)
    server.routes["/x.tar.gz"] = _until_closed(b"s" * 5000)
    monkeypatch.setattr(reader, "PROJECT_PAGE", replace(reader.PROJECT_PAGE, cap=1000))
    monkeypatch.setattr(reader, "SDIST", replace(reader.SDIST, cap=1000))
    base = f"http://ci:{SECRET}@127.0.0.1:{server.server_address[1]}"
    with pytest.raises(TorchIndexUnreachable) as torch:
        read_torch_index(f"{base}/simple", cache=tmp_path / "cache")
    assert "sent more than 1000 bytes" in torch.value.cause and SECRET not in torch.value.cause
    with pytest.raises(SourceUnavailable) as downloaded:
        _download(f"{base}/x.tar.gz", tmp_path / "x.tar.gz", lambda _line: None)
    shown = f"http://***@127.0.0.1:{server.server_address[1]}/x.tar.gz"
    assert downloaded.value.cause == (
        f"could not download {shown}: {shown} sent more than 1000 bytes (1000 B), the cap for an sdist"
    )


def test_an_inputs_sidecar_over_its_cap_names_no_keys_as_a_damaged_one(server: _Server) -> None:
    from wheelbuild.nightly.published import remote_inputs

    wheel = "wbtiny-0.1.0-py3-none-any.whl"
    key = "a" * 64
    server.routes["/simple/"] = _body(b'<a href="wbtiny/">wbtiny</a>', content_type="text/html")
    server.routes["/simple/wbtiny/"] = _body(
        f'<a href="../../files/{wheel}">{wheel}</a><a href="../../files/b-{wheel}">b</a>'.encode(),
        content_type="text/html",
    )
    server.routes[f"/files/{wheel}.inputs"] = _chunked(f"{key}\n".encode() * 2000)  # 130 KB
    server.routes[f"/files/b-{wheel}.inputs"] = _body(f"{'b' * 64}\n".encode())
    assert remote_inputs(f"{server.url}/simple/") == {"b" * 64}
    assert f"/files/{wheel}.inputs" in [path for path, _auth, _agent in server.seen]


# --- one reader ------------------------------------------------------------------------------------

# What opens a connection: a module that uses any of these but the reader reads over HTTP itself.
_OPENERS = {
    "urlopen",
    "urlretrieve",
    "build_opener",
    "OpenerDirector",
    "HTTPConnection",
    "HTTPSConnection",
    "ClientSession",
}
_CLIENT_MODULES = {"http.client", "urllib3", "httpx"}  # aiohttp: wheelbuild serve is a server


def _opens_urls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in _CLIENT_MODULES]
        elif isinstance(node, ast.ImportFrom):
            if node.module in _CLIENT_MODULES:
                found.append(node.module)
            found += [a.name for a in node.names if a.name in _OPENERS]
        elif isinstance(node, ast.Attribute) and node.attr in _OPENERS:
            found.append(node.attr)
        elif isinstance(node, ast.Name) and node.id in _OPENERS:
            found.append(node.id)
    return found


def test_no_module_but_the_reader_opens_a_url() -> None:
    readers = {
        str(path.relative_to(BUILDER)): found
        for path in sorted(BUILDER.rglob("*.py"))
        if (found := _opens_urls(path))
    }
    assert readers == {"index/reader.py": ["http.client", "build_opener"]}
