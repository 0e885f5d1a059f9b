"""`wheelbuild serve [DIR]`: a wheelhouse tree over HTTP, as pip and uv expect a private index.

    /simple/                 project list      } PEP 691 negotiation on Accept: v1 JSON, v1 HTML,
    /simple/<project>/       one project       } text/html (the default); 406 when none fits
    /files/<wheel>           the wheel         } Range, ETag, If-None-Match, Last-Modified by
    /files/<wheel>.metadata  its METADATA      } aiohttp's FileResponse; cached as immutable

Only pages under ``simple/`` and ``*.whl`` / ``*.whl.metadata`` under ``files/`` are served; every
other path is a 404, and a non-normalized project name is a 301 to the normalized one. With an
htpasswd file (bcrypt ``$2y$``/``$2b$``/``$2a$`` or ``{SHA}``) every request needs basic auth.
One access-log line per request (method, path, status, body bytes sent, Range asked) goes to the
``wheelbuild.serve.access`` logger and, if asked, to a file.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import hmac
import itertools
import logging
import re
import secrets
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import bcrypt
from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from builder import index
from builder.errors import BadHtpasswd, NoIndex, ServeFailed

__all__ = [
    "MEDIA_HTML",
    "MEDIA_HTML_V1",
    "MEDIA_JSON",
    "Htpasswd",
    "make_app",
    "negotiate",
    "serve",
]

MEDIA_JSON = "application/vnd.pypi.simple.v1+json"
MEDIA_HTML_V1 = "application/vnd.pypi.simple.v1+html"
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
_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+!-]*\.whl(\.metadata)?$")
_BCRYPT = ("$2y$", "$2b$", "$2a$")
_SHA = "{SHA}"

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
    """Users and password hashes of an htpasswd file; only formats we can verify are accepted."""

    users: Mapping[str, str]

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
        """Constant-time check. An unknown user costs what a known one does."""
        hashed = self.users.get(user)
        if hashed is None:
            if any(h.startswith(_BCRYPT) for h in self.users.values()):
                bcrypt.checkpw(password.encode(), _dummy_bcrypt())
            else:
                hmac.compare_digest(hashlib.sha1(password.encode()).digest(), bytes(20))
            return False
        if hashed.startswith(_SHA):
            digest = base64.b64encode(hashlib.sha1(password.encode()).digest()).decode()
            return hmac.compare_digest(digest, hashed[len(_SHA) :])
        return bcrypt.checkpw(password.encode(), hashed.encode())


@functools.cache
def _dummy_bcrypt() -> bytes:
    """A bcrypt hash no password matches in practice: an unknown user is checked against it."""
    return bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(rounds=10))


class _Authenticator:
    """Checks Authorization headers; remembers the digests of credentials that passed, so bcrypt
    runs once per user and password, not once per request."""

    def __init__(self, htpasswd: Htpasswd) -> None:
        self.htpasswd = htpasswd
        self.passed: set[bytes] = set()

    async def allowed(self, header: str | None) -> bool:
        if not header or not header.lower().startswith("basic "):
            return False
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, sep, password = decoded.partition(":")
        if not sep:
            return False
        key = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        if key in self.passed:
            return True
        if await asyncio.to_thread(self.htpasswd.verify, user, password):
            self.passed.add(key)
            return True
        return False


# ---------------------------------------------------------------------------------------------
# The application


_Handler = Callable[[web.Request], Awaitable[StreamResponse]]


def _not_found() -> web.HTTPNotFound:
    return web.HTTPNotFound(text="404: Not Found\n")


def _page(request: web.Request, folder: Path) -> web.StreamResponse:
    media = negotiate(request.headers.get("Accept"))
    vary = {"Vary": "Accept"}
    if media is None:
        return web.Response(
            status=406,
            text=f"406: none of {', '.join(_OFFERS)} is acceptable\n",
            headers=vary,
        )
    page = folder / ("index.json" if media == MEDIA_JSON else "index.html")
    try:
        body = page.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise _not_found() from None
    etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    headers = {**vary, "Cache-Control": INDEX_CACHE, "ETag": etag}
    if request.if_none_match and any(tag.value in ("*", etag.strip('"')) for tag in request.if_none_match):
        return web.Response(status=304, headers=headers)
    return web.Response(body=body, headers={**headers, "Content-Type": media})


def make_app(root: Path, *, htpasswd: Htpasswd | None = None) -> web.Application:
    """The aiohttp application serving the tree at *root*."""
    root = root.resolve()
    simple = root / index.SIMPLE
    files = root / index.FILES
    middlewares = []
    if htpasswd is not None:
        auth = _Authenticator(htpasswd)

        @web.middleware
        async def require_auth(request: web.Request, handler: _Handler) -> StreamResponse:
            if await auth.allowed(request.headers.get("Authorization")):
                return await handler(request)
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
        raise web.HTTPFound("/simple/")

    async def simple_bare(request: web.Request) -> StreamResponse:
        raise redirect(request, "/simple/")

    async def root_page(request: web.Request) -> StreamResponse:
        return _page(request, simple)

    async def project_bare(request: web.Request) -> StreamResponse:
        normalized = index.normalize(request.match_info["project"])
        if not index.is_project_name(normalized):
            raise _not_found()
        raise redirect(request, f"/simple/{normalized}/")

    async def project_page(request: web.Request) -> StreamResponse:
        project = request.match_info["project"]
        normalized = index.normalize(project)
        if not index.is_project_name(normalized):
            raise _not_found()
        if project != normalized:
            raise redirect(request, f"/simple/{normalized}/")
        return _page(request, simple / normalized)

    async def file(request: web.Request) -> StreamResponse:
        name = request.match_info["name"]
        if not _FILE_NAME.match(name):
            raise _not_found()
        path = files / name
        try:
            inside = path.resolve(strict=True).parent == files and path.is_file()
        except (OSError, RuntimeError):
            inside = False
        if not inside:
            raise _not_found()
        kind = (
            "text/plain; charset=utf-8"
            if name.endswith(index.METADATA_SUFFIX)
            else "application/octet-stream"
        )
        return web.FileResponse(path, headers={"Cache-Control": FILE_CACHE, "Content-Type": kind})

    app = web.Application(middlewares=middlewares)
    app.router.add_get("/", home)
    app.router.add_get("/simple", simple_bare)
    app.router.add_get("/simple/", root_page)
    app.router.add_get("/simple/{project}", project_bare)
    app.router.add_get("/simple/{project}/", project_page)
    app.router.add_get("/files/{name}", file)
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


class _AccessLog(AbstractAccessLogger):
    """One line per request: client, method, path as sent, status, body bytes sent, time, and the
    Range asked for, if any."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        asked = request.headers.get("Range")
        self.logger.info(
            "%s %s %s %s %s %.1fms%s",
            request.remote or "-",
            request.method,
            request.raw_path,
            response.status,
            _body_bytes(request, response),
            time * 1000,
            f' range="{asked}"' if asked else "",
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
) -> None:
    """Serve the tree at *root* until interrupted (or until *stop* is set).

    *ready* is called with the index URL (``http://host:port/simple/``) once the socket listens;
    by default that URL is printed. Port 0 picks a free port. Raises NoIndex when *root* has no
    generated index, BadHtpasswd for an htpasswd file it cannot verify, ServeFailed when it cannot
    listen. Ctrl-C (or SIGTERM turned into KeyboardInterrupt) ends it normally."""
    if not (root / index.SIMPLE / "index.html").is_file():
        raise NoIndex(
            f"{root} has no index ({root / index.SIMPLE / 'index.html'} is missing)",
            "publish wheels into it first (wheelbuild publish), or point at a variant's tree (wheelhouse/cu130)",
        )
    users = Htpasswd.load(htpasswd) if htpasswd is not None else None
    if users is not None and any(h.startswith(_BCRYPT) for h in users.users.values()):
        _dummy_bcrypt()  # pay for the unknown-user hash now, not on the first request
    logger, handlers = _access_logger(access_log, echo_log)
    app = make_app(root, htpasswd=users)
    try:
        asyncio.run(_run(app, host, port, logger, ready or _print_ready(root), stop))
    except KeyboardInterrupt:
        pass
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
