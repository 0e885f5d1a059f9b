"""Where `wheelbuild publish --to` puts checked wheels, besides a local wheelhouse tree.

- A directory: the local tree (wheelbuild.index.publish), its static index regenerated under a lock.
- `[user@]host:path` or `ssh://[user@]host[:port]/path`: a wheelhouse tree on another machine,
  over ssh and rsync (both on each end; ssh keys or agent as usual, WHEELBUILD_SSH_COMMAND to
  add options). Under the remote tree's own lock (flock on <path>/.lock, the lock a local
  `wheelbuild publish` on that host takes too), the tree is pulled into a local mirror, the
  wheels published into the mirror (conflict checks, index regenerated from the full listing),
  and pushed back: new files first, never overwriting one, then the pages, renamed into place
  together. So concurrent publishers from several machines do not lose each other's wheels,
  and a push cut midway leaves pages that link only files already there. rsync rather than an
  fsspec/S3 layer: a host with a web server is what most teams already have, rsync sends only
  what changed, and the lock is a real one.
- An http(s) URL: a PyPI-compatible upload endpoint (pypiserver, devpi, a registry's legacy
  upload API), through twine's own API in this process, so credentials never reach a command
  line. They come as twine takes them: TWINE_USERNAME / TWINE_PASSWORD, or the system keyring
  (`keyring set <url> <user>`), never from the URL. The server then owns its index.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import BadArgument, UploadFailed
from ..secrets import basic_auth_forms, redact_values
from . import index_page, tree
from . import publish as publishing

__all__ = [
    "DEFAULT_TO",
    "RsyncTarget",
    "UploadEndpoint",
    "parse_target",
    "publish_rsync",
    "target_for",
    "upload",
]

LOCK_TIMEOUT_S = 120
DEFAULT_TO = "wheelhouse/{variant}"


@dataclass(frozen=True)
class UploadEndpoint:
    url: str  # e.g. http://pypi.internal:8080/ (pypiserver) or https://host/legacy/


@dataclass(frozen=True)
class RsyncTarget:
    host: str  # [user@]host, as ssh takes it
    path: str  # the tree on that host, e.g. /srv/wheels/cu130
    port: int | None = None

    def __str__(self) -> str:
        return f"{self.host}:{self.path}"

    def ssh(self) -> list[str]:
        command = shlex.split(os.environ.get("WHEELBUILD_SSH_COMMAND", "ssh"))
        return [*command, *(["-p", str(self.port)] if self.port else [])]


_SCP_STYLE = re.compile(r"^(?P<host>(?:[\w.-]+@)?[\w.-]+):(?P<path>.+)$")


def _remote(text: str, host: str, path: str, port: int | None = None) -> RsyncTarget:
    """ssh and rsync read an argument that begins with '-' as an option (-F config, -o
    ProxyCommand=...), and rsync hands the user and host to ssh as separate arguments: none of
    them may begin with '-'. `--` guards the arguments too, where the tools take it."""
    user, _, hostname = host.rpartition("@")
    for what, part in (("user", user), ("host", hostname), ("path", path)):
        if part.startswith("-"):
            raise BadArgument(
                f"--to {text}: its {what} {part!r} begins with '-', which ssh and rsync would read as an option",
                "name the host as ssh knows it; write a relative path that begins with '-' as ./-name",
            )
    return RsyncTarget(host=host, path=path, port=port)


def parse_target(text: str) -> Path | UploadEndpoint | RsyncTarget:
    """A local directory, a remote tree, or an upload URL. Credentials in a URL are refused
    (they would end up in shell history, CI logs and twine's own output)."""
    if not text.strip():
        raise BadArgument(
            f"--to {text!r} is empty, which would publish into the current directory",
            "name the tree: --to 'wheelhouse/{variant}' (a directory), [user@]host:path, or an upload URL",
        )
    try:
        parts = urlsplit(text)
        _port = parts.port  # a port that is no number raises here
    except ValueError as error:  # "Invalid IPv6 URL"
        raise BadArgument(
            f"--to {text!r} is not a URL wheelbuild can read ({error})",
            "write an IPv6 host in brackets: https://[::1]:8080/ or ssh://user@[::1]/srv/wheels",
        ) from None
    if "://" not in text and "[" in text.split("/", 1)[0]:
        raise BadArgument(
            f"--to {text!r} looks like a remote tree with an IPv6 host, which the host:path form cannot say",
            "write it as ssh://user@[::1]/srv/wheels (or name a local directory without brackets)",
        )
    if parts.scheme == "ssh":
        if not parts.hostname or not parts.path:
            raise BadArgument(f"--to {text} names no host or path", "write ssh://[user@]host[:port]/path")
        if parts.password:
            raise BadArgument("the ssh URL carries a password", "use an ssh key or agent instead")
        host = f"{parts.username}@{parts.hostname}" if parts.username else parts.hostname
        return _remote(text, host, parts.path, parts.port)
    if "://" not in text and (scp := _SCP_STYLE.match(text)):
        return _remote(text, scp["host"], scp["path"])
    if parts.scheme in ("http", "https"):
        if parts.username or parts.password:
            raise BadArgument(
                "the upload URL carries credentials",
                "drop them from the URL; set TWINE_USERNAME and TWINE_PASSWORD, or store the "
                "password with `keyring set <url> <user>`",
            )
        return UploadEndpoint(url=text)
    if "://" in text:
        raise BadArgument(
            f"--to {parts.scheme}://... is not a target wheelbuild can write",
            "give a directory (a wheelhouse tree) or an http(s) upload URL (pypiserver, devpi); "
            "to fill a bucket or a remote host, publish to a directory and sync it",
        )
    return Path(text)


def _plain_text(body: str) -> str:
    """A server's error page as one line of text (pypiserver answers in HTML)."""
    body = re.sub(r"(?is)<(head|style|script)\b.*?</\1>", " ", body)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def upload(
    wheels: Sequence[Path],
    endpoint: UploadEndpoint,
    *,
    progress: bool = False,
    check: publishing.CopiesCheck | None = None,
) -> dict[str, str]:
    """Upload with twine a private copy of each wheel, read and checked (*check* too) after it
    was copied, so that what was checked is what the server gets; returns each one's sha256. A
    file the server already has is an error (never overwritten), as the server reports it."""
    with (
        tempfile.TemporaryDirectory(prefix="wheelbuild-upload-") as folder,
        publishing.staged(wheels, Path(folder)) as copies,
    ):
        sha256 = {}
        for copy in copies.values():
            tree.read_wheel(copy)
            sha256[copy.name] = tree.hash_file(copy)
        if check is not None:
            check(copies)
        _twine_upload(list(copies.values()), endpoint, progress)
    return sha256


def _twine_upload(wheels: Sequence[Path], endpoint: UploadEndpoint, progress: bool) -> None:
    # Imported here: twine pulls in much that the rest of wheelbuild never needs.
    import requests
    from twine.commands.upload import upload as twine_upload
    from twine.exceptions import TwineException
    from twine.settings import Settings

    try:
        settings = Settings(
            repository_url=endpoint.url,
            username=os.environ.get("TWINE_USERNAME"),
            password=os.environ.get("TWINE_PASSWORD"),
            non_interactive=True,
            disable_progress_bar=not progress,
            config_file=os.environ.get("TWINE_CONFIG_FILE", "~/.pypirc"),
        )
        twine_upload(settings, [str(w) for w in wheels])
    except requests.HTTPError as error:
        response = error.response
        status = response.status_code if response is not None else 0
        # A server may echo what it was sent: the credentials never reach the output.
        sent = basic_auth_forms(os.environ.get("TWINE_USERNAME"), os.environ.get("TWINE_PASSWORD"))
        said = redact_values(_plain_text(response.text if response is not None else ""), sent)[:200]
        exists = status == 409 or "exist" in said.lower()
        cause, remedy = (
            (
                f"upload to {endpoint.url} failed: HTTP {status}",
                "that file is already on the index, and a published file is never replaced: give the "
                "build another version or local label",
            )
            if exists
            else _refusal(endpoint, status)
        )
        raise UploadFailed(cause + (f": {said}" if said else ""), remedy) from None
    except (TwineException, requests.RequestException) as error:
        sent = basic_auth_forms(os.environ.get("TWINE_USERNAME"), os.environ.get("TWINE_PASSWORD"))
        unset = [name for name in CREDENTIAL_VARIABLES if not os.environ.get(name)]
        if unset and isinstance(error, TwineException):
            # twine asks for what it lacks before it sends anything: the server was never asked.
            raise UploadFailed(
                f"upload to {endpoint.url} needs a user and password, and {' and '.join(unset)} "
                f"{'is' if len(unset) == 1 else 'are'} not set (nor found in the keyring)",
                f"{_SET_CREDENTIALS}, or store the password with `keyring set {endpoint.url} <user>`",
            ) from None
        raise UploadFailed(
            f"upload to {endpoint.url} failed: {type(error).__name__}: {redact_values(str(error), sent)}",
            "check the URL and that the server is up (e.g. curl it)",
        ) from None


CREDENTIAL_VARIABLES = ("TWINE_USERNAME", "TWINE_PASSWORD")
_SET_CREDENTIALS = (
    "export TWINE_USERNAME and TWINE_PASSWORD (read by name, never from a command line or the URL)"
)


def _refusal(endpoint: UploadEndpoint, status: int) -> tuple[str, str]:
    """What an upload refused with *status* means, and what to do: 401 and 403 are about the
    credentials (named by their variables, never their values), the rest about the URL."""
    given = [name for name in CREDENTIAL_VARIABLES if os.environ.get(name)]
    if status == 401:
        return (
            f"upload to {endpoint.url} refused: the server answered HTTP 401 (not authenticated"
            + (f"; it did not accept {' and '.join(given)})" if given else ")"),
            f"check TWINE_USERNAME and TWINE_PASSWORD for this index; {_SET_CREDENTIALS}"
            if given
            else _SET_CREDENTIALS,
        )
    if status == 403:
        return (
            f"upload to {endpoint.url} refused: the server answered HTTP 403 (forbidden: the user "
            "may not upload there, or the credentials are wrong)",
            "check TWINE_USERNAME and TWINE_PASSWORD (or the keyring entry) and that user's rights "
            "to upload to this index",
        )
    return f"upload to {endpoint.url} failed: HTTP {status}", "check the index URL and the server's log"


def target_for(template: str, tag: str, *, several: bool) -> Path | UploadEndpoint | RsyncTarget:
    """The target of one variant's wheels: `{variant}` in the template becomes its CUDA tag.
    Wheels of several variants need the placeholder, each variant being its own tree (an upload
    URL takes them all: the server sorts them out)."""
    where = parse_target(template.replace("{variant}", tag))
    if several and "{variant}" not in template and not isinstance(where, UploadEndpoint):
        raise BadArgument(
            f"the wheels were built for several variants, and --to {template} would mix them in one tree",
            "put {variant} in --to (e.g. --to 'wheelhouse/{variant}'), or publish each variant alone",
        )
    return where


def _run(target: RsyncTarget, args: list[str], what: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise UploadFailed(
            f"{what} ({target}) failed with exit {done.returncode}: {' / '.join(tail)}",
            "check that ssh to the host works without a prompt (key or agent) and rsync is on both ends",
        )


@contextlib.contextmanager
def _remote_lock(target: RsyncTarget) -> Iterator[None]:
    """Hold flock on <path>/.lock on the remote host while the block runs: the lock is held by
    a remote `flock ... cat`, released when we close its stdin (or when the connection drops)."""
    path = shlex.quote(target.path)
    script = (
        f"mkdir -p -- {path} && exec flock -x -w {LOCK_TIMEOUT_S} {path}/.lock "
        "sh -c 'echo locked; exec cat >/dev/null'"
    )
    holder = subprocess.Popen(
        [*target.ssh(), "--", target.host, script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    if holder.stdout.readline().strip() != "locked":
        holder.kill()
        _, error = holder.communicate()
        raise UploadFailed(
            f"could not lock {target}/.lock: {error.strip() or 'timed out or refused'}",
            "check ssh access; another publish may hold the lock (it is released when it ends)",
        )
    try:
        yield
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def mirror_dir(target: RsyncTarget, cache: Path) -> Path:
    """The local mirror of a remote tree, kept between publishes so rsync sends only news."""
    return cache / "mirrors" / hashlib.sha256(str(target).encode()).hexdigest()[:16]


def publish_rsync(
    wheels: Sequence[Path],
    target: RsyncTarget,
    mirror: Path,
    progress: Callable[[str], None],
    sidecars: publishing.Sidecars,
    check: publishing.CopiesCheck | None = None,
) -> publishing.PublishResult:
    """Publish into the remote tree (see the module docstring for the order of things); *sidecars*
    and *check* as for a local publish."""
    for tool in ("rsync", target.ssh()[0]):
        if shutil.which(tool) is None:
            raise UploadFailed(
                f"publishing to {target} needs {tool}, which is not on PATH",
                f"install it (apt-get install {'openssh-client' if tool == 'ssh' else tool}); "
                "the remote host needs rsync too",
            )
    rsync = ["rsync", "-a", "-e", shlex.join(target.ssh())]
    remote = f"{target.host}:{target.path.rstrip('/')}"
    keep_out = ["--exclude", ".lock", "--exclude", ".*.tmp"]
    mirror.mkdir(parents=True, exist_ok=True)
    with _remote_lock(target):
        progress(f"locked {target}/.lock; pulling the tree into {mirror}")
        _run(
            target,
            [*rsync, "--delete", *keep_out, "--", f"{remote}/", f"{mirror}/"],
            "pulling the remote tree",
        )
        result = publishing.publish(wheels, mirror, sidecars=sidecars, check=check)
        progress(f"pushing {len(result.added)} new wheel(s), then {len(result.pages)} page(s)")
        # Files before pages: a page never links a file the host does not have yet. Files are
        # immutable: --ignore-existing never replaces one (conflicts were refused above).
        _run(
            target,
            [*rsync, "--ignore-existing", *keep_out, "--", f"{mirror}/files/", f"{remote}/files/"],
            "pushing files",
        )
        # Every changed page is renamed into place at the end, together.
        _run(
            target,
            [
                *rsync,
                "--delay-updates",
                "--delete-after",
                *keep_out,
                "--",
                f"{mirror}/simple/",
                f"{remote}/simple/",
            ],
            "pushing the index",
        )
        # The page for people after the pages it links (renamed into place by rsync).
        if (mirror / index_page.PAGE).is_file():
            _run(
                target,
                [*rsync, *keep_out, "--", f"{mirror}/{index_page.PAGE}", f"{remote}/{index_page.PAGE}"],
                "pushing the index page",
            )
    return result
