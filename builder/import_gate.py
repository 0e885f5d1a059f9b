"""The import gate, as a build runs it: each wheel installed with what it declares (torch from
the variant's index) into a fresh venv, in a fresh container of the base image, and imported;
an abi3 wheel once under each Python of the build. What a gate asks and what its answer means
is wheel/gate.py's to say; the container is the engine's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from .preflight import ImageOptions
from .run.image import IMAGES_DIR, production_base
from .run.ports import Engine, GateJob
from .run.reporter import Reporter
from .spec import BuildSpec
from .wheel.abi import AbiReport
from .wheel.abi3 import gate_pythons, stable_abi
from .wheel.gate import GateResult, plan_gate
from .wheel.gate import read_result as read_gate
from .wheel.wheels import WheelInfo

__all__ = ["GATE_MEMORY", "import_gate"]

GATE_MEMORY = 6 * 1024**3  # pip installing torch and importing it; a smoke test's small tensors


def import_gate(
    engine: Engine,
    wheels: tuple[WheelInfo, ...],
    abi_reports: Mapping[str, AbiReport],
    spec: BuildSpec,
    options: ImageOptions,
    gpus: bool,
    run_id: str,
    run_dir: Path,
    reporter: Reporter,
    pythons: tuple[str, ...],
) -> tuple[GateResult, ...]:
    """Each wheel installed with what it declares (torch from the variant's index) into a fresh
    venv, in a fresh container of the base image, and every extension module and top-level
    package imported; the recipe's smoke test where a GPU is. A wheel of one Python is loaded
    under that Python; an abi3 wheel under each of the build's *pythons* (cp311 ...)."""
    base = options.base_image or production_base()
    reporter.step(f"import gate: each wheel installed and imported in a fresh {base} container")
    index = spec.variant.index_url
    found = []
    for wheel, python in ((w, p) for w in wheels for p in gate_pythons(w.path.name, pythons)):
        abi = abi_reports[wheel.path.name]
        plan = plan_gate(wheel.path, abi, spec.archs, spec.recipe.smoke_test, spec.recipe.import_packages)
        plan = replace(plan, python=python)
        job = GateJob(
            run_id=run_id,
            image=base,
            wheel=wheel.path,
            spec=plan.to_json(spec.variant.requirement),
            torch_index_url=index,
            torch_cache_key=spec.variant.cache_key,
            ca_bundle=options.ca_bundle,
            gpus=gpus,
            memory=GATE_MEMORY,
            log_path=run_dir / "gate.log",
            images_dir=IMAGES_DIR,
        )
        output, tail = engine.run_gate(job, reporter.log)
        answer = output or {
            "python": plan.python,
            "install_error": f"the gate's container ended without an answer:\n{tail}",
        }
        result = read_gate(wheel.path.name, answer, abi)
        if result.smoke and result.smoke.get("status") == "skipped" and not gpus:
            # It ran (its imports are checked too) and found no GPU: say why there is none.
            reason = "the Docker daemon has no NVIDIA runtime, so no GPU reaches the gate"
            result = replace(result, smoke={**result.smoke, "reason": reason})
        under = f" under {python}" if stable_abi(wheel.path.name) else ""
        reporter.info(f"{wheel.path.name}{under}: {result.summary}")
        found.append(result)
    return tuple(found)
