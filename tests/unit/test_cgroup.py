"""builder.cgroup.host_memory_available on a fixture /proc tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.cgroup import host_memory_available

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
