"""Read the resources a process may use: host memory, and the cgroup (v1, v2 or hybrid) limits,
usage and OOM counters that cap it.

Reads this machine's files: no Docker, no subprocess. Every reader takes a ``root`` path and only reads files under it,
so a copied or mounted tree reads as this machine's does; ``Path("/")`` reads this machine.

Absent files mean "unlimited or not reported by this kernel" and read as None; content that
cannot be parsed raises ValueError naming the file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal, TypeVar

_T = TypeVar("_T")

HierarchyVersion = Literal["v1", "v2"]
# "none": no cgroup filesystem is mounted (or /proc is missing), so there is nothing to read.
CgroupVersion = Literal["v1", "v2", "hybrid", "none"]

# v1 reports "no limit" as PAGE_COUNTER_MAX * PAGE_SIZE: 9223372036854771712 with 4 KiB pages,
# another huge number with 16/64 KiB pages. No machine has 4 EiB, so anything above means unlimited.
_V1_UNLIMITED_FLOOR = 1 << 62

# Controllers a v1 hierarchy can carry; a v1 mount with none of them (name=systemd) limits nothing.
_V1_CONTROLLERS = frozenset(
    {
        "blkio",
        "cpu",
        "cpuacct",
        "cpuset",
        "devices",
        "freezer",
        "hugetlb",
        "memory",
        "misc",
        "net_cls",
        "net_prio",
        "perf_event",
        "pids",
        "rdma",
    }
)


@dataclass(frozen=True)
class CgroupMount:
    """One cgroup filesystem from mountinfo."""

    mount_point: PurePosixPath  # where it is mounted, in the reader's mount namespace
    cgroup_root: PurePosixPath  # which cgroup the mount point shows (mountinfo field 4)
    version: HierarchyVersion
    controllers: frozenset[str]  # v1: the controllers bound to it; v2: empty (they vary per cgroup)


@dataclass(frozen=True)
class CgroupDir:
    """A process's cgroup directory in one hierarchy, and the mount it hangs under."""

    path: Path  # under root: the directory with memory.max / memory.limit_in_bytes / ...
    mount_path: Path  # under root: the mount point; ancestors above it are not visible
    version: HierarchyVersion

    def levels(self) -> list[Path]:
        """This cgroup, then each ancestor up to and including the mount point."""
        levels = [self.path]
        current = self.path
        while current != self.mount_path and current.parent != current:
            current = current.parent
            levels.append(current)
        return levels


@dataclass(frozen=True)
class CgroupLimits:
    """What the cgroups of one process allow it and what it has used. None: unlimited or unknown."""

    version: CgroupVersion
    memory_limit: int | None  # bytes: the smallest limit on the cgroup and its visible ancestors
    swap_limit: int | None  # bytes of swap on top of memory_limit (v1: memsw limit minus memory limit)
    cpu_quota: float | None  # CPUs' worth of CFS quota, the smallest along the path
    cpuset_cpus: int | None  # CPUs in the effective cpuset
    effective_cpus: float | None  # min(cpu_quota, cpuset_cpus or the processors in /proc/cpuinfo)
    memory_current: int | None  # bytes charged now
    memory_peak: int | None  # bytes at the high-water mark (absent before Linux 5.19 on v2)
    oom_kills: int | None  # processes the OOM killer has killed in this cgroup (absent before 4.13 on v1)
    memory_cgroup: CgroupDir | None  # where the memory numbers came from: re-read OOM kills here


def host_memory_available(root: Path = Path("/")) -> int:
    """MemAvailable from /proc/meminfo, in bytes."""
    for line in (root / "proc" / "meminfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "MemAvailable":
            return int(value.split()[0]) * 1024
    raise ValueError(f"no MemAvailable in {root / 'proc' / 'meminfo'}")


def memory_budget(root: Path = Path("/"), pid: int | str = "self") -> int:
    """Bytes the process may plan to use: MemAvailable, capped by its effective cgroup memory limit.

    The caller subtracts its own reserve.
    """
    available = host_memory_available(root)
    limit = read_limits(root, pid).memory_limit
    return available if limit is None else min(available, limit)


def read_limits(root: Path = Path("/"), pid: int | str = "self") -> CgroupLimits:
    """The cgroup limits, usage and OOM kills of process ``pid`` as seen from ``root``."""
    # The process's memberships, but our own mount table: the paths must be reachable from here.
    mounts = _read_mounts(root)
    memberships = _read_memberships(root, pid)
    memory = _locate("memory", mounts, memberships, root)
    cpu = _locate("cpu", mounts, memberships, root)
    cpuset = _locate("cpuset", mounts, memberships, root)

    memory_limit = swap_limit = memory_current = memory_peak = oom_kills = None
    if memory is not None and memory.version == "v2":
        memory_limit = _min_over_levels(memory.levels(), "memory.max", _parse_v2_bytes)
        swap_limit = _min_over_levels(memory.levels(), "memory.swap.max", _parse_v2_bytes)
        memory_current = _read_value(memory.path / "memory.current", _parse_count)
        memory_peak = _read_value(memory.path / "memory.peak", _parse_count)
        oom_kills = read_oom_kills(memory.path, "v2")
    elif memory is not None:
        levels = _v1_memory_levels(memory)
        memory_limit = _min_over_levels(levels, "memory.limit_in_bytes", _parse_v1_bytes)
        memory_and_swap = _min_over_levels(levels, "memory.memsw.limit_in_bytes", _parse_v1_bytes)
        swap_limit = _swap_beyond_memory(memory_and_swap, memory_limit)
        memory_current = _read_value(memory.path / "memory.usage_in_bytes", _parse_count)
        memory_peak = _read_value(memory.path / "memory.max_usage_in_bytes", _parse_count)
        oom_kills = read_oom_kills(memory.path, "v1")

    cpu_quota = _read_cpu_quota(cpu) if cpu is not None else None
    cpuset_cpus = _read_cpuset_count(cpuset) if cpuset is not None else None
    cpus = cpuset_cpus if cpuset_cpus is not None else _count_processors(root)
    candidates = [float(c) for c in (cpu_quota, cpus) if c is not None]

    return CgroupLimits(
        version=_overall_version(mounts),
        memory_limit=memory_limit,
        swap_limit=swap_limit,
        cpu_quota=cpu_quota,
        cpuset_cpus=cpuset_cpus,
        effective_cpus=min(candidates) if candidates else None,
        memory_current=memory_current,
        memory_peak=memory_peak,
        oom_kills=oom_kills,
        memory_cgroup=memory,
    )


def read_oom_kills(cgroup_dir: Path, version: HierarchyVersion) -> int | None:
    """The oom_kill counter of one memory cgroup directory; None where the kernel does not keep it."""
    # v2 memory.events counts the subtree too (unless mounted with memory_localevents);
    # v1 memory.oom_control has the oom_kill line since Linux 4.13, next to under_oom.
    name = "memory.events" if version == "v2" else "memory.oom_control"
    path = cgroup_dir / name
    counters = _read_value(path, _parse_flat_keyed)
    return None if counters is None else counters.get("oom_kill")


def read_working_set(cgroup_dir: Path, version: HierarchyVersion) -> int | None:
    """Memory charged now less the inactive page cache the kernel drops before it OOM-kills
    (what `docker stats` shows). The raw usage counts cache: after pip unpacks torch it sits
    near the limit without any pressure, so it says nothing about the compilers."""
    current_name, inactive_key = (
        ("memory.current", "inactive_file")
        if version == "v2"
        else ("memory.usage_in_bytes", "total_inactive_file")
    )
    current = _read_value(cgroup_dir / current_name, _parse_count)
    stats = _read_value(cgroup_dir / "memory.stat", _parse_flat_keyed)
    if current is None:
        return None
    return max(0, current - (stats or {}).get(inactive_key, 0))


def names_container(cgroup_dir: Path, container_id: str) -> bool:
    """Whether a cgroup directory is a container's own: Docker names it after the full id
    (cgroupfs: .../docker/<id>; systemd: .../docker-<id>.scope)."""
    return len(container_id) >= 12 and any(container_id in part for part in cgroup_dir.parts)


def parse_cpuset(text: str) -> int:
    """How many CPUs a cpuset list such as "0-3,8,10-11" names (each counted once)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            if text.strip():
                raise ValueError(f"empty entry in cpu list {text.strip()!r}")
            continue
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"bad cpu list entry {part!r}")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise ValueError(f"descending cpu range {part!r}")
        cpus.update(range(low, high + 1))
    return len(cpus)


# --- locating the process's cgroups ---------------------------------------------------------


def _read_mounts(root: Path) -> list[CgroupMount]:
    path = root / "proc" / "self" / "mountinfo"
    text = _read_text(path)
    return [] if text is None else _parse_mountinfo(text, path)


def _parse_mountinfo(text: str, path: Path) -> list[CgroupMount]:
    """The cgroup mounts in mountinfo (see proc(5)): id parent dev root mount_point options
    [optional fields...] - fstype source super_options."""
    mounts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        try:
            separator = fields.index("-", 6)
        except ValueError:
            raise ValueError(f"{path}:{number}: not a mountinfo line: {line!r}") from None
        if len(fields) < separator + 4:
            raise ValueError(f"{path}:{number}: not a mountinfo line: {line!r}")
        fstype, super_options = fields[separator + 1], fields[separator + 3]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        mounts.append(
            CgroupMount(
                mount_point=PurePosixPath(_unescape(fields[4])),
                cgroup_root=PurePosixPath(_unescape(fields[3])),
                version="v2" if fstype == "cgroup2" else "v1",
                controllers=frozenset(super_options.split(",")) & _V1_CONTROLLERS
                if fstype == "cgroup"
                else frozenset(),
            )
        )
    return mounts


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match[1], 8)), field)


def _read_memberships(root: Path, pid: int | str) -> dict[str, PurePosixPath]:
    """Controller name -> cgroup path from /proc/<pid>/cgroup; "" keys the v2 (unified) line."""
    path = root / "proc" / str(pid) / "cgroup"
    text = _read_text(path)
    memberships: dict[str, PurePosixPath] = {}
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip():
            continue
        hierarchy_id, sep1, rest = line.partition(":")
        controllers, sep2, cgroup_path = rest.partition(":")
        if not (sep1 and sep2 and hierarchy_id.isdigit() and cgroup_path.startswith("/")):
            raise ValueError(f"{path}:{number}: not a cgroup membership line: {line!r}")
        for controller in controllers.split(",") if controllers else [""]:
            memberships[controller] = PurePosixPath(cgroup_path)
    return memberships


def _locate(
    controller: str,
    mounts: list[CgroupMount],
    memberships: dict[str, PurePosixPath],
    root: Path,
) -> CgroupDir | None:
    """The directory of the process's cgroup for one controller, or None if it is not mounted.

    A controller is bound to at most one hierarchy: a v1 mount that names it, else the v2 one.
    """
    v1 = [m for m in mounts if m.version == "v1" and controller in m.controllers]
    if v1:
        candidates, cgroup_path = v1, memberships.get(controller)
    else:
        candidates, cgroup_path = [m for m in mounts if m.version == "v2"], memberships.get("")
    if not candidates or cgroup_path is None:
        return None
    # The same hierarchy may be mounted more than once; prefer a mount that shows our cgroup.
    mount = next((m for m in candidates if cgroup_path.is_relative_to(m.cgroup_root)), candidates[0])
    mount_path = root / mount.mount_point.relative_to("/")
    if cgroup_path.is_relative_to(mount.cgroup_root):
        cgroup_dir = mount_path / cgroup_path.relative_to(mount.cgroup_root)
        if cgroup_dir.is_dir():
            return CgroupDir(cgroup_dir, mount_path, mount.version)
    # The path does not map onto the mount (a container that shows its own cgroup at the mount
    # point while /proc/self/cgroup names it by the host's path): the mount point is our cgroup.
    return CgroupDir(mount_path, mount_path, mount.version)


def _overall_version(mounts: list[CgroupMount]) -> CgroupVersion:
    has_v1 = any(m.version == "v1" and m.controllers for m in mounts)
    has_v2 = any(m.version == "v2" for m in mounts)
    if has_v1 and has_v2:
        return "hybrid"
    if has_v1:
        return "v1"
    return "v2" if has_v2 else "none"


# --- reading values ---------------------------------------------------------------------------


def _v1_memory_levels(memory: CgroupDir) -> list[Path]:
    """The levels whose v1 memory limits apply: a parent caps its children only while
    use_hierarchy is on (deprecated and always on in recent kernels; an absent file means on)."""
    levels = memory.levels()
    applying = [levels[0]]
    for parent in levels[1:]:
        if _read_value(parent / "memory.use_hierarchy", _parse_count) == 0:
            break
        applying.append(parent)
    return applying


def _swap_beyond_memory(memory_and_swap: int | None, memory: int | None) -> int | None:
    if memory_and_swap is None:
        return None
    return memory_and_swap if memory is None else max(0, memory_and_swap - memory)


def _read_cpu_quota(cpu: CgroupDir) -> float | None:
    """The smallest quota/period along the path, in CPUs; CFS bandwidth is hierarchical."""
    quotas = []
    for level in cpu.levels():
        if cpu.version == "v2":
            quota = _read_value(level / "cpu.max", _parse_v2_cpu_max)
        else:
            quota_us = _read_value(level / "cpu.cfs_quota_us", _parse_v1_quota)
            period_us = _read_value(level / "cpu.cfs_period_us", _parse_count)
            quota = quota_us / period_us if quota_us is not None and period_us else None
        if quota is not None:
            quotas.append(quota)
    return min(quotas) if quotas else None


def _read_cpuset_count(cpuset: CgroupDir) -> int | None:
    """CPUs in the nearest cpuset that is set: a v2 cgroup without the cpuset controller enabled
    has no cpuset files and inherits its parent's; an empty v1 cpuset.cpus means "not set up"."""
    names = ["cpuset.cpus.effective"] if cpuset.version == "v2" else ["cpuset.effective_cpus", "cpuset.cpus"]
    for level in cpuset.levels():
        for name in names:
            count = _read_value(level / name, _parse_cpuset_file)
            if count:
                return count
    return None


def _count_processors(root: Path) -> int | None:
    text = _read_text(root / "proc" / "cpuinfo")
    if text is None:
        return None
    count = sum(1 for line in text.splitlines() if line.split(":")[0].strip() == "processor")
    return count or None


def _min_over_levels(levels: list[Path], name: str, parse: Callable[[str], int | None]) -> int | None:
    values = [v for v in (_read_value(level / name, parse) for level in levels) if v is not None]
    return min(values) if values else None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _read_value(path: Path, parse: Callable[[str], _T]) -> _T | None:
    """Parse one file; None if it is absent, ValueError naming the file if it is malformed."""
    text = _read_text(path)
    if text is None:
        return None
    try:
        return parse(text.strip())
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


# --- parsers: each takes the stripped content and raises ValueError without the path --------


def _parse_count(text: str) -> int:
    if not text.isdigit():
        raise ValueError(f"expected a non-negative integer, got {text!r}")
    return int(text)


def _parse_v2_bytes(text: str) -> int | None:
    if text == "max":
        return None
    if not text.isdigit():
        raise ValueError(f"expected bytes or 'max', got {text!r}")
    return int(text)


def _parse_v1_bytes(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected bytes, got {text!r}") from None
    return None if value < 0 or value >= _V1_UNLIMITED_FLOOR else value


def _parse_v1_quota(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected microseconds or -1, got {text!r}") from None
    return None if value < 0 else value


def _parse_v2_cpu_max(text: str) -> float | None:
    """ "$QUOTA $PERIOD" in microseconds; "max 100000" is no limit."""
    parts = text.split()
    if len(parts) not in (1, 2) or not all(p.isdigit() for p in parts[1:]):
        raise ValueError(f"expected '<quota|max> <period>', got {text!r}")
    period = int(parts[1]) if len(parts) == 2 else 100_000
    if parts[0] == "max":
        return None
    if not parts[0].isdigit() or period == 0:
        raise ValueError(f"expected '<quota|max> <period>', got {text!r}")
    return int(parts[0]) / period


def _parse_flat_keyed(text: str) -> dict[str, int]:
    """Lines of "key value" (memory.events, memory.oom_control)."""
    counters = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if not key or not value.strip().isdigit():
            raise ValueError(f"expected 'key count' lines, got {line!r}")
        counters[key] = int(value)
    return counters


def _parse_cpuset_file(text: str) -> int:
    return parse_cpuset(text)
