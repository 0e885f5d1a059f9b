"""What `plan` prints: the plan that runs, the wheels a build would make, one line each (as
cibuildwheel's --print-build-identifiers lists its builds), and what was chosen (torch, toolkit,
C++ standard), within a screen; with `-v` also why each number, and each option's source; and
the whole dry run as one JSON object for scripts (`plan --json`). Pure: a Resolution and its
Plan in, lines and a dict out; the CLI prints them.

Which Pythons: the ones named; else those torch has wheels for on its index that the package's
Requires-Python admits, of which a build makes the ones its image holds (the image is not asked
in a dry run). Free-threaded builds (cp313t) are left out, as the build leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..plan.planner import Plan, runs, summary_lines, why_lines, why_parts
from ..recipes import source_location, source_pin
from ..recipes.build_vars import parse_arch_env
from ..spec.build_spec import format_archs
from ..spec.pythons import admitted_by
from .preflight import arch_vars_to_set, unknown_arch_form
from .resolve import Resolution

__all__ = [
    "JSON_SCHEMA",
    "PlannedWheel",
    "plan_document",
    "plan_lines",
    "planned_pythons",
    "planned_wheels",
    "wheel_lines",
]

JSON_SCHEMA = 1  # plan --json's "schema": raised when a field changes meaning or goes


@dataclass(frozen=True)
class PlannedWheel:
    """One wheel a build would make."""

    project: str
    version: str  # "2.8.3.post2+cu130torch2.14"; "?+cu130torch2.14" when only its build can say
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


def planned_version(resolved: Resolution) -> str | None:
    """The release the build makes: the recipe's, else the one the source states (its metadata
    read as text); None where only running its setup.py could say."""
    return resolved.spec.recipe.version or resolved.metadata.version


def planned_wheels(resolved: Resolution) -> tuple[PlannedWheel, ...]:
    spec = resolved.spec
    version = planned_version(resolved) or "?"
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


def shown_switches(resolved: Resolution, plan: Plan) -> list[str]:
    """Each variable the build sets from what its files read ("NAME=VALUE: why"), a parallelism
    variable at the plan's MAX_JOBS (a retry after an OOM kill halves it with MAX_JOBS)."""
    jobs = set(resolved.spec.recipe.jobs_vars)
    shown = []
    for line in resolved.switches:
        name, _, rest = line.partition("=")
        if name in jobs and rest.startswith("MAX_JOBS:"):
            line = f"{name}={plan.max_jobs}{rest.removeprefix('MAX_JOBS')}"
        shown.append(line)
    return shown


def arch_env_lines(resolved: Resolution) -> list[str]:
    """The recipe's own arch variable (--arch-env NAME:FORM, or a known recipe's), as it is set."""
    spec = resolved.spec
    if not spec.recipe.arch_env:
        return []
    var = parse_arch_env(spec.recipe.arch_env)
    value = var.form.spell(spec.archs, spec.ptx)
    return [
        f"{var.name}={value}: the CUDA archs, {var.form.name} (the recipe's arch variable, or --arch-env)"
    ]


def unset_arch_vars(resolved: Resolution) -> list[str]:
    """The arch variables the build reads in a form its files do not tell: left unset, each said."""
    found = arch_vars_to_set(resolved.spec.recipe, resolved.survey, resolved.spec)
    return [unknown_arch_form(var.name, var.why) for var in found if var.form is None]


def plan_lines(resolved: Resolution, plan: Plan, *, verbose: bool, options: list[str]) -> list[str]:
    """`plan`'s text: within a screen by default (what, the plan that runs, the wheels, what was
    chosen); `verbose` adds each number's why lines and each option's source (*options*)."""
    version = planned_version(resolved)
    stated = version or "(its version: what its setup.py computes in the build)"
    source = resolved.spec.recipe.source
    pin = source_pin(source)
    lines = [
        f"plan for {resolved.project} {stated}",
        f"source: {source_location(source)}" + (f", sha256 {pin}" if pin else ""),
        *summary_lines(plan),
    ]
    lines.append(f"  {'model':<16}{plan.model.describe() if verbose else plan.model.brief()}")
    if verbose:
        lines += why_lines(plan)
    lines += wheel_lines(resolved)
    lines.append(f"torch: {resolved.torch_why}")
    lines.append(f"toolkit: {resolved.toolkit_note}")
    if resolved.arch_note:
        lines.append(f"archs: {resolved.arch_note}")
    if resolved.std_note:
        lines.append(f"C++ standard: {resolved.std_note}")
    lines += [f"sets {line}" for line in arch_env_lines(resolved)]
    lines += [f"sets {switch}" for switch in shown_switches(resolved, plan)]
    lines += [f"not set: {unset}" for unset in unset_arch_vars(resolved)]
    if verbose:
        lines.append(f"network while building: {resolved.network}")
        return [*lines, *options]
    return [
        *lines,
        "(-v: why each number of the plan, and where each option's value came from; --json: all of it)",
    ]


def plan_document(
    resolved: Resolution, plan: Plan, options: list[dict[str, object]], over_budget: str | None
) -> dict[str, object]:
    """`plan --json`: everything `plan -v` prints, as one object (docs/guides/plan-and-memory.md);
    *over_budget*: the warning a predicted peak over the limit gives, if it is."""
    spec = resolved.spec
    pythons, where = planned_pythons(resolved)
    return {
        "schema": JSON_SCHEMA,
        "package": {
            "name": resolved.project,
            "version": planned_version(resolved),
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
            "arch_env": arch_env_lines(resolved),
            "switches": shown_switches(resolved, plan),
            "unset_arch_vars": unset_arch_vars(resolved),
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
        "plan": {
            **plan.as_dict(),
            "runs": runs(plan),
            "model": {
                "name": plan.model.name,
                "source": plan.model.source,
                "units": plan.model.unit_count,
                "described": plan.model.describe(),
            },
            "why": [{"label": label, "reasons": list(reasons)} for label, reasons in why_parts(plan)],
            "over_budget": over_budget,
        },
        "network": resolved.network,
        "options": options,
    }
