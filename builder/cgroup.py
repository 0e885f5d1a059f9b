"""Read the resources this process may use. Pure: every reader takes a root path, so tests can
point it at a fixture tree. (The memory-planning issue extends this to cgroup v1/v2 limits,
quotas and OOM counters.)"""

from __future__ import annotations

from pathlib import Path


def host_memory_available(root: Path = Path("/")) -> int:
    """MemAvailable from /proc/meminfo, in bytes."""
    for line in (root / "proc" / "meminfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "MemAvailable":
            return int(value.split()[0]) * 1024
    raise ValueError(f"no MemAvailable in {root / 'proc' / 'meminfo'}")
