"""The engine's watcher of one attempt: OOM evidence and memory, without trusting the exit code.

When a compiler is OOM-killed, ninja fails, cibuildwheel exits 1 and the container's PID 1
(cibuildwheel's bash) exits 0: no 137 anywhere. The kernel and Docker know, so we ask them."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types

from ..attempt.buildlog import COMPILE_STEP, MemorySample, MemorySeries
from ..attempt.outcome import OomEvidence
from ..attempt.ownership import ATTEMPT_LABEL
from ..host import cgroup
from ..host.unit_memory import UnitTracker, measured_now, read_processes, write_measured


class AttemptWatcher:
    """For the whole attempt: Docker's oom events for its label (one thread), and once a second
    the container's State.OOMKilled, its cgroup oom_kill counter and memory use (another)."""

    def __init__(
        self,
        client: Any,
        attempt_id: str,
        on_memory: Callable[[MemorySample], None] | None = None,
        measured_dir: Path | None = None,
    ) -> None:
        self._client = client
        # The folder the container shares as the admission wrapper's ledger's: each sample's unit
        # memory goes there (unit_memory.MEASURED_FILE), for admission to learn while it runs.
        self._measured_dir = measured_dir
        self._label = f"{ATTEMPT_LABEL}={attempt_id}"
        self._on_memory = on_memory
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.oom_events = 0
        self.state_oom_killed = False
        self.cgroup_oom_kills = 0
        self.peak_memory: int | None = None
        # cibuildwheel's current step, set by the reader of the log: peaks are kept per step, so
        # the compile's peak is not confused with the page cache of torch's install.
        self.phase = "starting"
        self.identifier: str | None = None  # the Python cibuildwheel builds now, from the log too
        self.peaks: dict[str, int] = {}
        # While compiling: each unit's memory and time, for the report and the model that learns.
        self.units = UnitTracker()
        # For build-report.html: memory over time and when the OOM killer struck, in seconds
        # since the watch began.
        self.started = time.monotonic()
        self.series = MemorySeries()
        self.oom_at: list[float] = []
        self._events: Any = None
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> AttemptWatcher:
        # Subscribe before cibuildwheel creates the container, so no event can be missed.
        self._events = self._client.events(decode=True, filters={"label": self._label, "type": "container"})
        for target in (self._watch_events, self._poll):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._poll_once()  # a last look, in case the container is still there
        time.sleep(0.5)  # let the daemon deliver events of the container's last moments
        self._events.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def evidence(self, killed_lines: Sequence[str]) -> OomEvidence:
        return OomEvidence(
            docker_oom_events=self.oom_events,
            state_oom_killed=self.state_oom_killed,
            cgroup_oom_kills=self.cgroup_oom_kills,
            killed_lines=tuple(killed_lines[:5]),
        )

    def _oom_seen(self) -> None:
        """Note when a kill happened (the caller holds the lock). Docker's event and the cgroup
        counter report the same kill about a second apart: one mark for both; at most 100."""
        now = round(time.monotonic() - self.started, 1)
        if len(self.oom_at) < 100 and all(abs(now - t) > 3 for t in self.oom_at):
            self.oom_at.append(now)

    def _watch_events(self) -> None:
        try:
            for event in self._events:
                if event.get("status") == "oom" or event.get("Action") == "oom":
                    with self._lock:
                        self.oom_events += 1
                        self._oom_seen()
        except Exception:  # the stream ends with an error when closed; that is how it stops
            return

    def _poll(self) -> None:
        while not self._stop.wait(1.0):
            self._poll_once()

    def _poll_once(self) -> None:
        try:
            containers = self._client.containers.list(
                all=True, filters={"label": self._label}, ignore_removed=True
            )
        except docker.errors.DockerException:
            return
        # list() inspects each container it returns, so attrs are fresh: no reload().
        for container in containers:
            state = container.attrs.get("State", {})
            if state.get("OOMKilled"):
                self.state_oom_killed = True
            pid = int(state.get("Pid") or 0)
            if pid:
                self._read_cgroup(pid, str(container.id))

    def _read_cgroup(self, pid: int, container_id: str) -> None:
        try:
            found = cgroup.read_limits(pid=str(pid))
            where = found.memory_cgroup
            # The pid is from the last inspect: by now the container may have exited and the
            # number gone to another process, whose cgroup is not ours to count (a reading of
            # a host cgroup once put the "peak" above the container's limit).
            if where is None or not cgroup.names_container(where.path, container_id):
                return
            used = cgroup.read_working_set(where.path, where.version)
        except (OSError, ValueError):
            return
        # The container's cgroup is new with the attempt, so its counter started at 0.
        if found.oom_kills is not None:
            with self._lock:
                if found.oom_kills > self.cgroup_oom_kills:
                    self._oom_seen()
                self.cgroup_oom_kills = max(self.cgroup_oom_kills, found.oom_kills)
        if used is not None:
            # Sampled once a second: the working set's peak, not the cache-inflated max_usage.
            self.peak_memory = max(self.peak_memory or 0, used)
            phase = self.phase
            self.peaks[phase] = max(self.peaks.get(phase, 0), used)
            now = time.monotonic() - self.started
            with self._lock:
                self.series.add(now, used)
            compiling: tuple[tuple[str, float], ...] = ()
            if phase.startswith(COMPILE_STEP):
                self.units.observe(now, self.identifier, read_processes(where.path), used)
                compiling = self.units.running(self.identifier)
                self._share_measured()
            if self._on_memory is not None:
                self._on_memory(MemorySample(used, self.peak_memory, found.memory_limit, compiling))

    def _share_measured(self) -> None:
        if self._measured_dir is None:
            return
        # A folder gone or full costs admission its correction, never the build.
        with contextlib.suppress(OSError):
            write_measured(self._measured_dir, measured_now(self.units, self.identifier))
