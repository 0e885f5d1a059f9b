"""The sccache-dist fleet's commands, one group as image and nightly are: dist scheduler, dist
server, dist stop (their old names dist-scheduler, dist-server, dist-stop still run them).
Each parses, checks what it can before Docker (token file, sizes, names, URL), calls
engine/dist_fleet.py, and prints what it started and how to reach it."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from ..engine import dist_fleet
from ..engine.docker_engine import DockerEngine
from ..errors import BadUrl
from ..plan.dist import scheduler_address
from ..progress.console import Console
from ..spec.build_spec import check_cpus
from ..units import format_bytes, parse_memory
from .params import GIVEN_PATH, GIVEN_TEXT, BoundedInt
from .seams import seams

TOKEN_FILE_ENV = "WHEELBUILD_DIST_TOKEN_FILE"
DEFAULT_NETWORK = "wbdist"
DEFAULT_SCHEDULER = "wbdist-scheduler"
PORT = BoundedInt(1, 65535)
F = TypeVar("F", bound=Callable[..., object])


def _network_option(function: F) -> F:
    return click.option(
        "--network",
        default=DEFAULT_NETWORK,
        show_default=True,
        type=GIVEN_TEXT,
        help="The user-defined bridge network the fleet (and the builds that use it) share; made when missing.",
    )(function)


def _start_options(function: F) -> F:
    """What both starts take: the token, the image, its base."""
    for option in (
        click.option(
            "--token-file",
            envvar=TOKEN_FILE_ENV,
            show_envvar=True,
            required=True,
            type=GIVEN_PATH,
            help="A file holding the fleet's shared token; mounted read-only, never passed as a value.",
        ),
        click.option(
            "--image",
            type=GIVEN_TEXT,
            help="A fleet image already here [default: build images/Dockerfile.sccache-dist FROM the build image].",
        ),
        click.option(
            "--base-image",
            envvar="WHEELBUILD_BASE_IMAGE",
            show_envvar=True,
            type=GIVEN_TEXT,
            help="Base of the build image the fleet image starts from [default: as `wheelbuild build`].",
        ),
        _network_option,
    ):
        function = option(function)
    return function


def _fleet_engine() -> DockerEngine:
    """The engine whose client the fleet's containers are started with: connected now, so a
    missing daemon is DockerUnavailable (exit 20) before anything starts. No orphan sweep: the
    fleet is not a build."""
    return seams().engine(sweep=False).connect()


def _image(engine: DockerEngine, image: str | None, base_image: str | None) -> str:
    if image:
        return image
    return dist_fleet.dist_image(engine, progress=Console().log, base_image=base_image)


@click.command("scheduler")
@click.option("--name", default=DEFAULT_SCHEDULER, show_default=True, type=GIVEN_TEXT, help="Container name.")
@click.option("--port", default=dist_fleet.SCHEDULER_PORT, show_default=True, type=PORT, help="Its port.")
@click.option(
    "--publish",
    metavar="ADDRESS",
    type=GIVEN_TEXT,
    help="Also listen on this host address (0.0.0.0, or one interface's IP), same port, for other machines.",
)
@_start_options
def dist_scheduler(
    name: str,
    port: int,
    publish: str | None,
    token_file: Path,
    image: str | None,
    base_image: str | None,
    network: str,
) -> None:
    """Start an sccache-dist scheduler in a container: the one place build servers register
    and builds (wheelbuild build --dist URL) ask for a server. Runs until `wheelbuild dist stop`."""
    dist_fleet.check_token_file(token_file)
    dist_fleet.check_name(name, "--name")
    dist_fleet.check_name(network, "--network")
    engine = _fleet_engine()
    tag, client = _image(engine, image, base_image), engine.client
    dist_fleet.start_scheduler(
        client, name=name, network=network, token_file=token_file, image=tag, port=port, publish=publish
    )
    url = f"http://{name}:{port}"
    click.echo(f"started scheduler {name} ({tag}) on network {network}")
    click.echo(f"  on {network}: {url}")
    if publish:
        click.echo(f"  from other machines: http://<this host's address>:{port} (published on {publish})")
    click.echo(
        f"  next, per build machine: wheelbuild dist server --network {network} --scheduler {url} "
        f"--memory SIZE --token-file {token_file}"
    )
    click.echo(f"  builds: wheelbuild build --dist {url} --dist-network {network} ...")


def _scheduler_url(text: str) -> str:
    found = scheduler_address(text)
    if found is None or found[0].username:
        raise BadUrl(
            f"--scheduler {text!r} is not a scheduler URL",
            f"give it as http://HOST:PORT, e.g. http://{DEFAULT_SCHEDULER}:{dist_fleet.SCHEDULER_PORT}",
        )
    parts, port = found
    return f"{parts.scheme}://{parts.hostname}:{port}"


@click.command("server")
@click.option("--name", default="wbdist-server", show_default=True, type=GIVEN_TEXT, help="Container name.")
@click.option(
    "--scheduler",
    default=f"http://{DEFAULT_SCHEDULER}:{dist_fleet.SCHEDULER_PORT}",
    show_default=True,
    type=GIVEN_TEXT,
    help="The scheduler's URL, as the server reaches it.",
)
@click.option(
    "--memory", required=True, type=GIVEN_TEXT, help="The server's memory limit (swap included): 16g."
)
@click.option("--cpus", type=float, help="Cores it may use [default: all of this machine's].")
@click.option(
    "--job-memory",
    type=GIVEN_TEXT,
    help="Peak of the heaviest job it runs [default: flash-attn's bwd cicc, 5.8 GiB]; sizes its slots.",
)
@click.option("--port", default=dist_fleet.SERVER_PORT, show_default=True, type=PORT, help="Its port.")
@click.option(
    "--public-addr",
    metavar="HOST:PORT",
    type=GIVEN_TEXT,
    help="The address clients on other machines reach it at (the port is then published); "
    "default: its IP on --network.",
)
@_start_options
def dist_server(
    name: str,
    scheduler: str,
    memory: str,
    cpus: float | None,
    job_memory: str | None,
    port: int,
    public_addr: str | None,
    token_file: Path,
    image: str | None,
    base_image: str | None,
    network: str,
) -> None:
    """Start an sccache-dist build server in a memory-limited container, sized so the jobs the
    scheduler sends it at once fit its memory. Runs until `wheelbuild dist stop`."""
    url = _scheduler_url(scheduler)
    limit = parse_memory(memory)
    cores = check_cpus(cpus) or float(len(os.sched_getaffinity(0)))
    peak = parse_memory(job_memory) if job_memory else None
    sizing = dist_fleet.server_sizing(memory=limit, cores=cores, job_memory=peak)
    dist_fleet.check_token_file(token_file)
    dist_fleet.check_name(name, "--name")
    dist_fleet.check_name(network, "--network")
    engine = _fleet_engine()
    tag = _image(engine, image, base_image)
    container = dist_fleet.start_server(
        engine.client, name=name, network=network, token_file=token_file, image=tag, scheduler_url=url,
        memory=limit, cpus=cores, job_memory=peak, port=port, public_addr=public_addr,
    )  # fmt: skip
    click.echo(f"started build server {container.name} ({tag}) on network {network}, registering with {url}")
    click.echo(
        f"  --memory {format_bytes(limit)}, --cpus {sizing.cpus}: at most {sizing.max_jobs} jobs at once"
    )
    click.echo(f"  why: {sizing.reason}")
    click.echo(
        f"  clients reach it at {public_addr or f'its IP on {network}, port {port}'}; sandbox probe: ok"
    )


@click.command("stop")
@click.option("--name", type=GIVEN_TEXT, help="Only this container [default: every fleet container].")
@click.option("--network", type=GIVEN_TEXT, help="Only the fleet on this network.")
def dist_stop(name: str | None, network: str | None) -> None:
    """Remove the fleet's containers (by their label, never anything else), the servers' build
    volumes, and the fleet's networks once empty."""
    removed = dist_fleet.stop_fleet(_fleet_engine().client, name=name, network=network)
    for item in removed:
        click.echo(f"removed {item}")
    if not removed:
        click.echo("no fleet container here" + (f" named {name}" if name else ""))


@click.group("dist")
def dist() -> None:
    """A fleet of sccache-dist containers that spreads one build's compiles over machines (build
    --dist URL): a scheduler, a server per build machine, and stop."""


def _old_name(command: click.Command, name: str) -> click.Command:
    """The same command under its old name, run as before but not shown in help."""
    old = copy.copy(command)
    old.name, old.hidden = name, True
    return old


for _command in (dist_scheduler, dist_server, dist_stop):
    dist.add_command(_command)

COMMANDS = (dist, *(_old_name(c, f"dist-{c.name}") for c in (dist_scheduler, dist_server, dist_stop)))
