"""The watcher reads memory only from its container's own cgroup. The Docker client is a fake
here (its containers.list answer); the cgroup read is this host's real /proc and /sys."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from wheelbuild.engine.watcher import AttemptWatcher


@dataclass
class _Container:
    id: str
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Containers:
    listed: list[_Container]

    def list(self, **_: Any) -> list[_Container]:
        return self.listed


@dataclass
class _Client:
    containers: _Containers


def test_a_pid_now_in_another_cgroup_is_not_counted_as_the_containers_memory() -> None:
    # The last inspect gave this pid; it is now this test's own process, in a host cgroup
    # that does not carry the container's id, so none of its memory is the container's.
    container = _Container("a" * 64, {"State": {"Pid": os.getpid(), "OOMKilled": True}})
    watcher = AttemptWatcher(_Client(_Containers([container])), "run.1")
    watcher._poll_once()
    assert watcher.peak_memory is None
    assert watcher.peaks == {}
    assert watcher.cgroup_oom_kills == 0
    assert watcher.state_oom_killed  # Docker's own word still counts
