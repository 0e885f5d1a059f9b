"""What the pipeline asks of the engine: small Protocols, one per kind of caller, and the plain
values that cross. build.py, calibrate.py, prune.py and nightly.py depend on these, never on the
docker SDK, so a fake engine stands in for Docker in their unit tests. engine.DockerEngine is the
one real implementation (and the only holder of a docker client).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..attempt.buildlog import BuildLog, MemorySample
from ..attempt.config import AttemptConfig
from ..attempt.outcome import AttemptResult
from ..host.gpu import GpuMode
from ..image.ports import Images, OnLine


@dataclass(frozen=True)
class GateJob:
    """One wheel through the import gate, in a fresh container of the base image."""

    run_id: str
    image: str  # the base image: no CUDA toolkit, as on a user's machine
    wheel: Path
    spec: Mapping[str, object]  # gate.GateChecks.to_json(...) less the paths the engine fills in
    torch_index_url: str  # may hold credentials: travels as a mounted file, never env or argv
    torch_cache_key: (
        str  # names this torch and its index in the machine's wheel cache (TorchVariant.cache_key)
    )
    ca_bundle: Path | None
    gpus: bool
    memory: int
    log_path: Path
    images_dir: Path


@dataclass(frozen=True)
class UnitCompile:
    """One compile of one unit, as `wheelbuild calibrate` runs it."""

    run_id: str
    image: str
    source_dir: Path  # the unpacked sdist on this machine, mounted read-only at /src
    torch_volume: str  # a volume holding torch (headers) at the engine's TORCH_HEADERS_DIR
    unit: str  # relative to the source root
    flags: tuple[str, ...]  # the package's nvcc flags
    include_dirs: tuple[str, ...]  # relative to the source root
    archs: tuple[int, ...]
    threads: int
    memory: int
    cpus: float
    cuda_home: str


@dataclass(frozen=True)
class UnitResult:
    returncode: int
    peak: int  # the container cgroup's peak memory, bytes
    wall_s: float  # nvcc's own wall time, measured inside the container
    oom: bool
    log_tail: tuple[str, ...]


class Engine(Images, Protocol):
    """What a build runs through: preflight, attempts, the import gate, cleanup."""

    def start_reaper(self, run_id: str) -> None: ...

    def sweep_orphans(self) -> int: ...

    def resolve_gpus(self, mode: GpuMode) -> bool: ...

    def run_attempt(
        self,
        config: AttemptConfig,
        on_line: Callable[[str, BuildLog], None],
        on_memory: Callable[[MemorySample], None] | None = None,
    ) -> AttemptResult: ...

    def run_gate(self, job: GateJob, on_line: OnLine) -> tuple[dict[str, object] | None, str]: ...

    def interrupt_cleanup(self, run_id: str) -> int: ...


class CalibrationEngine(Images, Protocol):
    """What `wheelbuild calibrate` runs through: torch's headers, one unit per container."""

    def connect(self) -> object: ...

    def ensure_torch_headers(self, image: str, requirement: str, index_url: str, on_line: OnLine) -> str: ...

    def compile_unit_alone(self, job: UnitCompile) -> UnitResult: ...

    def interrupt_cleanup(self, run_id: str) -> int: ...
