"""Calibration: measure a sample of a recipe's real units on this toolkit, and turn the sample into
a profile the planner prefers over the built-in one. No Docker, no subprocess: measurements in, text out, and a profile file read when named.

- Units are grouped in families (flash-attn: fwd, bwd, fwd_split). `--sample N` takes N units,
  cheapest first by the built-in model, one family after another in the recipe's order, so a
  small sample still reaches every family, and `--sample 1` is the first family's cheapest unit
  (flash-attn: fwd hdim32, its cheapest kernel of all).
- Each sampled unit is compiled alone, for each requested archs and NVCC_THREADS, in its own
  container (its own cgroup), which reports its cgroup's peak memory and the wall time.
- A measured unit takes its measured cost (its worst row's ratio to the built-in estimate). The
  other units of its family are scaled by the family's worst ratio, and units of a family with
  no sample by the worst ratio of all (a guess, and the profile says so); for memory that ratio
  is never below 1, so a cheap sample cannot lower the estimates a plan's safety rests on.
  Units outside every family (host code) keep their cost.
- The result is a profile in builder/plan/profiles' format, kept in the cache under
  <recipe>-<version>-cuda<toolkit>.tsv, with the raw measurements beside it
  (<...>.measured.tsv, the shared/calibration format).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .memory_model import COLUMNS, MIB, MemoryModel, UnitCost, parse_profile

__all__ = [
    "Measurement",
    "calibrated_model",
    "compare_with",
    "family_of",
    "load_calibrated",
    "measurements_tsv",
    "parse_measurements",
    "profile_path",
    "profile_tsv",
    "read_measurements",
    "sample_units",
]


@dataclass(frozen=True)
class Measurement:
    unit: str  # as the profile names it: csrc/flash_attn/src/flash_fwd_hdim32_fp16_sm80.cu
    archs: tuple[int, ...]
    threads: int
    peak: int  # bytes: the container cgroup's peak (page cache it touched included)
    wall_s: float
    oom: bool = False  # killed at the limit: `peak` is the limit, a lower bound
    # The archs compiled at once when it peaked, where that was seen and is not min(threads,
    # archs): with cicc admission a unit's ciccs may run one at a time (unit_memory.py).
    peak_threads: int | None = None


def family_of(unit: str, families: Mapping[str, str]) -> str | None:
    """The first family whose pattern matches the unit's file name."""
    name = unit.rsplit("/", 1)[-1]
    return next((family for family, pattern in families.items() if re.search(pattern, name)), None)


def sample_units(model: MemoryModel, families: Mapping[str, str], count: int, archs: int) -> list[UnitCost]:
    """`count` units, cheapest first within each family, families taken in turn in the order
    `families` lists them."""
    by_family: dict[str, list[UnitCost]] = {}
    for unit in model.units:
        family = family_of(unit.name, families)
        if family is not None:
            by_family.setdefault(family, []).append(unit)
    for units in by_family.values():
        units.sort(key=lambda u: (u.peak(1, archs), u.name))
    order = [f for f in families if f in by_family]
    picked: list[UnitCost] = []
    depth = 0
    while len(picked) < count and any(depth < len(by_family[f]) for f in order):
        for family in order:
            if depth < len(by_family[family]) and len(picked) < count:
                picked.append(by_family[family][depth])
        depth += 1
    return picked


def _own_ratios(
    model: MemoryModel, measurements: Sequence[Measurement], families: Mapping[str, str]
) -> dict[str, tuple[float, float]]:
    """unit -> the worst (peak, wall) ratio of its own rows to the model's estimate."""
    by_name = {u.name: u for u in model.units}
    own: dict[str, tuple[float, float]] = {}
    for m in measurements:
        unit = by_name.get(m.unit)
        if unit is None or family_of(m.unit, families) is None or m.oom:
            continue
        archs = len(m.archs)
        at_peak = m.threads if m.peak_threads is None else m.peak_threads
        peak, wall = m.peak / unit.peak(at_peak, archs), m.wall_s / unit.wall(m.threads, archs)
        old_peak, old_wall = own.get(m.unit, (0.0, 0.0))
        own[m.unit] = (max(old_peak, peak), max(old_wall, wall))
    return own


def calibrated_model(
    model: MemoryModel,
    measurements: Sequence[Measurement],
    families: Mapping[str, str],
    toolkit: str,
    *,
    keep_unsampled: bool = False,
) -> MemoryModel:
    """The built-in model corrected by what was measured (see the module doc). With
    `keep_unsampled`, a family nothing was measured in keeps its costs instead of taking the
    worst ratio: a real build leaves a unit unmeasured because the cache answered it or it was
    too short to sample, not because it was left out of a sample."""
    own = _own_ratios(model, measurements, families)
    if not own:
        raise ValueError("no measurement of a unit the model knows: nothing to calibrate with")
    family_ratio: dict[str, tuple[float, float]] = {}
    for name, (peak, wall) in own.items():
        named = family_of(name, families) or ""
        old_peak, old_wall = family_ratio.get(named, (0.0, 0.0))
        family_ratio[named] = (max(old_peak, peak), max(old_wall, wall))
    worst = (max(p for p, _ in family_ratio.values()), max(w for _, w in family_ratio.values()))
    units = []
    for unit in model.units:
        family = family_of(unit.name, families)
        if family is None:
            units.append(unit)
            continue
        if keep_unsampled and unit.name not in own and family not in family_ratio:
            units.append(unit)
            continue
        measured = unit.name in own
        if measured:
            p, w = own[unit.name]
            basis = f"measured on CUDA {toolkit}: x{p:.3f} peak, x{w:.3f} time of the built-in estimate"
        else:
            p, w = family_ratio.get(family, worst)
            whose = f"{family}'s" if family in family_ratio else "the worst (family not sampled)"
            # A sample may raise the others' memory, never lower it: the built-in numbers of
            # unsampled units stay the floor, so a cheap sample cannot make a plan unsafe.
            p = max(1.0, p)
            basis = f"{whose} measured ratio on CUDA {toolkit}: x{p:.3f} peak (never below 1), x{w:.3f} time"
        units.append(
            replace(
                unit,
                fixed=math.ceil(unit.fixed * p),
                per_arch=math.ceil(unit.per_arch * p),
                front_s=unit.front_s * w,
                per_arch_s=unit.per_arch_s * w,
                basis=basis,
                measured=measured,
            )
        )
    return replace(
        model,
        units=tuple(units),
        source=f"calibrated on CUDA {toolkit} from {len(own)} sampled unit(s), scaling {model.source or model.name}",
    )


def profile_tsv(model: MemoryModel, header: Iterable[str]) -> str:
    """A profile in builder/plan/profiles' format (memory_model.parse_profile reads it back)."""
    lines = [f"# {line}" for line in header]
    lines += [
        f"#@ reserve_mib {model.reserve // MIB}",
        f"#@ margin {model.margin}",
        f"#@ source {model.source}",
    ]
    lines.append("\t".join(COLUMNS))
    for u in model.units:
        lines.append(
            f"{u.name}\t{math.ceil(u.fixed / MIB)}\t{math.ceil(u.per_arch / MIB)}\t{u.front_s:.1f}\t{u.per_arch_s:.1f}"
            f"\t{u.basis}\t{'yes' if u.measured else 'no'}"
        )
    return "\n".join(lines) + "\n"


def measurements_tsv(measurements: Iterable[Measurement], header: Iterable[str]) -> str:
    """The raw measurements in shared/calibration's format (an OOM-killed row says so)."""
    lines = [f"# {line}" for line in header]
    lines.append("tu\tarchs\tnvcc_threads\tpeak_mib\twall_s")
    for m in measurements:
        peak = f">={m.peak // MIB}" if m.oom else str(round(m.peak / MIB))
        lines.append(f"{m.unit}\t{','.join(map(str, m.archs))}\t{m.threads}\t{peak}\t{m.wall_s:.1f}")
    return "\n".join(lines) + "\n"


def read_measurements(text: str) -> list[Measurement]:
    """Measurements back from measurements_tsv's text (an OOM-killed row too)."""
    found = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(("#", "tu\t")):
            continue
        unit, archs, threads, peak, wall = line.split("\t")[:5]
        oom = peak.startswith(">=")
        found.append(
            Measurement(
                unit=unit,
                archs=tuple(int(a) for a in archs.split(",")),
                threads=int(threads),
                peak=int(peak.removeprefix(">=")) * MIB,
                wall_s=float(wall),
                oom=oom,
            )
        )
    return found


def parse_measurements(text: str) -> dict[tuple[str, str, int], tuple[int, float]]:
    """shared/calibration's format: (unit file name, archs, threads) -> (peak MiB, wall s)."""
    rows = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith(("#", "tu\t")):
            continue
        tu, archs, threads, peak, wall = line.split("\t")[:5]
        if peak.isdigit():
            rows[(tu.rsplit("/", 1)[-1], archs, int(threads))] = (int(peak), float(wall))
    return rows


def compare_with(measurements: Iterable[Measurement], reference: str, reference_name: str) -> list[str]:
    """One line per measurement that the reference table also has: ours against theirs."""
    theirs = parse_measurements(reference)
    lines = []
    for m in measurements:
        key = (m.unit.rsplit("/", 1)[-1], ",".join(map(str, m.archs)), m.threads)
        if key not in theirs or m.oom:
            continue
        peak_mib, wall_s = theirs[key]
        lines.append(
            f"{key[0]} archs {key[1]} threads {key[2]}: peak {m.peak / MIB:.0f} MiB vs {peak_mib} in "
            f"{reference_name} (x{m.peak / MIB / peak_mib:.2f}), wall {m.wall_s:.1f} s vs {wall_s} (x{m.wall_s / wall_s:.2f})"
        )
    return lines


def profile_path(cache: Path, recipe: str, version: str | None, toolkit: str) -> Path:
    """Where the calibrated profile of a recipe release on a toolkit is kept."""
    return cache / "profiles" / f"{recipe}-{version or 'any'}-cuda{toolkit}.tsv"


def load_calibrated(cache: Path, recipe: str, version: str | None, toolkit: str) -> MemoryModel | None:
    """The calibrated profile, when `wheelbuild calibrate` wrote one."""
    path = profile_path(cache, recipe, version, toolkit)
    if not path.is_file():
        return None
    return parse_profile(path.read_text(), name=f"{recipe}-{version}")
