"""`wheelbuild build --dist` against a real sccache-dist fleet (issue 15, part 3): a scheduler and
two memory-limited build servers (engine/dist_fleet.py) on a private bridge network, the build
container joined to it. The fixture's units are salted, so sccache has nothing cached and every
compile is a real one that can go to a server. The report counts each server's compiles against
those run locally; a server killed while it compiles costs its jobs a local run, never the build.
The token travels as a file and is in no log, report or container config."""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import subprocess
import time
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import pytest
from elftools.elf.elffile import ELFFile
from wheelbuild.engine import dist_fleet
from wheelbuild.engine.docker_engine import DockerEngine
from wheelbuild.host.ca_bundle import DEFAULT_CA_BUNDLE
from wheelbuild.wheel.contents import inspect_wheel

from .conftest import REPO, WHEELBUILD, wheelbuild

PREFIX = "wbdist-build-"
NETWORK = f"{PREFIX}net"
SCHEDULER = f"{PREFIX}scheduler"
SERVERS = (f"{PREFIX}server1", f"{PREFIX}server2")
SERVER_MEMORY = 3 * 1024**3
JOB_MEMORY = 1024**3  # a fixture unit's cicc; the servers' CPU count is sized from it
TORCH_INDEX = os.environ.get("WHEELBUILD_TORCH_INDEX_URL", "https://pypi.org/simple")


@dataclass(frozen=True)
class Fleet:
    client: docker.DockerClient
    token: str
    token_file: Path


def _remove_all(client: docker.DockerClient) -> None:
    for name in (*SERVERS, SCHEDULER):
        with contextlib.suppress(docker.errors.NotFound):
            client.containers.get(name).remove(force=True)
    for name in SERVERS:
        with contextlib.suppress(docker.errors.NotFound):
            client.volumes.get(f"{name}-build").remove(force=True)
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        client.networks.get(NETWORK).remove()


@pytest.fixture(scope="module")
def fleet(
    docker_client: docker.DockerClient, base_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    _remove_all(docker_client)
    token = secrets.token_hex(32)
    token_file = tmp_path_factory.mktemp("wbdist-build") / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    try:
        image = dist_fleet.dist_image(
            DockerEngine(docker_client, sweep=False),
            progress=lambda line: None,
            base_image=base_image,
            ca_bundle=DEFAULT_CA_BUNDLE,
        )
        dist_fleet.ensure_network(docker_client, NETWORK)
        dist_fleet.start_scheduler(
            docker_client, name=SCHEDULER, network=NETWORK, token_file=token_file, image=image
        )
        for name in SERVERS:
            dist_fleet.start_server(
                docker_client, name=name, network=NETWORK, token_file=token_file, image=image,
                scheduler_url=f"http://{SCHEDULER}:10600", memory=SERVER_MEMORY, cpus=2.0, job_memory=JOB_MEMORY,
            )  # fmt: skip
        yield Fleet(docker_client, token, token_file)
    finally:
        _remove_all(docker_client)


COMMON = (
    "build",
    "wbdemo",
    "--torch",
    "cu130",
    "--torch-index-url",
    TORCH_INDEX,
    "--python",
    "3.11",
    "--memory",
    "6g",
    "--no-gate",
)


def _dist_flags(fleet: Fleet) -> tuple[str, ...]:
    return (
        "--dist", f"http://{SCHEDULER}:10600", "--dist-network", NETWORK,
        "--dist-token-file", str(fleet.token_file), "--dist-servers", "2x2x3g",
    )  # fmt: skip


def _args(out: Path, fleet: Fleet, *extra: str) -> list[str]:
    salt = ("--env", f"WBDEMO_BLOB_SALT={uuid.uuid4().hex}")
    return [*COMMON, *_dist_flags(fleet), *salt, "--output-dir", str(out), *extra]


def _report(out: Path) -> dict:
    (path,) = out.glob("runs/*/build-report.json")
    return json.loads(path.read_text())


def _server_addresses(fleet: Fleet) -> dict[str, str]:
    """ip -> server name, read before any is killed (a killed container loses its address)."""
    found = {}
    for name in SERVERS:
        networks = fleet.client.containers.get(name).attrs["NetworkSettings"]["Networks"]
        found[networks[NETWORK]["IPAddress"]] = name
    return found


def test_a_dist_build_runs_its_device_compiles_on_the_servers(fleet: Fleet, tmp_path: Path) -> None:
    done = wheelbuild(*_args(tmp_path, fleet, "--env", "WBDEMO_BLOB_ELEMENTS=1000"))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    report = _report(tmp_path)
    attempt = report["attempts"][-1]
    by_server, local = attempt["dist_by_server"], attempt["dist_local"]
    names = _server_addresses(fleet)
    assert {names[address.rsplit(":", 1)[0]] for address in by_server} <= set(SERVERS)
    # Goal: >= 80% of the compiles sccache distributes (cudafe++, cicc, ptxas, host) run remotely.
    assert attempt["dist_remote_share"] >= 0.8, (by_server, local)
    assert sum(by_server.values()) >= 4 * 2  # 4 .cu units x 2 archs of device code at least
    assert "--dist: " in done.stdout and "remote" in done.stdout
    assert any("bound:" in reason for reason in report["plan"]["reasons"])
    (wheel,) = tmp_path.glob("runs/*/*.whl")
    assert inspect_wheel(wheel).modules[0].archs.sass == {100, 120}
    # The token: in no log, report or terminal line, and not in the build container's config.
    for path in tmp_path.glob("runs/*/*"):
        if path.suffix in (".log", ".json", ".html"):
            assert fleet.token not in path.read_text(errors="replace"), path
    assert fleet.token not in done.stdout + done.stderr


# What a remote compile may change: sccache-dist compiles the host code (binding.cpp) from its
# preprocessed text on the server, so its DWARF (line tables, abbreviations) differs, and with it
# the build-id, a hash over the whole file. Measured here: every other section the same bytes.
DEBUG_ONLY = {".note.gnu.build-id"}


def test_the_distributed_extension_matches_the_local_build_in_code_and_device_code(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The same salted source built locally, then with --dist and SCCACHE_RECACHE=1 (sccache
    compiles again, on the servers, instead of answering from the local build's cache entries):
    the extension's code, data, symbols and fatbin (sm_100 and sm_120) are the same bytes; only
    the debug sections and the build-id differ."""
    salt = ("--env", f"WBDEMO_BLOB_SALT={uuid.uuid4().hex}", "--env", "WBDEMO_BLOB_ELEMENTS=1000")
    local = wheelbuild(*COMMON, *salt, "--output-dir", str(tmp_path / "local"))
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr
    distributed = wheelbuild(
        *COMMON,
        *_dist_flags(fleet),
        *salt,
        "--env",
        "SCCACHE_RECACHE=1",
        "--output-dir",
        str(tmp_path / "dist"),
    )
    assert distributed.returncode == 0, distributed.stdout[-3000:] + distributed.stderr
    assert sum(_report(tmp_path / "dist")["attempts"][-1]["dist_by_server"].values()) >= 8  # really remote
    local_sections, dist_sections = _sections(tmp_path / "local"), _sections(tmp_path / "dist")
    assert local_sections.keys() == dist_sections.keys()
    differ = {name for name in local_sections if local_sections[name] != dist_sections[name]}
    assert {".text", ".rodata", ".nv_fatbin", ".dynsym", ".dynstr", ".data"} <= local_sections.keys()
    assert differ <= {name for name in local_sections if name.startswith(".debug_")} | DEBUG_ONLY, differ


def _sections(out: Path) -> dict[str, bytes]:
    (wheel,) = out.glob("runs/*/*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (member,) = [n for n in archive.namelist() if n.endswith(".so") and "/_C." in n]
        elf = ELFFile(io.BytesIO(archive.read(member)))
        return {section.name: section.data() for section in elf.iter_sections() if section.name}


def test_a_server_killed_while_it_compiles_costs_its_jobs_not_the_build(fleet: Fleet, tmp_path: Path) -> None:
    # Heavier units (seconds of cicc each), so a server is seen compiling before the build ends.
    args = _args(tmp_path, fleet, "--env", "WBDEMO_BLOB_ELEMENTS=1500000")
    proc = subprocess.Popen(
        [WHEELBUILD, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    killed: dict[str, list[str]] = {}
    try:
        deadline = time.monotonic() + 900
        while not killed and time.monotonic() < deadline and proc.poll() is None:
            for name in SERVERS:
                if compiling := _compiles_on(fleet.client.containers.get(name)):
                    fleet.client.containers.get(name).kill()
                    killed[name] = compiling
                    break
            time.sleep(0.2)
        output, _ = proc.communicate(timeout=1200)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed, "no server was seen compiling before the build ended"
    assert proc.returncode == 0, output[-4000:]
    attempt = _report(tmp_path)["attempts"][-1]
    assert attempt["returncode"] == 0 and attempt["dist_by_server"]
    # The jobs the killed server held failed there and were compiled here instead.
    assert attempt["dist_local"] >= 1, (killed, attempt["dist_by_server"], attempt["dist_local"])
    (wheel,) = tmp_path.glob("runs/*/*.whl")
    assert inspect_wheel(wheel).modules[0].archs.sass == {100, 120}


COMPILERS = {"cicc", "ptxas", "cudafe++", "cc1plus", "fatbinary", "nvcc", "gcc", "g++", "c++"}


def _compiles_on(server: docker.models.containers.Container) -> list[str]:
    """The compiler processes running in a build server's container (its jobs), by command."""
    try:
        top = server.top()
    except docker.errors.APIError:  # not running
        return []
    column = top["Titles"].index("CMD")
    commands = [row[column] for row in top.get("Processes") or []]
    return [c for c in commands if c.split() and Path(c.split()[0]).name in COMPILERS]
