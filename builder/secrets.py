"""Secrets travel by name or as a mounted file, never as a value on a command line, in a log, a
report or a label. This module is the second wall: whatever wheelbuild writes (build.log, the
terminal, the gate's log) passes through a Redactor that knows every secret value of the run,
and hides any URL's credentials and query values it has not been told about.

Pure: values in, text out. engine/ mounts the files; this module says what goes in them.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Iterable, Mapping
from urllib.parse import unquote

MOUNT = "/run/wheelbuild-secrets"  # read-only in every build container, never in its config
TORCH_INDEX_FILE = "torch-index-url"
SCCACHE_ENV_FILE = "sccache.env"  # sourced only by the sccache server's start: it alone needs them
MIN_SECRET = 4  # shorter values are not hunted in text: they would redact half of every line

# A variable or key name that names a credential, and values shaped like well-known tokens:
# refused wherever a value is shown (a config file, --env), since those reach logs and reports.
SECRET_NAME = re.compile(r"token|passw|secret|credential|api[-_]?key|auth|private[-_]?key", re.IGNORECASE)
SECRET_VALUE = re.compile(
    r"^(gh[pousr]_|github_pat_|glpat-|hf_[A-Za-z0-9]{20}|xox[abpr]-|AKIA[0-9A-Z]{16}|sk-[A-Za-z0-9]{20})"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
# How a credential reaches wheelbuild instead: read by name, mounted as a file, never shown.
BY_NAME_ONLY = (
    "by environment variable (a credentialed WHEELBUILD_TORCH_INDEX_URL, SCCACHE_*/AWS_*) or a mounted file"
)

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'<>]+", re.IGNORECASE)
_QUERY_VALUE = re.compile(r"([?&][^=&#]*=)[^&#]*")


def _split(url: str) -> tuple[str, str, str, str]:
    """(scheme://, user info, rest up to the query, query) with the user info taken as whatever
    comes before the *last* @ ahead of the path's query: a password may hold @ and /."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    head, mark, query = rest.partition("?")
    userinfo, at, location = head.rpartition("@")
    if not at:
        userinfo, location = "", head
    return f"{scheme}{sep}", userinfo, location, f"{mark}{query}"


def _hide_url(match: re.Match[str]) -> str:
    scheme, userinfo, location, query = _split(match[0])
    return scheme + ("***@" if userinfo else "") + location + _QUERY_VALUE.sub(r"\1***", query)


def url_secrets(url: str) -> tuple[str, ...]:
    """The parts of a URL that are credentials: the user info, its password and user, each query value."""
    _scheme, userinfo, _location, query = _split(url)
    found: list[str] = []
    if userinfo:
        user, _, password = userinfo.partition(":")
        found += [userinfo, unquote(userinfo), user, unquote(user), password, unquote(password)]
    for pair in query.lstrip("?").split("&"):
        _key, eq, value = pair.partition("=")
        if eq:
            found += [value, unquote(value)]
    return tuple(v for v in found if v)


def redact_url(url: str) -> str:
    """*url* with its credentials (``https://user:token@host/...``, ``?token=...``) replaced by
    ``***``, for logs, errors and reports. When in doubt it hides more: everything before the
    last ``@`` ahead of the query is taken for credentials, and every query value."""
    scheme, userinfo, location, query = _split(url)
    return scheme + ("***@" if userinfo else "") + location + _QUERY_VALUE.sub(r"\1***", query)


def without_credentials(url: str) -> tuple[str, str | None]:
    """(the URL without its user info, a Basic Authorization header value or None). urllib does
    not send a URL's credentials itself; the header goes only to the URL's own host."""
    scheme, userinfo, location, query = _split(url)
    if not userinfo:
        return url, None
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    return f"{scheme}{location}{query}", f"Basic {token}"


def redact_values(text: str, secrets: Iterable[str]) -> str:
    """*text* with every secret value in it, and its Basic-auth forms, replaced by ***: for a
    server's answer that echoes what it was sent."""
    found = [value for value in secrets if value]
    for value in sorted(found, key=len, reverse=True):
        text = text.replace(value, "***")
    return text


def basic_auth_forms(user: str | None, password: str | None) -> tuple[str, ...]:
    """The forms a user and password travel in: the password, user:password, and its base64."""
    if not password:
        return ()
    pair = f"{user or ''}:{password}"
    return (password, pair, base64.b64encode(pair.encode()).decode())


def sccache_env_file(values: Mapping[str, str]) -> str:
    """`export NAME='value'` lines for a POSIX shell to source."""
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in values.items())


class Redactor:
    """Hides every known secret value, and any URL credentials, in a line of text."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Longest first, so that a value containing another is hidden whole.
        self._values = sorted({s for s in secrets if len(s) >= MIN_SECRET}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, "***")
        return _URL.sub(_hide_url, text)


def run_secrets(environ: Mapping[str, str], names: Iterable[str], urls: Iterable[str]) -> tuple[str, ...]:
    """Every secret value of a run: the named variables' values and the URLs' credentials."""
    values = [environ[name] for name in names if environ.get(name)]
    for url in urls:
        values += url_secrets(url)
    return tuple(values)
