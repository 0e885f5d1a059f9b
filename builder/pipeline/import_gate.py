"""The import gate, as a build runs it: each wheel installed with what it declares (torch from
the variant's index) into a fresh venv, in a fresh container of the base image, and imported;
an abi3 wheel once under each Python of the build. What a gate asks and what its answer means
is wheel/gate.py's to say; the container is the engine's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..engine.ports import Engine, GateJob
from ..image.inputs import IMAGES_DIR, production_base
from ..image.options import ImageOptions
from ..progress.console import Console
from ..spec.build_spec import BuildSpec
from ..variants import TorchVariant
from ..wheel.abi import AbiFindings
from ..wheel.abi3 import gate_pythons, stable_abi
from ..wheel.contents import WheelInfo
from ..wheel.gate import GateResult, gate_checks
from ..wheel.gate import read_result as read_gate

__all__ = ["GATE_MEMORY", "GateRun", "import_gate"]

GATE_MEMORY = 6 * 1024**3  # pip installing torch and importing it; a smoke test's small tensors


def import_gate(
    engine: Engine,
    wheels: tuple[WheelInfo, ...],
    abi_findings: Mapping[str, AbiFindings],
    spec: BuildSpec,
    options: ImageOptions,
    gpus: bool,
    run_id: str,
    run_dir: Path,
    console: Console,
    pythons: tuple[str, ...],
) -> tuple[GateResult, ...]:
    """Each wheel installed with what it declares (torch from the variant's index) into a fresh
    venv, in a fresh container of the base image, and every extension module and top-level
    package imported; the recipe's smoke test where a GPU is. A wheel of one Python is loaded
    under that Python; an abi3 wheel under each of the build's *pythons* (cp311 ...)."""
    base = options.base_image or production_base()
    console.step(f"import gate: each wheel installed and imported in a fresh {base} container")
    found = []
    gate = GateRun(engine, spec, options, gpus, run_id, run_dir, console)
    for wheel, python in ((w, p) for w in wheels for p in gate_pythons(w.path.name, pythons)):
        console.doing(f"gating {wheel.path.name}", python)
        result = gate.run(wheel, abi_findings[wheel.path.name], python, spec.variant)
        under = f" under {python}" if stable_abi(wheel.path.name) else ""
        console.info(f"{wheel.path.name}{under}: {result.summary}")
        found.append(result)
    return tuple(found)


@dataclass(frozen=True)
class GateRun:
    """What every gate of one build shares: the engine, the build's spec and options, its run."""

    engine: Engine
    spec: BuildSpec
    options: ImageOptions
    gpus: bool
    run_id: str
    run_dir: Path
    console: Console

    def run(
        self,
        wheel: WheelInfo,
        abi: AbiFindings,
        python: str,
        torch: TorchVariant,
        other_requirements: tuple[str, ...] | None = None,
        log_path: Path | None = None,
    ) -> GateResult:
        """One wheel under one Python and one torch (*torch*, from its index through the machine's
        wheel cache). With *other_requirements*, the wheel is installed without its own (its torch
        pin need not admit *torch*) and those after it: how its torch range is gated. Its log goes
        to *log_path*, else the run's gate.log."""
        spec = self.spec
        plan = gate_checks(wheel.path, abi, spec.archs, spec.recipe.smoke_test, spec.recipe.import_packages)
        asked = replace(plan, python=python).to_json(torch.requirement)
        if other_requirements is not None:
            asked["other_requirements"] = list(other_requirements)
        job = GateJob(
            run_id=self.run_id,
            image=self.options.base_image or production_base(),
            wheel=wheel.path,
            spec=asked,
            torch_index_url=torch.index_url,
            torch_cache_key=torch.cache_key,
            ca_bundle=self.options.ca_bundle,
            gpus=self.gpus,
            memory=GATE_MEMORY,
            log_path=log_path or self.run_dir / "gate.log",
            images_dir=IMAGES_DIR,
        )
        output, tail = self.engine.run_gate(job, self.console.log)
        answer = output or {
            "python": python,
            "install_error": f"the gate's container ended without an answer:\n{tail}",
        }
        result = read_gate(wheel.path.name, answer, abi)
        if result.smoke and result.smoke.get("status") == "skipped" and not self.gpus:
            # It ran (its imports are checked too) and found no GPU: say why there is none.
            reason = "the Docker daemon has no NVIDIA runtime, so no GPU reaches the gate"
            result = replace(result, smoke={**result.smoke, "reason": reason})
        return result
