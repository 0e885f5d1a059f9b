"""The one HTTP reader of wheelbuild: index pages, METADATA files, inputs sidecars, sdists, torch
wheels and NVIDIA's archives all come through :func:`fetch` (into memory) or :func:`download`
(streamed into a file, hashed on the way), and a server's reach is checked by :func:`probe`.

Every read has a cap, by the kind of document (:class:`Kind`), and a timeout: past the cap the
read stops and :class:`TooLarge` names the URL (credentials hidden) and the cap, whether the
server said its size (Content-Length) or not (chunked, or until the connection closes). A URL's
credentials go as an Authorization header to that URL's host only, never on to a host a redirect
names, and never into an error's text. Redirects are followed, at most MAX_REDIRECTS of them, to
http and https only. Every failure (an HTTP error, a redirect past the limit, a network failure,
a timeout, a URL no client can use) becomes one :class:`HttpRefused`, here and nowhere else; each
caller words it as its own typed error.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import importlib.metadata
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from ..secrets import Redactor, redact_url, url_secrets, without_credentials
from ..units import format_bytes
from .inputs import MAX_INPUTS_SIZE

MAX_REDIRECTS = 5  # an index behind a CDN redirects once or twice; a loop is refused
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Kind:
    """A kind of document read over HTTP: what to call it, the most bytes it may have, and how
    long the server may stay silent (per connect and per read) before the read fails."""

    what: str
    cap: int
    timeout_s: float


# Each cap is well above the largest real one, and far below what would fill memory or a disk.
PROJECT_PAGE = Kind("a project page", 64 << 20, 60.0)  # PyTorch's torch page is a few MiB
PROJECT_LIST = Kind("an index's list of projects", 64 << 20, 60.0)
METADATA = Kind("a METADATA file", 4 << 20, 60.0)  # torch's is ~40 KB
INPUTS = Kind("an inputs sidecar", MAX_INPUTS_SIZE, 60.0)  # a few 65-byte lines
SDIST = Kind("an sdist", 2 << 30, 120.0)  # flash-attn's, cutlass included, is ~8 MB packed
WHEEL = Kind("a wheel", 8 << 30, 120.0)  # a torch wheel is ~0.5-1 GB
ARCHIVE = Kind("an archive", 2 << 30, 20.0)  # NVIDIA's nvcc archive is ~100 MB; a silent server fails fast
PROBE = Kind("an answer to a reach check", 64 << 10, 5.0)  # an answer proves reach; its body is not needed


def authorized_request(url: str, headers: Mapping[str, str] | None = None) -> urllib.request.Request:
    """A urllib request for `url` with its user info moved into an Authorization header, which
    urllib never sends on to a host a redirect names."""
    bare, authorization = without_credentials(url)
    request = urllib.request.Request(bare, headers=dict(headers or {}))
    if authorization:
        request.add_unredirected_header("Authorization", authorization)
    return request


def byte_range(length: int) -> Kind:
    """A byte range of a remote file, capped at the *length* asked for."""
    return Kind(f"a byte range of {length} bytes", length, METADATA.timeout_s)


class HttpRefused(Exception):
    """An HTTP read that did not give what was asked: the status (0 without one) and why, in
    words that hold no credential."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status
        self.why = why


class TooLarge(HttpRefused):
    """The answer is larger than its kind's cap: the read stopped there."""

    def __init__(self, url: str, kind: Kind, status: int) -> None:
        self.url = redact_url(url)
        self.cap = kind.cap
        super().__init__(
            status,
            f"{self.url} sent more than {kind.cap} bytes ({format_bytes(kind.cap)}), the cap for {kind.what}",
        )


class Sink(Protocol):
    """Where :func:`download` writes: a file open for writing bytes."""

    def write(self, data: bytes, /) -> int: ...


@dataclass(frozen=True)
class Answer:
    body: bytes
    status: int
    headers: Mapping[str, str]  # names in lower case

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")


@functools.cache
def user_agent() -> str:
    """The one User-Agent of every request wheelbuild makes."""
    try:
        return f"wheelbuild/{importlib.metadata.version('wheelbuild')}"
    except importlib.metadata.PackageNotFoundError:
        return "wheelbuild"


class _Redirects(urllib.request.HTTPRedirectHandler):
    max_redirections = MAX_REDIRECTS

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: object,
        code: int,
        msg: str,
        headers: object,
        newurl: str,
    ) -> urllib.request.Request | None:
        if urlsplit(newurl).scheme not in ("http", "https"):  # never ftp:, whatever the server says
            raise urllib.error.HTTPError(req.full_url, code, f"a redirect to {newurl}", headers, None)  # type: ignore[arg-type]
        return super().redirect_request(req, fp, code, msg, headers, newurl)  # type: ignore[arg-type]


def _refused(url: str, error: BaseException) -> HttpRefused:
    """The one place a failure to read becomes an HttpRefused, its words free of *url*'s credentials."""
    status = 0
    if isinstance(error, urllib.error.HTTPError):
        status = error.code
        why = f"HTTP {error.code} {error.reason}"
        if 300 <= error.code < 400:
            why += f" (more than {MAX_REDIRECTS} redirects, or a redirect to another scheme)"
        elif error.code in (401, 403):
            why += " (the credentials in the URL are missing or refused)"
    elif isinstance(error, urllib.error.URLError):
        why = str(error.reason) or type(error.reason).__name__
    else:
        why = str(error) or type(error).__name__
    return HttpRefused(status, Redactor(url_secrets(url))(why))


@contextmanager
def _opened(
    url: str,
    kind: Kind,
    headers: Mapping[str, str] | None,
    method: str,
    timeout: float | None,
    *,
    whole: bool = True,
) -> Iterator[http.client.HTTPResponse]:
    """The answer to one request; where the body is to be read *whole*, refused before it when
    the server says it is over the cap."""
    request = authorized_request(url, headers)
    request.method = method
    # Built per request: the proxies are the environment's of this moment, as urlopen's first were.
    opener = urllib.request.build_opener(_Redirects)
    opener.addheaders = [("User-Agent", user_agent())]
    try:
        with opener.open(request, timeout=kind.timeout_s if timeout is None else timeout) as response:
            declared = response.headers.get("Content-Length", "").strip()
            if whole and declared.isdigit() and int(declared) > kind.cap:
                raise TooLarge(url, kind, int(response.status))
            yield response
    except HttpRefused:
        raise
    except (OSError, http.client.HTTPException, ValueError) as error:
        raise _refused(url, error) from None


def fetch(
    url: str,
    kind: Kind,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> Answer:
    """GET *url* into memory: at most *kind*'s cap, within its timeout (or *timeout*). Raises
    TooLarge past the cap and HttpRefused for anything else that went wrong."""
    with _opened(url, kind, headers, "GET", timeout) as response:
        status = int(response.status)
        blocks, total = [], 0
        # Block by block: a buffer is never sized by the cap, nor by what the server says.
        while block := response.read(min(_CHUNK, kind.cap + 1 - total)):
            blocks.append(block)
            total += len(block)
            if total > kind.cap:
                raise TooLarge(url, kind, status)
        body = b"".join(blocks)
        found = {key.lower(): value for key, value in response.headers.items()}
    return Answer(body, status, found)


def download(url: str, dest: Sink, kind: Kind, *, on_bytes: Callable[[int], None] | None = None) -> str:
    """Stream *url* into *dest*, at most *kind*'s cap; *on_bytes* hears the running total after
    each block. The sha256 of what was written. Raises TooLarge past the cap and HttpRefused for
    anything else (a failure to write *dest* among them); *dest* may then hold part of it."""
    digest = hashlib.sha256()
    total = 0
    with _opened(url, kind, None, "GET", None) as response:
        while block := response.read(_CHUNK):
            total += len(block)
            if total > kind.cap:
                raise TooLarge(url, kind, int(response.status))
            digest.update(block)
            dest.write(block)
            if on_bytes is not None:
                on_bytes(total)
    return digest.hexdigest()


def probe(
    url: str,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> int:
    """Whether *url* answers: its status, after reading a little of the answer (the rest is not
    needed, so a large one is no error). Raises HttpRefused for an HTTP error or no answer."""
    with _opened(url, PROBE, headers, method, timeout, whole=False) as response:
        response.read(PROBE.cap)
        return int(response.status)
