"""What `plan` says beyond the plan itself: the wheels a build would make, one line each (as
cibuildwheel's --print-build-identifiers lists its builds), and the whole dry run as one JSON
object for scripts (`plan --json`). Pure: a Resolution and its Plan in, lines and a dict out.

Which Pythons: the ones named; else those torch has wheels for on its index that the package's
Requires-Python admits, of which a build makes the ones its image holds (the image is not asked
in a dry run). Free-threaded builds (cp313t) are left out, as the build leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..plan.planner import Plan
from ..recipes import source_location, source_pin
from ..spec.build_spec import format_archs
from ..spec.pythons import admitted_by
from .resolve import Resolution

__all__ = ["JSON_SCHEMA", "PlannedWheel", "plan_document", "planned_pythons", "planned_wheels", "wheel_lines"]

JSON_SCHEMA = 1  # plan --json's "schema": raised when a field changes meaning or goes


@dataclass(frozen=True)
class PlannedWheel:
    """One wheel a build would make."""

    project: str
    version: str  # "2.8.3.post2+cu130torch2.14"; "?+cu130torch2.14" when only the build can say
    python: str  # cp311
    torch: str  # 2.14.1+cu130
    archs: tuple[int, ...]

    def line(self) -> str:
        archs = " ".join(f"sm_{a}" for a in self.archs) or "the package's own"
        return f"{self.project} {self.version}  {self.python}  torch {self.torch}  {archs}"


def planned_pythons(resolved: Resolution) -> tuple[tuple[str, ...], str]:
    """The Pythons a build would make wheels for, and where that comes from."""
    spec = resolved.spec
    if spec.pythons:
        return spec.pythons, "as named"
    if resolved.torch_index is None:
        return (), "the image's (torch's index could not be read)"
    admitted = admitted_by(
        resolved.requires_python, resolved.torch_index.cpythons(spec.variant.torch_version)
    )
    return admitted, "torch's wheels the package admits, of which the build makes those its image holds"


def planned_wheels(resolved: Resolution) -> tuple[PlannedWheel, ...]:
    spec = resolved.spec
    version = spec.recipe.version or resolved.metadata.version or "?"
    label = spec.variant.label
    pythons, _where = planned_pythons(resolved)
    return tuple(
        PlannedWheel(resolved.project, f"{version}+{label}", python, str(spec.variant), resolved.archs)
        for python in pythons
    )


def wheel_lines(resolved: Resolution) -> list[str]:
    """`plan`'s list of the wheels, under a line that says where the Pythons come from."""
    _pythons, where = planned_pythons(resolved)
    wheels = planned_wheels(resolved)
    head = f"wheels ({len(wheels)}; Pythons {where}):" if wheels else f"wheels: one per Python, {where}"
    return [head, *(f"  {wheel.line()}" for wheel in wheels)]


def plan_document(resolved: Resolution, plan: Plan, options: list[dict[str, object]]) -> dict[str, object]:
    """`plan --json`: everything `plan` prints, as one object (docs/guides/plan-and-memory.md)."""
    spec = resolved.spec
    pythons, where = planned_pythons(resolved)
    return {
        "schema": JSON_SCHEMA,
        "package": {
            "name": resolved.project,
            "version": spec.recipe.version or resolved.metadata.version,
            "source": {
                "location": source_location(spec.recipe.source),
                "sha256": source_pin(spec.recipe.source),
            },
            "requires_python": resolved.requires_python,
        },
        "torch": {
            "variant": str(spec.variant),
            "index_url": spec.variant.index_url,
            "why": resolved.torch_why,
        },
        "toolkit": {
            "cuda": resolved.compiler.version,
            "home": resolved.compiler.home,
            "why": resolved.toolkit_note,
        },
        "archs": list(resolved.archs),
        "archs_asked": format_archs(spec.archs, spec.ptx),
        "notes": {
            "archs": resolved.arch_note,
            "cxx_standard": resolved.std_note,
            "switches": list(resolved.switches),
        },
        "pythons": {"tags": list(pythons), "from": where},
        "wheels": [
            {
                "project": w.project,
                "version": w.version,
                "python": w.python,
                "torch": w.torch,
                "archs": list(w.archs),
            }
            for w in planned_wheels(resolved)
        ],
        "plan": plan.as_dict(),
        "network": resolved.network,
        "options": options,
    }
