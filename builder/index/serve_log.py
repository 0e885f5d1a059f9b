"""What `wheelbuild serve` logs: one access-log line per request, every value a client chose
escaped as nginx escapes it, so that no client can end a field or start a line."""

from __future__ import annotations

import itertools
import logging
import sys
from pathlib import Path
from typing import Protocol, runtime_checkable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

from .serve_auth import USER

__all__ = ["ACCESS_LOGGER", "AccessLog", "access_logger", "escape"]

ACCESS_LOGGER = "wheelbuild.serve.access"


@runtime_checkable
class CountsSent(Protocol):
    """A response that counts the body bytes its client took (serve_connections.PacedFile)."""

    sent: int


def _body_bytes(request: BaseRequest, response: StreamResponse) -> int:
    """Body bytes sent. A file goes out by sendfile(), which aiohttp does not count: its body is
    the Content-Length it announced (sendfile raises if it cannot send it all). Other responses
    are counted with their status line and headers, so take off those, serialized as aiohttp does
    (status line, "k: v" lines, blank line)."""
    if isinstance(response, CountsSent):  # what the client took, not what was announced
        return 0 if request.method == "HEAD" or response.status not in (200, 206) else response.sent
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


def escape(value: str, *, quoted: bool = False) -> str:
    """*value* fit for one field of one log line: printable ASCII stays; inside quotes a quote
    and a backslash are backslashed; anything else (a quote or backslash outside quotes, control
    characters, newlines, non-ASCII, and a space outside quotes) becomes ``\\xHH`` of its UTF-8
    bytes, as nginx escapes, so a client can neither end a field nor start a line."""
    try:
        data = value.encode("utf-8", "surrogateescape")  # bytes aiohttp could not decode, as sent
    except UnicodeEncodeError:
        data = value.encode("utf-8", "surrogatepass")
    kept = _KEPT_QUOTED if quoted else _KEPT
    # Inside quotes, a quote and a backslash are backslashed (a JSON user agent, as uv sends,
    # stays readable); the field still cannot end early.
    backslashed = {ord('"'): '\\"', ord("\\"): "\\\\"} if quoted else {}
    return "".join(chr(byte) if byte in kept else backslashed.get(byte) or f"\\x{byte:02x}" for byte in data)


class AccessLog(AbstractAccessLogger):
    """One line per request: client, user (- for none), method, path as sent, status, body bytes
    sent, time, and the Range asked for and the user agent, if any. Every value a client chose is
    escaped (:func:`escape`)."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        asked = request.headers.get("Range")
        agent = request.headers.get("User-Agent")
        self.logger.info(
            "%s %s %s %s %s %s %.1fms%s%s",
            escape(request.remote or "-"),
            escape(request.get(USER) or "-"),
            escape(request.method),
            escape(request.raw_path),
            response.status,
            _body_bytes(request, response),
            time * 1000,
            f' range="{escape(asked, quoted=True)}"' if asked is not None else "",
            f' agent="{escape(agent, quoted=True)}"' if agent is not None else "",
        )


_loggers = itertools.count()


def access_logger(access_log: Path | None, echo: bool) -> tuple[logging.Logger, list[logging.Handler]]:
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
