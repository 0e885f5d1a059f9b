"""What compiling flash-attn 2.8.3's 73 units really costs, for bench/planner: built from measured
rows, not from the planner's model, with a seeded spread where nothing was measured.

The planner plans from its profile (builder/plan/profiles/flash-attn-2.8.3.tsv, fitted by
bench/fit-profile, with its +5% margin); a bench that also simulated the profile as the truth
would find every plan safe by construction. So the truth here is read from the calibration rows
themselves (shared/calibration/flash-attn-2.8.3-cuda13.0.tsv: nine compiles of seven units, each
alone, by nvcc 13.0; peak = cgroup v1 max_usage, page cache included; walls on a 2-core machine);
the profile is read only for the unit names and their build order.

1. The one unit measured at several settings, flash_fwd_hdim64_fp16 (4040 MiB for sm_100 alone;
   4150 MiB for two archs at --threads 1, 7778 MiB at --threads 2; 108.7 / 198.0 / 109.6 s),
   gives the shape every other row is read with: peak = fixed + per_arch x archs at once, the
   fixed part 12.6% of the one-thread peak; two archs at --threads 1 peak 1.027 x one arch;
   wall = front + per_arch_s x ceil(archs / threads), the front part 19.3% of a one-arch wall.
2. Measured units (matched by file name) take their own row, read with that shape: exact where
   the row was taken at the bench's settings (fwd hdim64 at both thread counts, bwd hdim128 at
   --threads 2), else converted (one-arch rows x1.027 to two archs).
3. An unmeasured unit takes the nearest measured unit of its kind (fwd, fwd_split, bwd; nearest
   hdim on a log scale, ties to the larger hdim), scaled along that kind's measured trend over
   hdim (a power law between the measured hdims around it, held at the nearest one outside them;
   fwd_split, measured at hdim128 only, follows fwd's trend). Unlike the profile's linear
   interpolation this has no margin, and fp16/bf16 and causal/not stay equal at the median.
4. Spread: each unmeasured unit's peak and wall are multiplied by lognormal factors, median 1,
   drawn from random.Random(seed), independently per unit. The rows cannot give a sigma by
   residuals (the profile passes through every measured row; one sample per unit), so they are
   stated: peak sigma 5%, the size of the gaps the rows show between costs the model takes as
   equal or as a straight line (sm_100 alone vs the worse of two archs: 2.7%; bwd hdim64 ->
   hdim128 -> hdim256: +4.6%, +6.7% per doubling), i.e. a dtype or causal variant may differ
   from its measured neighbour as much as one hdim step does; then 17% of the unmeasured units'
   peaks (over 200 seeds) lie above the planner's margined peak for them. Wall sigma 15%: walls follow hdim far less than
   peaks (bwd hdim128 takes 127.7 s, above bwd hdim256's 124.2 s and 33% above the straight
   line between hdim64 and hdim256; fwd_split hdim128 takes 1.34x fwd's). Measured units get no spread.

FULL_BUILD is the one real whole build measured (issue 14: sm_120 only, MAX_JOBS=2,
NVCC_THREADS=1), to check the truth against: it should not promise less than that build needed.
It needed less: 13.07 GiB of working set where the truth's max_usage peaks sum to about 15 GiB.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from wheelbuild.plan.memory_model import GIB, MIB, UnitCost

CALIBRATION = Path("/work/shared/calibration/flash-attn-2.8.3-cuda13.0.tsv")
SHAPE_UNIT = "flash_fwd_hdim64_fp16_sm80.cu"  # the unit measured at several settings
SIGMA_PEAK = 0.05
SIGMA_WALL = 0.15
KIND = re.compile(r"flash_(fwd_split|fwd|bwd)_hdim(\d+)_(?:fp16|bf16)(?:_causal)?_sm80\.cu")
TREND_OF = {"fwd": "fwd", "bwd": "bwd", "fwd_split": "fwd"}  # whose hdim trend a kind follows


@dataclass(frozen=True)
class FullBuild:
    """One real flash-attn 2.8.3 build: sm_120 only, MAX_JOBS=2, NVCC_THREADS=1, 73 units."""

    archs: int = 1
    jobs: int = 2
    threads: int = 1
    cpus: float = 2.0
    peak: int = round(13.07 * GIB)  # the container's working set at its highest
    seconds: float = 4320.0  # the compile step
    model_peak: int = round(16.0 * GIB)  # what the planner predicted: reserve + 2 heaviest units
    model_seconds: float = 4476.0


FULL_BUILD = FullBuild()


@dataclass(frozen=True)
class Row:
    unit: str  # the source's file name
    archs: int  # how many archs the compile targeted
    arch_names: str
    threads: int
    peak: int  # bytes
    wall: float  # seconds


@dataclass(frozen=True)
class Shape:
    """How a unit's cost varies with archs and threads, from SHAPE_UNIT's rows."""

    fixed_share: float  # of the one-thread peak, not repeated per arch compiled at once
    two_archs: float  # two archs at --threads 1 over one arch alone (peak)
    front_share: float  # of a one-arch wall, the part that does not scale with archs


@dataclass(frozen=True)
class Truth:
    """The units' true costs for one seed, and which of them were measured."""

    seed: int | None  # None: the median truth, no spread
    units: tuple[UnitCost, ...]
    measured: frozenset[str]  # file names taken from their own rows


def read_rows(path: Path = CALIBRATION) -> list[Row]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#") or line.startswith("tu\t"):
            continue
        tu, archs, threads, peak_mib, wall = line.split("\t")
        rows.append(
            Row(
                unit=tu.rsplit("/", 1)[-1],
                archs=len(archs.split(",")),
                arch_names=archs,
                threads=int(threads),
                peak=int(peak_mib) * MIB,
                wall=float(wall),
            )
        )
    return rows


def _row(rows: Sequence[Row], unit: str, archs: int, threads: int) -> Row | None:
    return next((r for r in rows if r.unit == unit and r.archs == archs and r.threads == threads), None)


def shape(rows: Sequence[Row]) -> Shape:
    one, t1, t2 = (_row(rows, SHAPE_UNIT, a, t) for a, t in ((1, 1), (2, 1), (2, 2)))
    if one is None or t1 is None or t2 is None:
        raise ValueError(f"the calibration rows lack {SHAPE_UNIT} at 1 arch, and 2 archs at 1 and 2 threads")
    per_arch_s = t1.wall - t2.wall
    return Shape(
        fixed_share=(2 * t1.peak - t2.peak) / t1.peak,
        two_archs=t1.peak / one.peak,
        front_share=(t2.wall - per_arch_s) / t2.wall,
    )


def measured_cost(name: str, rows: Sequence[Row], s: Shape) -> UnitCost | None:
    """A measured unit's cost from its own rows (see the module doc, 2); None if not measured."""
    unit = name.rsplit("/", 1)[-1]
    mine = [r for r in rows if r.unit == unit]
    if not mine:
        return None
    if KIND.fullmatch(unit) is None:  # host code (flash_api.cpp): one compile whatever the archs
        r = max(mine, key=lambda r: r.peak)
        return UnitCost(name, fixed=r.peak, per_arch=0, front_s=r.wall, per_arch_s=0.0, basis="measured")
    t1, t2 = _row(mine, unit, 2, 1), _row(mine, unit, 2, 2)
    if t1 is not None and t2 is not None:  # both thread counts for two archs: nothing to assume
        per_arch_s = t1.wall - t2.wall
        return UnitCost(
            name,
            fixed=2 * t1.peak - t2.peak,
            per_arch=t2.peak - t1.peak,
            front_s=t2.wall - per_arch_s,
            per_arch_s=per_arch_s,
            basis="measured: 2 archs at --threads 1 and 2",
        )
    if t2 is not None:  # two archs at --threads 2: peak = P1 x (2 - fixed share)
        p1, wall, how = t2.peak / (2 - s.fixed_share), t2.wall, "measured: 2 archs at --threads 2"
    else:
        r = min(mine, key=lambda r: (r.archs, r.threads))
        p1, wall = r.peak * s.two_archs, r.wall
        how = f"measured: sm_{r.arch_names} x{s.two_archs:.3f} for two archs"
    return UnitCost(
        name,
        fixed=round(p1 * s.fixed_share),
        per_arch=round(p1 * (1 - s.fixed_share)),
        front_s=wall * s.front_share,
        per_arch_s=wall * (1 - s.front_share),
        basis=how,
    )


def _kind(name: str) -> tuple[str, int] | None:
    m = KIND.fullmatch(name.rsplit("/", 1)[-1])
    return None if m is None else (m.group(1), int(m.group(2)))


def _trend(points: dict[int, float], hdim: int) -> float:
    """A power law in hdim between the measured hdims around `hdim`, held outside them."""
    xs = sorted(points)
    if hdim <= xs[0]:
        return points[xs[0]]
    if hdim >= xs[-1]:
        return points[xs[-1]]
    lo = max(x for x in xs if x <= hdim)
    hi = min(x for x in xs if x >= hdim)
    if lo == hi:
        return points[lo]
    w = math.log(hdim / lo) / math.log(hi / lo)
    return math.exp(math.log(points[lo]) * (1 - w) + math.log(points[hi]) * w)


def median_truth(names: Sequence[str], rows: Sequence[Row]) -> Truth:
    """Every unit's cost before the spread: its own row, or its nearest measured kin scaled."""
    s = shape(rows)
    measured = {n: c for n in names if (c := measured_cost(n, rows, s)) is not None}
    anchors: dict[str, dict[int, UnitCost]] = {}
    for n, c in measured.items():
        if (k := _kind(n)) is not None:
            anchors.setdefault(k[0], {})[k[1]] = c
    peaks = {kind: {h: float(c.peak(1, 2)) for h, c in by_h.items()} for kind, by_h in anchors.items()}
    walls = {kind: {h: c.wall(1, 1) for h, c in by_h.items()} for kind, by_h in anchors.items()}
    units = []
    for n in names:
        if n in measured:
            units.append(measured[n])
            continue
        k = _kind(n)
        if k is None or k[0] not in anchors:
            raise ValueError(f"{n}: not measured and no measured unit of its kind")
        kind, h = k
        near = min(anchors[kind], key=lambda x: (abs(math.log2(x / h)), -x))
        base, trend = anchors[kind][near], TREND_OF[kind]
        peak = _trend(peaks[trend], h) / _trend(peaks[trend], near)
        wall = _trend(walls[trend], h) / _trend(walls[trend], near)
        units.append(
            replace(
                base,
                name=n,
                fixed=round(base.fixed * peak),
                per_arch=round(base.per_arch * peak),
                front_s=base.front_s * wall,
                per_arch_s=base.per_arch_s * wall,
                basis=f"{kind} hdim{near} measured, x{peak:.3f} peak, x{wall:.3f} wall along {trend}'s hdim trend",
            )
        )
    return Truth(seed=None, units=tuple(units), measured=frozenset(n.rsplit("/", 1)[-1] for n in measured))


def with_spread(median: Truth, seed: int, wall_sigma: float = SIGMA_WALL) -> Truth:
    """The median truth with each unmeasured unit's peak and wall drawn around it (lognormal)."""
    rng = random.Random(seed)
    units = []
    for u in median.units:
        peak, wall = math.exp(rng.gauss(0.0, SIGMA_PEAK)), math.exp(rng.gauss(0.0, wall_sigma))
        if u.name.rsplit("/", 1)[-1] in median.measured:
            units.append(u)  # drawn anyway, so one unit's draw never shifts another's
            continue
        units.append(
            replace(
                u,
                fixed=round(u.fixed * peak),
                per_arch=round(u.per_arch * peak),
                front_s=u.front_s * wall,
                per_arch_s=u.per_arch_s * wall,
            )
        )
    return Truth(seed=seed, units=tuple(units), measured=median.measured)
