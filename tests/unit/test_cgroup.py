"""wheelbuild.host.cgroup: host memory and cgroup v1/v2/hybrid limits, read from fixture trees and from this machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wheelbuild.host.cgroup import (
    CgroupDir,
    CgroupLimits,
    host_memory_available,
    memory_budget,
    names_container,
    parse_cpuset,
    read_limits,
    read_oom_kills,
    read_working_set,
)

MEMINFO = """\
MemTotal:       131891308 kB
MemFree:         2345678 kB
MemAvailable:   98765432 kB
Buffers:          123456 kB
Cached:         45678901 kB
SwapTotal:             0 kB
"""


def _root(tmp_path: Path, meminfo: str) -> Path:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text(meminfo)
    return tmp_path


def test_mem_available_is_read_in_bytes(tmp_path: Path) -> None:
    assert host_memory_available(_root(tmp_path, MEMINFO)) == 98765432 * 1024


def test_mem_free_is_not_mistaken_for_mem_available(tmp_path: Path) -> None:
    meminfo = "MemTotal: 1000 kB\nMemFree: 10 kB\nMemAvailableX: 5 kB\nMemAvailable: 700 kB\n"
    assert host_memory_available(_root(tmp_path, meminfo)) == 700 * 1024


def test_meminfo_without_mem_available_is_an_error(tmp_path: Path) -> None:
    root = _root(tmp_path, "MemTotal: 1000 kB\nMemFree: 10 kB\n")
    with pytest.raises(ValueError, match="no MemAvailable in"):
        host_memory_available(root)


def test_the_real_host_has_some_memory_available() -> None:
    assert host_memory_available() > 0


# --- cgroup limits on fixture trees ------------------------------------------------------------
#
# The mountinfo lines copy the shape of real ones: "id parent major:minor root mount_point options
# [optional fields] - fstype source super_options". HYBRID_MOUNTS is this machine's table.

GIB = 1024**3
V1_UNLIMITED = "9223372036854771712"

V2_HOST_MOUNTS = """\
24 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
25 24 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
26 24 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
35 26 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
"""

V1_HOST_MOUNTS = """\
24 1 259:2 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
26 24 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
30 26 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:4 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:5 - cgroup cgroup rw,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd
34 30 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:8 - cgroup cgroup rw,memory
35 30 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
36 30 0:32 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,cpuset
37 30 0:33 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,pids
"""

HYBRID_MOUNTS = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 27 254:0 /var/lib/docker /var/lib/docker rw,relatime shared:1 - ext4 /dev/vda rw,discard,resv_strict
"""


def _cpuinfo(processors: int) -> str:
    return "".join(f"processor\t: {n}\nvendor_id\t: GenuineIntel\n\n" for n in range(processors))


def _tree(root: Path, files: dict[str, str]) -> Path:
    """Write files (paths relative to root) and return root."""
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root


def _v2_host(tmp_path: Path) -> Path:
    job = "sys/fs/cgroup/build.slice/job.scope"
    return _tree(
        tmp_path,
        {
            "proc/self/mountinfo": V2_HOST_MOUNTS,
            "proc/self/cgroup": "0::/build.slice/job.scope\n",
            "proc/cpuinfo": _cpuinfo(16),
            "proc/meminfo": MEMINFO,
            # Shaped as Documentation/admin-guide/cgroup-v2.rst describes a hierarchy: every
            # cgroup lists the controllers it has (cgroup.controllers) and those it enables for
            # its children (cgroup.subtree_control); processes sit only in leaves (cgroup.procs).
            "sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
            "sys/fs/cgroup/cgroup.subtree_control": "cpu io memory pids\n",
            "sys/fs/cgroup/build.slice/cgroup.controllers": "cpu io memory pids\n",
            "sys/fs/cgroup/build.slice/cgroup.subtree_control": "cpu memory pids\n",
            "sys/fs/cgroup/build.slice/cgroup.procs": "",
            f"{job}/cgroup.controllers": "cpu memory pids\n",
            f"{job}/cgroup.subtree_control": "",
            f"{job}/cgroup.procs": "4242\n",
            # The root cgroup has no memory.max; the parent's limit is tighter than the child's.
            "sys/fs/cgroup/cpuset.cpus.effective": "0-15\n",
            "sys/fs/cgroup/build.slice/memory.max": f"{4 * GIB}\n",
            "sys/fs/cgroup/build.slice/memory.swap.max": "max\n",
            "sys/fs/cgroup/build.slice/cpu.max": "max 100000\n",
            f"{job}/memory.max": f"{8 * GIB}\n",
            f"{job}/memory.swap.max": f"{GIB}\n",
            f"{job}/cpu.max": "150000 100000\n",
            f"{job}/cpuset.cpus.effective": "0-3,8\n",
            f"{job}/memory.current": "123456789\n",
            f"{job}/memory.peak": "987654321\n",
            f"{job}/memory.events": "low 0\nhigh 0\nmax 17\noom 4\noom_kill 3\noom_group_kill 0\n",
        },
    )


def test_v2_host_nested_cgroup(tmp_path: Path) -> None:
    root = _v2_host(tmp_path)
    limits = read_limits(root)
    assert limits.version == "v2"
    assert limits.memory_limit == 4 * GIB  # the parent's, smaller than the child's 8 GiB
    assert limits.swap_limit == GIB
    assert limits.cpu_quota == 1.5
    assert limits.cpuset_cpus == 5
    assert limits.effective_cpus == 1.5
    assert limits.memory_current == 123456789
    assert limits.memory_peak == 987654321
    assert limits.oom_kills == 3
    assert limits.memory_cgroup == CgroupDir(
        root / "sys/fs/cgroup/build.slice/job.scope", root / "sys/fs/cgroup", "v2"
    )
    assert read_oom_kills(limits.memory_cgroup.path, "v2") == 3


def test_v2_memory_budget_is_capped_by_the_cgroup_limit(tmp_path: Path) -> None:
    root = _v2_host(tmp_path)
    assert memory_budget(root) == 4 * GIB  # MemAvailable is ~94 GiB
    (root / "proc/meminfo").write_text("MemTotal: 8000000 kB\nMemAvailable: 1000000 kB\n")
    assert memory_budget(root) == 1000000 * 1024


def test_v2_cpuset_is_inherited_where_the_controller_is_not_enabled(tmp_path: Path) -> None:
    root = _v2_host(tmp_path)
    (root / "sys/fs/cgroup/build.slice/job.scope/cpuset.cpus.effective").unlink()
    (root / "sys/fs/cgroup/build.slice/job.scope/cpu.max").write_text("max 100000\n")
    limits = read_limits(root)
    assert limits.cpuset_cpus == 16
    assert limits.cpu_quota is None
    assert limits.effective_cpus == 16.0


def test_v2_old_kernel_without_memory_peak(tmp_path: Path) -> None:
    root = _v2_host(tmp_path)
    (root / "sys/fs/cgroup/build.slice/job.scope/memory.peak").unlink()
    limits = read_limits(root)
    assert limits.memory_peak is None
    assert limits.memory_current == 123456789


def test_another_process_is_read_through_our_mount_table(tmp_path: Path) -> None:
    root = _v2_host(tmp_path)
    _tree(
        root,
        {
            "proc/4242/cgroup": "0::/build.slice\n",
            "proc/4242/mountinfo": "this must not be read\n",
        },
    )
    limits = read_limits(root, pid=4242)
    assert limits.memory_limit == 4 * GIB
    assert limits.swap_limit is None
    assert limits.cpu_quota is None
    assert limits.cpuset_cpus == 16  # inherited from the root cgroup
    assert limits.oom_kills is None


def _v1_host(tmp_path: Path) -> Path:
    memory, cpu, cpuset = "sys/fs/cgroup/memory", "sys/fs/cgroup/cpu,cpuacct", "sys/fs/cgroup/cpuset"
    return _tree(
        tmp_path,
        {
            "proc/self/mountinfo": V1_HOST_MOUNTS,
            "proc/self/cgroup": (
                "11:pids:/user.slice/user-1000.slice/session-3.scope\n"
                "9:memory:/build/job\n"
                "5:cpu,cpuacct:/build/job\n"
                "3:cpuset:/build\n"
                "1:name=systemd:/user.slice/user-1000.slice/session-3.scope\n"
            ),
            "proc/cpuinfo": _cpuinfo(32),
            "proc/meminfo": MEMINFO,
            f"{memory}/memory.limit_in_bytes": V1_UNLIMITED,
            f"{memory}/memory.memsw.limit_in_bytes": V1_UNLIMITED,
            f"{memory}/memory.use_hierarchy": "1\n",
            f"{memory}/build/memory.limit_in_bytes": f"{2 * GIB}\n",
            f"{memory}/build/memory.memsw.limit_in_bytes": f"{3 * GIB}\n",
            f"{memory}/build/memory.use_hierarchy": "1\n",
            f"{memory}/build/job/memory.limit_in_bytes": f"{6 * GIB}\n",
            f"{memory}/build/job/memory.memsw.limit_in_bytes": V1_UNLIMITED,
            f"{memory}/build/job/memory.use_hierarchy": "1\n",
            f"{memory}/build/job/memory.usage_in_bytes": "1048576\n",
            f"{memory}/build/job/memory.max_usage_in_bytes": "2097152\n",
            f"{memory}/build/job/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
            f"{cpu}/cpu.cfs_quota_us": "-1\n",
            f"{cpu}/cpu.cfs_period_us": "100000\n",
            f"{cpu}/build/cpu.cfs_quota_us": "-1\n",
            f"{cpu}/build/cpu.cfs_period_us": "100000\n",
            f"{cpu}/build/job/cpu.cfs_quota_us": "200000\n",
            f"{cpu}/build/job/cpu.cfs_period_us": "100000\n",
            f"{cpuset}/cpuset.effective_cpus": "0-31\n",
            f"{cpuset}/cpuset.cpus": "0-31\n",
            f"{cpuset}/build/cpuset.effective_cpus": "0-7\n",
            f"{cpuset}/build/cpuset.cpus": "0-7\n",
        },
    )


def test_v1_host_nested_cgroup(tmp_path: Path) -> None:
    root = _v1_host(tmp_path)
    limits = read_limits(root)
    assert limits.version == "v1"
    assert limits.memory_limit == 2 * GIB  # the parent's; the root's sentinel means unlimited
    assert limits.swap_limit == GIB  # memory+swap 3 GiB minus memory 2 GiB
    assert limits.cpu_quota == 2.0  # -1 above it is no limit
    assert limits.cpuset_cpus == 8
    assert limits.effective_cpus == 2.0
    assert limits.memory_current == 1048576
    assert limits.memory_peak == 2097152
    assert limits.oom_kills == 2
    assert limits.memory_cgroup is not None
    assert limits.memory_cgroup.path == root / "sys/fs/cgroup/memory/build/job"
    assert limits.memory_cgroup.version == "v1"


def test_v1_unlimited_everywhere(tmp_path: Path) -> None:
    root = _v1_host(tmp_path)
    memory = root / "sys/fs/cgroup/memory"
    for level in (memory / "build", memory / "build/job"):
        (level / "memory.limit_in_bytes").write_text(V1_UNLIMITED)
        (level / "memory.memsw.limit_in_bytes").write_text(V1_UNLIMITED)
    (root / "sys/fs/cgroup/cpu,cpuacct/build/job/cpu.cfs_quota_us").write_text("-1\n")
    limits = read_limits(root)
    assert limits.memory_limit is None
    assert limits.swap_limit is None
    assert limits.cpu_quota is None
    assert limits.effective_cpus == 8.0
    assert memory_budget(root) == 98765432 * 1024


def test_v1_parent_without_use_hierarchy_does_not_cap(tmp_path: Path) -> None:
    root = _v1_host(tmp_path)
    (root / "sys/fs/cgroup/memory/build/memory.use_hierarchy").write_text("0\n")
    assert read_limits(root).memory_limit == 6 * GIB


def test_v1_kernel_before_4_13_has_no_oom_kill_counter(tmp_path: Path) -> None:
    root = _v1_host(tmp_path)
    (root / "sys/fs/cgroup/memory/build/job/memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\n"
    )
    assert read_limits(root).oom_kills is None


def test_v1_cpuset_falls_back_to_cpuset_cpus(tmp_path: Path) -> None:
    root = _v1_host(tmp_path)
    (root / "sys/fs/cgroup/cpuset/build/cpuset.effective_cpus").unlink()
    (root / "sys/fs/cgroup/cpuset/build/cpuset.cpus").write_text("0-5\n")
    assert read_limits(root).cpuset_cpus == 6


def _hybrid_host(tmp_path: Path) -> Path:
    memory = "sys/fs/cgroup/memory/process_api/3602cbd882a9632cfd7c444d15b9710e"
    return _tree(
        tmp_path,
        {
            "proc/self/mountinfo": HYBRID_MOUNTS,
            "proc/self/cgroup": (
                "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/3602cbd882a9632cfd7c444d15b9710e\n"
                "3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n"
            ),
            "proc/cpuinfo": _cpuinfo(2),
            "proc/meminfo": MEMINFO,
            "sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED,
            "sys/fs/cgroup/memory/process_api/memory.limit_in_bytes": V1_UNLIMITED,
            f"{memory}/memory.limit_in_bytes": f"{16 * GIB}\n",
            f"{memory}/memory.usage_in_bytes": "36519936\n",
            f"{memory}/memory.max_usage_in_bytes": "37011456\n",
            f"{memory}/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
            "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/cpuset/cpuset.effective_cpus": "0-1\n",
            # The unified hierarchy carries no memory controller here: these must not be read.
            "sys/fs/cgroup/unified/cgroup.controllers": "hugetlb\n",
            "sys/fs/cgroup/unified/memory.max": "1024\n",
            "sys/fs/cgroup/unified/cpu.max": "1000 100000\n",
        },
    )


def test_hybrid_host_reads_memory_from_v1(tmp_path: Path) -> None:
    root = _hybrid_host(tmp_path)
    limits = read_limits(root)
    assert limits.version == "hybrid"
    assert limits.memory_limit == 16 * GIB
    assert limits.swap_limit is None  # no memsw file: swap accounting is off
    assert limits.memory_current == 36519936
    assert limits.memory_peak == 37011456
    assert limits.oom_kills == 0
    assert limits.cpu_quota is None
    assert limits.cpuset_cpus == 2
    assert limits.effective_cpus == 2.0
    assert limits.memory_cgroup is not None
    assert limits.memory_cgroup.version == "v1"


def test_named_v1_hierarchy_alone_does_not_make_a_v2_host_hybrid(tmp_path: Path) -> None:
    root = _v2_host(tmp_path)
    systemd = (
        "40 35 0:37 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:20 - "
        "cgroup cgroup rw,xattr,name=systemd\n"
    )
    (root / "proc/self/mountinfo").write_text(V2_HOST_MOUNTS + systemd)
    assert read_limits(root).version == "v2"


@pytest.mark.parametrize(
    ("mount_root", "cgroup_path"),
    [
        pytest.param("/", "/", id="cgroup-namespace"),
        pytest.param("/docker/0123abcd", "/docker/0123abcd", id="host-namespace"),
        # The mount shows the container's cgroup, but /proc/self/cgroup names it by the host path.
        pytest.param("/", "/docker/0123abcd", id="host-path-at-mount-root"),
    ],
)
def test_inside_a_v1_container(tmp_path: Path, mount_root: str, cgroup_path: str) -> None:
    mounts = "".join(
        f"{900 + n} 890 0:{40 + n} {mount_root} /sys/fs/cgroup/{name} ro,nosuid,nodev,noexec,relatime "
        f"master:{10 + n} - cgroup cgroup rw,{name}\n"
        for n, name in enumerate(["memory", "cpu,cpuacct", "cpuset"])
    )
    root = _tree(
        tmp_path,
        {
            "proc/self/mountinfo": (
                "880 870 0:80 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/l\n"
                "889 880 0:84 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro\n"
                "890 889 0:85 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755\n"
                + mounts
            ),
            "proc/self/cgroup": (
                f"10:memory:{cgroup_path}\n4:cpu,cpuacct:{cgroup_path}\n3:cpuset:{cgroup_path}\n"
                f"1:name=systemd:{cgroup_path}\n"
            ),
            "proc/cpuinfo": _cpuinfo(64),
            "sys/fs/cgroup/memory/memory.limit_in_bytes": f"{6 * GIB}\n",
            "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": f"{6 * GIB}\n",
            "sys/fs/cgroup/memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 1\noom_kill 1\n",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "750000\n",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "sys/fs/cgroup/cpuset/cpuset.effective_cpus": "0-63\n",
        },
    )
    limits = read_limits(root)
    assert limits.version == "v1"
    assert limits.memory_limit == 6 * GIB
    assert limits.swap_limit == 0  # docker --memory-swap equal to --memory: no swap
    assert limits.cpu_quota == 7.5
    assert limits.cpuset_cpus == 64
    assert limits.effective_cpus == 7.5
    assert limits.oom_kills == 1
    assert limits.memory_cgroup == CgroupDir(
        root / "sys/fs/cgroup/memory", root / "sys/fs/cgroup/memory", "v1"
    )


def test_inside_a_v2_container_with_a_cgroup_namespace(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "proc/self/mountinfo": (
                "880 870 0:80 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/l\n"
                "889 880 0:84 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro\n"
                "890 889 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup "
                "rw,nsdelegate,memory_recursiveprot\n"
            ),
            "proc/self/cgroup": "0::/\n",
            "proc/cpuinfo": _cpuinfo(64),
            "sys/fs/cgroup/memory.max": f"{6 * GIB}\n",
            "sys/fs/cgroup/memory.swap.max": "0\n",
            "sys/fs/cgroup/memory.current": "4096\n",
            "sys/fs/cgroup/memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
            "sys/fs/cgroup/cpu.max": "750000 100000\n",
            "sys/fs/cgroup/cpuset.cpus.effective": "0-63\n",
        },
    )
    limits = read_limits(root)
    assert limits.version == "v2"
    assert limits.memory_limit == 6 * GIB
    assert limits.swap_limit == 0
    assert limits.cpu_quota == 7.5
    assert limits.effective_cpus == 7.5
    assert limits.memory_current == 4096
    assert limits.memory_peak is None
    assert limits.oom_kills == 0
    assert limits.memory_cgroup == CgroupDir(root / "sys/fs/cgroup", root / "sys/fs/cgroup", "v2")


def test_escaped_mount_point(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "proc/self/mountinfo": "35 26 0:30 / /run/my\\040cgroups rw,relatime - cgroup2 cgroup2 rw\n",
            "proc/self/cgroup": "0::/a\n",
            "run/my cgroups/a/memory.max": "1048576\n",
        },
    )
    assert read_limits(root).memory_limit == 1048576


# --- missing and malformed files ---------------------------------------------------------------


def test_missing_cgroup_files_read_as_none(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {"proc/self/mountinfo": V2_HOST_MOUNTS, "proc/self/cgroup": "0::/gone/away\n"},
    )
    limits = read_limits(root)
    assert limits == CgroupLimits(
        version="v2",
        memory_limit=None,
        swap_limit=None,
        cpu_quota=None,
        cpuset_cpus=None,
        effective_cpus=None,
        memory_current=None,
        memory_peak=None,
        oom_kills=None,
        # The cgroup directory is gone: the mount point is the best guess.
        memory_cgroup=CgroupDir(root / "sys/fs/cgroup", root / "sys/fs/cgroup", "v2"),
    )
    assert read_oom_kills(root / "nowhere", "v1") is None


def test_no_proc_at_all_reads_as_no_cgroups(tmp_path: Path) -> None:
    limits = read_limits(tmp_path)
    assert limits.version == "none"
    assert limits.memory_limit is None
    assert limits.memory_cgroup is None
    assert limits.effective_cpus is None


def test_memory_budget_without_cgroups_is_mem_available(tmp_path: Path) -> None:
    assert memory_budget(_root(tmp_path, MEMINFO)) == 98765432 * 1024


@pytest.mark.parametrize(
    ("relative", "content"),
    [
        ("sys/fs/cgroup/build.slice/memory.max", "lots\n"),
        ("sys/fs/cgroup/build.slice/job.scope/memory.swap.max", "-1\n"),
        ("sys/fs/cgroup/build.slice/job.scope/cpu.max", "fast 100000\n"),
        ("sys/fs/cgroup/build.slice/job.scope/cpu.max", "150000 0\n"),
        ("sys/fs/cgroup/build.slice/job.scope/cpuset.cpus.effective", "3-1\n"),
        ("sys/fs/cgroup/build.slice/job.scope/memory.current", "12k\n"),
        ("sys/fs/cgroup/build.slice/job.scope/memory.events", "oom_kill many\n"),
        ("proc/self/cgroup", "memory:/build\n"),
        ("proc/self/mountinfo", "35 26 0:30 / /sys/fs/cgroup rw cgroup2\n"),
    ],
)
def test_malformed_file_names_its_path(tmp_path: Path, relative: str, content: str) -> None:
    root = _v2_host(tmp_path)
    (root / relative).write_text(content)
    with pytest.raises(ValueError, match=re.escape(str(root / relative))):
        read_limits(root)


@pytest.mark.parametrize(
    ("relative", "content"),
    [
        ("sys/fs/cgroup/memory/build/memory.limit_in_bytes", "two gigs\n"),
        ("sys/fs/cgroup/cpu,cpuacct/build/job/cpu.cfs_quota_us", "-\n"),
        ("sys/fs/cgroup/memory/build/job/memory.oom_control", "oom_kill_disable\n"),
    ],
)
def test_malformed_v1_file_names_its_path(tmp_path: Path, relative: str, content: str) -> None:
    root = _v1_host(tmp_path)
    (root / relative).write_text(content)
    with pytest.raises(ValueError, match=re.escape(str(root / relative))):
        read_limits(root)


# --- parse_cpuset --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count"),
    [("0-3,8", 5), ("0-3,8,10-11", 7), ("0", 1), ("0-63\n", 64), ("", 0), ("\n", 0), ("0-3,2", 4)],
)
def test_parse_cpuset(text: str, count: int) -> None:
    assert parse_cpuset(text) == count


@pytest.mark.parametrize("text", ["3-1", "a", "0-", "-3", "0,,1", "0-3,", "0-7:2", " 1 - 2"])
def test_parse_cpuset_rejects_malformed_lists(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpuset(text)


cpu_ranges = st.lists(
    st.tuples(st.integers(min_value=0, max_value=4096), st.integers(min_value=0, max_value=64)),
    max_size=20,
)


@settings(max_examples=300, deadline=None)
@given(ranges=cpu_ranges)
def test_parse_cpuset_counts_each_cpu_once(ranges: list[tuple[int, int]]) -> None:
    text = ",".join(str(low) if span == 0 else f"{low}-{low + span}" for low, span in ranges)
    expected = {cpu for low, span in ranges for cpu in range(low, low + span + 1)}
    assert parse_cpuset(text + "\n") == len(expected)


# --- this machine --------------------------------------------------------------------------------


def _real_layout() -> str:
    """The cgroup layout /proc/self/mountinfo shows, judged without wheelbuild.host.cgroup."""
    fstypes: list[tuple[str, str]] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        after = line.split(" - ", 1)[1].split()
        fstypes.append((after[0], after[2]))
    v1 = any(fstype == "cgroup" and "memory" in options.split(",") for fstype, options in fstypes)
    v2 = any(fstype == "cgroup2" for fstype, _ in fstypes)
    return "hybrid" if v1 and v2 else "v1" if v1 else "v2" if v2 else "none"


def test_the_real_hierarchy() -> None:
    if not Path("/proc/self/mountinfo").exists() or _real_layout() != "hybrid":
        pytest.skip("this machine's cgroups are not the hybrid layout (v1 memory + cgroup2 unified)")
    before = host_memory_available()
    limits = read_limits()
    assert limits.version == "hybrid"
    assert limits.memory_limit is None or limits.memory_limit >= GIB
    assert limits.oom_kills is None or isinstance(limits.oom_kills, int)
    assert limits.memory_cgroup is not None and limits.memory_cgroup.version == "v1"
    assert limits.effective_cpus is not None and limits.effective_cpus > 0
    budget = memory_budget()
    # MemAvailable moves between reads; allow for that much drift.
    assert 0 < budget <= max(before, host_memory_available()) + 256 * 1024**2


# --- working set: usage less inactive page cache ---------------------------------------------


def test_working_set_leaves_out_inactive_page_cache_v1(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        {
            "memory.usage_in_bytes": "3000000000\n",
            "memory.stat": "cache 2000000000\nrss 900000000\ntotal_inactive_file 1800000000\n",
        },
    )
    assert read_working_set(tmp_path, "v1") == 1_200_000_000


def test_working_set_v2_and_missing_stat(tmp_path: Path) -> None:
    _tree(tmp_path, {"memory.current": "500\n", "memory.stat": "anon 300\ninactive_file 120\n"})
    assert read_working_set(tmp_path, "v2") == 380
    (tmp_path / "memory.stat").unlink()
    assert read_working_set(tmp_path, "v2") == 500
    (tmp_path / "memory.current").unlink()
    assert read_working_set(tmp_path, "v2") is None


# ---------------------------------------------------------------------------------------------
# Whose cgroup a reading came from (the engine's watcher counts only its container's)

CONTAINER_ID = "4f1c0a5e9b7d" + "0" * 52


@pytest.mark.parametrize(
    ("path", "ours"),
    [
        (f"/sys/fs/cgroup/memory/docker/{CONTAINER_ID}", True),  # cgroupfs driver, v1
        (f"/sys/fs/cgroup/system.slice/docker-{CONTAINER_ID}.scope", True),  # systemd driver, v2
        ("/sys/fs/cgroup/memory/process_api/dc99b61d678ab802", False),  # a host process's
        ("/sys/fs/cgroup/system.slice/containerd.service", False),
        ("/sys/fs/cgroup", False),
        (f"/sys/fs/cgroup/docker/{'9' * 64}", False),  # another container's
    ],
)
def test_a_cgroup_names_the_container_only_when_it_is_the_containers_own(path: str, ours: bool) -> None:
    assert names_container(Path(path), CONTAINER_ID) is ours


def test_a_short_or_empty_id_names_no_cgroup() -> None:
    assert not names_container(Path("/sys/fs/cgroup/docker/anything"), "")
