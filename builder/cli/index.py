"""The index's commands: publish (check, then add to a tree or upload), yank, serve."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import click

from ..errors import BadArgument, BadHtpasswd
from ..gc import prune
from ..index import publish as publishing
from ..index import remote
from ..index import serve as serving
from ..index import yank as yanking
from ..pipeline import check
from ..pipeline.statements import for_publish, without_statement
from ..pipeline.statements import subjects_check as statements_check
from ..progress.console import Console
from ..provenance import keyless, signing
from ..provenance.keyless import keyless_bundles
from ..spec.build_spec import parse_archs
from ..spec.sources import cache_dir
from ..variants import parse_variant
from .options import sigstore_option, torch_option
from .params import GIVEN_PATH, REPEATABLE, BoundedInt, RenamedOption, joined_list


@click.command("publish")
@click.argument("wheels", nargs=-1, required=True, type=GIVEN_PATH)
@click.option(
    "--to",
    "target",
    default=remote.DEFAULT_TO,
    show_default=True,
    metavar="TREE|URL",
    help="The published tree (as yank --tree and serve name it): a directory or [user@]host:path (ssh+rsync), where {variant} stands "
    "for the wheels' CUDA tag; or an http(s) upload URL (pypiserver, devpi; credentials from "
    "TWINE_USERNAME/TWINE_PASSWORD or keyring).",
)
@torch_option(
    "Variant the wheels were built for [default: the build report beside them, else each wheel's "
    "local version label, +cu130torch2.14]."
)
@click.option(
    "--archs",
    multiple=True,
    callback=joined_list,
    help=f"SASS that must be present, comma-separated; {REPEATABLE} [default: the build report's, else 100,120].",
)
@click.option(
    "--sign-key",
    type=GIVEN_PATH,
    help="Sign each wheel's provenance statement with this Ed25519 key (PEM, raw, or your OpenSSH "
    f"key); a passphrase is read from {signing.PASSPHRASE_ENV}.",
)
@click.option(
    "--require-signed",
    is_flag=True,
    help="Refuse a wheel whose statement --sign-key or --key has not signed.",
)
@click.option(
    "--key",
    "keys",
    multiple=True,
    type=GIVEN_PATH,
    help=f"A public key --require-signed accepts; {REPEATABLE}.",
)
@sigstore_option
def publish_command(
    wheels: tuple[Path, ...],
    target: str,
    torch_variant: str | None,
    archs: str | None,
    sign_key: Path | None,
    require_signed: bool,
    keys: tuple[Path, ...],
    sigstore: bool,
) -> None:
    """Check wheels (archs, version label, torch pin), then add them to a wheelhouse tree and
    regenerate its static index (PEP 503/691/658/700, under a lock, atomically). Each wheel's
    provenance statement goes beside it (files/<wheel>.intoto.jsonl)."""
    parsed = remote.parse_target(target)  # a bad --to fails before the wheels are read
    statements = _statements(wheels, sign_key, keys, require_signed, parsed)
    bundles = _keyless(statements, parsed) if sigstore else {}
    groups = check.check_wheels(
        wheels,
        parse_variant(torch_variant) if torch_variant is not None else None,
        parse_archs(archs) if archs is not None else None,
        on_note=lambda note: click.echo(f"note: {note}", err=True),
    )
    # Checked again on the copies publish makes, under its lock: those are what is served.
    again = check.copies_check(
        parse_variant(torch_variant) if torch_variant is not None else None,
        parse_archs(archs) if archs is not None else None,
    )
    for tag, (_variant, paths) in groups.items():
        where = remote.target_for(target, tag, several=len(groups) > 1)
        _publish_to(where, paths, statements_check(statements, again), statements, bundles)


def _statements(
    wheels: tuple[Path, ...],
    sign_key: Path | None,
    keys: tuple[Path, ...],
    require_signed: bool,
    target: object,
) -> dict[str, bytes]:
    """Each wheel's statement as the tree will serve it, signed with --sign-key; with
    --require-signed, a wheel without one signed by --sign-key or a --key is refused now."""
    if isinstance(target, remote.UploadEndpoint) and sign_key is not None:
        raise BadArgument(
            "--sign-key signs the statements a tree serves beside its wheels; an upload URL takes none",
            "publish to a tree (a directory or host:path) to serve signed statements",
        )
    if require_signed and sign_key is None and not keys:
        raise BadArgument("--require-signed needs a key to check against", "add --key PUB or --sign-key KEY")
    signer = signing.load_signing_key(sign_key, os.environ) if sign_key is not None else None
    trusted = [signing.load_verifying_key(key, os.environ) for key in keys]
    return for_publish(wheels, signer, trusted, require_signed)


def _keyless(statements: Mapping[str, bytes], target: object) -> dict[str, bytes]:
    """Each statement signed keyless (Sigstore), before anything is published."""
    if isinstance(target, remote.UploadEndpoint):
        raise BadArgument(
            "--sigstore signs the statements a tree serves beside its wheels; an upload URL takes none",
            "publish to a tree (a directory or host:path) to serve them",
        )
    return keyless_bundles(statements, keyless.sigstore_signer())


def _publish_to(
    where: Path | remote.UploadEndpoint | remote.RsyncTarget,
    wheels: tuple[Path, ...],
    again: publishing.CopiesCheck,
    statements: Mapping[str, bytes] | None = None,
    bundles: Mapping[str, bytes] | None = None,
) -> None:
    sidecars = publishing.Sidecars(
        inputs={w.name: (key,) for w in wheels if (key := check.inputs_key_beside(w))},
        statements=statements or {},
        torch_ranges={w.name: line for w in wheels if (line := check.torch_range_line(w))},
        sigstore_bundles=bundles or {},  # by wheel name, as statements are
    )
    if isinstance(where, remote.UploadEndpoint):
        sha256 = remote.upload(wheels, where, check=again)
        prune.record_published(wheels, where.url, sha256)  # gc keeps a run whose wheels were published
        for wheel in wheels:
            click.echo(f"uploaded {wheel.name} to {where.url}")
        return
    if isinstance(where, remote.RsyncTarget):
        mirror = remote.mirror_dir(where, cache_dir())
        result = remote.publish_rsync(wheels, where, mirror, Console().info, sidecars, again)
    else:
        result = publishing.publish(wheels, where, sidecars=sidecars, check=again)
    prune.record_published(wheels, str(where), result.sha256)
    for name in result.added:
        click.echo(f"added {name}")
    for name in result.present:
        click.echo(f"already there, same sha256: {name}")
    click.echo(f"index: {where}/simple ({len(result.pages)} page(s) written)")
    for wheel in wheels:  # an upload server keeps no statements at all: only a tree is warned of
        if wheel.name not in sidecars.statements:
            click.echo(f"warning: {without_statement(wheel.name)}", err=True)


@click.command()
@click.argument("target")
@click.option(
    "--tree",
    "--wheelhouse",  # its old name, still taken
    "root",
    cls=RenamedOption,
    required=True,
    type=GIVEN_PATH,
    metavar="TREE",
    help="The published tree, as publish --to and serve name it, e.g. wheelhouse/cu130.",
)
@click.option("--reason", default="", help="Why (shown by pip and uv).")
@click.option("--undo", is_flag=True, help="Take a yank back.")
def yank(target: str, root: Path, reason: str, undo: bool) -> None:
    """Yank (PEP 592) the wheels TARGET names: a file name, or PROJECT==VERSION. Installers skip
    a yanked file unless it is pinned exactly; nothing is deleted."""
    result = yanking.unyank(root, target) if undo else yanking.yank(root, target, reason)
    for name in result.changed:
        click.echo(f"{'unyanked' if undo else 'yanked'} {name}")
    for name in result.unchanged:
        click.echo(f"unchanged {name}")


_MAX_TIMEOUT = 24 * 3600.0


def _timeout(name: str, default: float, what: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    help_text = f"Seconds {what}; then the connection is closed."
    return click.option(name, type=float, default=default, show_default=True, help=help_text)


@click.command()
@click.argument("directory", metavar="[TREE]", required=False, type=GIVEN_PATH)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (0.0.0.0: every interface, on purpose).",
)
@click.option(
    "--port", default=8080, show_default=True, type=BoundedInt(0, 65535), help="0 picks a free one."
)
@click.option("--htpasswd", type=GIVEN_PATH, help="Require basic auth (bcrypt or {SHA} entries).")
@click.option("--access-log", type=GIVEN_PATH, help="Also append the access log here.")
@_timeout("--header-timeout", serving.DEFAULT_HEADER_TIMEOUT, "a request's head may take to arrive")
@_timeout("--idle-timeout", serving.DEFAULT_IDLE_TIMEOUT, "a connection may wait for its next request")
@_timeout("--send-timeout", serving.DEFAULT_SEND_TIMEOUT, "a client may take to read each chunk of a file")
@click.option(
    "--max-connections",
    type=BoundedInt(min=1),
    help=f"Open connections at most [default: {serving.DEFAULT_MAX_CONNECTIONS}, or fewer if the "
    "open-file limit holds fewer]; past it the longest idle one is closed, or a 503 answered.",
)
def serve(
    directory: Path | None,
    host: str,
    port: int,
    htpasswd: Path | None,
    access_log: Path | None,
    header_timeout: float,
    idle_timeout: float,
    send_timeout: float,
    max_connections: int | None,
) -> None:
    """Serve a wheelhouse tree over HTTP for pip and uv (PEP 691 by Accept, Range requests,
    404 for unknown projects). TREE, the published tree as publish --to and yank --tree name it,
    defaults to the one tree under ./wheelhouse."""
    for option, seconds in (
        ("--header-timeout", header_timeout),
        ("--idle-timeout", idle_timeout),
        ("--send-timeout", send_timeout),
    ):
        if not 0 < seconds <= _MAX_TIMEOUT:  # nan and inf too
            raise BadArgument(
                f"{option} {seconds:g} is not a number of seconds between 0 and {_MAX_TIMEOUT:g}",
                f"give e.g. {option} 30",
            )
    if not host.strip():
        raise BadArgument(
            f"--host {host!r} is empty, which would listen on every interface",
            "give the address to listen on: --host 127.0.0.1, or --host 0.0.0.0 to serve every interface on purpose",
        )
    if htpasswd is not None and not _is_file(htpasswd):  # a directory, or /dev/zero read forever
        raise BadHtpasswd(
            f"--htpasswd {htpasswd} is not a file",
            "give a file of user:hash lines (htpasswd -B makes bcrypt ones)",
        )
    if access_log is not None:
        _check_access_log(access_log)
    root = directory or publishing.only_tree(Path("wheelhouse"))
    try:  # serve looks for the index with is_file(), which raises (not False) on a name too long
        (root / "simple" / "index.html").stat()
    except (FileNotFoundError, NotADirectoryError):
        pass  # serve says there is no index, and what to do
    except OSError as error:
        raise BadArgument(
            f"{root} cannot be served: {error.strerror or error}",
            "name a tree, e.g. wheelbuild serve wheelhouse/cu130",
        ) from None
    limits = serving.ServeLimits(header_timeout, idle_timeout, max_connections, send_timeout=send_timeout)
    serving.serve(
        root, host=host, port=port, htpasswd=htpasswd, access_log=access_log, echo_log=True, limits=limits
    )


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the file system
        return False


def _check_access_log(path: Path) -> None:
    """Open the access log as the server will (append), so that a directory or an unwritable path
    is refused before the server starts, not as a traceback from its logging setup."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as error:
        raise BadArgument(
            f"--access-log {path} cannot be written: {error.strerror or error}",
            "name a file in a directory you can write, e.g. --access-log serve-access.log",
        ) from None


COMMANDS = (publish_command, yank, serve)
