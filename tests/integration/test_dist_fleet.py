"""The sccache-dist fleet on a real Docker engine (issue 15, part 2): dist_fleet's functions start a
scheduler and two memory-limited build servers on a fresh bridge network; a client container on
that network sees both servers, with the CPU counts their memory allows; the token is in no
container's logs and no `docker inspect`. Everything is removed afterwards."""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import pytest
from wheelbuild.engine import dist_fleet
from wheelbuild.engine.docker_engine import DockerEngine

PREFIX = "wbdist-test-"
NETWORK = f"{PREFIX}net"
SCHEDULER = f"{PREFIX}scheduler"
SERVERS = {f"{PREFIX}server1": "1g", f"{PREFIX}server2": "1536m"}
JOB_MEMORY = 384 * 1024**2  # explicit: small servers, light jobs
CLIENT = f"{PREFIX}client"
CLIENT_CONFIG = (
    '[dist]\nscheduler_url = "http://{scheduler}:10600"\ntoolchains = []\n'
    'cache_dir = "/tmp/wbdist-client-toolchains"\n\n[dist.auth]\ntype = "token"\ntoken = "@TOKEN@"\n'
)


@dataclass(frozen=True)
class Fleet:
    client: docker.DockerClient
    image: str
    token: str
    token_file: Path
    names: tuple[str, ...]


def _remove_all(client: docker.DockerClient) -> None:
    """Only what this test names: its containers, its servers' volumes, its network."""
    for name in (CLIENT, *SERVERS, SCHEDULER):
        with contextlib.suppress(docker.errors.NotFound):
            client.containers.get(name).remove(force=True)
    for name in SERVERS:
        with contextlib.suppress(docker.errors.NotFound):
            client.volumes.get(f"{name}-build").remove(force=True)
    with contextlib.suppress(docker.errors.NotFound):
        client.networks.get(NETWORK).remove()


@pytest.fixture(scope="module")
def fleet(
    docker_client: docker.DockerClient, base_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    _remove_all(docker_client)  # an interrupted earlier run's leftovers (these names are ours)
    token = secrets.token_hex(32)
    token_file = tmp_path_factory.mktemp("wbdist") / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    try:
        image = dist_fleet.dist_image(
            DockerEngine(docker_client, sweep=False), progress=lambda line: None, base_image=base_image
        )
        dist_fleet.ensure_network(docker_client, NETWORK)
        dist_fleet.start_scheduler(
            docker_client, name=SCHEDULER, network=NETWORK, token_file=token_file, image=image
        )
        for name, memory in SERVERS.items():
            dist_fleet.start_server(
                docker_client, name=name, network=NETWORK, token_file=token_file, image=image,
                scheduler_url=f"http://{SCHEDULER}:10600", memory=_bytes(memory), cpus=2.0,
                job_memory=JOB_MEMORY,
            )  # fmt: skip
        yield Fleet(docker_client, image, token, token_file, (SCHEDULER, *SERVERS))
    finally:
        _remove_all(docker_client)


def _bytes(size: str) -> int:
    return int(size[:-1]) * {"m": 1024**2, "g": 1024**3}[size[-1]]


def _dist_status(fleet: Fleet) -> dict:
    """`sccache --dist-status` from a client container on the network (config as in dist-smoke)."""
    config = CLIENT_CONFIG.format(scheduler=SCHEDULER)
    script = (
        "t=$(</run/wbdist/token); c=$WBDIST_CONFIG; c=${c//@TOKEN@/$t}; unset t\n"
        '(umask 077; printf "%s\\n" "$c" > /tmp/client.conf); unset c\n'
        "export SCCACHE_CONF=/tmp/client.conf SCCACHE_DIR=/tmp/sccache\n"
        "sccache --start-server >/dev/null\n"
        "for _ in $(seq 1 60); do s=$(sccache --dist-status); [[ $s == *'\"num_servers\":2'* ]] && break; sleep 1; done\n"
        'printf "%s\\n" "$s"\n'
    )
    output = fleet.client.containers.run(
        fleet.image, ["bash", "-euo", "pipefail", "-c", script], name=CLIENT, network=NETWORK,
        environment={"WBDIST_CONFIG": config},
        volumes={str(fleet.token_file.resolve()): {"bind": "/run/wbdist/token", "mode": "ro"}},
        mem_limit="512m", remove=False,
    )  # fmt: skip
    text = output.decode().strip().splitlines()[-1]
    assert fleet.token not in output.decode()
    return json.loads(text)


def test_two_memory_limited_servers_register_with_the_scheduler(fleet: Fleet) -> None:
    status = _dist_status(fleet)
    print(f"{fleet.image}: sccache --dist-status: {json.dumps(status)}")
    # {"SchedulerStatus":["http://...",{"num_servers":2,"num_cpus":N,"in_progress":0}]}
    detail = status["SchedulerStatus"][1]
    assert detail["num_servers"] == 2, status
    # server1: 1 GiB less 256 MiB holds 2 jobs of 384 MiB -> --cpus 1 (1 + 1 jobs);
    # server2: 1.5 GiB less 256 MiB holds 3 -> --cpus 2 (2 + 1 jobs). The CPU count each reports
    # is the container's quota, which is what the scheduler admits by.
    sizes = [
        dist_fleet.server_sizing(memory=_bytes(m), cores=2.0, job_memory=JOB_MEMORY) for m in SERVERS.values()
    ]
    assert [s.cpus for s in sizes] == [1, 2]
    assert detail["num_cpus"] == sum(s.cpus for s in sizes), status


def test_servers_run_with_the_least_privilege_and_limits(fleet: Fleet) -> None:
    for name, memory in SERVERS.items():
        container = fleet.client.containers.get(name)
        host = container.attrs["HostConfig"]
        assert container.status == "running", container.logs()[-2000:]
        assert host["Memory"] == host["MemorySwap"] == _bytes(memory)
        assert host["CapDrop"] == ["ALL"] and sorted(host["CapAdd"]) == sorted(dist_fleet.SERVER_CAPS)
        assert not host["Privileged"]
        assert host["MaskedPaths"] in ([], None) and host["ReadonlyPaths"] in ([], None)
        assert any(o.startswith("seccomp=") for o in host["SecurityOpt"])
        labels = container.labels
        assert labels[dist_fleet.ROLE_LABEL] == "server" and "wheelbuild.owner" not in labels
    network = fleet.client.networks.get(NETWORK)
    assert network.attrs["Driver"] == "bridge" and network.attrs["Internal"] is False


def test_the_token_is_in_no_log_and_no_inspect(fleet: Fleet) -> None:
    time.sleep(2)  # a heartbeat or two logged
    for name in (*fleet.names, CLIENT):
        try:
            container = fleet.client.containers.get(name)
        except docker.errors.NotFound:
            continue
        logs = container.logs().decode(errors="replace")
        inspect = json.dumps(fleet.client.api.inspect_container(container.id))
        assert fleet.token not in logs, name
        assert fleet.token not in inspect, name
        assert "@TOKEN@" in inspect  # the template travels, the token does not


def test_the_build_sweep_and_reaper_never_select_the_fleet(fleet: Fleet) -> None:
    """sweep_orphans lists by OWNER_LABEL, the reaper and __exit__ by RUN_LABEL: the fleet has neither."""
    from wheelbuild.attempt.ownership import OWNER_LABEL, RUN_LABEL

    for label in (OWNER_LABEL, RUN_LABEL):
        selected = {
            c.name
            for c in fleet.client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
        }
        assert not selected & set(fleet.names), label


def test_a_second_start_by_the_same_name_is_refused(fleet: Fleet) -> None:
    from wheelbuild.errors import BadArgument

    with pytest.raises(BadArgument, match="already exists"):
        dist_fleet.start_scheduler(
            fleet.client, name=SCHEDULER, network=NETWORK, token_file=fleet.token_file, image=fleet.image
        )
