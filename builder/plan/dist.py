"""--dist: one build's compiles spread over sccache-dist build servers. What the user gives,
parsed and checked, and the sccache client config the build's compiler cache starts with. No Docker, no subprocess; the token file is read with a cap.

The build's sccache server is the sccache-dist client: it runs `nvcc --dryrun` and sends each
step it can (cudafe++, cicc, ptxas, the host compile) to a build server the scheduler picks;
preprocessing, fatbinary and the link stay in the build container. The scheduler's token is a
secret: it travels by name (WHEELBUILD_DIST_TOKEN) or as a file, and reaches the container only
inside the client config, a file of the attempt's read-only secrets mount (sccache 0.16 reads
the token from its config file alone, never from the environment).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from ..errors import BadArgument, BadUrl
from ..units import parse_memory

TOKEN_ENV = "WHEELBUILD_DIST_TOKEN"
CLIENT_CONFIG_FILE = "sccache-dist.conf"  # in the attempt's secrets mount (secrets.MOUNT)
_SERVERS = re.compile(r"^(?P<count>\d+)x(?P<cores>\d+)x(?P<memory>\d+(?:\.\d+)?[kmgtKMGT]?i?[bB]?)$")
_NETWORK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class ServerShape:
    """--dist-servers COUNTxCORESxMEMORY: the fleet the plan counts on (2x16x64g)."""

    count: int
    cores: int
    memory: int  # bytes, each server's container limit


@dataclass(frozen=True)
class DistTarget:
    scheduler_url: str  # http://scheduler:10600
    network: str | None = None  # a Docker network the build container joins to reach the fleet
    token_file: Path | None = None  # else the token comes from $WHEELBUILD_DIST_TOKEN
    servers: ServerShape | None = None  # None: the plan assumes servers that hold every job


def scheduler_address(text: str) -> tuple[SplitResult, int] | None:
    """An http(s)://host:port URL split, with its port; None where it is not one."""
    try:
        parts = urlsplit(text.strip())  # ValueError for a bracket left open: http://[::1
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
        return None
    return parts, port


def parse_scheduler_url(text: str) -> str:
    """An sccache-dist scheduler's URL: http(s)://host:port, nothing after the port."""
    found = scheduler_address(text)
    if found is None:
        raise BadUrl(
            f"--dist {text!r} is not a scheduler URL",
            "give the sccache-dist scheduler as http://HOST:PORT, e.g. http://scheduler:10600",
        )
    parts, port = found
    if parts.username or parts.password or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise BadArgument(
            "--dist takes the scheduler's address only",
            f"give {parts.scheme}://{parts.hostname}:{port}; the token goes in ${TOKEN_ENV} or --dist-token-file",
        )
    return f"{parts.scheme}://{parts.hostname}:{port}/"


def parse_servers(text: str) -> ServerShape:
    found = _SERVERS.match(text.strip())
    if not found or int(found["count"]) < 1 or int(found["cores"]) < 1:
        raise BadArgument(
            f"--dist-servers {text!r} is not COUNTxCORESxMEMORY",
            "describe the build servers as e.g. 2x16x64g: two servers of 16 cores and 64 GiB each",
        )
    return ServerShape(int(found["count"]), int(found["cores"]), parse_memory(found["memory"]))


def parse_network(text: str) -> str:
    if not _NETWORK.match(text):
        raise BadArgument(
            f"--dist-network {text!r} is not a Docker network name",
            "give the name of the network the scheduler and servers are on (docker network ls)",
        )
    return text


def dist_target(
    url: str | None, network: str | None, token_file: Path | None, servers: str | None
) -> DistTarget | None:
    """The --dist options, checked; None without --dist (the others then must not be given)."""
    if url is None:
        if network or token_file or servers:
            raise BadArgument(
                "--dist-network, --dist-token-file and --dist-servers need --dist",
                "add --dist http://SCHEDULER:PORT, or drop them",
            )
        return None
    return DistTarget(
        scheduler_url=parse_scheduler_url(url),
        network=parse_network(network) if network else None,
        token_file=token_file,
        servers=parse_servers(servers) if servers else None,
    )


def read_token(target: DistTarget, environ: Mapping[str, str], *, max_bytes: int = 4096) -> str:
    """The scheduler's token: the file's content, else $WHEELBUILD_DIST_TOKEN."""
    if target.token_file is not None:
        try:
            with target.token_file.open("rb") as handle:
                token = handle.read(max_bytes + 1).decode("utf-8", errors="replace").strip()
        except OSError as error:
            raise BadArgument(
                f"cannot read the dist token file {target.token_file}: {error.strerror}",
                "point --dist-token-file at a readable file holding the scheduler's token",
            ) from None
        if len(token) > max_bytes:
            raise BadArgument(
                f"the dist token file {target.token_file} is over {max_bytes} bytes",
                "the file must hold the scheduler's token alone",
            )
    else:
        token = environ.get(TOKEN_ENV, "").strip()
    if not token or any(c.isspace() or c in '"\\' for c in token):
        raise BadArgument(
            "no usable sccache-dist token"
            + (f" in {target.token_file}" if target.token_file else f" in ${TOKEN_ENV}"),
            f"set {TOKEN_ENV} (by name, e.g. from your CI's secrets) or --dist-token-file to the "
            "scheduler's token: one word, no quotes",
        )
    return token


def client_config(scheduler_url: str, token: str, toolchain_dir: str) -> str:
    """sccache's client config with distribution on: the scheduler, the token, and where the
    compilers it packages for the servers are kept (~90 MB for cicc, ptxas, cudafe++ and gcc,
    packaged once per machine in the compiler cache's volume)."""
    return "\n".join(
        [
            "[dist]",
            f"scheduler_url = {json.dumps(scheduler_url)}",
            "toolchains = []  # client and servers are both x86_64 Linux: sccache packages each compiler",
            f"cache_dir = {json.dumps(toolchain_dir)}",
            "toolchain_cache_size = 4294967296",
            "",
            "[dist.auth]",
            'type = "token"',
            f"token = {json.dumps(token)}",
            "",
        ]
    )


def remote_share(by_server: Sequence[tuple[str, int]], local: int) -> float | None:
    """The build servers' share of the compiles sccache distributed or fell back to local on;
    None when it did neither."""
    remote = sum(count for _, count in by_server)
    return remote / (remote + local) if remote + local else None


def dist_summary(by_server: Sequence[tuple[str, int]] | None, local: int) -> str:
    """One line for the terminal: compiles per build server, against those run locally."""
    if by_server is None:
        return "--dist: sccache printed no distribution stats: no compile reached the scheduler"
    remote = sum(count for _, count in by_server)
    servers = ", ".join(f"{server} {count}" for server, count in by_server) or "none"
    share = remote_share(by_server, local)
    shown = f"{share:.0%}" if share is not None else "-"
    return (
        f"--dist: {remote} compiles on build servers ({servers}), {local} ran locally instead: {shown} remote"
    )
