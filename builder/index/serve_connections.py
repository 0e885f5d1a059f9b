"""The connections of `wheelbuild serve`: a header, an idle and a send timeout, a cap below what
the open-file limit holds and a share of it per client address, and one log line (not a
traceback) for a malformed request or for the event loop's own errors. A slow reader is not an
idle connection: a file goes out in chunks (:class:`PacedFile`), each of which the client must
take within the send timeout, or its connection is closed and its slot freed. aiohttp's connection (RequestHandler) is kept; :class:`Connection` only
tells :class:`Connections` when it opens, when a request's head begins, and when its answer went
out, through aiohttp's public hooks."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger, AbstractStreamWriter
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from ..errors import BadArgument, ServeFailed
from .serve_log import escape

__all__ = [
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_SEND_TIMEOUT",
    "MAX_BACKLOG",
    "Connection",
    "Connections",
    "PacedFile",
    "ServeLimits",
    "loop_error",
    "request_started",
]

log = logging.getLogger("wheelbuild.serve")
_Handler = Callable[[web.Request], Awaitable[StreamResponse]]

DEFAULT_HEADER_TIMEOUT = 15.0
DEFAULT_IDLE_TIMEOUT = 30.0
DEFAULT_SEND_TIMEOUT = 30.0
_SEND_CHUNK = 256 * 1024
DEFAULT_MAX_CONNECTIONS = 256
# Descriptors kept free of connections: the logs, the event loop's, a page or file being opened.
_RESERVED_FDS = 32
MAX_BACKLOG = 128
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
    (None: from the open-file limit); the kernel queues up to MAX_BACKLOG.
    *send_timeout*: each chunk of a file must be taken by the client within it, or the
    connection is closed (a stalled reader frees its slot).
    *per_client*: open connections one client address may hold (None: a quarter of the cap, at
    least two), so that one client's stalled downloads cannot take every slot."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_connections: int | None = None
    backlog: int | None = None
    send_timeout: float = DEFAULT_SEND_TIMEOUT
    per_client: int | None = None

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
        backlog = self.backlog or min(max(free // 8, 1), MAX_BACKLOG)
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
        cap = self.max_connections or min(DEFAULT_MAX_CONNECTIONS, room)
        return replace(
            self, max_connections=cap, backlog=backlog, per_client=self.per_client or max(2, cap // 4)
        )


class Connection(RequestHandler):
    """aiohttp's connection, telling :class:`Connections` when it opens, when a request's head
    begins and when its answer went out, and logging a malformed request in one line."""

    def __init__(
        self,
        manager: web.Server,
        connections: Connections,
        *,
        loop: asyncio.AbstractEventLoop,
        access_log_class: type[AbstractAccessLogger],
        access_log: logging.Logger,
    ) -> None:
        super().__init__(
            manager,
            loop=loop,
            keepalive_timeout=connections.limits.idle_timeout,  # aiohttp's own, behind ours
            access_log_class=access_log_class,
            access_log=access_log,
        )
        self.connections = connections
        self.client = "-"  # its peer's address, once open
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

    def log_exception(self, *args: object, **kw: object) -> None:
        error = kw.get("exc_info")
        if not isinstance(error, HttpProcessingError):
            super().log_exception(*args, **kw)  # the server's own fault: its traceback helps
            return
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        # The kind of malformation only: aiohttp's message goes on to echo the offending bytes,
        # which may be an Authorization or Cookie value (a credential with one bad byte).
        kind = (
            str(getattr(error, "message", "") or error).strip().splitlines()[0] if str(error).strip() else ""
        )
        said = f"{getattr(error, 'code', 400)}: {' '.join(kind.split())[:200]}"
        log.warning(
            "malformed request from %s: %s",
            escape(str(peer[0]) if peer else "-"),
            escape(said, quoted=True),
        )


class Connections:
    """Every open connection of one server, each either answering a request or waiting for
    one, with the deadline by which its next request's head must have come."""

    def __init__(self, limits: ServeLimits, loop: asyncio.AbstractEventLoop) -> None:
        assert limits.max_connections is not None  # ServeLimits.fitted() decided it
        self.limits = limits
        self.cap = limits.max_connections
        self.loop = loop
        self.open: set[Connection] = set()

    def opened(self, connection: Connection, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        connection.client = str(peer[0]) if peer else "-"
        self.open.add(connection)
        self.waiting(connection, self.limits.header_timeout)
        if not self._within_share(connection, transport):
            return
        if len(self.open) <= self.cap:
            return
        waiting = [c for c in self.open if c is not connection and c.waiting_since is not None]
        if waiting:  # the one that has waited longest makes room: it asked for nothing
            longest = min(waiting, key=lambda c: c.waiting_since or 0.0)
            self.closed(longest)  # now, not when its close is done: the next one counts without it
            longest.force_close()
            return
        log.warning(
            "refused a connection from %s: all %d are answering requests (--max-connections)",
            escape(connection.client),
            self.cap,
        )
        self._refuse(connection, transport)

    def _within_share(self, connection: Connection, transport: asyncio.BaseTransport) -> bool:
        """A client over its share: its own longest-waiting connection makes room, else the new
        one is refused (503), whatever the others do. Whether *connection* is still open."""
        share = self.limits.per_client or self.cap
        its = [c for c in self.open if c.client == connection.client]
        if len(its) <= share:
            return True
        waiting = [c for c in its if c is not connection and c.waiting_since is not None]
        if waiting:
            longest = min(waiting, key=lambda c: c.waiting_since or 0.0)
            self.closed(longest)
            longest.force_close()
            return True
        log.warning(
            "refused a connection from %s: it holds its share of %d, each answering a request",
            escape(connection.client),
            share,
        )
        self._refuse(connection, transport)
        return False

    def _refuse(self, connection: Connection, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.WriteTransport):
            transport.write(_BUSY)
        self.closed(connection)
        connection.force_close()

    def waiting(self, connection: Connection, seconds: float) -> None:
        """It waits for a request from now on, for *seconds* at most."""
        connection.waiting_since = self.loop.time()
        self._expire_at(connection, connection.waiting_since + seconds)

    def receiving(self, connection: Connection) -> None:
        """Bytes came: if it was waiting, a request's head began, and has header_timeout to end."""
        if connection.waiting_since is not None:
            self._expire_at(
                connection, min(connection.deadline, self.loop.time() + self.limits.header_timeout)
            )

    def started(self, connection: Connection) -> None:
        """A request's head came whole: it is answered, however long that takes."""
        connection.waiting_since = None
        if connection.timer is not None:
            connection.timer.cancel()
            connection.timer = None

    def closed(self, connection: Connection) -> None:
        self.started(connection)
        self.open.discard(connection)

    def _expire_at(self, connection: Connection, deadline: float) -> None:
        if connection.timer is not None:
            connection.timer.cancel()
        connection.deadline = deadline
        connection.timer = self.loop.call_at(deadline, self._expired, connection)

    def _expired(self, connection: Connection) -> None:
        connection.timer = None
        if connection.waiting_since is not None:
            connection.force_close()


class PacedFile(web.FileResponse):
    """aiohttp's FileResponse (its ranges, conditional requests and headers), but the body sent in
    chunks, each of which the client must take within *send_timeout*: a reader that stops
    reading loses its connection, and with it its slot. `sent` counts the body bytes the client
    took (what the access log says), not those announced."""

    def __init__(self, path: Path, *, send_timeout: float, headers: Mapping[str, str]) -> None:
        super().__init__(path, chunk_size=_SEND_CHUNK, headers=headers)
        self.send_timeout = send_timeout
        self.sent = 0

    async def _sendfile(
        self, request: BaseRequest, fobj: IO[bytes], offset: int, count: int
    ) -> AbstractStreamWriter:
        writer = await web.StreamResponse.prepare(self, request)
        assert writer is not None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, fobj.seek, offset)
        left = count
        while left > 0:
            chunk = await loop.run_in_executor(None, fobj.read, min(_SEND_CHUNK, left))
            if not chunk:
                break
            await self._bounded(request, writer.write(chunk))
            left -= len(chunk)
            self.sent += len(chunk)
        await self._bounded(request, writer.drain())
        return writer

    async def _bounded(self, request: BaseRequest, step: Awaitable[None]) -> None:
        try:
            await asyncio.wait_for(step, self.send_timeout)
        except TimeoutError:
            transport = request.transport
            unsent = transport.get_write_buffer_size() if isinstance(transport, asyncio.WriteTransport) else 0
            self.sent = max(self.sent - unsent, 0)
            log.warning(
                "closed a connection from %s: it took no data for %gs (a stalled download), %d of %d bytes sent",
                escape(request.remote or "-"),
                self.send_timeout,
                self.sent,
                self.content_length or 0,
            )
            if transport is not None:
                transport.abort()
            raise ConnectionResetError("the client stopped reading") from None


@web.middleware
async def request_started(request: web.Request, handler: _Handler) -> StreamResponse:
    if isinstance(request.protocol, Connection):
        request.protocol.connections.started(request.protocol)
    return await handler(request)


def loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
    """The event loop's own errors: one for a system call (accept() out of file descriptors, a
    socket reset) is a line, not a traceback; anything else as asyncio reports it."""
    error = context.get("exception")
    if isinstance(error, OSError):
        log.error("%s: %s", context.get("message", "error"), error.strerror or error)
        return
    loop.default_exception_handler(context)
