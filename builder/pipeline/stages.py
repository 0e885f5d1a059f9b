"""A build's run as the pipeline hands it from step to step (build.py), beside the request's
Resolution (resolve.py): who it is (Run), what stamp, check, gate and the torch range found
(Checked), and what the caller gets (BuildResult). Values only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import WheelbuildError
from ..image.inputs import Image
from ..image.options import ImageOptions
from ..plan.planner import Plan
from ..report.attempt_records import PhaseRecord
from ..wheel.abi import AbiFindings
from ..wheel.abi3 import Abi3Use
from ..wheel.contents import WheelInfo
from ..wheel.gate import GateResult
from ..wheel.torch_range import TorchRange

__all__ = ["BuildResult", "Checked", "Run"]


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
    """One build's run: its image options, id, folder, and GPU or not (what it builds is its
    Resolution's)."""

    options: ImageOptions
    id: str
    dir: Path
    gpus: bool


@dataclass(frozen=True)
class Checked:
    """The attempts' wheels after stamp, check and gate, and every problem found."""

    wheels: tuple[WheelInfo, ...]
    abi: Mapping[str, AbiFindings]
    gates: tuple[GateResult, ...]
    problems: list[WheelbuildError]
    ranges: tuple[TorchRange, ...] = ()  # each wheel against the torch releases around its own
    # The import gate and the torch range, timed on the last attempt's clock (the chart's)
    phases: tuple[PhaseRecord, ...] = ()
