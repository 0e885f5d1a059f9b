"""A model that learns from every build. No Docker, no subprocess: a build's per-unit measurements in, a profile
and its record out; preflight.py keeps them in the cache and plans with them.

After a build, each unit the watcher measured (host/unit_memory.py: its processes' memory at
its worst sample, and how long it was seen compiling) is a measurement at that build's archs and
NVCC_THREADS. The new model is the build's own model corrected as `wheelbuild calibrate`
corrects it (plan/calibration.py): measured units take their measured cost, the others of a
family are scaled by the family's worst ratio, never below 1; a family with no unit measured
(its units came from the compiler cache, or ran too briefly to sample) keeps its costs. Its
reserve is what the build held outside the units when its working set peaked. The next plan for the same recipe, release and
toolkit uses it, and says how far the model was off.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..bounded import read_bounded
from ..host.unit_memory import UnitMemory
from ..units import format_bytes
from .admission import with_admission
from .calibration import Measurement, calibrated_model, family_of, profile_tsv
from .memory_model import MemoryModel, parse_profile
from .planner import Plan

__all__ = [
    "BuildMeasurement",
    "LearnedRecord",
    "learn",
    "learned_path",
    "load_learned",
    "record_from_json",
    "save_learned",
]

SAMPLE_S = 1.0  # the watcher's period: a unit is seen for up to one period less than it runs
# A unit seen in fewer samples than this may have been caught before its peak: it is left to be
# scaled like an unmeasured one (never below its old cost), so a short unit cannot lower the model.
MIN_SAMPLES = 3
# A recipe without families learns by kind of unit: CUDA kernels scale together, host code apart.
BY_KIND = {"cuda": r"\.cu$", "host": r"\.(c|cc|cpp|cxx)$"}


@dataclass(frozen=True)
class BuildMeasurement:
    """What one build measured, and what its plan had predicted."""

    run_id: str
    units: tuple[UnitMemory, ...]  # "identifier:stem", one per unit and Python
    overhead: int | None  # the working set at its peak less the units' memory then
    measured_peak: int  # the working set's peak while compiling
    predicted_peak: int  # that build's plan's prediction
    max_jobs: int
    nvcc_threads: int
    archs: tuple[int, ...]


@dataclass(frozen=True)
class LearnedRecord:
    """Kept beside the learned profile: where it came from and how far each model was off,
    both for the plan that build ran."""

    run_id: str
    units_measured: int
    units_total: int
    max_jobs: int
    nvcc_threads: int
    measured_peak: int
    predicted_before: int  # the model the build planned with
    predicted_after: int  # the learned model, for the same MAX_JOBS and NVCC_THREADS

    def error_before(self) -> float:
        return self.predicted_before / self.measured_peak - 1

    def error_after(self) -> float:
        return self.predicted_after / self.measured_peak - 1

    def describe(self) -> str:
        return (
            f"learned from build {self.run_id} ({self.units_measured} of {self.units_total} units measured): "
            f"at MAX_JOBS={self.max_jobs}, NVCC_THREADS={self.nvcc_threads} it peaked at "
            f"{format_bytes(self.measured_peak)}; its plan predicted {format_bytes(self.predicted_before)} "
            f"({self.error_before():+.0%}), this model predicts {format_bytes(self.predicted_after)} "
            f"({self.error_after():+.0%})"
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def record_from_json(text: str) -> LearnedRecord | None:
    """The record back, or None when it is not one (it is cache, not truth: then plan without)."""
    try:
        data = json.loads(text)
        record = LearnedRecord(**data)
    except (ValueError, TypeError):
        return None
    numbers = (
        getattr(record, name) for name in ("units_measured", "units_total", "max_jobs", "nvcc_threads")
    )
    peaks = (record.measured_peak, record.predicted_before, record.predicted_after)
    if not all(isinstance(n, int) and n >= 0 for n in (*numbers, *peaks)) or record.measured_peak <= 0:
        return None
    return record


# One link of a learned model's source: what one build (or several) taught the model it scaled.
_LEARNED_LINK = re.compile(
    r"^learned from (?:build \S+: \d+ unit\(s\) measured|(\d+) builds, the newest \S+ \(\d+ unit\(s\) measured\)), scaling "
)


def learned_source(previous: str, run_id: str, measured: int) -> str:
    """The source of a model learned from build *run_id* on top of a model whose source is
    *previous*: one link however many builds taught it (their count and the newest), then the
    source the first of them scaled, so the text does not grow with every build."""
    builds, base = 1, previous
    while found := _LEARNED_LINK.match(base):
        builds += int(found[1]) if found[1] else 1
        base = base[found.end() :]
    if builds == 1:
        return f"learned from build {run_id}: {measured} unit(s) measured, scaling {base}"
    return f"learned from {builds} builds, the newest {run_id} ({measured} unit(s) measured), scaling {base}"


def learn(
    model: MemoryModel,
    build: BuildMeasurement,
    families: Mapping[str, str] | None,
    toolkit: str,
    predict: Callable[[MemoryModel], int] | None = None,
) -> tuple[MemoryModel, LearnedRecord] | None:
    """The model corrected by what the build measured, and its record; None when the build
    measured no unit the model knows (a generic model's one unit, or no sample caught one).
    `predict` gives a model's peak for the build that ran, as its plan predicted it (by default
    the static worst case: reserve + the MAX_JOBS heaviest units)."""
    if not model.complete:
        return None
    measurements = _measurements(model, build.units, build.archs, build.nvcc_threads)
    groups = families or BY_KIND
    if not any(family_of(m.unit, groups) for m in measurements):
        return None
    learned = calibrated_model(model, measurements, groups, toolkit, keep_unsampled=True)
    reserve = build.overhead if build.overhead is not None else model.reserve
    learned = replace(
        learned,
        reserve=reserve,
        source=learned_source(model.source or model.name, build.run_id, len(measurements)),
    )
    archs = len(build.archs)
    record = LearnedRecord(
        run_id=build.run_id,
        units_measured=len(measurements),
        units_total=len(model.units),
        max_jobs=build.max_jobs,
        nvcc_threads=build.nvcc_threads,
        measured_peak=build.measured_peak,
        predicted_before=build.predicted_peak,
        predicted_after=predict(learned)
        if predict is not None
        else learned.peak_of_jobs(build.max_jobs, build.nvcc_threads, archs),
    )
    return learned, record


def _measurements(
    model: MemoryModel, units: Sequence[UnitMemory], archs: tuple[int, ...], threads: int
) -> list[Measurement]:
    """One measurement per model unit seen: its worst peak (and the ciccs it ran then) and its
    longest time over the Pythons."""
    by_stem = {u.name.rsplit("/", 1)[-1].split(".")[0]: u.name for u in model.units}
    worst: dict[str, tuple[int, int, float]] = {}
    for seen in units:
        name = by_stem.get(seen.unit.rsplit(":", 1)[-1])
        if name is None or not seen.compiled or seen.seen_s < (MIN_SAMPLES - 1) * SAMPLE_S:
            continue
        peak, ciccs, wall = worst.get(name, (0, 0, 0.0))
        if seen.peak > peak:
            peak, ciccs = seen.peak, seen.ciccs_at_peak
        worst[name] = (peak, ciccs, max(wall, seen.seen_s + SAMPLE_S))
    return [
        Measurement(
            unit=n,
            archs=archs,
            threads=threads,
            peak=p,
            wall_s=w,
            # Fewer ciccs at its peak than nvcc runs at once: cicc admission held the others back.
            peak_threads=c if 0 < c < min(threads, len(archs)) else None,
        )
        for n, (p, c, w) in worst.items()
    ]


MAX_LEARNED = 4 * 1024**2  # a profile is a few KiB; the cache is not trusted beyond that


def remember(
    plan: Plan, measured: BuildMeasurement, families: Mapping[str, str] | None, toolkit: str, path: Path
) -> str | None:
    """Learn from a finished build and keep the model at *path* for the next plan of its release
    and toolkit; the line to show, or None when there was nothing to learn."""
    admitted = plan.admission_budget is not None  # then its peak was predicted behind the wrapper

    def predict(model: MemoryModel) -> int:
        return with_admission(replace(plan, model=model), keep_jobs=True).predicted_peak

    learned = learn(plan.model, measured, families, toolkit, predict if admitted else None)
    if learned is None:
        return None
    model, record = learned
    save_learned(path, model, record)
    return record.describe()


def learned_path(cache: Path, recipe: str, version: str | None, toolkit: str, env: Mapping[str, str]) -> Path:
    """Where the model learned from the last build of a recipe release on a toolkit is kept
    (beside calibrate's profile; its record is the .json of the same name). A build's extra env
    (`--env`) can change what a unit costs, so a build with one learns apart from one without."""
    extra = ""
    if env:
        text = "\n".join(f"{key}={value}" for key, value in sorted(env.items()))
        extra = "-env" + hashlib.sha256(text.encode()).hexdigest()[:12]
    return cache / "profiles" / f"{recipe}-{version or 'any'}-cuda{toolkit}{extra}.learned.tsv"


def save_learned(path: Path, model: MemoryModel, record: LearnedRecord) -> None:
    """Profile and record, each written whole (temporary file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for target, text in (
        (path, profile_tsv(model, [record.describe()])),
        (path.with_suffix(".json"), record.to_json()),
    ):
        partial = target.with_name(target.name + ".partial")
        partial.write_text(text)
        os.replace(partial, target)


def load_learned(path: Path, name: str) -> tuple[MemoryModel, LearnedRecord] | None:
    """The learned model and its record; None when either is missing or not readable as one."""
    try:
        model = parse_profile(read_bounded(path, MAX_LEARNED).decode(), name=name)
        record = record_from_json(read_bounded(path.with_suffix(".json"), MAX_LEARNED).decode())
    except (OSError, ValueError):
        return None
    return None if record is None else (model, record)
