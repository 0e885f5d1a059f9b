"""`wheelbuild serve [DIR]`: a wheelhouse tree over HTTP, as pip and uv expect a private index.

    /simple/                 project list      } PEP 691 negotiation on Accept: v1 JSON, v1 HTML,
    /simple/<project>/       one project       } text/html (the default); 406 when none fits
    /files/<wheel>           the wheel         } Range, ETag, If-None-Match, Last-Modified by
    /files/<wheel>.metadata  its METADATA      } aiohttp's FileResponse; cached as immutable
    /files/<wheel>.inputs    the inputs key of the build that made it (`wheelbuild nightly schedule`)
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
import logging
import os
import stat
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Middleware
from aiohttp.web_response import StreamResponse

from ..errors import NoIndex, ServeFailed
from . import index_page, tree
from .project_pages import MEDIA_HTML_V1, MEDIA_JSON
from .routes import ROUTE, route_install_lines
from .serve_auth import Htpasswd, LoginLimit, auth_middleware
from .serve_connections import (
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_SEND_TIMEOUT,
    MAX_BACKLOG,
    Connection,
    Connections,
    PacedFile,
    ServeLimits,
    loop_error,
    request_started,
)
from .serve_log import ACCESS_LOGGER, AccessLog, access_logger, escape
from .wheel_names import NAME_MAX, is_served_name

__all__ = [
    "ACCESS_LOGGER",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_SEND_TIMEOUT",
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
    if len(name) > NAME_MAX:
        return None
    normalized = tree.normalize(name)
    return normalized if tree.is_project_name(normalized) else None


@web.middleware
async def _no_500_tracebacks(request: web.Request, handler: _Handler) -> StreamResponse:
    """The outermost guard: whatever a handler did not expect is logged here, with its
    traceback, and the client gets a plain 500 that tells it nothing about the server."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception:
        log.exception("error answering %s %s", escape(request.method), escape(request.raw_path))
        return web.Response(status=500, text="500: Internal Server Error\n")


@dataclass(frozen=True)
class _Tree:
    """The routes' handlers over one tree. Its folders are resolved once, when the app is made:
    files/ or simple/ may be a link the operator made (wheels on another volume). Below them no
    link is followed out of its folder."""

    root: Path
    simple: Path
    files: Path
    send_timeout: float = DEFAULT_SEND_TIMEOUT

    @classmethod
    def at(cls, root: Path, send_timeout: float = DEFAULT_SEND_TIMEOUT) -> _Tree:
        root = root.resolve()
        return cls(root, (root / tree.SIMPLE).resolve(), (root / tree.FILES).resolve(), send_timeout)

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

    async def route_bare(self, request: web.Request) -> StreamResponse:
        raise _redirect(request, f"/{request.match_info['route']}/simple/")

    async def route_root_page(self, request: web.Request) -> StreamResponse:
        # Read below the tree's root, one name at a time: a route folder that is a link is a 404.
        return _page(request, self.root, request.match_info["route"], tree.SIMPLE)

    async def route_project_bare(self, request: web.Request) -> StreamResponse:
        route, project = request.match_info["route"], request.match_info["project"]
        normalized = _project(project)
        if normalized is None:
            raise _not_found()
        raise _redirect(request, f"/{route}/simple/{normalized}/")

    async def route_project_page(self, request: web.Request) -> StreamResponse:
        route, project = request.match_info["route"], request.match_info["project"]
        normalized = _project(project)
        if normalized is None:
            raise _not_found()
        if project != normalized:
            raise _redirect(request, f"/{route}/simple/{normalized}/")
        return _page(request, self.root, route, tree.SIMPLE, normalized)

    async def file(self, request: web.Request) -> StreamResponse:
        name = request.match_info["name"]
        if not is_served_name(name):
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
            if name.endswith((tree.METADATA_SUFFIX, tree.INPUTS_SUFFIX))
            else "application/json"  # a provenance statement (a DSSE envelope) or its Sigstore bundle
            if name.endswith((tree.ENVELOPE_SUFFIX, tree.SIGSTORE_SUFFIX))
            else "application/octet-stream"
        )
        # Sent paced: a client that stops reading loses the connection, not the other clients.
        return PacedFile(
            path, send_timeout=self.send_timeout, headers={"Cache-Control": FILE_CACHE, "Content-Type": kind}
        )

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
    root: Path,
    *,
    htpasswd: Htpasswd | None = None,
    login_limit: LoginLimit | None = None,
    send_timeout: float = DEFAULT_SEND_TIMEOUT,
) -> web.Application:
    """The aiohttp application serving the tree at *root*."""
    tree = _Tree.at(root, send_timeout)
    middlewares: list[Middleware] = [request_started, _no_500_tracebacks]
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
    route = "/{route:" + ROUTE.pattern.strip("^$") + "}"
    app.router.add_get(route, tree.route_bare)
    app.router.add_get(route + "/simple", tree.route_bare)
    app.router.add_get(route + "/simple/", tree.route_root_page)
    app.router.add_get(route + "/simple/{project}", tree.route_project_bare)
    app.router.add_get(route + "/simple/{project}/", tree.route_project_page)
    app.router.add_get("/files/{name}", tree.file)
    app.router.add_get(f"/{COVERAGE_PAGE}", tree.coverage)
    return app


# ---------------------------------------------------------------------------------------------
# The server's life


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
    runner = web.AppRunner(app, access_log_class=AccessLog, access_log=logger)
    await runner.setup()
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(loop_error)
    connections = Connections(limits, loop)
    manager = runner.server
    assert manager is not None  # set up above

    def connection() -> Connection:
        return Connection(
            manager,
            connections,
            loop=loop,
            access_log_class=AccessLog,
            access_log=logger,
        )

    listening: asyncio.Server | None = None
    try:
        try:
            listening = await loop.create_server(
                connection, host, port, reuse_address=True, backlog=limits.backlog or MAX_BACKLOG
            )
            for sock in listening.sockets:
                # asyncio listens with the number it accepts in one go; the kernel may queue more
                # (they hold none of our descriptors), so that no connection waits for a SYN retry.
                with sock.dup() as same:
                    same.listen(MAX_BACKLOG)
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


def served_routes(root: Path) -> tuple[str, ...]:
    """The per-torch routes the tree at *root* has (cu130-torch2.14, ...), by name."""
    try:
        with os.scandir(root) as entries:
            return tuple(
                sorted(
                    e.name
                    for e in entries
                    if ROUTE.match(e.name) and (Path(e.path) / tree.SIMPLE / "index.html").is_file()
                )
            )
    except OSError:
        return ()


def _print_ready(root: Path) -> Callable[[str], None]:
    def ready(url: str) -> None:
        print(f"serving {root} at {url}  (pip install --index-url {url} ...)", flush=True)
        base = url.removesuffix(f"{tree.SIMPLE}/")
        for route in served_routes(root):
            # A route lists only what loads with that torch: no label needed, torch never changed.
            print(f"  {route}: {route_install_lines(f'{base}{route}/simple/', 'NAME')[1]}", flush=True)

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
    if not (root / tree.SIMPLE / "index.html").is_file():
        raise NoIndex(
            f"{root} has no index ({root / tree.SIMPLE / 'index.html'} is missing)",
            "publish wheels into it first (wheelbuild publish), or point at a variant's tree (wheelhouse/cu130)",
        )
    limits = (limits or ServeLimits()).fitted()
    users = Htpasswd.load(htpasswd) if htpasswd is not None else None
    logger, handlers = access_logger(access_log, echo_log)
    app = make_app(root, htpasswd=users, login_limit=login_limit, send_timeout=limits.send_timeout)
    try:
        asyncio.run(_run(app, (host, port), limits, logger, ready or _print_ready(root), stop))
    except KeyboardInterrupt:
        pass
    finally:
        for handler in handlers:
            logger.removeHandler(handler)
            handler.close()
