"""Each source of OOM evidence, proven alone on a real kernel OOM kill: a child process killed
in a 64 MiB container whose PID 1 lives on (as a compiler is killed under cibuildwheel's bash).
The watcher is the one every build attempt uses. A "Killed" line in a log is not among them: it
counts only when one of these agrees (tests/unit/test_engine_failure.py).

The cgroup counter read is the engine's: v1's memory.oom_control `oom_kill` on these machines (a
hybrid hierarchy, Docker's cgroup driver cgroupfs), v2's memory.events `oom_kill` on a cgroup v2
host; both readers are also tested on fixture trees (tests/unit/test_cgroup.py)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import docker
import pytest
from wheelbuild.attempt.ownership import ATTEMPT_LABEL, OWNER_LABEL, RUN_LABEL, owner_token
from wheelbuild.engine.watcher import AttemptWatcher


@pytest.fixture(scope="module")
def killed(docker_client: docker.DockerClient, base_image: str) -> Iterator[AttemptWatcher]:
    attempt = f"oom-evidence-{secrets.token_hex(4)}"
    watcher = AttemptWatcher(docker_client, attempt)
    with watcher:
        container = docker_client.containers.run(
            base_image,
            ["sh", "-c", "python3 -c 'x = bytearray(512 * 1024 * 1024)'; echo child-exit=$?; sleep 4"],
            detach=True, mem_limit="64m", memswap_limit="64m", network_disabled=True,
            labels={ATTEMPT_LABEL: attempt, RUN_LABEL: attempt, OWNER_LABEL: owner_token()},
        )  # fmt: skip
        try:
            status = container.wait(timeout=60)
            log = container.logs().decode()
            # Docker's event may arrive, and State.OOMKilled is set, only as the container ends:
            # wait, to a deadline, until the watcher has seen every kind (the tests say which not).
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (
                watcher.oom_events and watcher.state_oom_killed and watcher.cgroup_oom_kills
            ):
                time.sleep(0.1)
        finally:
            container.remove(force=True)
    assert "child-exit=137" in log  # the child was SIGKILLed...
    assert status["StatusCode"] == 0  # ...while PID 1 exited 0: the exit code says nothing
    yield watcher


def test_dockers_oom_event_fires_on_a_real_kill(killed: AttemptWatcher) -> None:
    assert killed.oom_events >= 1


def test_state_oomkilled_fires_on_a_real_kill(killed: AttemptWatcher) -> None:
    assert killed.state_oom_killed is True


def test_the_cgroup_oom_kill_counter_fires_on_a_real_kill(killed: AttemptWatcher) -> None:
    assert killed.cgroup_oom_kills >= 1


def test_the_evidence_names_every_source_that_fired(killed: AttemptWatcher) -> None:
    fired = killed.evidence(["Killed"]).fired
    assert any(f.startswith("docker oom event") for f in fired)
    assert "State.OOMKilled" in fired
    assert any(f.startswith("cgroup oom_kill") for f in fired)
    assert fired[-1] == "log: Killed"  # agreed with, so it counts


def test_the_kill_is_timed_once_and_memory_is_sampled_for_the_report(killed: AttemptWatcher) -> None:
    # Docker's event and the cgroup counter report the same kill: one mark on build-report.html.
    # Seconds since the watch began, noted while it ran (not a clock's absolute reading).
    assert len(killed.oom_at) == 1 and 0 < killed.oom_at[0] < time.monotonic() - killed.started
    assert killed.series.points, "no memory sample while the container lived"
    assert all(0 < used <= 64 * 1024**2 for _t, used in killed.series.points)  # under the limit
