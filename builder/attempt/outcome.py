"""What the engine saw of one attempt (AttemptResult, with its OOM evidence) and how it ended:
Succeeded | OOMKilled | Failed, decided by `classify`. Pure: the engine observes, this module says
what the observations mean, so every ending is tested without a daemon. config.py says what to
run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BuildFailed, MemoryLimitNotApplied, OutOfMemory, WheelbuildError
from ..host.unit_memory import UnitMemory
from ..plan.learned import BuildMeasurement
from ..plan.planner import Plan
from .buildlog import MEMORY_MISSING_MARK, NETWORK_STUCK_MARK, TORCH_MISMATCH_MARK, StepTime
from .diagnosis import compile_failure, contract_failure

__all__ = ["AttemptResult", "Failed", "OOMKilled", "OomEvidence", "Outcome", "Succeeded", "classify"]


# ---------------------------------------------------------------------------------------------
# What the engine saw
#
# When a compiler is OOM-killed, ninja fails, cibuildwheel exits 1 and the container's PID 1
# (cibuildwheel's bash) exits 0: no 137 anywhere. The kernel and Docker know, so the engine asks
# them, and the evidence comes back here.


@dataclass(frozen=True)
class OomEvidence:
    docker_oom_events: int = 0  # Docker's `oom` events for the attempt's label
    state_oom_killed: bool = False  # State.OOMKilled, seen while the container lived
    cgroup_oom_kills: int = 0  # rise of the container cgroup's oom_kill counter
    killed_lines: tuple[str, ...] = ()  # "Killed", "died due to signal 9" in the log

    @property
    def fired(self) -> tuple[str, ...]:
        found = []
        if self.docker_oom_events:
            found.append(f"docker oom event x{self.docker_oom_events}")
        if self.state_oom_killed:
            found.append("State.OOMKilled")
        if self.cgroup_oom_kills:
            found.append(f"cgroup oom_kill +{self.cgroup_oom_kills}")
        # "Killed" in the log is what any SIGKILL prints (a timeout, a person's pkill): it
        # counts only when the kernel or Docker also says the memory limit was hit.
        if self.killed_lines and found:
            found.append(f"log: {self.killed_lines[0]}")
        return tuple(found)


@dataclass(frozen=True)
class AttemptResult:
    attempt: int
    returncode: int
    duration_s: float
    wheels: tuple[Path, ...]
    memory_limit_seen: int | None
    log_path: Path
    log_tail: tuple[str, ...] = field(default_factory=tuple)
    oom: OomEvidence = field(default_factory=OomEvidence)
    peak_memory: int | None = None  # peak working set, sampled once a second
    peak_memory_compile: int | None = None  # the same, during cibuildwheel's "Building wheel" step
    finished_units: tuple[str, ...] = ()  # "identifier:unit.o" of each unit that completed here
    units_total: int = 0
    cache_hits: int = 0  # sccache, over the builds that got as far as the repair step
    cache_misses: int = 0
    build_seconds: float = 0.0  # time in cibuildwheel's "Building wheel..." steps
    build_seconds_by_identifier: tuple[tuple[str, float], ...] = ()  # the same, per Python
    # Each Python's whole time in cibuildwheel (setup to its wheel), and the Pythons that reused
    # an earlier Python's wheel (abi3) instead of building: (identifier, that wheel's file name).
    python_seconds_by_identifier: tuple[tuple[str, float], ...] = ()
    reused_wheels: tuple[tuple[str, str], ...] = ()
    cache_by_identifier: tuple[tuple[str, int, int], ...] = ()  # (identifier, hits, misses)
    # ("identifier:unit.o", compiled) per unit sccache saw, from wheelbuild-cache-log's lines;
    # empty without the compiler cache or for a Python that never reached its repair step.
    unit_cache: tuple[tuple[str, bool], ...] = ()
    # --dist: compiles each build server ran ("ip:port", count), and those run locally instead;
    # None where sccache printed no distribution stats (no --dist)
    dist_by_server: tuple[tuple[str, int], ...] | None = None
    dist_local: int = 0
    # For build-report.html, in seconds since the attempt began: the working set (each point the
    # highest sample of its interval, memory_step_s long), the OOM kills, each unit's finish.
    memory_series: tuple[tuple[float, int], ...] = ()
    memory_step_s: float = 0.0
    oom_at_s: tuple[float, ...] = ()
    unit_finished_s: tuple[tuple[str, float], ...] = ()
    steps: tuple[StepTime, ...] = ()  # cibuildwheel's steps per Python: the chart's phases
    # Each unit's own memory and time while compiling, and what the build held outside the
    # units when its working set peaked (host/unit_memory.py): what the next plan learns from.
    unit_memory: tuple[UnitMemory, ...] = ()
    overhead_at_peak: int | None = None
    # The contract's evidence from the log: wheelbuild-nvcc's rewrites (each once), each
    # Python's link check, and URLs of prebuilt binaries the package's build printed.
    nvcc_rewrites: tuple[str, ...] = ()
    std_raises: tuple[str, ...] = ()  # the package's C++ standard raised to torch's, each once
    link_checks: tuple[str, ...] = ()
    prebuilt_urls: tuple[str, ...] = ()
    # The log's first compiler error lines, wherever they were (its tail may have lost them).
    error_lines: tuple[str, ...] = ()
    # What each Python installed from the machine's wheel cache (torch, its CUDA wheels, the
    # build tools): (lock KEY-TAG, sha256, file name), from wheelbuild-wheel-cache's lines.
    locked_files: tuple[tuple[str, str, str], ...] = ()

    def measurement(self, plan: Plan, run_id: str, archs: tuple[int, ...]) -> BuildMeasurement | None:
        """What this attempt measured against what its plan predicted, for the next plan to learn
        from; None when it failed or caught no unit compiling."""
        if self.returncode != 0 or not self.peak_memory_compile or not self.unit_memory:
            return None
        return BuildMeasurement(
            run_id=run_id,
            units=self.unit_memory,
            overhead=self.overhead_at_peak,
            measured_peak=self.peak_memory_compile,
            predicted_peak=plan.predicted_peak,
            max_jobs=plan.max_jobs,
            nvcc_threads=plan.nvcc_threads,
            archs=archs,
        )


# ---------------------------------------------------------------------------------------------
# How an attempt ended: the architecture's result type


@dataclass(frozen=True)
class Succeeded:
    result: AttemptResult


@dataclass(frozen=True)
class OOMKilled:
    """A compiler was OOM-killed, by evidence: worth a retry at half the parallelism."""

    result: AttemptResult

    @property
    def error(self) -> OutOfMemory:
        result = self.result
        return OutOfMemory(
            f"a compiler was OOM-killed in attempt {result.attempt} "
            f"(evidence: {'; '.join(result.oom.fired)})",
            "give the container more memory (--memory) or lower --max-jobs / --nvcc-threads; "
            + f"full log: {result.log_path}",
            details="\n".join(result.log_tail[-25:]),
        )


@dataclass(frozen=True)
class Failed:
    """Any other end without wheels: final, with the typed error that explains it."""

    result: AttemptResult
    error: WheelbuildError


Outcome = Succeeded | OOMKilled | Failed


def classify(result: AttemptResult) -> Outcome:
    """What the observations mean. Marks count only at the start of a line: cibuildwheel also
    echoes the commands that print them."""
    if result.returncode == 0 and result.wheels:
        return Succeeded(result)
    tail = "\n".join(result.log_tail[-25:])
    where = f"full log: {result.log_path}"
    if any(line.startswith(MEMORY_MISSING_MARK) for line in result.log_tail):
        return Failed(
            result,
            MemoryLimitNotApplied(
                "the build container runs without the memory limit it was given "
                f"(it read {result.memory_limit_seen or 'no limit'}); Docker ignored --memory",
                "use a rootful Docker with the memory cgroup controller enabled "
                "(rootless Docker on cgroup v1 cannot limit memory)",
                details=tail,
            ),
        )
    mismatch = next((line for line in result.log_tail if line.startswith(TORCH_MISMATCH_MARK)), None)
    if mismatch:
        return Failed(
            result,
            BuildFailed(
                mismatch.removeprefix("wheelbuild: "),
                "point --torch-index-url at an index serving that variant, or pick the variant the index has",
                details=tail,
            ),
        )
    stuck = next((line for line in result.log_tail if line.startswith(NETWORK_STUCK_MARK)), None)
    if stuck:
        return Failed(
            result,
            BuildFailed(
                f"the build container's network did not change as asked ({stuck.removeprefix('wheelbuild: ')})",
                "check the Docker daemon (docker network ls: the bridge network); --build-network keeps "
                f"the network on for the build; {where}",
                details=tail,
            ),
        )
    if (broken := contract_failure(result)) is not None:
        return Failed(result, broken)
    if result.oom.fired:
        return OOMKilled(result)
    if (failed := compile_failure(result)) is not None:
        return Failed(result, failed)
    return Failed(
        result,
        BuildFailed(
            f"cibuildwheel exited with code {result.returncode} without a wheel",
            f"read the log tail above; {where}",
            details=tail,
        ),
    )
