"""A build's run as the pipeline hands it from step to step (build.py): who it is (Run), what
the attempts need once preflight found it all (Ready), what stamp, check, gate and the torch range
found (Checked), and what the caller gets (BuildResult). Values only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import WheelbuildError
from ..image.inputs import Image, ImageInputs
from ..image.options import ImageOptions
from ..plan.planner import Plan
from ..recipes.survey import Survey
from ..report.attempt_records import PhaseRecord
from ..spec.build_spec import BuildSpec
from ..spec.sources import PreparedSource, SourceDate
from ..spec.torch_releases import TorchIndex
from ..variants import CudaCompiler
from ..wheel.abi import AbiReport
from ..wheel.abi3 import Abi3Use
from ..wheel.contents import WheelInfo
from ..wheel.gate import GateResult
from ..wheel.torch_range import TorchRange

__all__ = ["BuildResult", "Checked", "Ready", "Run"]


@dataclass(frozen=True)
class BuildResult:
    run_id: str
    run_dir: Path
    image: Image
    plan: Plan | None  # None when the wheels were reused from an earlier build
    wheels: tuple[WheelInfo, ...]
    report: Path
    gate: Mapping[str, str]  # wheel file name -> the import gate's one-line summary
    abi3: tuple[Abi3Use, ...] = ()  # the wheels that serve several Pythons, and how
    ranges: tuple[TorchRange, ...] = ()  # each wheel against the torch releases around its own

    def gate_summary(self, wheel: WheelInfo) -> str:
        return self.gate.get(wheel.path.name, "not run (--no-gate): publish checks it statically only")


@dataclass(frozen=True)
class Run:
    """One build: its spec (the release pinned), image options, id, folder, and GPU or not."""

    spec: BuildSpec
    options: ImageOptions
    id: str
    dir: Path
    gpus: bool


@dataclass(frozen=True)
class Ready:
    """What the attempts need, all found before the first container."""

    inputs: ImageInputs
    compiler: CudaCompiler
    source: PreparedSource
    image: Image
    pythons: tuple[str, ...]
    key: str  # the result store's key: the content hash of every input
    survey: Survey  # what the package's build files ask for, read as text
    switches: tuple[str, ...]  # "NAME=VALUE: why" for each switch the survey set
    torch_why: str  # which torch release, and why ("torch 2.14.1: newest on ... with cp311 wheels")
    torch_index: TorchIndex | None  # torch's page on its index; None when it could not be read
    date: SourceDate  # SOURCE_DATE_EPOCH, from the inputs: every zip entry's date
    network: str  # the container's network while the package builds: "off", or "on: <why>"
    image_s: float | None = None  # how long this run took to have its image (built or reused)


@dataclass(frozen=True)
class Checked:
    """The attempts' wheels after stamp, check and gate, and every problem found."""

    wheels: tuple[WheelInfo, ...]
    abi: Mapping[str, AbiReport]
    gates: tuple[GateResult, ...]
    problems: list[WheelbuildError]
    ranges: tuple[TorchRange, ...] = ()  # each wheel against the torch releases around its own
    # The import gate and the torch range, timed on the last attempt's clock (the chart's)
    phases: tuple[PhaseRecord, ...] = ()
