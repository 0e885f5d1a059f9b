"""`wheelbuild publish --to [user@]host:path`: a wheelhouse tree on another host over real ssh and
rsync. The host is a container (sshd + rsync on the local base image), reached on 127.0.0.1
with a key made for the test."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import docker
import pytest

from tests.indexkit import check_tree
from tests.integration.conftest import REPO, FixtureBuild, poll_until

SSHD_DIR = REPO / "tests" / "fixtures" / "sshd"
TREE = "/srv/wheels/cu130"


@dataclass(frozen=True)
class SshHost:
    container: docker.models.containers.Container
    port: int
    env: dict[str, str]  # WHEELBUILD_SSH_COMMAND with the test's key; a cache dir of its own

    def target(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}{TREE}"

    def sh(self, script: str) -> str:
        code, out = self.container.exec_run(["sh", "-c", script])
        assert code == 0, out.decode()
        return str(out.decode())

    def fetch_tree(self, dest: Path) -> Path:
        stream, _ = self.container.get_archive(TREE)
        with tarfile.open(fileobj=BytesIO(b"".join(stream))) as archive:
            archive.extractall(dest, filter="data")
        return dest / Path(TREE).name


@pytest.fixture(scope="module")
def ssh_host(
    docker_client: docker.DockerClient, base_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SshHost]:
    dockerfile = (SSHD_DIR / "Dockerfile").read_bytes()
    base_id = docker_client.images.get(base_image).id
    tag = "wheelbuild-test-sshd:" + hashlib.sha256(dockerfile + base_id.encode()).hexdigest()[:16]
    try:
        docker_client.images.get(tag)
    except docker.errors.ImageNotFound:
        docker_client.images.build(path=str(SSHD_DIR), tag=tag, buildargs={"BASE_IMAGE": base_image}, rm=True)
    keys = tmp_path_factory.mktemp("ssh")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "id")], check=True)
    (keys / "id.pub").chmod(0o644)
    container = docker_client.containers.run(
        tag,
        detach=True,
        remove=True,
        ports={"22/tcp": ("127.0.0.1", None)},
        volumes={str(keys / "id.pub"): {"bind": "/root/.ssh/authorized_keys", "mode": "ro"}},
        labels={"wheelbuild.test": "sshd"},
    )
    try:
        container.reload()
        port = int(container.attrs["NetworkSettings"]["Ports"]["22/tcp"][0]["HostPort"])
        ssh = (
            f"ssh -i {keys / 'id'} -o BatchMode=yes -o StrictHostKeyChecking=no "
            "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
        )
        env = {**os.environ, "WHEELBUILD_SSH_COMMAND": ssh, "WHEELBUILD_CACHE_DIR": str(keys / "cache")}
        deadline = time.monotonic() + 30
        while subprocess.run(
            [*ssh.split(), "-p", str(port), "root@127.0.0.1", "true"], check=False
        ).returncode:
            assert time.monotonic() < deadline, "sshd in the test container did not come up"
            time.sleep(0.5)
        yield SshHost(container=container, port=port, env=env)
    finally:
        container.kill()


def _publish(host: SshHost, *wheels: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(Path(sys.executable).parent / "wheelbuild"),
            "publish",
            *map(str, wheels),
            "--to",
            host.target(),
        ],
        env=host.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_publish_to_a_remote_tree_over_ssh_and_rsync(
    fixture_build: FixtureBuild, ssh_host: SshHost, tmp_path: Path
) -> None:
    done = _publish(ssh_host, fixture_build.wheel)
    out, err = done.communicate(timeout=300)
    assert done.returncode == 0, out + err
    assert f"added {fixture_build.wheel.name}" in out
    tree = ssh_host.fetch_tree(tmp_path)
    # Every page parses; every link resolves to a file with the hash the link names.
    projects = check_tree(tree)
    assert list(projects) == ["wbdemo"] and projects["wbdemo"] == [fixture_build.wheel.name]
    assert (tree / "files" / fixture_build.wheel.name).read_bytes() == fixture_build.wheel.read_bytes()

    again = _publish(ssh_host, fixture_build.wheel)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0 and "already there, same sha256" in out, out + err


def test_a_remote_publish_waits_for_the_remote_trees_lock(
    fixture_build: FixtureBuild, ssh_host: SshHost, tmp_path: Path
) -> None:
    ssh_host.sh(f"rm -rf {TREE} /tmp/held /tmp/release && mkdir -p {TREE}")
    # Another publisher (here: flock on the host itself) holds the tree's lock until told to let go.
    hold = "touch /tmp/held; until [ -e /tmp/release ]; do sleep 0.1; done"
    holder = ssh_host.container.exec_run(["sh", "-c", f"flock -x {TREE}/.lock sh -c '{hold}'"], detach=True)
    del holder
    assert poll_until(lambda: "held" in ssh_host.sh("ls /tmp"), timeout_s=30), (
        "the holder never took the lock"
    )
    waiting = _publish(ssh_host, fixture_build.wheel)
    try:
        # The publish's own flock (the one with a wait limit) is on the host, waiting for the lock.
        assert poll_until(lambda: _lock_waiters(ssh_host) == 1, timeout_s=120), (
            "publish never asked for the lock"
        )
        assert waiting.poll() is None, "publish ended while another held the lock"
        assert ssh_host.sh(f"ls -A {TREE}").split() == [".lock"]  # nothing written meanwhile
    finally:
        ssh_host.sh("touch /tmp/release")
    out, err = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, out + err
    assert list(check_tree(ssh_host.fetch_tree(tmp_path))) == ["wbdemo"]


def _lock_waiters(host: SshHost) -> int:
    """Processes on the host running publish's `flock -x -w ...` on the tree's lock."""
    listing = host.sh("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done 2>/dev/null")
    return sum(line.startswith("flock -x -w ") and f"{TREE}/.lock" in line for line in listing.splitlines())


def test_an_unreachable_host_is_a_clear_error(fixture_build: FixtureBuild, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "WHEELBUILD_SSH_COMMAND": "ssh -o BatchMode=yes -o ConnectTimeout=3",
        "WHEELBUILD_CACHE_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [str(Path(sys.executable).parent / "wheelbuild"), "publish", str(fixture_build.wheel),
         "--to", "ssh://root@127.0.0.1:9/srv/x"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 58, done.stdout + done.stderr
    assert "could not lock" in done.stderr and "remedy:" in done.stderr
