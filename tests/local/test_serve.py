"""`wheelbuild serve`: the real aiohttp server on 127.0.0.1, then real pip and real uv installing
from it into fresh venvs. No Docker needed; seconds, not minutes."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import itertools
import json
import logging
import os
import re
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from wheelbuild.errors import BadHtpasswd, NoIndex, ServeFailed
from wheelbuild.index.publish import Sidecars, publish
from wheelbuild.index.serve import (
    MEDIA_HTML,
    MEDIA_HTML_V1,
    MEDIA_JSON,
    Htpasswd,
    LoginLimit,
    ServeLimits,
    negotiate,
    serve,
)
from wheelbuild.index.serve_auth import _Failures
from wheelbuild.index.serve_log import escape as _escape
from wheelbuild.index.yank import yank

from tests.indexkit import make_wheel, parse_page
from tests.serving import (
    LINE,
    Hit,
    clean_env,
    limited,
    read_log,
    request,
    run_ok,
    running_server,
    serve_process,
    uv_binary,
)

PIN = "wbtiny==0.1.0+cu130torch2.11"
WHEEL = "wbtiny-0.1.0+cu130torch2.11-py3-none-any.whl"
WHEEL_URL = "/files/wbtiny-0.1.0%2Bcu130torch2.11-py3-none-any.whl"
PIP_ACCEPT = (
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01"
)
SECRET = "do not serve me"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A published tree: wbtiny 0.1.0 (local version), a newer yanked 0.2.0, and Other.Pkg; a
    secret file beside it that no URL may reach, also not through links planted in files/ and
    simple/ (a project folder that is a link, a page that is one)."""
    base = tmp_path_factory.mktemp("served")
    wheels = [
        make_wheel(base / "in", "wbtiny", "0.1.0+cu130torch2.11", payload="x" * 50_000),
        make_wheel(base / "in", "wbtiny", "0.2.0+cu130torch2.11"),
        make_wheel(base / "in", "Other.Pkg", "1.0"),
    ]
    root = base / "cu130"
    publish(wheels, root)
    yank(root, "wbtiny==0.2.0+cu130torch2.11", "broken build")
    (base / "secret.txt").write_text(SECRET)
    (root / "files" / "evil-1.0-py3-none-any.whl").symlink_to(base / "secret.txt")
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    for page in ("index.html", "index.json"):
        (elsewhere / page).write_text(SECRET)
    (root / "simple" / "linked").symlink_to(elsewhere, target_is_directory=True)
    (root / "simple" / "planted").mkdir()
    (root / "simple" / "planted" / "index.html").symlink_to(base / "secret.txt")
    return root


@pytest.fixture
def server(tree: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    log = tmp_path / "access.log"
    with running_server(tree, access_log=log) as url:
        yield url, log


# --- content negotiation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, MEDIA_HTML),
        ("", MEDIA_HTML),
        ("*/*", MEDIA_HTML),
        ("text/html", MEDIA_HTML),
        (MEDIA_JSON, MEDIA_JSON),
        (MEDIA_HTML_V1, MEDIA_HTML_V1),
        ("application/vnd.pypi.simple.latest+json", MEDIA_JSON),
        (PIP_ACCEPT, MEDIA_JSON),
        (f"{MEDIA_JSON};q=0.2, {MEDIA_HTML_V1};q=0.5", MEDIA_HTML_V1),
        (f"{MEDIA_JSON}; q=0.1, text/html", MEDIA_HTML),
        (f"{MEDIA_JSON}, */*;q=0.1", MEDIA_JSON),
        ("application/*", MEDIA_HTML_V1),
        (f"{MEDIA_JSON};q=0, */*", MEDIA_HTML),
        ("application/json", None),
        (f"{MEDIA_JSON};q=0", None),
        ("text/plain, image/png", None),
    ],
)
def test_negotiation_follows_pep_691(accept: str | None, chosen: str | None) -> None:
    assert negotiate(accept) == chosen


@pytest.mark.parametrize("path", ["/simple/", "/simple/wbtiny/"])
def test_pages_come_as_html_or_json_by_accept_with_exact_types_and_vary(
    server: tuple[str, Path], path: str
) -> None:
    url, _ = server
    plain = request(url, path)
    assert plain.status == 200
    assert plain.headers["content-type"] == "text/html"
    assert plain.headers["vary"] == "Accept"
    assert plain.headers["cache-control"] == "max-age=60"
    assert parse_page(plain.body).meta == {"pypi:repository-version": "1.1"}

    as_json = request(url, path, {"Accept": PIP_ACCEPT})
    assert as_json.headers["content-type"] == MEDIA_JSON
    assert as_json.headers["vary"] == "Accept"
    assert json.loads(as_json.body)["meta"] == {"api-version": "1.1"}

    as_v1_html = request(url, path, {"Accept": MEDIA_HTML_V1})
    assert as_v1_html.headers["content-type"] == MEDIA_HTML_V1
    assert as_v1_html.body == plain.body

    unacceptable = request(url, path, {"Accept": "application/json"})
    assert unacceptable.status == 406
    assert unacceptable.headers["vary"] == "Accept"


def test_an_unchanged_page_answers_304_to_its_etag(server: tuple[str, Path]) -> None:
    url, _ = server
    first = request(url, "/simple/wbtiny/", {"Accept": MEDIA_JSON})
    again = request(url, "/simple/wbtiny/", {"Accept": MEDIA_JSON, "If-None-Match": first.headers["etag"]})
    assert again.status == 304
    assert again.body == b""
    other_form = request(url, "/simple/wbtiny/", {"If-None-Match": first.headers["etag"]})
    assert other_form.status == 200  # the HTML form has its own ETag


def test_project_names_redirect_to_the_normalized_url_and_unknown_ones_are_404(
    server: tuple[str, Path],
) -> None:
    url, _ = server
    for path, target in [
        ("/simple/WBTiny/", "/simple/wbtiny/"),
        ("/simple/Other_Pkg/", "/simple/other-pkg/"),
        ("/simple/other.pkg", "/simple/other-pkg/"),
        ("/simple/wbtiny", "/simple/wbtiny/"),
        ("/simple", "/simple/"),
    ]:
        reply = request(url, path)
        assert reply.status == 301, path
        assert reply.headers["location"].endswith(target), (path, reply.headers["location"])
    assert request(url, "/simple/other-pkg/").status == 200
    forged = request(url, "/simple/WBTiny/?x=1", {"Host": "evil.example"})
    assert forged.headers["location"] == "/simple/wbtiny/?x=1"  # relative: the Host is not echoed
    for missing in ("/simple/nosuchproject/", "/simple/wbtiny/index.json", "/nothing", "/files/"):
        assert request(url, missing).status == 404, missing


# --- files ----------------------------------------------------------------------------------


def test_files_are_served_whole_in_ranges_and_cached_as_immutable(
    server: tuple[str, Path], tree: Path
) -> None:
    url, log = server
    data = (tree / "files" / WHEEL).read_bytes()
    whole = request(url, WHEEL_URL)
    assert whole.status == 200
    assert whole.body == data
    assert whole.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert whole.headers["accept-ranges"] == "bytes"

    part = request(url, WHEEL_URL, {"Range": "bytes=100-1099"})
    assert part.status == 206
    assert part.headers["content-range"] == f"bytes 100-1099/{len(data)}"
    assert part.body == data[100:1100]
    tail = request(url, WHEEL_URL, {"Range": "bytes=-22"})  # a zip's end-of-central-directory
    assert tail.status == 206
    assert tail.body == data[-22:]

    assert request(url, WHEEL_URL, {"If-None-Match": whole.headers["etag"]}).status == 304

    metadata = request(url, WHEEL_URL + ".metadata")
    assert metadata.status == 200
    assert metadata.body == (tree / "files" / (WHEEL + ".metadata")).read_bytes()
    assert metadata.headers["cache-control"] == "public, max-age=31536000, immutable"

    hits = read_log(log, at_least=5)
    assert hits[:5] == [
        Hit("GET", WHEEL_URL, 200, len(data), None),
        Hit("GET", WHEEL_URL, 206, 1000, "bytes=100-1099"),
        Hit("GET", WHEEL_URL, 206, 22, "bytes=-22"),
        Hit("GET", WHEEL_URL, 304, 0, None),
        Hit("GET", WHEEL_URL + ".metadata", 200, len(metadata.body), None),
    ]


@pytest.mark.parametrize(
    "path",
    [
        "/files/../.lock",
        "/files/..%2F.lock",
        "/files/..%2F..%2Fsecret.txt",
        "/files/%2e%2e%2f%2e%2e%2fsecret.txt",
        "/files/../../secret.txt",
        "/simple/../../secret.txt",
        "/simple/..%2F..%2Fsecret.txt/",
        "/simple/%2e%2e/",
        "/simple/..",
        "/simple/%2e%2e",
        "/files/evil-1.0-py3-none-any.whl",  # a symlink out of files/
        "/simple/linked/",  # a project folder that is a link out of the tree
        "/simple/planted/",  # a page that is a link
        f"/files/{WHEEL}.sha256",
        f"/files/{WHEEL}.yanked",
        "/files/.lock",
        "/.lock",
        "/files/wbtiny-0.1.0%2Bcu130torch2.11-py3-none-any.whl%00.metadata",
    ],
)
def test_nothing_outside_simple_and_files_is_served(server: tuple[str, Path], path: str) -> None:
    url, _ = server
    reply = request(url, path)
    assert reply.status in (400, 404), (path, reply.status)
    assert SECRET.encode() not in reply.body


# --- basic auth -----------------------------------------------------------------------------


@pytest.fixture
def htpasswd(tmp_path: Path) -> Path:
    alice = bcrypt.hashpw(b"alice-pw", bcrypt.gensalt(rounds=4)).decode().replace("$2b$", "$2y$", 1)
    bob = bcrypt.hashpw(b"bob-pw", bcrypt.gensalt(rounds=4)).decode()
    carol = "{SHA}" + base64.b64encode(hashlib.sha1(b"carol-pw").digest()).decode()
    path = tmp_path / "htpasswd"
    path.write_text(f"# users\nalice:{alice}\nbob:{bob}\n\ncarol:{carol}\n")
    return path


def test_basic_auth_refuses_missing_and_wrong_credentials_and_admits_right_ones(
    tree: Path, htpasswd: Path
) -> None:
    with running_server(tree, htpasswd=htpasswd) as url:
        for auth in (None, ("alice", "wrong"), ("nobody", "alice-pw"), ("carol", "alice-pw")):
            reply = request(url, "/simple/", auth=auth)
            assert reply.status == 401, auth
            assert reply.headers["www-authenticate"] == 'Basic realm="wheelbuild"'
        assert request(url, WHEEL_URL).status == 401  # files too
        for user in ("alice", "bob", "carol"):  # bcrypt $2y$, $2b$ and {SHA}
            assert request(url, "/simple/", auth=(user, f"{user}-pw")).status == 200, user
            assert request(url, WHEEL_URL, auth=(user, f"{user}-pw")).status == 200, user
        garbled = request(url, "/simple/", {"Authorization": "Basic !!!not-base64"})
        assert garbled.status == 401


@pytest.mark.parametrize(
    "line",
    [
        "dave:$apr1$abcdefgh$0123456789abcdefghijkl",  # Apache MD5
        "dave:plaintext",
        "dave:$6$salt$hash",  # crypt SHA-512
        "dave:{SHA}not-base64!",
        "dave:$2b$04$short",
        "no-colon-here",
    ],
)
def test_htpasswd_formats_we_cannot_verify_are_refused_at_startup(
    tmp_path: Path, tree: Path, line: str
) -> None:
    path = tmp_path / "htpasswd"
    path.write_text(line + "\n")
    with pytest.raises(BadHtpasswd) as raised:
        serve(tree, htpasswd=path, ready=lambda url: pytest.fail("started"))
    assert raised.value.exit_code == 55
    assert "line 1" in raised.value.cause
    assert "htpasswd" in raised.value.remedy
    with pytest.raises(BadHtpasswd):
        Htpasswd.load(tmp_path / "missing")


def test_serve_says_when_there_is_no_index_or_the_port_is_taken(tmp_path: Path, tree: Path) -> None:
    with pytest.raises(NoIndex) as raised:
        serve(tmp_path / "empty", ready=lambda url: pytest.fail("started"))
    assert raised.value.exit_code == 56
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ServeFailed) as failed:
            serve(tree, port=taken.getsockname()[1], ready=lambda url: pytest.fail("started"))
    assert failed.value.exit_code == 57


# --- hostile clients -------------------------------------------------------------------------


def _basic(raw: bytes) -> str:
    """An Authorization header for *raw* user:password bytes, as http.client sends a str (latin-1)."""
    return ("Basic " + base64.b64encode(raw).decode()).encode().decode("latin-1")


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/simple/", {"Authorization": _basic(b"alice:" + b"x" * 73)}),  # bcrypt 5 raised past 72
        ("/simple/", {"Authorization": _basic(b"alice:" + "é".encode() * 40)}),
        ("/simple/", {"Authorization": _basic(b"nobody:" + b"x" * 100)}),
        ("/simple/", {"Authorization": _basic(b"carol:" + b"x" * 100)}),
        ("/simple/", {"Authorization": _basic(b"alice:alice-pw") + "\xc3\xa9"}),  # non-ASCII bytes
        ("/simple/", {"Authorization": "Basic \xff\xfe"}),
        ("/simple/", {"Authorization": _basic(b"\xff:\xfe")}),  # not UTF-8 inside
        ("/simple/" + "a" * 300 + "/", {}),  # ENAMETOOLONG
        ("/simple/" + "a" * 300, {}),
        ("/files/" + "a" * 300 + ".whl", {}),
        ("/files/" + "a" * 300 + ".whl.metadata", {}),
    ],
)
def test_client_input_never_makes_a_500(
    tree: Path, htpasswd: Path, path: str, headers: dict[str, str]
) -> None:
    with running_server(tree, htpasswd=htpasswd) as url:
        sent = {"Authorization": _basic(b"alice:alice-pw"), **headers}
        reply = request(url, path, sent)
    expected = {400, 401} if headers else {404}
    assert reply.status in expected, (path, headers, reply.status, reply.body)
    assert b"Traceback" not in reply.body


def test_a_bcrypt_password_counts_up_to_72_bytes_and_a_longer_one_never_logs_in(
    tree: Path, tmp_path: Path
) -> None:
    exact = b"p" * 72
    path = tmp_path / "htpasswd"
    path.write_text(f"dave:{bcrypt.hashpw(exact, bcrypt.gensalt(rounds=4)).decode()}\n")
    with running_server(tree, htpasswd=path) as url:
        assert request(url, "/simple/", auth=("dave", exact.decode())).status == 200
        # bcrypt reads only 72 bytes, so this would match: refused instead of silently truncated.
        assert request(url, "/simple/", auth=("dave", exact.decode() + "q")).status == 401


def test_an_unexpected_error_is_a_plain_500_logged_on_the_server(
    server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    url, _ = server

    def broken(accept: str | None) -> str | None:
        raise RuntimeError("the internals of /srv/wheelhouse")

    monkeypatch.setattr("wheelbuild.index.serve.negotiate", broken)
    with caplog.at_level(logging.ERROR, logger="wheelbuild.serve"):
        reply = request(url, "/simple/")
    assert reply.status == 500
    assert reply.body == b"500: Internal Server Error\n"
    logged = [r.exc_info[1] for r in caplog.records if r.name == "wheelbuild.serve" and r.exc_info]
    assert logged and "the internals" in str(logged[0])  # the traceback stays in the server's log


def _median_ms(url: str, auth: tuple[str, str], sources: Iterator[str]) -> float:
    return 1000 * statistics.median(_timed(url, auth, next(sources)) for _ in range(9))


def _timed(url: str, auth: tuple[str, str], source: str) -> float:
    started = time.perf_counter()
    assert request(url, "/simple/", auth=auth, source=source).status == 401
    return time.perf_counter() - started


def test_an_unknown_user_takes_as_long_as_a_known_ones_wrong_password(tree: Path, tmp_path: Path) -> None:
    """htpasswd -B makes cost-5 hashes; the unknown user used to be checked against cost 10."""
    path = tmp_path / "htpasswd"
    path.write_text(
        "".join(f"{u}:{bcrypt.hashpw(b'pw', bcrypt.gensalt(rounds=5)).decode()}\n" for u in ("alice", "bob"))
    )
    # Each try from its own loopback address, so the failed-login limit never answers instead.
    sources = (f"127.0.2.{n}" for n in itertools.count(1))
    with running_server(tree, htpasswd=path) as url:
        _timed(url, ("alice", "warm-up"), next(sources))
        known, unknown = [], []
        for _ in range(3):  # interleaved, so load from elsewhere falls on both alike
            known.append(_median_ms(url, ("alice", "wrong"), sources))
            unknown.append(_median_ms(url, ("nobody", "wrong"), sources))
    ratio = statistics.median(unknown) / statistics.median(known)
    print(f"known user {statistics.median(known):.2f} ms, unknown {statistics.median(unknown):.2f} ms")
    assert 1 / 3 < ratio < 3, (known, unknown)


def test_the_unknown_users_hash_has_the_scheme_and_cost_most_entries_have(tmp_path: Path) -> None:
    def hashed(cost: int) -> str:
        return bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=cost)).decode()

    sha = "{SHA}" + base64.b64encode(hashlib.sha1(b"pw").digest()).decode()
    cases = [
        ([hashed(5), hashed(5), hashed(4), sha], "$2b$05$"),
        ([hashed(4).replace("$2b$", "$2y$", 1), hashed(6), hashed(6)], "$2b$06$"),
        ([sha, sha, hashed(4)], "{SHA}"),
    ]
    for entries, prefix in cases:
        path = tmp_path / "htpasswd"
        path.write_text("".join(f"user{n}:{h}\n" for n, h in enumerate(entries)))
        users = Htpasswd.load(path)
        assert users.dummy.startswith(prefix), (entries, users.dummy)
        assert users.dummy not in entries
        assert not users.verify("nobody", "pw")
        assert users.verify("user0", "pw")


def test_failed_logins_from_one_address_get_429_without_a_password_check(
    tree: Path, htpasswd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks: list[bytes] = []
    checkpw = bcrypt.checkpw

    def counted(password: bytes, hashed: bytes) -> bool:
        checks.append(password)
        return checkpw(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counted)
    limit = LoginLimit().failures
    with running_server(tree, htpasswd=htpasswd) as url:
        checks.clear()  # loading the file checked each hash once
        for n in range(limit):
            assert request(url, "/simple/", auth=("alice", f"guess-{n}")).status == 401
        assert len(checks) == limit
        for auth in (("alice", "guess-x"), ("nobody", "x"), ("alice", "alice-pw")):
            # The right password too: else a limited client could still find it, at hash speed.
            refused = request(url, "/simple/", auth=auth)
            assert refused.status == 429, auth
            assert 1 <= int(refused.headers["retry-after"]) <= 60
        assert len(checks) == limit  # no password was checked for them
        assert request(url, "/simple/", auth=("alice", "alice-pw"), source="127.0.0.2").status == 200
        assert request(url, "/simple/").status == 401  # no credentials: not a failed login


def test_the_login_limit_counts_tries_in_flight_and_forgets_after_its_window() -> None:
    now = [100.0]
    failures = _Failures(LoginLimit(failures=3, window=10.0, clients=2), clock=lambda: now[0])
    assert [failures.wait("a") for _ in range(3)] == [0.0, 0.0, 0.0]  # three in flight
    assert failures.wait("a") > 0  # a fourth concurrent guess waits for them
    for _ in range(3):
        failures.settle("a", passed=False)
    now[0] = 105.0
    assert failures.wait("a") == pytest.approx(5.0)
    now[0] = 110.5
    assert failures.wait("a") == 0.0
    failures.settle("a", passed=True)
    for client in ("b", "c", "d"):  # only the two most recent clients are remembered
        assert failures.wait(client) == 0.0
        failures.settle(client, passed=False)
    assert list(failures.failed) == ["c", "d"]


def test_a_flood_of_bad_passwords_does_not_hold_up_good_requests(tree: Path, tmp_path: Path) -> None:
    """200 concurrent bad-password requests from 25 addresses (each under the limit), then 30
    concurrent downloads of the wheel with good, already checked credentials. The downloads must
    not queue behind the flood's bcrypt checks: when the last download is answered, most of the
    flood must still be waiting. Ordering, not a time limit: a slow machine slows both alike (CI
    once failed a 250 ms median here at 285 ms, with the flood answered over 4 s)."""
    path = tmp_path / "htpasswd"
    path.write_text(f"alice:{bcrypt.hashpw(b'alice-pw', bcrypt.gensalt(rounds=8)).decode()}\n")
    good = {"Authorization": _basic(b"alice:alice-pw")}
    bad = {"Authorization": _basic(b"alice:wrong")}

    async def flood(base: str) -> tuple[list[int], list[tuple[int, float]], list[float], float]:
        sessions = [
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(f"127.0.3.{n}", 0), limit=0))
            for n in range(1, 26)
        ]
        async with aiohttp.ClientSession() as client:

            async def one(session: aiohttp.ClientSession) -> tuple[int, float]:
                async with session.get(base + "/simple/", headers=bad) as reply:
                    await reply.read()
                    return reply.status, time.perf_counter()

            async def download() -> tuple[int, float]:
                started = time.perf_counter()
                async with client.get(base + WHEEL_URL, headers=good) as reply:
                    await reply.read()
                return reply.status, time.perf_counter() - started

            async with client.get(base + "/simple/", headers=good) as first:  # its check is cached
                assert first.status == 200
            try:
                flooded = [asyncio.create_task(one(sessions[n % 25])) for n in range(200)]
                await asyncio.sleep(0.1)  # the flood is in before the downloads are asked for
                downloads = await asyncio.gather(*(download() for _ in range(30)))
                downloaded_at = time.perf_counter()
                bad_replies = await asyncio.gather(*flooded)
            finally:
                for session in sessions:
                    await session.close()
        statuses = [status for status, _took in downloads]
        took = [took for _status, took in downloads]
        return statuses, bad_replies, took, downloaded_at

    with running_server(tree, htpasswd=path) as url:
        statuses, bad_replies, took, downloaded_at = asyncio.run(flood(url.removesuffix("/simple/")))
    assert {status for status, _at in bad_replies} == {401}
    assert statuses == [200] * 30
    answered_first = sum(at < downloaded_at for _status, at in bad_replies)
    median = statistics.median(took)
    print(
        f"wheel downloads during the flood: median {median * 1000:.0f} ms, max {max(took) * 1000:.0f} ms; "
        f"{answered_first} of {len(bad_replies)} bad passwords answered before the last download"
    )
    # Queued behind the checks, the downloads would come after all 200; beside them, after a few.
    assert answered_first < len(bad_replies) // 2, (answered_first, sorted(took))


def test_escape_leaves_no_quote_newline_or_control_character() -> None:
    hostile = 'a"b\\c d\r\n127.0.0.1 - GET /forged 200 0 0.1ms\x1b[2J\x00\x7f\u2028é\udcff'
    quoted = _escape(hostile, quoted=True)
    assert re.fullmatch(r"[\x20-\x7e]*", quoted)
    # Inside quotes, a quote and a backslash are backslashed, so no quote ends the field early.
    assert re.fullmatch(r'(?:[^"\\]|\\.)*', quoted), quoted
    assert quoted.startswith('a\\"b\\\\c d\\x0d\\x0a')
    assert _escape('{"installer":"uv"}', quoted=True) == '{\\"installer\\":\\"uv\\"}'  # readable
    assert " " not in _escape(hostile)  # outside quotes a space would split the field
    assert _escape("/simple/wbtiny/") == "/simple/wbtiny/"
    assert _escape("bytes=0-99", quoted=True) == "bytes=0-99"


def test_client_values_in_the_access_log_are_escaped(tree: Path, tmp_path: Path) -> None:
    forged_user = "eve\n127.0.0.1 alice GET /files/x.whl 200 1 1.0ms"
    path = tmp_path / "htpasswd"
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    path.write_text(f"alice:{hashed}\n")
    log = tmp_path / "access.log"
    with running_server(tree, htpasswd=path, access_log=log) as url:
        auth = ("alice", "pw")
        assert request(url, WHEEL_URL, {"Range": 'bytes=0-1" status="200'}, auth=auth).status == 416
        assert request(url, "/simple/", {"User-Agent": 'pip "x"\t\\ é'}, auth=auth).status == 200
        assert request(url, '/simple/x"y/', auth=auth).status == 404
        assert request(url, "/simple/", auth=(forged_user, "pw")).status == 401
    read_log(log, at_least=4)
    text = log.read_text()
    lines = text.splitlines()
    assert len(lines) == 4, text  # no line was forged
    parsed = [LINE.search(line) for line in lines]
    assert all(parsed), text
    ranged, agent, quote, forged = (m for m in parsed if m)
    assert ranged["range"] == 'bytes=0-1\\" status=\\"200'
    assert ranged["user"] == "alice"
    assert agent["agent"] == 'pip \\"x\\"\\x09\\\\ \\xe9'  # the byte as sent (latin-1)
    assert quote["path"] == "/simple/x\\x22y/"
    assert forged["user"] == "eve\\x0a127.0.0.1\\x20alice\\x20GET\\x20/files/x.whl\\x20200\\x201\\x201.0ms"
    assert 'status="200' not in text and '"x"' not in text


# --- connections: timeouts, a cap, malformed requests ---------------------------------------


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed *sock*: a read returns end of file (at most 60 s of waiting, a
    guard against a server that never does, not a measure of how soon it did)."""
    sock.settimeout(60)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def _port(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


def test_a_silent_a_half_sent_and_an_idle_connection_are_each_closed(tree: Path) -> None:
    limits = ServeLimits(header_timeout=0.5, idle_timeout=0.5)
    with running_server(tree, limits=limits) as url:
        silent = socket.create_connection(("127.0.0.1", _port(url)))
        half = socket.create_connection(("127.0.0.1", _port(url)))
        half.sendall(b"GET /simple/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/html\r\n")  # never ends
        kept = http.client.HTTPConnection("127.0.0.1", _port(url), timeout=60)
        kept.request("GET", "/simple/")
        answer = kept.getresponse()
        assert answer.status == 200 and answer.read() and not answer.will_close  # kept alive
        assert kept.sock is not None
        for sock in (silent, half, kept.sock):
            with sock:
                assert _closed_by_server(sock)


def test_idle_sockets_past_the_file_limit_never_keep_a_request_from_an_answer(tree: Path) -> None:
    # 70 connections that never send a byte, under an open-file limit of 64 (the header timeout
    # set long, so only the connection cap can make room).
    with serve_process(tree, "--header-timeout", "600", open_files=64) as served:
        idle = [socket.create_connection(("127.0.0.1", _port(served.url))) for _ in range(70)]
        try:
            reply = request(served.url, "/simple/wbtiny/", {"Accept": MEDIA_JSON})
            assert reply.status == 200 and json.loads(reply.body)["name"] == "wbtiny"
            readable, _, _ = select.select(idle, [], [], 0)
            closed = [sock for sock in readable if sock.recv(1) == b""]
            # The longest idle made room, one at a time; the newest are still open (no timeout
            # closed them: the cap did).
            assert len(closed) > len(idle) // 2 and len(closed) < len(idle)
            assert closed == idle[: len(closed)]
        finally:
            for sock in idle:
                sock.close()
    assert "Traceback" not in served.stderr and "Too many open files" not in served.stderr, served.stderr


def test_when_every_connection_is_answering_the_next_gets_a_503(tmp_path: Path) -> None:
    big = make_wheel(
        tmp_path / "in", "wbbig", "1.0", extra_files={"wbbig/blob.bin": os.urandom(16 * 1024**2)}
    )
    publish([big], tmp_path / "cu130")
    with serve_process(tmp_path / "cu130", "--max-connections", "1") as served, socket.socket() as busy:
        # A small receive buffer: the server's answer stops once ~4 MiB are in flight, and it
        # goes on answering (blocked) while this client reads nothing past the head.
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        busy.connect(("127.0.0.1", _port(served.url)))
        busy.sendall(f"GET /files/{big.name} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        busy.settimeout(60)
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += busy.recv(1)
        assert head.startswith(b"HTTP/1.1 200")
        refused = request(served.url, "/simple/")
    assert refused.status == 503
    assert refused.headers["retry-after"] == "1" and refused.headers["connection"] == "close"
    assert refused.body == b"503: every connection is busy; try again\n"
    assert "refused a connection from 127.0.0.1: all 1 are answering requests" in served.stderr


def test_a_connection_cap_the_open_file_limit_cannot_hold_is_refused_before_listening(tree: Path) -> None:
    done = subprocess.run(
        limited(64, "serve", str(tree), "--port", "0", "--max-connections", "1000"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 13, done.stdout + done.stderr
    assert (
        "--max-connections 1000 is more than the open-file limit holds (ulimit -n 64: at most" in done.stderr
    )
    assert "serving" not in done.stdout and "Traceback" not in done.stderr


def test_a_malformed_request_is_answered_400_and_logged_in_one_line(tree: Path) -> None:
    with serve_process(tree) as served:
        sock = socket.create_connection(("127.0.0.1", _port(served.url)))
        with sock:
            sock.sendall(b"GET /simple/ HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon here\r\n\r\n")
            sock.settimeout(60)
            assert sock.recv(12).split(b" ")[1] == b"400"
    logged = [line for line in served.stderr.splitlines() if "malformed request" in line]
    assert len(logged) == 1, served.stderr
    assert logged[0].startswith("malformed request from 127.0.0.1: ")
    assert "Traceback" not in served.stderr, served.stderr


def test_a_malformed_request_carrying_a_credential_is_logged_without_it(tree: Path) -> None:
    """A valid Basic credential followed by one invalid byte: aiohttp's message echoes the value;
    the log line says what was wrong, never the credential (nor its base64)."""
    credential = base64.b64encode(b"alice:" + SECRET.encode()).decode()
    with serve_process(tree) as served:
        sock = socket.create_connection(("127.0.0.1", _port(served.url)))
        with sock:
            sock.sendall(
                b"GET /simple/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic "
                + credential.encode() + b"\x01\r\nCookie: session=" + SECRET.encode() + b"\x01\r\n\r\n"
            )  # fmt: skip
            sock.settimeout(60)
            assert sock.recv(12).split(b" ")[1] == b"400"
    logged = [line for line in served.stderr.splitlines() if "malformed request" in line]
    assert len(logged) == 1, served.stderr
    assert logged[0].startswith("malformed request from 127.0.0.1: 400: ")
    for leaked in (credential, credential[:12], SECRET):
        assert leaked not in served.stderr


# --- links ----------------------------------------------------------------------------------


def test_a_files_folder_that_is_a_link_serves_its_wheels(tmp_path: Path) -> None:
    """files/ on another volume, linked by the operator: its wheels are served and published
    into; traversal and links in it that lead out are still refused."""
    root = tmp_path / "cu130"
    volume = tmp_path / "volume" / "files"
    volume.mkdir(parents=True)
    root.mkdir()
    (root / "files").symlink_to(volume, target_is_directory=True)
    publish([make_wheel(tmp_path / "in", "wbtiny", "0.1.0+cu130torch2.11")], root)
    assert (volume / WHEEL).is_file()
    (tmp_path / "secret.txt").write_text(SECRET)
    (volume / "evil-1.0-py3-none-any.whl").symlink_to(tmp_path / "secret.txt")
    with running_server(root) as url:
        wheel = request(url, WHEEL_URL)
        assert wheel.status == 200
        assert wheel.body == (volume / WHEEL).read_bytes()
        assert request(url, WHEEL_URL + ".metadata").status == 200
        for path in (
            "/files/evil-1.0-py3-none-any.whl",
            "/files/..%2F..%2Fsecret.txt",
            "/files/../secret.txt",
        ):
            reply = request(url, path)
            assert reply.status in (400, 404), path
            assert SECRET.encode() not in reply.body


# --- a bounded load test --------------------------------------------------------------------


def test_load_with_auth_good_and_bad_clients(tree: Path, tmp_path: Path) -> None:
    """4 good clients (200 requests: pages, JSON, metadata, the wheel) and 3 bad-credential
    clients (150 requests, each client from its own address) at once, each to its last request:
    no 500, every good request a 200; the good ones' p50/p99 go to stdout and to a JSON file
    (figures, not limits: a loaded machine is slower, not wrong)."""
    path = tmp_path / "htpasswd"
    path.write_text(
        f"alice:{bcrypt.hashpw(b'alice-pw', bcrypt.gensalt(rounds=10)).decode()}\n"
        + "carol:{SHA}"
        + base64.b64encode(hashlib.sha1(b"carol-pw").digest()).decode()
        + "\n"
    )
    good_paths = [
        ("/simple/", {}),
        ("/simple/wbtiny/", {"Accept": PIP_ACCEPT}),
        (WHEEL_URL + ".metadata", {}),
        (WHEEL_URL, {}),
    ]
    bad_auth = [("alice", "wrong"), ("nobody", "x"), ("carol", "wrong"), ("alice", "y" * 100)]
    results: dict[str, list[tuple[int, float]]] = {"good": [], "bad": []}
    lock = threading.Lock()

    def client(kind: str, number: int, count: int, url: str) -> None:
        source = "127.0.0.1" if kind == "good" else f"127.0.4.{number + 1}"
        user = ("alice", "alice-pw") if number % 2 == 0 else ("carol", "carol-pw")
        for n in range(count):
            if kind == "good":
                where, headers = good_paths[n % len(good_paths)]
                auth = user
            else:
                where, headers, auth = "/simple/", {}, bad_auth[n % len(bad_auth)]
            started = time.perf_counter()
            status = request(url, where, headers, auth=auth, source=source).status
            with lock:
                results[kind].append((status, time.perf_counter() - started))

    with running_server(tree, htpasswd=path) as url:
        assert request(url, "/simple/", auth=("alice", "alice-pw")).status == 200  # cached from now on
        threads = [threading.Thread(target=client, args=("good", n, 50, url)) for n in range(4)]
        threads += [threading.Thread(target=client, args=("bad", n, 50, url)) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)  # a hang guard
        assert not any(thread.is_alive() for thread in threads)

    good = [took for _status, took in results["good"]]
    assert len(good) == 200
    assert {status for status, _took in results["good"]} == {200}
    assert {status for status, _took in results["bad"]} <= {401, 429}
    assert 429 in {status for status, _took in results["bad"]}
    quantiles = statistics.quantiles(good, n=100, method="inclusive")
    numbers = {
        "good_requests": len(good),
        "bad_requests": len(results["bad"]),
        "bad_answered_429": sum(status == 429 for status, _took in results["bad"]),
        "p50_ms": round(quantiles[49] * 1000, 2),
        "p99_ms": round(quantiles[98] * 1000, 2),
        "max_ms": round(max(good) * 1000, 2),
    }
    report = tmp_path / "serve-load.json"
    report.write_text(json.dumps(numbers, indent=2) + "\n")
    print(f"\nserve load: {numbers}\nwritten to {report}")


# --- real installers ------------------------------------------------------------------------


def test_pip_installs_a_local_version_by_name_from_the_served_index(
    server: tuple[str, Path], tmp_path: Path
) -> None:
    url, log = server
    env = clean_env(tmp_path)
    venv = tmp_path / "pip-venv"
    run_ok([sys.executable, "-m", "venv", str(venv)], env, tmp_path)
    python = str(venv / "bin" / "python")
    run_ok([python, "-m", "pip", "install", "--index-url", url, PIN], env, tmp_path)
    done = run_ok([python, "-c", "import wbtiny; print(wbtiny.VERSION)"], env, tmp_path)
    assert done.stdout.strip() == "0.1.0+cu130torch2.11"
    # The newer 0.2.0 is yanked: an unpinned upgrade keeps 0.1.0.
    run_ok([python, "-m", "pip", "install", "--upgrade", "--index-url", url, "wbtiny"], env, tmp_path)
    done = run_ok([python, "-c", "import wbtiny; print(wbtiny.VERSION)"], env, tmp_path)
    assert done.stdout.strip() == "0.1.0+cu130torch2.11"
    paths = [hit.path for hit in read_log(log, at_least=4)]
    # pip too decides from the PEP 658 file, then downloads the wheel.
    assert paths.index("/simple/wbtiny/") < paths.index(WHEEL_URL + ".metadata") < paths.index(WHEEL_URL)


def test_uv_resolves_from_the_metadata_file_then_fetches_the_wheel_once(
    server: tuple[str, Path], tree: Path, tmp_path: Path
) -> None:
    url, log = server
    env = clean_env(tmp_path)
    venv = tmp_path / "uv-venv"
    run_ok([sys.executable, "-m", "venv", "--without-pip", str(venv)], env, tmp_path)
    python = str(venv / "bin" / "python")
    run_ok([uv_binary(), "pip", "install", "--python", python, "--index-url", url, PIN], env, tmp_path)
    done = run_ok([python, "-c", "import wbtiny; print(wbtiny.VERSION)"], env, tmp_path)
    assert done.stdout.strip() == "0.1.0+cu130torch2.11"

    hits = read_log(log, at_least=3)
    paths = [hit.path for hit in hits]
    metadata = paths.index(WHEEL_URL + ".metadata")
    wheel = paths.index(WHEEL_URL)
    assert paths.index("/simple/wbtiny/") < metadata < wheel, paths
    # Before it decided, uv read no byte of the wheel (no range reads into the zip either).
    assert all(h.path != WHEEL_URL for h in hits[:wheel]), hits
    fetched = [h for h in hits if h.path == WHEEL_URL]
    size = (tree / "files" / WHEEL).stat().st_size
    assert [(h.status, h.bytes) for h in fetched] == [(200, size)], fetched
    # uv's user agent carries JSON (linehaul's): the log backslashes its quotes, never \x22, so
    # the agent reads back as uv sent it.
    agents = [m["agent"] for line in log.read_text().splitlines() if (m := LINE.search(line)) and m["agent"]]
    assert agents and "\\x22" not in log.read_text()
    product, _, linehaul = re.sub(r"\\(.)", r"\1", agents[0]).partition(" ")
    assert product.startswith("uv/") and json.loads(linehaul)["installer"]["name"] == "uv", agents[0]

    run_ok(
        [uv_binary(), "pip", "install", "--python", python, "--upgrade", "--index-url", url, "wbtiny"],
        env,
        tmp_path,
    )
    done = run_ok([python, "-c", "import wbtiny; print(wbtiny.VERSION)"], env, tmp_path)
    assert done.stdout.strip() == "0.1.0+cu130torch2.11"  # 0.2.0 is yanked


def test_uv_installs_through_basic_auth(tree: Path, htpasswd: Path, tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    venv = tmp_path / "uv-venv"
    run_ok([sys.executable, "-m", "venv", "--without-pip", str(venv)], env, tmp_path)
    python = str(venv / "bin" / "python")
    with running_server(tree, htpasswd=htpasswd, access_log=tmp_path / "access.log") as url:
        wrong = url.replace("http://", "http://alice:wrong@")
        refused = subprocess.run(
            [uv_binary(), "pip", "install", "--python", python, "--index-url", wrong, PIN],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert refused.returncode != 0
        assert "401" in refused.stderr or "nauthorized" in refused.stderr, refused.stderr
        right = url.replace("http://", "http://alice:alice-pw@")
        run_ok([uv_binary(), "pip", "install", "--python", python, "--index-url", right, PIN], env, tmp_path)
    done = run_ok([python, "-c", "import wbtiny; print(wbtiny.VERSION)"], env, tmp_path)
    assert done.stdout.strip() == "0.1.0+cu130torch2.11"


def test_serve_answers_every_file_the_pages_link_to_the_sigstore_bundle_too(tmp_path: Path) -> None:
    """A wheel published with its statement and that statement's Sigstore bundle: every href on
    its project page, followed from the page, is answered 200 (the bundle used to be a 404)."""
    wheel = make_wheel(tmp_path / "in")
    sidecars = Sidecars(
        statements={
            wheel.name: b'{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}'
        },
        sigstore_bundles={wheel.name: b'{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"}'},
    )
    publish([wheel], tmp_path / "cu130", sidecars=sidecars)
    with running_server(tmp_path / "cu130") as url:
        pages = [
            request(url, path, {"Accept": "text/html"}).body.decode() for path in ("/", "/simple/wbtiny/")
        ]
        links = re.findall(r'(?:href|data-[a-z-]+)="([^"#]+)', "".join(pages))
        files = sorted({"files/" + link.split("files/", 1)[1] for link in links if "files/" in link})
        assert any(link.endswith(".sigstore.json") for link in files), pages
        for link in files:
            assert request(url, "/" + link).status == 200, link


def test_stalled_downloads_lose_their_slots_not_the_other_clients(tmp_path: Path) -> None:
    """Downloads of a 24 MB wheel that are never read (a receive window of 4 KiB, then nothing):
    one client holds no more than its share (2 of 4 here), so another client is answered at
    once; and each stalled download is closed after the send timeout, its slot freed, the access
    log saying the bytes really sent, not the file's size."""
    wheel = make_wheel(tmp_path / "in", extra_files={"wbtiny/blob.bin": os.urandom(24 << 20)})
    publish([wheel], tmp_path / "tree")
    size = wheel.stat().st_size
    log = tmp_path / "access.log"
    path = "/files/" + wheel.name.replace("+", "%2B")
    limits = ("--max-connections", "4", "--send-timeout", "2", "--access-log", str(log))
    with serve_process(tmp_path / "tree", *limits) as served:
        stalled = []
        for _ in range(2):
            sock = socket.create_connection(("127.0.0.1", _port(served.url)))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            sock.settimeout(30)
            assert sock.recv(12) == b"HTTP/1.1 200"  # answering; then never read again
            stalled.append(sock)
        third = socket.create_connection(("127.0.0.1", _port(served.url)))
        third.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        third.settimeout(30)
        assert third.recv(12) == b"HTTP/1.1 503"  # over its share: refused, not queued
        assert request(served.url, "/simple/", source="127.0.0.2").status == 200  # another client
        hits = [hit for hit in read_log(log, at_least=3, timeout=60) if hit.path == path]
        assert [hit.status for hit in hits] == [200, 200], hits  # both closed (the 503 is not logged)
        assert all(0 < hit.bytes < size for hit in hits), (hits, size)
        for sock in [*stalled, third]:
            sock.close()
    assert served.stderr.count("(a stalled download)") == 2, served.stderr
    assert "refused a connection from 127.0.0.1: it holds its share of 2" in served.stderr
