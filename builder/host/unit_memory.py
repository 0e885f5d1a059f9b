"""Each compile unit's own memory and time, measured in a real build. No Docker, no subprocess: process snapshots
in, per-unit figures out; the engine's watcher takes the snapshots (engine/watcher.py).

Once a second the watcher lists the container's processes (pid, parent, resident memory,
command line). A process belongs to the unit its command line names (unit_of), else to the unit
of its sccache work folder (sccache splits nvcc into its steps and runs them itself), else to its
nearest ancestor's (nvcc's own steps run under it). A unit's memory at a moment is the sum over
its processes. Time a unit spends waiting in wheelbuild-admit (its compile not yet admitted, or
a cicc of it held at cicc admission: an admit process with no child) is admission's, and is left
out of the unit's time.

The container's working set also holds what is no unit's: pip and setup.py, ninja, page
cache. So the build's overhead is learned where it matters, at the moment the working set
peaked: the working set then less the units' memory then. The model that learns from a build
(plan/learned.py) takes each unit's peak and that overhead as its reserve, so that for the
same MAX_JOBS it predicts that build's peak.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "MEASURED_FILE",
    "MEASURED_MAX_UNITS",
    "ProcessInfo",
    "UnitMemory",
    "UnitTracker",
    "attribute",
    "charged",
    "generates_code",
    "measured_now",
    "read_processes",
    "unit_of",
    "waiting_for_admission",
    "write_measured",
]

_SOURCES = (".cu", ".cpp", ".cc", ".cxx", ".c")
# nvcc's intermediates: /tmp/tmpxft_0000abcd_00000000-6_flash_fwd_hdim64_fp16_sm80.cpp1.ii
_NVCC_TEMP = re.compile(r"tmpxft_[0-9a-f]+_[0-9a-f]+-\d+_([^./]+)\.")
# sccache runs nvcc's steps itself, each unit's in a folder of its own: /tmp/sccache_nvccAbC123/x_0.ptx
_GENERATORS = {"cicc", "ptxas", "nvlink", "fatbinary"}
_SCCACHE_FOLDER = re.compile(r"/sccache_nvcc[^/\s]+/")


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    rss: int  # bytes resident
    argv: tuple[str, ...]


def unit_of(argv: Iterable[str]) -> str | None:
    """The unit (its source's stem: flash_fwd_hdim64_fp16_sm80) a command line works on: a
    compiler's `-c` source; nvcc's steps name it too (cicc and cudafe++ by --orig_src_path_name,
    the preprocessor by the .cu it reads, cc1plus by -dumpbase, the host compile by its -o .o
    output, the rest by their tmpxft_..._<unit>.* intermediates)."""
    words = list(argv)
    for flag, value in itertools.pairwise(words):
        if flag == "-c" and value.endswith(_SOURCES):
            return _stem(value)
        if flag in ("--orig_src_path_name", "--orig_src_file_name", "-dumpbase") or (
            flag == "-o" and value.endswith(".o")
        ):
            return _stem(value)
    for word in words:
        if word.endswith(".cu"):
            return _stem(word)
        if found := _NVCC_TEMP.search(word):
            return found[1]
    return None


def _stem(path: str) -> str:
    if found := _NVCC_TEMP.search(path):
        return found[1]
    return path.rsplit("/", 1)[-1].split(".")[0]


def attribute(processes: Iterable[ProcessInfo]) -> dict[str, int]:
    """Resident bytes per unit (see charged)."""
    totals: dict[str, int] = {}
    for unit, process in charged(processes):
        totals[unit] = totals.get(unit, 0) + process.rss
    return totals


def charged(processes: Iterable[ProcessInfo]) -> list[tuple[str, ProcessInfo]]:
    """Each process that works for a unit, with that unit. A process counts for the unit its
    command line names; else for its sccache work folder's (sccache runs nvcc's steps itself, in
    one /tmp/sccache_nvcc* folder per unit, and ptxas names only files there); else for its
    nearest ancestor's."""
    by_pid = {p.pid: p for p in processes}
    own = {p.pid: unit_of(p.argv) for p in by_pid.values()}
    folders = {p.pid: _sccache_folder(p.argv) for p in by_pid.values()}
    folder_unit = {folders[pid]: unit for pid, unit in own.items() if unit and folders[pid]}
    for pid, unit in own.items():
        if unit is None and folders[pid]:
            own[pid] = folder_unit.get(folders[pid])
    found = []
    for process in by_pid.values():
        unit, seen, current = own[process.pid], {process.pid}, process
        while unit is None and current.ppid in by_pid and current.ppid not in seen:
            current = by_pid[current.ppid]
            seen.add(current.pid)
            unit = own[current.pid]
        if unit is not None:
            found.append((unit, process))
    return found


def waiting_for_admission(processes: Iterable[ProcessInfo]) -> set[int]:
    """The pids of wheelbuild-admit processes (a compile's wrapper, or a cicc's behind the cicc
    gate) that have not started their command yet: no child of theirs is running."""
    processes = list(processes)
    parents = {p.ppid for p in processes}
    return {
        p.pid
        for p in processes
        if p.pid not in parents and any(word.rsplit("/", 1)[-1] == "wheelbuild-admit" for word in p.argv[:2])
    }


def generates_code(argv: Sequence[str]) -> bool:
    """Whether a process compiles (cicc, ptxas, nvlink, fatbinary; cc1plus other than the
    preprocessor). On a cache hit sccache still preprocesses, to hash, but none of these run:
    only a unit that was really compiled has its cost measured."""
    program = _program(argv)
    return program in _GENERATORS or (program in ("cc1plus", "cc1") and "-E" not in argv)


def _program(argv: Sequence[str]) -> str:
    """The basename of the program a command line runs ("" for none)."""
    return argv[0].rsplit("/", 1)[-1] if argv else ""


def _sccache_folder(argv: Iterable[str]) -> str | None:
    for word in argv:
        if found := _SCCACHE_FOLDER.search(word):
            return found[0]
    return None


@dataclass(frozen=True)
class UnitMemory:
    unit: str  # "identifier:stem": cp311-manylinux_x86_64:flash_fwd_hdim64_fp16_sm80
    peak: int  # the most its processes held together at one sample
    first_s: float  # first and last sample it was seen at, in the watch's seconds
    last_s: float
    # A code generator (cicc, ptxas, cc1plus compiling) was seen working for it. False: only
    # sccache and the preprocessor were, a cache hit whose memory says nothing of the compile.
    compiled: bool = False
    # Seconds between first_s and last_s it spent waiting in wheelbuild-admit (its compile, or
    # one of its ciccs with cicc admission): admission's doing, not the unit's cost.
    waited_s: float = 0.0
    # The ciccs it ran at its worst sample (0: none then). nvcc --threads T runs its archs'
    # ciccs together, but cicc admission may let them in one at a time: then its peak is one
    # arch's, whatever NVCC_THREADS, and the model must learn it as that.
    ciccs_at_peak: int = 0

    @property
    def seen_s(self) -> float:
        """How long it was seen compiling, waits for admission left out: one sample period
        short of its working time at most."""
        return max(0.0, self.last_s - self.first_s - self.waited_s)


@dataclass
class UnitTracker:
    """Per-unit peaks and times over a build's samples, and the overhead at the working set's peak."""

    units: dict[str, UnitMemory] = field(default_factory=dict)
    peak_working_set: int = 0
    overhead_at_peak: int | None = None  # the working set at its peak less the units' memory then
    last_at_s: float | None = None  # the previous sample's time
    held_now: dict[str, int] = field(default_factory=dict)  # each unit's memory at the last sample

    def observe(
        self, at_s: float, identifier: str | None, processes: Iterable[ProcessInfo], working_set: int | None
    ) -> None:
        """One sample: the container's processes while `identifier` (a Python's build) runs."""
        processes = list(processes)
        found = charged(processes)
        waiting_pids = waiting_for_admission(processes)
        per_unit: dict[str, int] = {}
        ciccs: dict[str, int] = {}
        compiling: set[str] = set()
        waiting: set[str] = set()
        for stem, process in found:
            per_unit[stem] = per_unit.get(stem, 0) + process.rss
            if generates_code(process.argv):
                compiling.add(stem)
            if _program(process.argv) == "cicc":
                ciccs[stem] = ciccs.get(stem, 0) + 1
            if process.pid in waiting_pids:
                waiting.add(stem)
        since = 0.0 if self.last_at_s is None else max(0.0, at_s - self.last_at_s)
        self.last_at_s = at_s
        self.held_now = {}
        for stem, rss in per_unit.items():
            unit = f"{identifier or '?'}:{stem}"
            self.held_now[unit] = rss
            old = self.units.get(unit)
            here = ciccs.get(stem, 0)
            self.units[unit] = (
                UnitMemory(unit, rss, at_s, at_s, stem in compiling, ciccs_at_peak=here)
                if old is None
                else UnitMemory(
                    unit,
                    max(old.peak, rss),
                    old.first_s,
                    at_s,
                    old.compiled or stem in compiling,
                    old.waited_s + (since if stem in waiting else 0.0),
                    here if rss > old.peak else old.ciccs_at_peak,
                )
            )
        if working_set is not None and working_set > self.peak_working_set:
            self.peak_working_set = working_set
            self.overhead_at_peak = max(0, working_set - sum(per_unit.values()))

    def running(self, identifier: str | None) -> tuple[tuple[str, float], ...]:
        """The units of `identifier` seen at the last sample, each with the seconds since it was
        first seen, oldest first: the compiles running now, for the status line. An nvcc step
        known only by its intermediate (tmpxft_000000a1_00000000-2) names no unit a reader knows."""
        prefix = f"{identifier or '?'}:"
        return tuple(
            (stem, unit.last_s - unit.first_s)
            for unit in sorted(self.units.values(), key=lambda u: u.first_s)
            if unit.unit.startswith(prefix)
            and unit.last_s == self.last_at_s
            and not (stem := unit.unit.removeprefix(prefix)).startswith("tmpxft_")
        )

    def snapshot(self) -> tuple[tuple[UnitMemory, ...], int | None]:
        return tuple(sorted(self.units.values(), key=lambda u: u.first_s)), self.overhead_at_peak


# The file the engine's watcher writes beside the admission wrapper's ledger, in the folder the
# container shares with the host: what each unit of the Python now building was measured at, for
# the wrapper to correct its costs by (images/wheelbuild-admit, learning while the build runs).
MEASURED_FILE = "measured.json"
# Its bound: the units seen last (a build of thousands of units keeps the newest; what a family
# measured lives on in its units still listed).
MEASURED_MAX_UNITS = 2000


def measured_now(tracker: UnitTracker, identifier: str | None) -> dict[str, object]:
    """What the wrapper reads: {"units": {stem: {"held": bytes at the last sample (0: not seen
    then), "peak": the most seen, "done": its compile is over}}}, for the units seen compiling (a
    cache hit's memory says nothing of a compile, so it corrects nothing), the MEASURED_MAX_UNITS
    seen last. A unit another Python compiled (an earlier build of the attempt) is over, at its
    peak there: the same source costs alike under another Python's headers, so a second Python's
    compiles start from what the first measured. Units are named by their source's stem, as the
    watcher knows them; the wrapper matches its ledger's source basenames by stem."""
    prefix = f"{identifier or '?'}:"
    shared: dict[str, dict[str, object]] = {}
    for u in sorted((u for u in tracker.units.values() if u.compiled), key=lambda u: (u.last_s, u.first_s)):
        stem = u.unit.rpartition(":")[2]
        if u.unit.startswith(prefix):
            held = tracker.held_now.get(u.unit, 0)
            shared[stem] = {"held": held, "peak": u.peak, "done": u.last_s != tracker.last_at_s}
        elif stem not in shared or shared[stem]["done"] is True:
            earlier = shared.get(stem, {}).get("peak", 0)
            peak = max(u.peak, earlier if isinstance(earlier, int) else 0)
            shared[stem] = {"held": 0, "peak": peak, "done": True}
        shared[stem] = shared.pop(stem)  # the last seen go last: the bound keeps them
    return {"units": dict(list(shared.items())[-MEASURED_MAX_UNITS:])}


def write_measured(folder: Path, measured: Mapping[str, object]) -> None:
    """measured_now's answer to folder/MEASURED_FILE, whole: a temporary file renamed over it,
    so a reader sees the last file or this one, never a part."""
    temporary = folder / f".{MEASURED_FILE}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(measured, separators=(",", ":")), encoding="utf-8")
    os.replace(temporary, folder / MEASURED_FILE)


MAX_CMDLINE = 256 * 1024  # nvcc's command lines run to a few KiB; a bigger one is cut, not read whole


def read_processes(cgroup_dir: Path, root: Path = Path("/")) -> list[ProcessInfo]:
    """The processes of a cgroup (its cgroup.procs), each with its parent, resident memory and
    command line from `root`/proc. A process that exits while being read is left out."""
    found = []
    try:
        pids = (cgroup_dir / "cgroup.procs").read_text().split()
    except OSError:
        return []
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in pids:
        proc = root / "proc" / pid
        try:
            stat = (proc / "stat").read_text()
            resident = int((proc / "statm").read_text().split()[1]) * page
            with (proc / "cmdline").open("rb") as file:
                argv = file.read(MAX_CMDLINE).split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        # stat: "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        words = tuple(word.decode(errors="replace") for word in argv if word)
        found.append(ProcessInfo(int(pid), ppid, resident, words))
    return found
