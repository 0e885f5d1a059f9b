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
with a plain 500, and a malformed request gets aiohttp's 400 and one log line. A request's head
must come within a header timeout, an idle connection is closed after an idle timeout, and the
open connections are capped below what the open-file limit holds (:class:`ServeLimits`).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import itertools
import logging
import os
import resource
import stat
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Middleware
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from ..errors import BadArgument, NoIndex, ServeFailed
from . import index, index_page
from .index import MEDIA_HTML_V1, MEDIA_JSON
from .serve_auth import USER, Htpasswd, LoginLimit, auth_middleware

__all__ = [
    "MEDIA_HTML",
    "MEDIA_HTML_V1",
    "MEDIA_JSON",
    "Htpasswd",
    "LoginLimit",
    "ServeLimits",
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
ACCESS_LOGGER = "wheelbuild.serve.access"
COVERAGE_PAGE = "coverage.html"  # written by `wheelbuild nightly publish-night`

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
# The application


_Handler = Callable[[web.Request], Awaitable[StreamResponse]]
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
    if len(name) > index.NAME_MAX:
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


@dataclass(frozen=True)
class _Tree:
    """The routes' handlers over one tree. Its folders are resolved once, when the app is made:
    files/ or simple/ may be a link the operator made (wheels on another volume). Below them no
    link is followed out of its folder."""

    root: Path
    simple: Path
    files: Path

    @classmethod
    def at(cls, root: Path) -> _Tree:
        root = root.resolve()
        return cls(root, (root / index.SIMPLE).resolve(), (root / index.FILES).resolve())

    async def home(self, request: web.Request) -> StreamResponse:
        vary = {"Vary": "Accept"}  # the answer depends on it: a cache must not mix them up
        if not _wants_page(request.headers.get("Accept")):
            raise web.HTTPFound("/simple/", headers=vary)
        try:
            body = _read_below(self.root, index_page.PAGE)
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

    async def simple_bare(self, request: web.Request) -> StreamResponse:
        raise _redirect(request, "/simple/")

    async def root_page(self, request: web.Request) -> StreamResponse:
        return _page(request, self.simple)

    async def project_bare(self, request: web.Request) -> StreamResponse:
        normalized = _project(request.match_info["project"])
        if normalized is None:
            raise _not_found()
        raise _redirect(request, f"/simple/{normalized}/")

    async def project_page(self, request: web.Request) -> StreamResponse:
        project = request.match_info["project"]
        normalized = _project(project)
        if normalized is None:
            raise _not_found()
        if project != normalized:
            raise _redirect(request, f"/simple/{normalized}/")
        return _page(request, self.simple, normalized)

    async def file(self, request: web.Request) -> StreamResponse:
        name = request.match_info["name"]
        if not index.is_served_name(name):
            raise _not_found()
        try:
            # A link inside files/ may point at a file beside it, never out of the folder.
            path = (self.files / name).resolve(strict=True)
            inside = path.parent == self.files and path.is_file()
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

    async def coverage(self, request: web.Request) -> StreamResponse:
        page = self.root / COVERAGE_PAGE
        if page.is_symlink() or not page.is_file():
            raise _not_found()
        return web.FileResponse(page, headers={"Cache-Control": INDEX_CACHE, "Content-Type": "text/html"})


def _redirect(request: web.Request, path: str) -> web.HTTPMovedPermanently:
    # A relative Location: the Host header a client sent is never echoed back.
    query = request.query_string
    return web.HTTPMovedPermanently(path + (f"?{query}" if query else ""))


def make_app(
    root: Path, *, htpasswd: Htpasswd | None = None, login_limit: LoginLimit | None = None
) -> web.Application:
    """The aiohttp application serving the tree at *root*."""
    tree = _Tree.at(root)
    middlewares: list[Middleware] = [_request_started, _no_500_tracebacks]
    auth = None
    if htpasswd is not None:
        require_auth, auth = auth_middleware(htpasswd, login_limit or LoginLimit())
        middlewares.append(require_auth)
    app = web.Application(middlewares=middlewares)
    if auth is not None:
        app.on_cleanup.append(auth.close)
    app.router.add_get("/", tree.home)
    app.router.add_get("/simple", tree.simple_bare)
    app.router.add_get("/simple/", tree.root_page)
    app.router.add_get("/simple/{project}", tree.project_bare)
    app.router.add_get("/simple/{project}/", tree.project_page)
    app.router.add_get("/files/{name}", tree.file)
    app.router.add_get(f"/{COVERAGE_PAGE}", tree.coverage)
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
            _escape(request.get(USER) or "-"),
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


# ---------------------------------------------------------------------------------------------
# Connections: header and idle timeouts, and a cap the open-file limit can hold

DEFAULT_HEADER_TIMEOUT = 15.0
DEFAULT_IDLE_TIMEOUT = 30.0
DEFAULT_MAX_CONNECTIONS = 256
# Descriptors kept free of connections: the logs, the event loop's, a page or file being opened.
_RESERVED_FDS = 32
_MAX_BACKLOG = 128
_BUSY_TEXT = b"503: every connection is busy; try again\n"
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    b"Content-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_TEXT), _BUSY_TEXT)
)


@dataclass(frozen=True)
class ServeLimits:
    """How long a connection may take and how many there may be.

    *header_timeout*: a request's head must arrive within it, counted from the connection's
    opening (the first request) or from the head's first byte (the next ones).
    *idle_timeout*: a connection waiting for its next request is closed after it.
    *max_connections*: open connections at most (None: DEFAULT_MAX_CONNECTIONS, or fewer if the
    open-file limit holds fewer). When a new one would pass it, the one that has waited longest
    for a request is closed; when every one is answering a request, the new one gets a 503.
    *backlog*: connections the event loop accepts in one go, before the cap above sees them
    (None: from the open-file limit); the kernel queues up to _MAX_BACKLOG."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_connections: int | None = None
    backlog: int | None = None

    def fitted(self) -> ServeLimits:
        """These limits with the cap and the backlog decided, against this process's open-file
        limit: a connection holds its socket and, while it sends one, a file; and up to a few
        backlogs of sockets are accepted (or closing) before the cap has counted them.
        BadArgument for a cap the limit cannot hold, ServeFailed when it holds none at all."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            in_use = len(os.listdir("/proc/self/fd"))
        except OSError:
            in_use = _RESERVED_FDS
        free = 1 << 20 if soft == resource.RLIM_INFINITY else soft - in_use - _RESERVED_FDS
        backlog = self.backlog or min(max(free // 8, 1), _MAX_BACKLOG)
        room = (free - 4 * backlog) // 2
        if room < 1:
            raise ServeFailed(
                f"the open-file limit ({soft}) leaves no room for connections",
                "raise it (ulimit -n 1024) and start the server again",
            )
        if self.max_connections is not None and self.max_connections > room:
            raise BadArgument(
                f"--max-connections {self.max_connections} is more than the open-file limit holds "
                f"(ulimit -n {soft}: at most {room})",
                f"give --max-connections {room} or fewer, or raise the limit (ulimit -n)",
            )
        return replace(
            self, max_connections=self.max_connections or min(DEFAULT_MAX_CONNECTIONS, room), backlog=backlog
        )


class _Connection(RequestHandler):
    """aiohttp's connection, telling :class:`_Connections` when it opens, when a request's head
    begins and when its answer went out, and logging a malformed request in one line."""

    def __init__(self, manager: web.Server, connections: _Connections, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.connections = connections
        self.waiting_since: float | None = None  # None: answering a request
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.connections.opened(self, transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.connections.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.connections.receiving(self)
        super().data_received(data)

    def log_access(self, request: BaseRequest, response: StreamResponse, time: float | None) -> None:
        super().log_access(request, response, time)
        self.connections.waiting(self, self.connections.limits.idle_timeout)  # answered: idle now

    def log_exception(self, *args: Any, **kw: Any) -> None:
        error = kw.get("exc_info")
        if not isinstance(error, HttpProcessingError):
            super().log_exception(*args, **kw)  # the server's own fault: its traceback helps
            return
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        said = " ".join(str(error).split())[:300]
        log.warning(
            "malformed request from %s: %s",
            _escape(str(peer[0]) if peer else "-"),
            _escape(said, quoted=True),
        )


class _Connections:
    """Every open connection of one server, each either answering a request or waiting for
    one, with the deadline by which its next request's head must have come."""

    def __init__(self, limits: ServeLimits, loop: asyncio.AbstractEventLoop) -> None:
        assert limits.max_connections is not None  # ServeLimits.fitted() decided it
        self.limits = limits
        self.cap = limits.max_connections
        self.loop = loop
        self.open: set[_Connection] = set()

    def opened(self, connection: _Connection, transport: asyncio.BaseTransport) -> None:
        self.open.add(connection)
        self.waiting(connection, self.limits.header_timeout)
        if len(self.open) <= self.cap:
            return
        waiting = [c for c in self.open if c is not connection and c.waiting_since is not None]
        if waiting:  # the one that has waited longest makes room: it asked for nothing
            longest = min(waiting, key=lambda c: c.waiting_since or 0.0)
            self.closed(longest)  # now, not when its close is done: the next one counts without it
            longest.force_close()
            return
        peer = transport.get_extra_info("peername")
        log.warning(
            "refused a connection from %s: all %d are answering requests (--max-connections)",
            _escape(str(peer[0]) if peer else "-"),
            self.cap,
        )
        if isinstance(transport, asyncio.WriteTransport):
            transport.write(_BUSY)
        self.closed(connection)
        connection.force_close()

    def waiting(self, connection: _Connection, seconds: float) -> None:
        """It waits for a request from now on, for *seconds* at most."""
        connection.waiting_since = self.loop.time()
        self._expire_at(connection, connection.waiting_since + seconds)

    def receiving(self, connection: _Connection) -> None:
        """Bytes came: if it was waiting, a request's head began, and has header_timeout to end."""
        if connection.waiting_since is not None:
            self._expire_at(
                connection, min(connection.deadline, self.loop.time() + self.limits.header_timeout)
            )

    def started(self, connection: _Connection) -> None:
        """A request's head came whole: it is answered, however long that takes."""
        connection.waiting_since = None
        if connection.timer is not None:
            connection.timer.cancel()
            connection.timer = None

    def closed(self, connection: _Connection) -> None:
        self.started(connection)
        self.open.discard(connection)

    def _expire_at(self, connection: _Connection, deadline: float) -> None:
        if connection.timer is not None:
            connection.timer.cancel()
        connection.deadline = deadline
        connection.timer = self.loop.call_at(deadline, self._expired, connection)

    def _expired(self, connection: _Connection) -> None:
        connection.timer = None
        if connection.waiting_since is not None:
            connection.force_close()


@web.middleware
async def _request_started(request: web.Request, handler: _Handler) -> StreamResponse:
    if isinstance(request.protocol, _Connection):
        request.protocol.connections.started(request.protocol)
    return await handler(request)


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The event loop's own errors: one for a system call (accept() out of file descriptors, a
    socket reset) is a line, not a traceback; anything else as asyncio reports it."""
    error = context.get("exception")
    if isinstance(error, OSError):
        log.error("%s: %s", context.get("message", "error"), error.strerror or error)
        return
    loop.default_exception_handler(context)


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/simple/"


async def _run(
    app: web.Application,
    where: tuple[str, int],
    limits: ServeLimits,
    logger: logging.Logger,
    ready: Callable[[str], None],
    stop: threading.Event | None,
) -> None:
    host, port = where
    runner = web.AppRunner(app, access_log_class=_AccessLog, access_log=logger)
    await runner.setup()
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_loop_error)
    connections = _Connections(limits, loop)
    manager = runner.server
    assert manager is not None  # set up above

    def connection() -> _Connection:
        return _Connection(
            manager,
            connections,
            loop=loop,
            keepalive_timeout=limits.idle_timeout,
            access_log_class=_AccessLog,
            access_log=logger,
        )

    listening: asyncio.Server | None = None
    try:
        try:
            listening = await loop.create_server(
                connection, host, port, reuse_address=True, backlog=limits.backlog or _MAX_BACKLOG
            )
            for sock in listening.sockets:
                # asyncio listens with the number it accepts in one go; the kernel may queue more
                # (they hold none of our descriptors), so that no connection waits for a SYN retry.
                with sock.dup() as same:
                    same.listen(_MAX_BACKLOG)
        except OSError as error:
            raise ServeFailed(
                f"cannot listen on {host}:{port}: {error.strerror or error}",
                "choose another --port (0 picks a free one) or stop what listens there",
            ) from None
        ready(_url(host, listening.sockets[0].getsockname()[1]))
        if stop is None:
            await asyncio.Event().wait()  # until Ctrl-C / SIGTERM
        else:
            while not stop.is_set():
                await asyncio.sleep(0.05)
    finally:
        if listening is not None:
            listening.close()
        await runner.cleanup()  # closes every connection still open


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
    limits: ServeLimits | None = None,
) -> None:
    """Serve the tree at *root* until interrupted (or until *stop* is set).

    *ready* is called with the index URL (``http://host:port/simple/``) once the socket listens;
    by default that URL is printed. Port 0 picks a free port. *login_limit* bounds failed logins
    per client address (default :class:`LoginLimit`); *limits* the connections (timeouts and a
    cap, default :class:`ServeLimits`). Raises NoIndex when *root* has no generated index,
    BadHtpasswd for an htpasswd file it cannot verify, BadArgument for a connection cap the
    open-file limit cannot hold, ServeFailed when it cannot listen. Ctrl-C (or SIGTERM turned
    into KeyboardInterrupt) ends it normally."""
    if not (root / index.SIMPLE / "index.html").is_file():
        raise NoIndex(
            f"{root} has no index ({root / index.SIMPLE / 'index.html'} is missing)",
            "publish wheels into it first (wheelbuild publish), or point at a variant's tree (wheelhouse/cu130)",
        )
    limits = (limits or ServeLimits()).fitted()
    users = Htpasswd.load(htpasswd) if htpasswd is not None else None
    logger, handlers = _access_logger(access_log, echo_log)
    app = make_app(root, htpasswd=users, login_limit=login_limit)
    try:
        asyncio.run(_run(app, (host, port), limits, logger, ready or _print_ready(root), stop))
    except KeyboardInterrupt:
        pass
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
