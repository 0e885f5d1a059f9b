"""Read a cibuildwheel log as it streams: which Python is building, ninja's [n/N] progress,
the units that finished, sccache's counts, and the marks our in-container checks print.
Pure: lines in, state out."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

MEMORY_MARK = "wheelbuild: container memory limit:"
MEMORY_MISSING_MARK = "wheelbuild: memory limit not applied"
TORCH_MISMATCH_MARK = "wheelbuild: torch mismatch"
# images/wheelbuild-nvcc, once per distinct rewrite: "wheelbuild-nvcc: rewrote archs ... -> ...".
NVCC_REWRITE_MARK = "wheelbuild-nvcc: "
# images/wheelbuild-cxx (and wheelbuild-nvcc through it), once per distinct raise:
# "wheelbuild-cxx: raised -std=c++17 to -std=c++20 (torch's headers require C++20)".
STD_RAISE_MARK = "wheelbuild-cxx: "
# images/wheelbuild-check-linked, per Python before the repair.
LINKED_MARK = "wheelbuild: linked here:"
NOT_LINKED_MARK = "wheelbuild: not linked here:"
LINK_CHECK_SKIPPED_MARK = "wheelbuild: link check skipped:"
# images/wheelbuild-wheel-cache, per file it installed from a lock (torch, its CUDA wheels, the
# build tools): "wheelbuild: wheel cache: locked KEY-TAG SHA256 NAME".
_LOCKED = re.compile(r"^wheelbuild: wheel cache: locked (\S+) ([0-9a-f]{64}) (\S+)$")
# images/wheelbuild-network: "wheelbuild: network: off please" asks the engine to take the
# container off its network, "... on please" to put it back; "... still on after 60 s" is its
# wait running out.
NETWORK_MARK = "wheelbuild: network: "
NETWORK_STUCK_MARK = "wheelbuild: network: still "
# What the in-container scripts say they start, for the status line of a step that prints little
# else for minutes (torch's install, the import gate's): images/wheelbuild-wheel-cache's
# "wheelbuild: wheel cache: installing 29 files (3.02 GB) ..." and images/wheelbuild-gate's.
_ACTIVITY_MARKS = ("wheelbuild: wheel cache: ", "wheelbuild-gate: ")
# cibuildwheel's summary line of a wheel ends ", SHA256=<hex>": the hash of the wheel before
# wheelbuild stamps it, so not the hash of the wheel the run delivers.
_UNSTAMPED_SHA256 = re.compile(r",? SHA256=[0-9a-f]{64}\b")


def activity(line: str) -> str | None:
    """What an in-container script says it starts doing ("wheel cache: installing 29 files
    (3.02 GB) ..."), or None for any other line."""
    stripped = line.strip()
    for mark in _ACTIVITY_MARKS:
        if stripped.startswith(mark):
            return stripped.removeprefix("wheelbuild: ").removeprefix("wheelbuild-")
    return None


def shown_line(line: str) -> str:
    """A cibuildwheel line as the terminal shows it (build.log keeps it as it came): its
    summary's sha256 of the unstamped wheel is left out, so that the one sha256 the run prints
    for a wheel is the wheel's."""
    return _UNSTAMPED_SHA256.sub(
        " (unstamped; wheelbuild stamps it next and prints the wheel's sha256 at the end)", line
    )


def python_of(identifier: str | None) -> str | None:
    """The Python of a cibuildwheel build identifier: cp311-manylinux_x86_64 -> cp311."""
    return identifier.split("-", 1)[0] if identifier else None


def network_request(line: str) -> bool | None:
    """True: the container asks to be put on its network, False: off it; None: no request."""
    if not line.startswith(NETWORK_MARK) or not line.endswith(" please"):
        return None
    return line[len(NETWORK_MARK) :].startswith("on")


COMPILE_STEP = "Building wheel"  # cibuildwheel's step that runs the package's build
BEFORE_BUILD_STEP = "Running before_build"  # the step that runs images/wheelbuild-before-build

# cibuildwheel's "Building cp311-manylinux_x86_64 wheel" (with or without decoration).
_BUILD_START = re.compile(r"Building (cp\d+-\S+) wheel")
# cibuildwheel's "✓ cp311-manylinux_x86_64 finished in 3 minutes": that Python is done.
_BUILD_END = re.compile(r"(cp\d+t?-\S+) finished in ")
# A later Python that a wheel built for an earlier one already serves (abi3: one wheel for every
# Python): cibuildwheel skips its build and only sets up (and tests) that Python.
_REUSED = re.compile(
    r"Found previously built wheel (\S+\.whl), that's compatible with (\S+)\. Skipping build step"
)
# cibuildwheel's step lines: "Setting up build environment...", "Running before_build...".
_STEP = re.compile(r"^[A-Z][a-z]+ [\w ]+\.\.\.$")
# The steps cibuildwheel's Linux builds print (cibuildwheel/platforms/linux.py), timed for the
# report's phases; the package's own output can print a line of the same shape, and is not one.
CIBUILDWHEEL_STEPS = (
    "Copying project into container",
    "Running before_all",
    "Setting up build environment",
    BEFORE_BUILD_STEP,
    COMPILE_STEP,
    "Repairing wheel",
    "Testing wheel",
    "Auditing wheel",
    "Copying wheels back to host",
)
# cibuildwheel's end of a step, right-aligned: "✓ 6.01s" ("done 6.01s" without Unicode; "✕" or
# "failed" when the step failed).
_STEP_END = re.compile(r"^\s*(?:✓|✕|done|failed) \d+\.\d+s$")
MAX_STEPS = 400  # timed per attempt: a few per Python; this only bounds a log that prints more
# ninja prints "[n/N] command" when a unit finishes (on a non-terminal); pip -v indents it.
_NINJA = re.compile(r"^\s*\[(\d+)/(\d+)\]\s+(.*)$")
_OUTPUT = re.compile(r"\s-o\s+(\S+)")
# ninja prints the [n/N] line of a failed unit too, then "FAILED: [code=N] <output>".
_FAILED = re.compile(r"^\s*FAILED:\s+(?:\[code=-?\d+\]\s+)?(\S+)")
# sccache splits an nvcc compile into CUDA, device, PTX and CUBIN requests; the units are the
# top-level "(C/C++)" and "(CUDA)" lines.
_SCCACHE = re.compile(r"^\s*Cache (hits|misses) \((C/C\+\+|CUDA|CUDA \(Device code\))\)\s+(\d+)\s*$")
# sccache --show-stats with --dist: "Failed distributed compilations  N" (each ran locally
# instead), then "Successful distributed compiles" and one "  <server ip:port>  N" line each.
_DIST_FAILED = re.compile(r"^Failed distributed compilations\s+(\d+)\s*$")
_DIST_HEAD = "Successful distributed compiles"
_DIST_SERVER = re.compile(r"^\s+(\S+:\d+)\s+(\d+)\s*$")
# images/wheelbuild-cache-log: one line per unit, compiled or answered from sccache's cache.
_UNIT_CACHE = re.compile(r"^wheelbuild: unit (compiled|from cache): (\S+)$")
# A prebuilt binary a setup.py fetches instead of building it (flash-attn's, causal-conv1d's
# "Guessing wheel URL: https://github.com/.../x.whl"): a URL of a wheel or shared object,
# printed while the package's build runs.
_PREBUILT_URL = re.compile(r"https?://[^\s'\"<>]+?\.(?:whl|so)\b")
# A compiler killed by signal 9: bash's "Killed", nvcc's "died due to signal 9", gcc's
# "Killed signal terminated program cc1plus".
_KILLED = re.compile(r"\bKilled\b|died due to signal 9|signal 9\b")


def is_kill_line(line: str) -> bool:
    """A log line saying a compiler was killed by signal 9. cibuildwheel's echoes of the
    commands it runs ("+ sh -c ...") prove nothing and do not count."""
    return bool(_KILLED.search(line)) and not line.lstrip().startswith("+ ")


@dataclass(frozen=True)
class MemorySample:
    """The build container's memory, sampled while it runs, and the compiles running then."""

    used: int
    peak: int
    limit: int | None
    # While compiling: each unit whose processes run at this sample, with the seconds since its
    # first was seen, oldest first (host/unit_memory.UnitTracker.running).
    compiling: tuple[tuple[str, float], ...] = ()


@dataclass
class MemorySeries:
    """The container's working set over an attempt, bounded for the report: one point per
    `step_s` seconds holding that interval's highest sample (so no peak is averaged away); when
    the points pass `cap`, the step doubles and neighbours merge. Times are seconds since start."""

    cap: int = 600
    step_s: float = 2.0
    points: list[tuple[float, int]] = field(default_factory=list)

    def add(self, t: float, used: int) -> None:
        start = (t // self.step_s) * self.step_s
        if self.points and self.points[-1][0] == start:
            self.points[-1] = (start, max(self.points[-1][1], used))
        else:
            self.points.append((start, used))
        while len(self.points) > self.cap:
            self.step_s *= 2
            merged: list[tuple[float, int]] = []
            for when, value in self.points:
                bucket = (when // self.step_s) * self.step_s
                if merged and merged[-1][0] == bucket:
                    merged[-1] = (bucket, max(merged[-1][1], value))
                else:
                    merged.append((bucket, value))
            self.points = merged


@dataclass(frozen=True)
class StepTime:
    """One of cibuildwheel's steps, timed by the clock fed to BuildLog.feed: the Python it ran
    for (None for the steps before the first Python's and after the last), the step ("Building
    wheel"), when it began, and when it ended (None while it runs)."""

    identifier: str | None
    step: str
    start: float
    end: float | None = None


# A compiler's error line: gcc's `file:line:col: error: ...`, nvcc's `file(line): error: ...`, perhaps
# indented (pip -v indents what the build backend prints).
COMPILER_ERROR = re.compile(r"^\s*\S+?(?::\d+(?::\d+)?:|\(\d+\):)\s*(?:fatal\s+)?error\b.*$", re.MULTILINE)
# The first ones of a log are kept apart from its tail: a package whose build prints much after its
# first error (ptxas -v on every kernel still compiling) pushes that error out of any tail.
MAX_ERROR_LINES = 40


@dataclass
class BuildLog:
    identifier: str | None = None  # the cibuildwheel build identifier now building
    step: str = "starting"  # cibuildwheel's current step: "Running before_build", "Building wheel"...
    done: int = 0  # ninja units finished for the current identifier
    total: int = 0  # ninja units of the current identifier
    # identifier -> the outputs (saxpy.o) of units that finished, failed ones taken out again
    finished_units: dict[str, list[str]] = field(default_factory=dict)
    # identifier -> sccache's per-kind counts ("C/C++", "CUDA", "CUDA (Device code)") -> [hits,
    # misses], from the stats printed after each build that reached the repair step
    cache_counts: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    # --dist: compiles each build server ran ("ip:port" -> count) and those that fell back to
    # local, summed over the Pythons' stats
    dist_by_server: dict[str, int] = field(default_factory=dict)
    dist_local: int = 0
    dist_seen: bool = False
    _in_dist_servers: bool = False
    # identifier -> unit output (relu.o) -> compiled (True) or a cache hit (False)
    unit_cache: dict[str, dict[str, bool]] = field(default_factory=dict)
    memory_limit_seen: int | None = None
    killed_lines: list[str] = field(default_factory=list)
    error_lines: list[str] = field(default_factory=list)  # the first compiler errors (COMPILER_ERROR)
    # Seconds spent in cibuildwheel's "Building wheel..." steps (the compile, without setup,
    # torch's install or the repair): what a compiler cache can save.
    build_seconds: float = 0.0
    # The same per build identifier: how much a second Python costs after the first.
    build_seconds_by_identifier: dict[str, float] = field(default_factory=dict)
    # "identifier:unit" -> when (the `now` fed) the unit finished: the report's unit table.
    finished_at: dict[str, float] = field(default_factory=dict)
    # Each Python's whole time, from cibuildwheel's "Building <identifier> wheel" to its
    # "<identifier> finished in": setup, torch, compile and repair (or, reused, setup only).
    python_seconds_by_identifier: dict[str, float] = field(default_factory=dict)
    # identifier -> the file name of the earlier Python's wheel it reused instead of building
    reused_wheels: dict[str, str] = field(default_factory=dict)
    # wheelbuild-nvcc's rewrites of the package's arch and thread flags, each once, in order
    nvcc_rewrites: list[str] = field(default_factory=list)
    # wheelbuild-cxx's raises of the package's C++ standard to torch's, each once, in order
    std_raises: list[str] = field(default_factory=list)
    # wheelbuild-check-linked's verdict per Python: "identifier: linked here: ..."
    link_checks: list[str] = field(default_factory=list)
    # URLs of prebuilt wheels or shared objects the package's build printed (it fetched one)
    prebuilt_urls: list[str] = field(default_factory=list)
    # cibuildwheel's steps, each timed (fed a `now`): where the report's chart marks its phases
    steps: list[StepTime] = field(default_factory=list)
    _building: str | None = None  # the Python between its "Building ... wheel" and its end
    # The files each Python installed from the machine's wheel cache: (lock, sha256, file name),
    # each once, in order; the lock (KEY-TAG) names the requirements and the Python
    locked_files: list[tuple[str, str, str]] = field(default_factory=list)
    _build_started: float | None = None
    _python_started: float | None = None
    _totals: dict[str, int] = field(default_factory=dict)

    def feed(self, line: str, now: float | None = None) -> None:
        """One line of the log; `now` (monotonic seconds) times the build steps."""
        if now is not None:
            self._time_steps(line, now)
        if self._dist_line(line):
            return
        if _STEP.match(line):
            self.step = line.rstrip(". ")
        if started := _BUILD_START.search(line):
            self.identifier, self.done, self.total = started[1], 0, 0
            self._python_started = now
            self._building = started[1]
        elif reused := _REUSED.search(line):
            self.reused_wheels[reused[2]] = reused[1]
        elif (ended := _BUILD_END.search(line)) and ended[1] == self.identifier:
            if now is not None and self._python_started is not None:
                self.python_seconds_by_identifier[ended[1]] = now - self._python_started
            self._python_started = None
            self._building = None
        elif ninja := _NINJA.match(line):
            self.done, self.total = int(ninja[1]), int(ninja[2])
            self._totals[self.identifier or "?"] = self.total
            output = _OUTPUT.search(ninja[3])
            name = output[1].rsplit("/", 1)[-1] if output else ninja[3][:60]
            self.finished_units.setdefault(self.identifier or "?", []).append(name)
            if now is not None:
                self.finished_at[f"{self.identifier or '?'}:{name}"] = now
        elif failed := _FAILED.match(line):
            units = self.finished_units.get(self.identifier or "?", [])
            name = failed[1].rsplit("/", 1)[-1]
            if name in units:
                units.remove(name)
        elif counted := _SCCACHE.match(line):
            kinds = self.cache_counts.setdefault(self.identifier or "?", {})
            kinds.setdefault(counted[2], [0, 0])[0 if counted[1] == "hits" else 1] += int(counted[3])
        elif unit := _UNIT_CACHE.match(line.strip()):
            self.unit_cache.setdefault(self.identifier or "?", {})[unit[2]] = unit[1] == "compiled"
        elif line.startswith(MEMORY_MARK):
            value = line[len(MEMORY_MARK) :].split()[0]
            self.memory_limit_seen = int(value) if value.isdigit() else None
        self._contract_line(line)
        if is_kill_line(line):
            self.killed_lines.append(line.strip())
        if len(self.error_lines) < MAX_ERROR_LINES and COMPILER_ERROR.match(line):
            self.error_lines.append(line.strip())

    def _contract_line(self, line: str) -> None:
        """What the arch contract and the link ledger printed, and prebuilt downloads tried."""
        stripped = line.strip()
        if stripped.startswith(NVCC_REWRITE_MARK):
            rewrite = stripped[len(NVCC_REWRITE_MARK) :]
            if rewrite not in self.nvcc_rewrites:
                self.nvcc_rewrites.append(rewrite)
        elif stripped.startswith(STD_RAISE_MARK):
            raised = stripped[len(STD_RAISE_MARK) :]
            if raised not in self.std_raises:
                self.std_raises.append(raised)
        elif locked := _LOCKED.match(stripped):
            entry = (locked[1], locked[2], locked[3])
            if entry not in self.locked_files:
                self.locked_files.append(entry)
        elif stripped.startswith((LINKED_MARK, NOT_LINKED_MARK, LINK_CHECK_SKIPPED_MARK)):
            self.link_checks.append(f"{self.identifier or '?'}: {stripped.removeprefix('wheelbuild: ')}")
        elif self.step == COMPILE_STEP and not stripped.startswith("+ "):
            for url in _PREBUILT_URL.findall(stripped):
                if url not in self.prebuilt_urls:
                    self.prebuilt_urls.append(url)

    def _dist_line(self, line: str) -> bool:
        """sccache's per-server counts (the lines below its header); True when `line` was one."""
        if self._in_dist_servers and (server := _DIST_SERVER.match(line)):
            self.dist_by_server[server[1]] = self.dist_by_server.get(server[1], 0) + int(server[2])
            return True
        stripped = line.strip()
        self._in_dist_servers = stripped == _DIST_HEAD
        if failed := _DIST_FAILED.match(stripped):
            self.dist_local += int(failed[1])
            self.dist_seen = True
        self.dist_seen = self.dist_seen or self._in_dist_servers
        return self._in_dist_servers

    def _time_steps(self, line: str, now: float) -> None:
        self._follow_step(line, now)
        if line.startswith("Building wheel..."):
            self._build_started = now
        elif self._build_started is not None and line.startswith(
            ("Repairing wheel...", "cibuildwheel: error")
        ):
            seconds = now - self._build_started
            self.build_seconds += seconds
            key = self.identifier or "?"
            self.build_seconds_by_identifier[key] = self.build_seconds_by_identifier.get(key, 0.0) + seconds
            self._build_started = None

    def _follow_step(self, line: str, now: float) -> None:
        """A step of cibuildwheel's begins (the one before it ends), or ends: its "✓ 6.01s", the
        next Python's start, or this one's end. Called before the line moves `identifier`."""
        name = line.rstrip().removesuffix("...")
        if name in CIBUILDWHEEL_STEPS and line.rstrip().endswith("..."):
            self.end_step(now)
            if len(self.steps) < MAX_STEPS:
                self.steps.append(StepTime(self._building, name, now))
        elif _STEP_END.match(line) or _BUILD_START.search(line) or _BUILD_END.search(line):
            self.end_step(now)

    def end_step(self, now: float) -> None:
        """The step running now, if one is, ended at *now* (the log ended: the attempt is over)."""
        if self.steps and self.steps[-1].end is None:
            self.steps[-1] = replace(self.steps[-1], end=now)

    @property
    def cache_by_identifier(self) -> dict[str, tuple[int, int]]:
        """(hits, misses) in units, a .cu or a .cpp each, per build identifier. A .cu unit counts
        as a miss when its device code was compiled again, even if sccache counted the nvcc call
        itself a hit: the device code (cicc, ptxas) is where a CUDA unit's time goes."""
        units: dict[str, tuple[int, int]] = {}
        for identifier, kinds in self.cache_counts.items():
            cpp_hits, cpp_misses = kinds.get("C/C++", [0, 0])
            cu_hits, cu_misses = kinds.get("CUDA", [0, 0])
            cu_misses = max(cu_misses, kinds.get("CUDA (Device code)", [0, 0])[1])
            cu_total = cu_hits + kinds.get("CUDA", [0, 0])[1]
            units[identifier] = (cpp_hits + cu_total - cu_misses, cpp_misses + cu_misses)
        return units

    @property
    def cache_hits(self) -> int:
        return sum(hits for hits, _ in self.cache_by_identifier.values())

    @property
    def cache_misses(self) -> int:
        return sum(misses for _, misses in self.cache_by_identifier.values())

    @property
    def units_total(self) -> int:
        """ninja's unit count over every identifier seen (each one's N)."""
        return sum(self._totals.values()) if self._totals else self.total

    @property
    def units_finished(self) -> int:
        return sum(len(units) for units in self.finished_units.values())
