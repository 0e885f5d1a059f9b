"""`wheelbuild serve`: the real aiohttp server on 127.0.0.1, then real pip and real uv installing
from it into fresh venvs. No Docker needed; seconds, not minutes."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from builder.errors import BadHtpasswd, NoIndex, ServeFailed
from builder.publish import publish, yank
from builder.serve import MEDIA_HTML, MEDIA_HTML_V1, MEDIA_JSON, Htpasswd, negotiate, serve
from tests.indexkit import make_wheel, parse_page
from tests.integration.serving import Hit, clean_env, read_log, request, run_ok, running_server, uv_binary

pytestmark = pytest.mark.integration

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
    secret file beside it that no URL may reach."""
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
