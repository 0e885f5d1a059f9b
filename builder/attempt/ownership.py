"""Who owns a container: the labels every container wheelbuild makes carries, and the token that
names the wheelbuild process behind it (host, boot, PID namespace, pid and start time), so that
a later run can tell an orphan from a container whose wheelbuild still lives.

No Docker here: the engine labels and sweeps; the attempt's configuration names the labels.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

RUN_LABEL = "wheelbuild.run"
ATTEMPT_LABEL = "wheelbuild.attempt"
OWNER_LABEL = "wheelbuild.owner"  # host:pid:process-start-time of the wheelbuild that owns it


def _process_start(pid: int) -> str:
    """The process's start time in clock ticks: with the pid, it names one process for good."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def process_namespace() -> str:
    """Where a pid means one process: this boot of this host, this PID namespace. CI runners
    that share a hostname in separate PID namespaces must not judge each other's pids."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        pidns = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    except OSError:
        boot, pidns = "unknown", "unknown"
    return f"{socket.gethostname()}/{boot}/{pidns}"


def owner_token(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{process_namespace()}:{pid}:{_process_start(pid)}"


def owner_alive(token: str) -> bool:
    namespace, _, rest = token.partition(":")
    pid_text, _, start = rest.partition(":")
    if namespace != process_namespace() or not pid_text.isdigit():
        return True  # another machine's or namespace's run: not ours to judge
    return _process_start(int(pid_text)) == start != ""
