"""Where in a compile the memory is: the stretches of a unit's wall its cicc runs. Pure.

nvcc runs a unit's steps in order: host preprocessing and cudafe++, then for each arch device
preprocessing, cicc and ptxas, then fatbinary and the host compile (fleet.py lists them). Only
cicc is heavy: in the steps measured one by one (bench/flash-attn-phases.tsv, nvcc 13.1, sm_120)
cicc peaks at 3534 MiB for a forward unit where cudafe++, the largest other step, takes 792 MiB
and ptxas 359; for a backward unit 5788 against 770 and 212. And cicc is only part of the time:
68% of a forward unit's per-arch CPU seconds, 86% of a backward one's; ptxas takes most of the rest.

So a unit holds its peak only while a cicc runs. A DeviceShape says where that is in its wall:
- `before`: the share of the unit's front part (model's front_s) spent before the first arch's
  device steps (host preprocessing, cudafe++); the rest (fatbinary, host compile) comes last;
- `preprocess` and `cicc`: the shares of each arch's part (per_arch_s) spent in device
  preprocessing and in cicc; ptxas takes what is left.
With --threads T nvcc runs min(T, archs) archs' chains at once, in rounds (memory_model).

cicc_windows gives those stretches as shares of the unit's progress, for simulation.simulate:
outside them a unit holds its fixed part, inside its whole peak. A unit with no per-arch part
(host code) has none. images/wheelbuild-admit's cicc admission admits each cicc on its own (a unit's
second cicc beside its first at its arch's part alone: admission.UnitCosts.cicc_beside). Only
flash-attn's kernels have a shape, since only their steps were measured: another extension's
units are admitted whole and simulated holding their peak from PEAK_ONSET on.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .fleet import Step, StepProfile
from .memory_model import MIB, UnitCost
from .simulation import PEAK_ONSET

__all__ = ["BWD_STEPS", "FWD_STEPS", "DeviceShape", "cicc_windows", "device_shape", "shape_of"]


@dataclass(frozen=True)
class DeviceShape:
    before: float  # share of front_s before the device steps
    preprocess: float  # share of per_arch_s before cicc
    cicc: float  # share of per_arch_s that cicc runs
    low: float  # the largest other step's peak, as a share of cicc's (cudafe++ for both kinds)


def device_shape(profile: StepProfile) -> DeviceShape:
    """The shares of a measured unit's steps, by CPU seconds (the simulation's clock)."""
    names = [s.name for s in profile.steps]
    first, cicc = names.index("device preprocess"), names.index("cicc")
    front_s = sum(s.cpu_s for s in profile.steps if not s.per_arch)
    arch_s = sum(s.cpu_s for s in profile.steps if s.per_arch)
    before = sum(s.cpu_s for s in profile.steps[:first] if not s.per_arch)
    return DeviceShape(
        before=before / front_s,
        preprocess=sum(s.cpu_s for s in profile.steps[first:cicc]) / arch_s,
        cicc=profile.steps[cicc].cpu_s / arch_s,
        low=max(s.peak for s in profile.steps if s.name != "cicc") / profile.steps[cicc].peak,
    )


def _steps(unit: str, rows: tuple[tuple[str, float, int], ...]) -> StepProfile:
    return StepProfile(unit, tuple(Step(name, cpu_s, rss_mib * MIB) for name, cpu_s, rss_mib in rows))


# bench/flash-attn-phases.tsv's rows (CPU seconds, peak RSS MiB); tests/unit/test_phases.py
# checks these against the file.
FWD_STEPS = _steps(
    "flash_fwd_hdim64_fp16_sm80.cu",
    (
        ("host preprocess", 0.99, 168),
        ("cudafe++", 4.38, 792),
        ("device preprocess", 0.96, 169),
        ("cicc", 53.03, 3534),
        ("ptxas", 24.33, 359),
        ("fatbinary", 0.04, 16),
        ("host compile", 4.93, 581),
    ),
)
BWD_STEPS = _steps(
    "flash_bwd_hdim128_fp16_sm80.cu",
    (
        ("host preprocess", 0.95, 168),
        ("cudafe++", 4.21, 770),
        ("device preprocess", 0.97, 169),
        ("cicc", 85.35, 5788),
        ("ptxas", 12.38, 212),
        ("fatbinary", 0.04, 12),
        ("host compile", 5.09, 532),
    ),
)
_FWD, _BWD = device_shape(FWD_STEPS), device_shape(BWD_STEPS)


# The units whose steps were measured: flash-attn's kernels (flash_fwd_*, flash_fwd_split_*,
# flash_bwd_*). Another extension's steps are unknown: its cudafe++ or host compile may be as
# heavy as its cicc (a big constant table, say), so its units get no shape and are admitted whole.
_MEASURED = re.compile(r"flash_(fwd|bwd)_")


def shape_of(unit: UnitCost) -> DeviceShape | None:
    """A unit's shape: a backward kernel's (flash-attn's flash_bwd_* units) or the forward one's
    (its other kernels); None for host code (no per-arch part) and for any unit whose steps were
    not measured."""
    name = unit.name.rsplit("/", 1)[-1]
    if (unit.per_arch == 0 and unit.per_arch_s == 0) or not _MEASURED.match(name):
        return None
    return _BWD if name.startswith("flash_bwd_") else _FWD


def cicc_windows(unit: UnitCost, threads: int, archs: int) -> tuple[tuple[float, float], ...]:
    """The stretches of `unit`'s progress (shares of its wall at `threads`) where a cicc runs:
    one per round of min(threads, archs) archs compiled at once. Host code has none (its peak is
    its fixed part); a device unit of unknown shape holds its peak from PEAK_ONSET to its end,
    simulate()'s default."""
    shape = shape_of(unit)
    wall = unit.wall(threads, archs)
    if unit.per_arch == 0 and unit.per_arch_s == 0:
        return ()
    if shape is None or wall <= 0:
        return ((PEAK_ONSET, 1.0),)
    in_flight = max(1, min(threads, archs))
    rounds = math.ceil(max(1, archs) / in_flight)
    windows = []
    at = shape.before * unit.front_s
    for _ in range(rounds):
        start = at + shape.preprocess * unit.per_arch_s
        end = start + shape.cicc * unit.per_arch_s
        windows.append((start / wall, end / wall))
        at += unit.per_arch_s
    return tuple(windows)
