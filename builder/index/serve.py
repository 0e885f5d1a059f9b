"""`wheelbuild serve [DIR]`: a wheelhouse tree over HTTP, as pip and uv expect a private index.

    /simple/                 project list      } PEP 691 negotiation on Accept: v1 JSON, v1 HTML,
    /simple/<project>/       one project       } text/html (the default); 406 when none fits
    /files/<wheel>           the wheel         } Range, ETag, If-None-Match, Last-Modified by
    /files/<wheel>.metadata  its METADATA      } aiohttp's FileResponse; cached as immutable
    /files/<wheel>.inputs    the inputs key of the build that made it (`wheelbuild nightly plan`)
    /coverage.html           the last nightly's coverage table, when the tree has one
    /                        a browser (Accept names text/html) gets the page for people,
                             index.html (builder/index/index_page.py); any other client a 302 to /simple/

Only pages under ``simple/``, ``*.whl`` / ``*.whl.metadata`` / ``*.whl.inputs`` under ``files/`` and
``coverage.html`` are served; every
other path is a 404, and a non-normalized project name is a 301 to the normalized one. With an
htpasswd file (bcrypt ``$2y$``/``$2b$``/``$2a$`` or ``{SHA}``) every request needs basic auth;
a client address with too many failed logins in a window gets 429 without a password check.
One access-log line per request (client, user, method, path, status, body bytes sent, time, Range
asked, user agent; client values escaped) goes to the ``wheelbuild.serve.access`` logger and, if
asked, to a file. No client input makes a 500: an unexpected error is logged here and answered
with a plain 500.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import errno
import hashlib
import hmac
import itertools
import logging
import math
import os
import re
import secrets
import stat
import sys
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.typedefs import Middleware
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from ..errors import BadHtpasswd, NoIndex, ServeFailed
from . import index, index_page
from .index import MEDIA_HTML_V1, MEDIA_JSON

__all__ = [
    "MEDIA_HTML",
    "MEDIA_HTML_V1",
    "MEDIA_JSON",
    "Htpasswd",
    "LoginLimit",
    "make_app",
    "negotiate",
    "serve",
]

MEDIA_HTML = "text/html"
_ALIASES = {
    "application/vnd.pypi.simple.latest+json": MEDIA_JSON,
    "application/vnd.pypi.simple.latest+html": MEDIA_HTML_V1,
}
_OFFERS = (MEDIA_JSON, MEDIA_HTML_V1, MEDIA_HTML)
INDEX_CACHE = "max-age=60"
FILE_CACHE = "public, max-age=31536000, immutable"
REALM = "wheelbuild"
ACCESS_LOGGER = "wheelbuild.serve.access"
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+!-]*\.whl(\.metadata|\.inputs)?$")
COVERAGE_PAGE = "coverage.html"  # written by `wheelbuild nightly publish-night`
_BCRYPT = ("$2y$", "$2b$", "$2a$")
_BCRYPT_COST = re.compile(r"^\$2[aby]\$(\d\d)\$")
_BCRYPT_MAX = 72  # bcrypt reads no further, and bcrypt 5 raises on a longer password
_SHA = "{SHA}"
_NAME_MAX = 255  # no file name, so no project folder, is longer (ENAMETOOLONG past it)

log = logging.getLogger("wheelbuild.serve")


# ---------------------------------------------------------------------------------------------
# Content negotiation (PEP 691)


def _ranges(accept: str) -> list[tuple[str, float]]:
    found: list[tuple[str, float]] = []
    for item in accept.split(","):
        media, *params = (part.strip() for part in item.split(";"))
        if not media:
            continue
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = min(max(float(value.strip()), 0.0), 1.0)
                except ValueError:
                    quality = 0.0
        media = media.lower()
        found.append((_ALIASES.get(media, media), quality))
    return found


def _specificity(media_range: str, offer: str) -> int:
    """3 for an exact match, 2 for type/*, 1 for */*, 0 for none."""
    if media_range == offer:
        return 3
    if media_range == "*/*":
        return 1
    kind, _, sub = media_range.partition("/")
    return 2 if sub == "*" and offer.startswith(kind + "/") else 0


def negotiate(accept: str | None) -> str | None:
    """The media type to answer with for this Accept header, or None (406).

    No header means text/html. Each offer gets the q of the most specific range that matches it;
    the highest q wins; on a tie a named type beats a wildcard match, and among named types JSON is
    preferred (a wildcard alone gets text/html, what old clients understand)."""
    if accept is None or not accept.strip():
        return MEDIA_HTML
    ranges = _ranges(accept)
    best: tuple[float, int, int, str] | None = None
    for offer in _OFFERS:
        matches = [(_specificity(r, offer), q) for r, q in ranges if _specificity(r, offer)]
        if not matches:
            continue
        specificity, quality = max(matches)
        if quality <= 0:
            continue
        preference = _OFFERS.index(offer)
        rank = -preference if specificity == 3 else preference
        key = (quality, specificity, rank, offer)
        if best is None or key[:3] > best[:3]:
            best = key
    return best[3] if best else None


# ---------------------------------------------------------------------------------------------
# Basic auth from an htpasswd file


@dataclass(frozen=True)
class Htpasswd:
    """Users and password hashes of an htpasswd file; only formats we can verify are accepted.

    *dummy* is what an unknown user's password is checked against: a hash of a random password
    with the scheme and cost most entries have (made once, here), so that a miss costs what a
    known user's wrong password does and timing does not tell which names exist."""

    users: Mapping[str, str]
    dummy: str = field(default="", repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.dummy:
            object.__setattr__(self, "dummy", _dummy_like(self.users.values()))

    @classmethod
    def load(cls, path: Path) -> Htpasswd:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise BadHtpasswd(
                f"cannot read the htpasswd file {path}: {error}",
                "give a readable file of user:hash lines (htpasswd -B makes bcrypt ones)",
            ) from None
        users: dict[str, str] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, hashed = line.partition(":")
            if not sep or not user or not hashed:
                raise BadHtpasswd(
                    f"{path} line {number} is not user:hash",
                    "write one user:hash per line (htpasswd -B FILE USER adds one)",
                )
            if hashed.startswith(_BCRYPT):
                try:
                    if not _BCRYPT_COST.match(hashed):
                        raise ValueError("no two-digit cost")
                    bcrypt.checkpw(b"", hashed.encode())
                except ValueError:
                    raise BadHtpasswd(
                        f"{path} line {number} (user {user}): the bcrypt hash is malformed",
                        "make it again with htpasswd -B",
                    ) from None
            elif hashed.startswith(_SHA):
                try:
                    if len(base64.b64decode(hashed[len(_SHA) :], validate=True)) != 20:
                        raise ValueError("not a SHA-1 digest")
                except (binascii.Error, ValueError):
                    raise BadHtpasswd(
                        f"{path} line {number} (user {user}): the {{SHA}} hash is not base64 of a SHA-1 digest",
                        "make it again with htpasswd -s, or better with htpasswd -B (bcrypt)",
                    ) from None
            else:
                kind = (
                    hashed.split("$")[1]
                    if hashed.startswith("$") and hashed.count("$") > 1
                    else "crypt/plain"
                )
                raise BadHtpasswd(
                    f"{path} line {number} (user {user}): hash format {kind!r} is not supported "
                    "(only bcrypt $2y$/$2b$/$2a$ and {SHA})",
                    "make the entry again with htpasswd -B (bcrypt)",
                )
            users[user] = hashed
        if not users:
            raise BadHtpasswd(f"{path} has no users", "add one with htpasswd -B FILE USER")
        return cls(users=users)

    def verify(self, user: str, password: str) -> bool:
        """Constant-time check. An unknown user costs what a known one of the file's usual scheme
        and cost does. A password over 72 bytes never matches a bcrypt entry (bcrypt would only
        read its first 72), but costs the same check."""
        known = self.users.get(user)
        hashed = self.dummy if known is None else known
        secret = password.encode()
        if hashed.startswith(_SHA):
            digest = base64.b64encode(hashlib.sha1(secret).digest()).decode()
            matched = hmac.compare_digest(digest, hashed[len(_SHA) :])
        else:
            matched = bcrypt.checkpw(secret[:_BCRYPT_MAX], hashed.encode())
            matched = matched and len(secret) <= _BCRYPT_MAX
        return matched and known is not None


def _scheme(hashed: str) -> tuple[int, str]:
    """(cost, prefix) of a hash: a bcrypt hash's log2 rounds, 0 for {SHA}."""
    cost = _BCRYPT_COST.match(hashed)
    return (int(cost[1]), "$2b$") if cost else (0, _SHA)


def _dummy_like(hashes: Iterable[str]) -> str:
    """A hash of a random password in the scheme and cost most of *hashes* have (on a tie, the
    dearer one)."""
    counts = Counter(_scheme(h) for h in hashes)
    if not counts:
        counts[(0, _SHA)] = 1
    (cost, prefix), _n = max(counts.items(), key=lambda item: (item[1], item[0]))
    password = secrets.token_urlsafe(32).encode()
    if prefix == _SHA:
        return _SHA + base64.b64encode(hashlib.sha1(password).digest()).decode()
    return bcrypt.hashpw(password, bcrypt.gensalt(rounds=cost)).decode()


def _credentials(header: str | None) -> tuple[str, str] | None:
    """(user, password) of a Basic Authorization header; None for anything else."""
    if not header or header[:6].lower() != "basic ":
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except ValueError:  # bad base64, non-ASCII header text, or bytes that are not UTF-8
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


@dataclass(frozen=True)
class LoginLimit:
    """At most *failures* failed logins per client address in *window* seconds; past that the
    address gets 429 without a password check until its oldest failure leaves the window. At most
    *clients* addresses are remembered (the longest quiet is forgotten first)."""

    failures: int = 10
    window: float = 60.0
    clients: int = 10_000


class _Failures:
    """Failed logins per client address. Checks in flight count as failures until they pass, so
    a burst of concurrent guesses cannot all get past the limit before the first one fails.
    Used from the event loop only."""

    def __init__(self, limit: LoginLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self.failed: OrderedDict[str, deque[float]] = OrderedDict()
        self.pending: Counter[str] = Counter()

    def wait(self, client: str) -> float:
        """0 if *client* may try now (the try is then in flight), else seconds until it may."""
        now = self.clock()
        failed = self.failed.get(client, deque())
        while failed and failed[0] <= now - self.limit.window:
            failed.popleft()
        if not failed:
            self.failed.pop(client, None)
        if len(failed) + self.pending[client] >= self.limit.failures:
            return failed[0] + self.limit.window - now if failed else 1.0
        self.pending[client] += 1
        return 0.0

    def settle(self, client: str, passed: bool) -> None:
        self.pending[client] -= 1
        if self.pending[client] <= 0:
            del self.pending[client]
        if passed:
            return
        self.failed.setdefault(client, deque()).append(self.clock())
        self.failed.move_to_end(client)
        while len(self.failed) > self.limit.clients:
            self.failed.popitem(last=False)


class _Authenticator:
    """Checks Authorization headers; remembers the digests of credentials that passed, so bcrypt
    runs once per user and password, not once per request. Password checks run on threads of
    their own (half the cores): bcrypt is CPU-bound, and on the loop's default executor a flood
    of them would queue ahead of the file reads of good requests."""

    def __init__(self, htpasswd: Htpasswd, limit: LoginLimit) -> None:
        self.htpasswd = htpasswd
        self.failures = _Failures(limit)
        self.passed: set[bytes] = set()
        self.pool = ThreadPoolExecutor(
            max_workers=max(1, (os.cpu_count() or 2) // 2), thread_name_prefix="wheelbuild-auth"
        )

    async def check(self, client: str, user: str, password: str) -> tuple[int, int]:
        """(200, 0) passed, (401, 0) refused, or (429, seconds to wait): too many failures from
        *client*, so the password was not checked."""
        wait = self.failures.wait(client)
        if wait:
            return 429, max(1, math.ceil(wait))
        # Looked up only after the limit: else a limited client could still test passwords
        # against the cache of good ones at the speed of a hash.
        key = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        passed = key in self.passed
        try:
            if not passed:
                loop = asyncio.get_running_loop()
                passed = await loop.run_in_executor(self.pool, self.htpasswd.verify, user, password)
        finally:
            self.failures.settle(client, passed)
        if passed:
            self.passed.add(key)
            return 200, 0
        return 401, 0

    async def close(self, _app: web.Application) -> None:
        """On the app's cleanup: checks still queued are dropped."""
        self.pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------------------------------
# The application


_Handler = Callable[[web.Request], Awaitable[StreamResponse]]
_USER = web.RequestKey("wheelbuild.user", str)  # the user a request claimed, for the access log
_MISSING = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG)


def _not_found() -> web.HTTPNotFound:
    return web.HTTPNotFound(text="404: Not Found\n")


def _read_below(folder: Path, *names: str) -> bytes:
    """The bytes of the regular file folder/names..., opened one name at a time relative to the
    last, never following a link: a link under *folder* (or one swapped in mid-request) cannot
    lead anywhere, inside the tree or out. Anything missing, a link, or not a plain file is a
    404; other errors (permissions, I/O) are the server's and propagate."""
    opened: list[int] = []
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        opened.append(fd)
        for number, name in enumerate(names, start=1):
            last = number == len(names)
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
            # O_NONBLOCK: a FIFO named index.html must not hang the server while it is opened.
            flags |= os.O_NONBLOCK if last else os.O_DIRECTORY
            fd = os.open(name, flags, dir_fd=fd)
            opened.append(fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_found()
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as error:
        if error.errno in _MISSING:
            raise _not_found() from None
        raise
    finally:
        for fd in opened:
            os.close(fd)


def _page(request: web.Request, simple: Path, *names: str) -> web.StreamResponse:
    media = negotiate(request.headers.get("Accept"))
    vary = {"Vary": "Accept"}
    if media is None:
        return web.Response(
            status=406,
            text=f"406: none of {', '.join(_OFFERS)} is acceptable\n",
            headers=vary,
        )
    body = _read_below(simple, *names, "index.json" if media == MEDIA_JSON else "index.html")
    etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    headers = {**vary, "Cache-Control": INDEX_CACHE, "ETag": etag}
    if request.if_none_match and any(tag.value in ("*", etag.strip('"')) for tag in request.if_none_match):
        return web.Response(status=304, headers=headers)
    return web.Response(body=body, headers={**headers, "Content-Type": media})


def _wants_page(accept: str | None) -> bool:
    """Whether the client prefers text/html named as such, as a browser does: pip and uv (PEP
    691 JSON first) and curl (*/*) keep getting the redirect to /simple/."""
    ranges = _ranges(accept or "")
    best = max((quality for _media, quality in ranges), default=0.0)
    return best > 0 and any(media == MEDIA_HTML and quality == best for media, quality in ranges)


def _project(name: str) -> str | None:
    """The normalized project name *name* asks for, or None when it cannot be one."""
    if len(name) > _NAME_MAX:
        return None
    normalized = index.normalize(name)
    return normalized if index.is_project_name(normalized) else None


@web.middleware
async def _no_500_tracebacks(request: web.Request, handler: _Handler) -> StreamResponse:
    """The outermost guard: whatever a handler did not expect is logged here, with its
    traceback, and the client gets a plain 500 that tells it nothing about the server."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception:
        log.exception("error answering %s %s", _escape(request.method), _escape(request.raw_path))
        return web.Response(status=500, text="500: Internal Server Error\n")


def make_app(
    root: Path, *, htpasswd: Htpasswd | None = None, login_limit: LoginLimit | None = None
) -> web.Application:
    """The aiohttp application serving the tree at *root*."""
    root = root.resolve()
    # Resolved once, here: files/ or simple/ may be a link the operator made (wheels on another
    # volume). Below them no link is followed out of its folder.
    simple = (root / index.SIMPLE).resolve()
    files = (root / index.FILES).resolve()
    middlewares: list[Middleware] = [_no_500_tracebacks]
    auth = _Authenticator(htpasswd, login_limit or LoginLimit()) if htpasswd is not None else None
    if auth is not None:

        @web.middleware
        async def require_auth(request: web.Request, handler: _Handler) -> StreamResponse:
            credentials = _credentials(request.headers.get("Authorization"))
            if credentials is not None:
                request[_USER] = credentials[0]
                status, retry = await auth.check(request.remote or "-", *credentials)
                if status == 200:
                    return await handler(request)
                if status == 429:
                    return web.Response(
                        status=429,
                        text="429: Too Many Failed Logins\n",
                        headers={"Retry-After": str(retry)},
                    )
            return web.Response(
                status=401,
                text="401: Unauthorized\n",
                headers={"WWW-Authenticate": f'Basic realm="{REALM}"'},
            )

        middlewares.append(require_auth)

    def redirect(request: web.Request, path: str) -> web.HTTPMovedPermanently:
        # A relative Location: the Host header a client sent is never echoed back.
        query = request.query_string
        return web.HTTPMovedPermanently(path + (f"?{query}" if query else ""))

    async def home(request: web.Request) -> StreamResponse:
        vary = {"Vary": "Accept"}  # the answer depends on it: a cache must not mix them up
        if not _wants_page(request.headers.get("Accept")):
            raise web.HTTPFound("/simple/", headers=vary)
        try:
            body = _read_below(root, index_page.PAGE)
        except web.HTTPNotFound:
            raise web.HTTPFound("/simple/", headers=vary) from None  # a tree from before the page
        etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
        headers = {
            **vary,
            "Cache-Control": INDEX_CACHE,
            "ETag": etag,
            "Content-Security-Policy": index_page.CSP,
        }
        if request.if_none_match and any(
            tag.value in ("*", etag.strip('"')) for tag in request.if_none_match
        ):
            return web.Response(status=304, headers=headers)
        return web.Response(body=body, headers={**headers, "Content-Type": "text/html; charset=utf-8"})

    async def simple_bare(request: web.Request) -> StreamResponse:
        raise redirect(request, "/simple/")

    async def root_page(request: web.Request) -> StreamResponse:
        return _page(request, simple)

    async def project_bare(request: web.Request) -> StreamResponse:
        normalized = _project(request.match_info["project"])
        if normalized is None:
            raise _not_found()
        raise redirect(request, f"/simple/{normalized}/")

    async def project_page(request: web.Request) -> StreamResponse:
        project = request.match_info["project"]
        normalized = _project(project)
        if normalized is None:
            raise _not_found()
        if project != normalized:
            raise redirect(request, f"/simple/{normalized}/")
        return _page(request, simple, normalized)

    async def file(request: web.Request) -> StreamResponse:
        name = request.match_info["name"]
        if len(name) > _NAME_MAX or not _FILE_NAME.match(name):
            raise _not_found()
        try:
            # A link inside files/ may point at a file beside it, never out of the folder.
            path = (files / name).resolve(strict=True)
            inside = path.parent == files and path.is_file()
        except (OSError, RuntimeError):
            inside = False
        if not inside:
            raise _not_found()
        kind = (
            "text/plain; charset=utf-8"
            if name.endswith((index.METADATA_SUFFIX, index.INPUTS_SUFFIX))
            else "application/octet-stream"
        )
        return web.FileResponse(path, headers={"Cache-Control": FILE_CACHE, "Content-Type": kind})

    async def coverage(request: web.Request) -> StreamResponse:
        page = root / COVERAGE_PAGE
        if page.is_symlink() or not page.is_file():
            raise _not_found()
        return web.FileResponse(page, headers={"Cache-Control": INDEX_CACHE, "Content-Type": "text/html"})

    app = web.Application(middlewares=middlewares)
    if auth is not None:
        app.on_cleanup.append(auth.close)
    app.router.add_get("/", home)
    app.router.add_get("/simple", simple_bare)
    app.router.add_get("/simple/", root_page)
    app.router.add_get("/simple/{project}", project_bare)
    app.router.add_get("/simple/{project}/", project_page)
    app.router.add_get("/files/{name}", file)
    app.router.add_get(f"/{COVERAGE_PAGE}", coverage)
    return app


# ---------------------------------------------------------------------------------------------
# Access log and the server's life


def _body_bytes(request: BaseRequest, response: StreamResponse) -> int:
    """Body bytes sent. A file goes out by sendfile(), which aiohttp does not count: its body is
    the Content-Length it announced (sendfile raises if it cannot send it all). Other responses
    are counted with their status line and headers, so take off those, serialized as aiohttp does
    (status line, "k: v" lines, blank line)."""
    if isinstance(response, web.FileResponse):
        if request.method == "HEAD" or response.status not in (200, 206):
            return 0
        return response.content_length or 0
    sent = response.body_length
    if not sent:
        return 0
    version = request.version
    head = len(f"HTTP/{version.major}.{version.minor} {response.status} {response.reason}\r\n".encode())
    head += sum(len(f"{key}: {value}\r\n".encode()) for key, value in response.headers.items()) + 2
    return max(sent - head, 0)


# Bytes kept as they are in a log field: printable ASCII but the quote and the backslash.
_KEPT = frozenset(range(0x21, 0x7F)) - {ord('"'), ord("\\")}
_KEPT_QUOTED = _KEPT | {ord(" ")}


def _escape(value: str, *, quoted: bool = False) -> str:
    """*value* fit for one field of one log line: printable ASCII stays; anything else (quote,
    backslash, control characters, newlines, non-ASCII, and a space outside quotes) becomes
    ``\\xHH`` of its UTF-8 bytes, as nginx escapes, so a client can neither end a field nor
    start a line."""
    try:
        data = value.encode("utf-8", "surrogateescape")  # bytes aiohttp could not decode, as sent
    except UnicodeEncodeError:
        data = value.encode("utf-8", "surrogatepass")
    kept = _KEPT_QUOTED if quoted else _KEPT
    return "".join(chr(byte) if byte in kept else f"\\x{byte:02x}" for byte in data)


class _AccessLog(AbstractAccessLogger):
    """One line per request: client, user (- for none), method, path as sent, status, body bytes
    sent, time, and the Range asked for and the user agent, if any. Every value a client chose is
    escaped (:func:`_escape`)."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        asked = request.headers.get("Range")
        agent = request.headers.get("User-Agent")
        self.logger.info(
            "%s %s %s %s %s %s %.1fms%s%s",
            _escape(request.remote or "-"),
            _escape(request.get(_USER) or "-"),
            _escape(request.method),
            _escape(request.raw_path),
            response.status,
            _body_bytes(request, response),
            time * 1000,
            f' range="{_escape(asked, quoted=True)}"' if asked is not None else "",
            f' agent="{_escape(agent, quoted=True)}"' if agent is not None else "",
        )


_loggers = itertools.count()


def _access_logger(access_log: Path | None, echo: bool) -> tuple[logging.Logger, list[logging.Handler]]:
    """A logger of its own for one server (a child of ``wheelbuild.serve.access``), so two servers
    in one process never write into each other's files."""
    logger = logging.getLogger(f"{ACCESS_LOGGER}.{next(_loggers)}")
    logger.setLevel(logging.INFO)
    handlers: list[logging.Handler] = []
    if access_log is not None:
        access_log.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(access_log, encoding="utf-8")
        to_file.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        handlers.append(to_file)
    if echo:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        logger.addHandler(handler)
    return logger, handlers


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/simple/"


async def _run(
    app: web.Application,
    host: str,
    port: int,
    logger: logging.Logger,
    ready: Callable[[str], None],
    stop: threading.Event | None,
) -> None:
    runner = web.AppRunner(app, access_log_class=_AccessLog, access_log=logger)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as error:
            raise ServeFailed(
                f"cannot listen on {host}:{port}: {error.strerror or error}",
                "choose another --port (0 picks a free one) or stop what listens there",
            ) from None
        bound = runner.addresses[0][1]
        ready(_url(host, bound))
        if stop is None:
            await asyncio.Event().wait()  # until Ctrl-C / SIGTERM
        else:
            while not stop.is_set():
                await asyncio.sleep(0.05)
    finally:
        await runner.cleanup()


def _print_ready(root: Path) -> Callable[[str], None]:
    def ready(url: str) -> None:
        print(f"serving {root} at {url}  (pip install --index-url {url} ...)", flush=True)

    return ready


def serve(
    root: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    htpasswd: Path | None = None,
    access_log: Path | None = None,
    echo_log: bool = False,
    ready: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
    login_limit: LoginLimit | None = None,
) -> None:
    """Serve the tree at *root* until interrupted (or until *stop* is set).

    *ready* is called with the index URL (``http://host:port/simple/``) once the socket listens;
    by default that URL is printed. Port 0 picks a free port. *login_limit* bounds failed logins
    per client address (default :class:`LoginLimit`). Raises NoIndex when *root* has no generated
    index, BadHtpasswd for an htpasswd file it cannot verify, ServeFailed when it cannot listen.
    Ctrl-C (or SIGTERM turned into KeyboardInterrupt) ends it normally."""
    if not (root / index.SIMPLE / "index.html").is_file():
        raise NoIndex(
            f"{root} has no index ({root / index.SIMPLE / 'index.html'} is missing)",
            "publish wheels into it first (wheelbuild publish), or point at a variant's tree (wheelhouse/cu130)",
        )
    users = Htpasswd.load(htpasswd) if htpasswd is not None else None
    logger, handlers = _access_logger(access_log, echo_log)
    app = make_app(root, htpasswd=users, login_limit=login_limit)
    try:
        asyncio.run(_run(app, host, port, logger, ready or _print_ready(root), stop))
    except KeyboardInterrupt:
        pass
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
