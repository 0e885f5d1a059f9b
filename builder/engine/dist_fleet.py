"""The sccache-dist fleet's Docker edge: the fleet image, a scheduler and build servers as
long-lived containers on a user-defined bridge network, and their removal. What
scripts/dist-smoke proved by hand (its header holds the findings), as functions of the docker
client DockerEngine opened (engine.client), which also builds the fleet's image; `wheelbuild
dist scheduler`, `dist server` and `dist stop` (cli/dist.py) call them, and
so does the --dist build's integration test.

The token. sccache-dist 0.16.0 reads its token from its config file only. It reaches each
container as a read-only bind mount of the user's token file (TOKEN_INSIDE); the container's
command is a bash script that splices it into the config with builtins (`$(<file)`, `${c//}`,
printf) and writes the result, mode 0600, under /tmp. The config's template travels in the
environment with `@TOKEN@` in place of the token. So the token is in no argv, environment value,
label, image layer or log, and `docker inspect` shows only the mount's path.

Server admission by memory. sccache-dist 0.16.0 cannot cap a server's concurrent jobs: its
server config (deny_unknown_fields) has builder, cache_dir, public_addr, bind_address,
scheduler_url, scheduler_auth and toolchain_cache_size, and no job or CPU count. The server
reports `std::thread::available_parallelism()` as num_cpus in its heartbeat (which honours the
container's CPU quota and cpuset), and the scheduler assigns it jobs while it has fewer than
num_cpus + 1 + num_cpus // 8 (load_weight, src/bin/sccache-dist/main.rs); it never looks at
memory. So the CPU count the container sees is the one lever, and server_sizing() sets it:
the server's memory, less SERVER_RESERVE for sccache-dist itself, holds `memory_slots` of the
heaviest remote job (the governor's model: fleet.Server.slots_for, min(cores, memory // job));
--cpus is then the largest whole N <= the cores given with N + 1 + N // 8 <= memory_slots, so
the most jobs the scheduler sends it at once fit its memory. A server whose memory holds fewer
than two such jobs cannot be made safe (N = 1 already means 2 jobs) and is refused. The
heaviest job defaults to flash-attn's measured bwd cicc (HEAVIEST_JOB); `job_memory` replaces it.

Labels: every fleet container carries ROLE_LABEL (and FLEET_LABEL: its network) and never the
build's ownership labels (ownership.OWNER_LABEL, RUN_LABEL), so a build's orphan sweep and its
reaper, which select by those, never touch the fleet; dist stop selects by ROLE_LABEL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import docker.models.containers
import docker.models.networks

from ..errors import BadArgument, BadMemory
from ..host.ca_bundle import resolve_ca_bundle
from ..image.inputs import ImageInputs, image_script, production_base
from ..image.names import DIST_DOCKERFILE, dist_image_tag
from ..plan.fleet import Fleet, RemoteJob
from ..units import format_bytes
from .docker_engine import DockerEngine

OnLine = Callable[[str], None]

SECCOMP_PROFILE = "sccache-dist-seccomp.json"
IMAGE_LABEL = "org.wheelbuild.dist.inputs.sha256"
ROLE_LABEL = "wheelbuild.plan.dist.role"  # scheduler | server | network | build-dir
FLEET_LABEL = "wheelbuild.plan.dist.network"
TOKEN_INSIDE = "/run/wbdist/token"
BUILD_DIR_INSIDE = "/sccache-dist"
SCHEDULER_PORT = 10600
SERVER_PORT = 10501
SERVER_CAPS = ("SYS_ADMIN", "SETFCAP", "DAC_OVERRIDE")  # each one's reason: scripts/dist-smoke
SCHEDULER_MEMORY = 256 * 1024**2
MIB = 1024**2
# sccache-dist's own process, bwrap and the overlay builder, beside the jobs.
SERVER_RESERVE = 256 * MIB
# The heaviest remote step measured (bench/flash-attn-phases.tsv, bench/fleet, plan/fleet.py's
# StepProfile): cicc of flash_bwd_hdim128_fp16_sm80.cu for sm_120, 85 s, 5788 MiB RSS and a
# 5949 MiB cgroup peak (what a server's limit charges) on nvcc 13.1.
HEAVIEST_JOB = RemoteJob(seconds=85.35 + 12.38, memory=5949 * MIB)
_TOKEN = re.compile(r"^[A-Za-z0-9._~+/=-]+$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


# --- pure: sizing, configs, the in-container script ----------------------------------------------


def scheduler_jobs(cpus: int) -> int:
    """Jobs sccache-dist 0.16.0's scheduler sends a server reporting `cpus` at once."""
    return cpus + 1 + cpus // 8


@dataclass(frozen=True)
class ServerSizing:
    cpus: int  # the container's --cpus, so the CPU count the server reports
    max_jobs: int  # what the scheduler then sends it at once: scheduler_jobs(cpus)
    memory_slots: int  # heaviest jobs its memory holds
    slots: int  # the governor's: min(cores, memory_slots)
    job_memory: int
    reason: str


def server_sizing(*, memory: int, cores: float, job_memory: int | None = None) -> ServerSizing:
    """The --cpus that makes the scheduler's job count memory-safe (see the module doc)."""
    if job_memory is not None and job_memory <= 0:
        raise BadMemory(f"--job-memory {job_memory} is not a size", "give the heaviest job's peak, e.g. 6g")
    job = HEAVIEST_JOB if job_memory is None else RemoteJob(HEAVIEST_JOB.seconds, job_memory)
    whole = max(1, int(cores))
    usable = memory - SERVER_RESERVE
    in_memory = max(0, usable) // job.memory
    # The governor's model (plan/fleet.py): a server runs min(cores, memory // job) such jobs.
    slots = Fleet.of(1, whole, max(0, usable)).slots_for(job)
    cpus = max((n for n in range(1, whole + 1) if scheduler_jobs(n) <= in_memory), default=0)
    if cpus == 0:
        raise BadMemory(
            f"--memory {format_bytes(memory)} holds {in_memory} job(s) of {format_bytes(job.memory)} "
            f"beside sccache-dist's {format_bytes(SERVER_RESERVE)}; the scheduler may send any server 2 at once",
            f"give the server --memory {format_bytes(2 * job.memory + SERVER_RESERVE)} or more"
            + (", or a smaller --job-memory if its jobs are lighter" if job_memory is None else ""),
        )
    why = (
        f"--cpus {cpus}: {format_bytes(memory)} less {format_bytes(SERVER_RESERVE)} holds {in_memory} "
        f"job(s) of {format_bytes(job.memory)} ({slots} slot(s) with {whole} core(s)); sccache-dist's "
        f"scheduler sends a server with N CPUs up to N + 1 + N // 8 jobs, {scheduler_jobs(cpus)} here"
    )
    return ServerSizing(cpus, scheduler_jobs(cpus), in_memory, slots, job.memory, why)


def scheduler_config(port: int = SCHEDULER_PORT) -> str:
    """The scheduler's config, `@TOKEN@` in place of the shared token."""
    return (
        f'public_addr = "0.0.0.0:{port}"\n\n'
        '[client_auth]\ntype = "token"\ntoken = "@TOKEN@"\n\n'
        '[server_auth]\ntype = "token"\ntoken = "@TOKEN@"\n'
    )


def server_config(scheduler_url: str, *, port: int = SERVER_PORT, public_addr: str | None = None) -> str:
    """A build server's config, `@TOKEN@` in place of the token. Without `public_addr` it is the
    container's own IP on its network (`@PUBLIC_IP@`, filled in at start): a socket address,
    never a name."""
    return (
        f'cache_dir = "{BUILD_DIR_INSIDE}/toolchains"\n'
        "toolchain_cache_size = 4294967296\n"
        f'public_addr = "{public_addr or f"@PUBLIC_IP@:{port}"}"\n'
        f'bind_address = "0.0.0.0:{port}"\n'
        f'scheduler_url = "{scheduler_url}"\n\n'
        f'[builder]\ntype = "overlay"\nbuild_dir = "{BUILD_DIR_INSIDE}/build"\nbwrap_path = "/usr/bin/bwrap"\n\n'
        '[scheduler_auth]\ntype = "token"\ntoken = "@TOKEN@"\n'
    )


def start_script(role: str) -> str:
    """The container's command: render $WBDIST_CONFIG with the mounted token, by bash builtins
    only (no process sees the token in its argv), then become sccache-dist."""
    return (
        "set -euo pipefail\n"
        f"t=$(<{TOKEN_INSIDE}); c=$WBDIST_CONFIG; unset WBDIST_CONFIG\n"
        '[ -n "$t" ] || { echo "wbdist: the token file is empty" >&2; exit 64; }\n'
        "c=${c//@TOKEN@/$t}; unset t\n"
        "if [[ $c == *@PUBLIC_IP@* ]]; then ip=$(hostname -i); c=${c//@PUBLIC_IP@/${ip%% *}}; fi\n"
        f"mkdir -p /tmp/wbdist{' ' + BUILD_DIR_INSIDE + '/build ' + BUILD_DIR_INSIDE + '/toolchains' if role == 'server' else ''}\n"
        '(umask 077; printf "%s\\n" "$c" > /tmp/wbdist/config.toml); unset c\n'
        f"exec sccache-dist {role} --config /tmp/wbdist/config.toml\n"
    )


def check_token_file(path: Path) -> Path:
    """The token file, resolved, once it is a non-empty file of one token (read here, never shown)."""
    remedy = "write one token to a file only you can read, e.g. (umask 077; openssl rand -hex 32 > token)"
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadArgument(f"the token file {path} cannot be read ({type(exc).__name__})", remedy) from exc
    if not text or len(text) > 4096 or not _TOKEN.match(text):
        why = "is empty" if not text else "does not hold one token (letters, digits, . _ ~ + / = -)"
        raise BadArgument(f"the token file {path} {why}", remedy)
    return path.resolve()


def check_name(name: str, what: str) -> str:
    if not _NAME.match(name):
        raise BadArgument(
            f"{what} {name!r} is not a Docker name",
            "use letters, digits, '.', '_' and '-' (e.g. wbdist-server1)",
        )
    return name


def labels(role: str, network: str) -> dict[str, str]:
    """The fleet's labels: found by dist stop, never by the build's orphan sweep or reaper."""
    return {ROLE_LABEL: role, FLEET_LABEL: network}


# --- the Docker edge ---------------------------------------------------------------------------


def dist_image(
    engine: DockerEngine,
    *,
    progress: OnLine,
    base_image: str | None = None,
    ca_bundle: Path | None = None,
) -> str:
    """The fleet image's tag: images/Dockerfile.sccache-dist FROM the build image. The build
    image is made first as `wheelbuild build` makes it (the same inputs, so the same tag: reused
    when present); its base is `base_image`, else $WHEELBUILD_BASE_IMAGE, else the production
    manylinux pin; its CA bundle `ca_bundle`, else the host's (host/ca_bundle.py, as the
    build's). The fleet image is tagged by dist_image_tag and reused when present."""
    base = base_image or os.environ.get("WHEELBUILD_BASE_IMAGE") or production_base()
    base_id = "" if "@sha256:" in base else engine.local_image_id(base)
    build = engine.ensure_image(
        ImageInputs.load(base_image=base, base_id=base_id, ca_bundle=resolve_ca_bundle(ca_bundle)), progress
    )
    dockerfile = image_script(DIST_DOCKERFILE).read_bytes()
    tag = dist_image_tag(dockerfile, build.id)
    if not engine.local_image_id(tag):
        progress(f"building {tag} FROM {build.tag} (bubblewrap and sccache-dist; once per build image)")
    image_labels = {IMAGE_LABEL: tag.rpartition(":")[2]}
    return engine.ensure_dockerfile_image(dockerfile, tag, {"BUILD_IMAGE": build.tag}, image_labels, progress)


def ensure_network(client: docker.DockerClient, name: str) -> None:
    """A user-defined bridge network by that name, made when missing. Not --internal: a build
    container on it still reaches PyPI for its first downloads."""
    check_name(name, "network")
    try:
        client.networks.get(name)
        return
    except docker.errors.NotFound:
        pass
    try:
        client.networks.create(name, driver="bridge", internal=False, labels=labels("network", name))
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # made meanwhile by another start: the same network
            raise


def start_scheduler(
    client: docker.DockerClient,
    *,
    name: str,
    network: str,
    token_file: Path,
    image: str,
    port: int = SCHEDULER_PORT,
    publish: str | None = None,
) -> docker.models.containers.Container:
    """The scheduler, on `network` at http://NAME:PORT (and on the host's `publish` address,
    same port, when given). No capability at all: it runs as the token file's owner, who can
    read it."""
    token = check_token_file(token_file)
    owner = token.stat()
    host_config = client.api.create_host_config(
        binds={str(token): {"bind": TOKEN_INSIDE, "mode": "ro"}},
        mem_limit=SCHEDULER_MEMORY,
        memswap_limit=SCHEDULER_MEMORY,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        restart_policy={"Name": "unless-stopped"},
        port_bindings={port: (publish, port)} if publish else None,
    )
    return _start(
        client, name=check_name(name, "--name"), network=network, image=image, role="scheduler",
        host_config=host_config, config=scheduler_config(port), user=f"{owner.st_uid}:{owner.st_gid}",
        ports=[port],
    )  # fmt: skip


def start_server(
    client: docker.DockerClient,
    *,
    name: str,
    network: str,
    token_file: Path,
    image: str,
    scheduler_url: str,
    memory: int,
    cpus: float,
    job_memory: int | None = None,
    port: int = SERVER_PORT,
    public_addr: str | None = None,
) -> docker.models.containers.Container:
    """A build server under `memory` (swap included) with the CPU count server_sizing() gives
    for `cpus` cores, so the scheduler's job count fits its memory; the least privilege
    bubblewrap works with (SERVER_CAPS, the seccomp profile, unmasked /proc); its toolchains
    and build dir on the volume NAME-build. With `public_addr` (HOST:PORT, for clients on other
    machines) the port is published on the host; else clients reach it on `network`. The
    sandbox is probed before it is returned: a broken one would fail builds, not fall back."""
    token = check_token_file(token_file)
    sizing = server_sizing(memory=memory, cores=cpus, job_memory=job_memory)
    check_name(name, "--name")
    volume = f"{name}-build"
    client.volumes.create(volume, labels=labels("build-dir", network))
    host_config = client.api.create_host_config(
        binds={
            str(token): {"bind": TOKEN_INSIDE, "mode": "ro"},
            volume: {"bind": BUILD_DIR_INSIDE, "mode": "rw"},
        },
        mem_limit=memory,
        memswap_limit=memory,
        nano_cpus=sizing.cpus * 10**9,
        cap_drop=["ALL"],
        cap_add=list(SERVER_CAPS),
        security_opt=[f"seccomp={image_script(SECCOMP_PROFILE).read_text()}"],
        restart_policy={"Name": "unless-stopped"},
        port_bindings={port: port} if public_addr else None,
    )
    # --security-opt systempaths=unconfined, which the SDK lacks: bwrap mounts a fresh /proc.
    host_config["MaskedPaths"], host_config["ReadonlyPaths"] = [], []
    container = _start(
        client, name=name, network=network, image=image, role="server", host_config=host_config,
        config=server_config(scheduler_url, port=port, public_addr=public_addr), user=None, ports=[port],
    )  # fmt: skip
    probe_sandbox(container)
    return container


def _start(
    client: docker.DockerClient,
    *,
    name: str,
    network: str,
    image: str,
    role: str,
    host_config: dict[str, object],
    config: str,
    user: str | None,
    ports: list[int],
) -> docker.models.containers.Container:
    """Create and start one fleet container on `network` (made when missing)."""
    ensure_network(client, network)
    try:
        created = client.api.create_container(
            image,
            ["bash", "-c", start_script(role)],
            name=name,
            user=user,
            environment={"WBDIST_CONFIG": config, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info"},
            labels=labels(role, network),
            ports=ports,
            host_config=host_config,
            networking_config=client.api.create_networking_config(
                {network: client.api.create_endpoint_config()}
            ),
        )
    except docker.errors.ImageNotFound as exc:
        raise BadArgument(f"image {image} is not here", "leave out --image: wheelbuild builds it") from exc
    except docker.errors.APIError as exc:
        if exc.status_code == 409:
            raise BadArgument(
                f"a container named {name} already exists",
                f"remove it (wheelbuild dist stop --name {name}) or give another --name",
            ) from exc
        raise
    client.api.start(created["Id"])
    return client.containers.get(created["Id"])


# bwrap with the flags sccache-dist 0.16.0 gives it, as the child of a shell (as under
# sccache-dist: as `docker exec`'s own process --die-with-parent made it exit 137 now and then).
_PROBE = (
    "bwrap --die-with-parent --cap-drop ALL --unshare-user --unshare-cgroup --unshare-ipc --unshare-pid "
    "--unshare-net --unshare-uts --bind / / --proc /proc --dev /dev --chdir / -- /bin/echo sandbox-ok; exit $?"
)


def probe_sandbox(container: docker.models.containers.Container) -> None:
    """Run the sandbox once in the server; a server that cannot is removed and refused."""
    code, output = container.exec_run(["bash", "-c", _PROBE])
    text = (output or b"").decode(errors="replace").strip()
    if code != 0 or "sandbox-ok" not in text:
        container.remove(force=True)
        raise BadArgument(
            f"bubblewrap cannot run in {container.name}: {text.splitlines()[-1:] or code}",
            "run the server on a Docker engine that allows the seccomp profile and the capabilities "
            "it asks for (not rootless, no AppArmor profile denying mounts); see deploy/sccache-dist/README.md",
        )


def fleet_containers(
    client: docker.DockerClient, *, name: str | None = None, network: str | None = None
) -> list[docker.models.containers.Container]:
    """The fleet's containers, running or not: all, those on one network, or one by name."""
    found = client.containers.list(all=True, filters={"label": ROLE_LABEL}, ignore_removed=True)
    return [
        c
        for c in found
        if (name is None or c.name == name) and (network is None or c.labels.get(FLEET_LABEL) == network)
    ]


def stop_fleet(
    client: docker.DockerClient, *, name: str | None = None, network: str | None = None
) -> list[str]:
    """Remove the fleet's containers (all, on one network, or one by name), the servers' build
    volumes, and a network of the fleet's left empty. The names removed, containers first."""
    removed = []
    for container in fleet_containers(client, name=name, network=network):
        with_volume = container.labels.get(ROLE_LABEL) == "server"
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            continue
        removed.append(container.name)
        if with_volume:
            removed += _remove_volume(client, f"{container.name}-build")
    if name is None:
        for net in client.networks.list(filters={"label": f"{ROLE_LABEL}=network"}):
            if network is None or net.name == network:
                removed += _remove_network(net)
    return removed


def _remove_volume(client: docker.DockerClient, volume: str) -> list[str]:
    try:
        client.volumes.get(volume).remove(force=False)
    except docker.errors.NotFound:
        return []
    return [volume]


def _remove_network(net: docker.models.networks.Network) -> list[str]:
    try:
        net.reload()
        if net.attrs.get("Containers"):
            return []  # a build or a container not of the fleet still uses it
        net.remove()
    except docker.errors.NotFound:
        return []
    return [net.name]
