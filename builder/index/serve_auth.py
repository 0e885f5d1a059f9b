"""Basic auth for `wheelbuild serve`: the htpasswd file (bcrypt or {SHA} entries), the password
check (off the event loop, as costly for an unknown user as for a wrong password), and the limit
on failed logins per client address that answers 429 without checking."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import math
import os
import re
import secrets
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt
from aiohttp import web
from aiohttp.typedefs import Middleware
from aiohttp.web_response import StreamResponse

from ..errors import BadHtpasswd

REALM = "wheelbuild"
_BCRYPT = ("$2y$", "$2b$", "$2a$")
_BCRYPT_COST = re.compile(r"^\$2[aby]\$(\d\d)\$")
_BCRYPT_MAX = 72  # bcrypt reads no further, and bcrypt 5 raises on a longer password
_SHA = "{SHA}"


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


_Handler = Callable[[web.Request], Awaitable[StreamResponse]]
USER = web.RequestKey("wheelbuild.user", str)  # the user a request claimed, for the access log


def auth_middleware(htpasswd: Htpasswd, limit: LoginLimit) -> tuple[Middleware, _Authenticator]:
    """The middleware that asks every request for basic auth, and the authenticator behind it
    (the app closes it on cleanup)."""
    auth = _Authenticator(htpasswd, limit)

    @web.middleware
    async def require_auth(request: web.Request, handler: _Handler) -> StreamResponse:
        credentials = _credentials(request.headers.get("Authorization"))
        if credentials is not None:
            request[USER] = credentials[0]
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

    return require_auth, auth
