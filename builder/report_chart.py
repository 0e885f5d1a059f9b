"""The SVG chart of one attempt on build-report.html: the container's memory over time against
its limit and the plan's predicted peak, OOM kills marked, units finished ticked along the time
axis; and the checked numbers, sizes and durations it and the page's tables print."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .units import MAX_MEMORY

if TYPE_CHECKING:  # the page reads the attempt; the chart only draws it
    from .report_html import ChartedAttempt

# The chart's geometry, in SVG user units (it scales to the page's width).
WIDTH, HEIGHT = 860, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 16, 40

# What a page draws or prints, at most. No machine has 4 EiB, so a memory limit above it is
# cgroup v1's "no limit" (2**63 - 4096), and any other size above it is not a measurement; no
# attempt runs for a year. Values past these are left out with a note, never drawn to scale.
MAX_BYTES = MAX_MEMORY
MAX_SECONDS = 366 * 24 * 3600
OUT_OF_RANGE = "out of range"
MIB = 1024**2


def number_of(value: object) -> float | None:
    """A finite JSON number, or None (bool is not a number here; NaN, inf and an int past a
    float's range are refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        n = float(value)
    except OverflowError:  # 10**400
        return None
    return n if math.isfinite(n) else None


def within(value: object, top: float) -> float | None:
    """A number from 0 to *top* (MAX_BYTES, MAX_SECONDS), or None."""
    n = number_of(value)
    return n if n is not None and 0 <= n <= top else None


def out_of_range(value: object, top: float) -> bool:
    """A number (infinite or past a float's range included; NaN is none), but not one from 0 to
    *top*: to be left out with a note."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not (isinstance(value, float) and math.isnan(value)) and within(value, top) is None


def size_text(value: object) -> str:
    n = number_of(value)
    if n is None:
        return "—"
    if abs(n) > MAX_BYTES:
        return OUT_OF_RANGE
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def seconds_text(value: object) -> str:
    n = number_of(value)
    if n is None:
        return "—"
    if abs(n) > MAX_SECONDS:
        return OUT_OF_RANGE
    if n >= 3600:
        return f"{int(n // 3600)} h {int(n % 3600 // 60)} min"
    if n >= 120:
        return f"{int(n // 60)} min {int(n % 60)} s"
    return f"{n:.1f} s"


def _ticks(top: float) -> list[float]:
    """Gridlines for 0..top bytes: a step of 64 MiB times a power of two, the smallest that
    makes at most six steps, so there are at most seven lines whatever *top* is."""
    if not (math.isfinite(top) and top > 0):
        return [0.0]
    doublings = max(0, math.ceil(math.log2(top / (6 * 64 * MIB))))
    step = 64 * MIB * 2.0**doublings
    return [i * step for i in range(min(int(top // step), 6) + 1)]


@dataclass(frozen=True)
class _Scale:
    """Seconds and bytes to the SVG's coordinates, for one attempt's chart."""

    end: float  # seconds at the right edge
    top: float  # bytes at the top edge
    plot_w: int = WIDTH - LEFT - RIGHT
    plot_h: int = HEIGHT - TOP - BOTTOM

    def x(self, t: float) -> float:
        return round(LEFT + self.plot_w * min(t, self.end) / self.end, 1)

    def y(self, v: float) -> float:
        return round(TOP + self.plot_h * (1 - min(v, self.top) / self.top), 1)


def chart(a: ChartedAttempt) -> str:
    """One attempt's SVG: memory over time, its limit and prediction, OOM kills, units."""
    end = max([a.duration or 0.0, *(t for t, _ in a.points), *a.oom_at, *a.unit_times, 1.0])
    top = (
        max([a.limit or 0.0, a.predicted or 0.0, a.peak or 0.0, *(v for _, v in a.points), 1024.0**3]) * 1.08
    )
    scale = _Scale(end, top)
    parts = [
        f'<svg class="memory-chart" data-attempt="{html.escape(a.number)}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="memory of attempt {html.escape(a.number)} over time">',
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{scale.plot_w}" height="{scale.plot_h}"/>',
        *_axes(scale),
        *_memory(a, scale),
        *_levels(a, scale),
        *_marks(a, scale),
        "</svg>",
    ]
    return "\n".join(parts)


def _axes(s: _Scale) -> list[str]:
    """The grid and byte ticks on the left, six time ticks below, the time axis's name."""
    parts = []
    for tick in _ticks(s.top):
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{LEFT + s.plot_w}" y1="{s.y(tick)}" y2="{s.y(tick)}"/>'
        )
        parts.append(
            f'<text class="axis" x="{LEFT - 6}" y="{s.y(tick) + 4}" text-anchor="end">{size_text(tick)}</text>'
        )
    for i in range(6):
        t = s.end * i / 5
        parts.append(
            f'<text class="axis" x="{s.x(t)}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{seconds_text(t)}</text>'
        )
    parts.append(
        f'<text class="axis" x="{LEFT + s.plot_w / 2}" y="{HEIGHT - 4}" text-anchor="middle">'
        "time since the attempt began</text>"
    )
    return parts


def _memory(a: ChartedAttempt, s: _Scale) -> list[str]:
    """The working set over time; a report with only a peak gets a line at the peak."""
    if a.points:
        path = " ".join(f"{'M' if i == 0 else 'L'}{s.x(t)},{s.y(v)}" for i, (t, v) in enumerate(a.points))
        return [f'<path class="series memory" d="{path}"><title>working set</title></path>']
    if a.peak is None:
        return []
    return [
        f'<line class="peak-only" x1="{LEFT}" x2="{LEFT + s.plot_w}" y1="{s.y(a.peak)}" y2="{s.y(a.peak)}"/>',
        f'<text class="label peak-only-label" x="{LEFT + s.plot_w + 6}" y="{s.y(a.peak) + 4}">peak {size_text(a.peak)}</text>',
    ]


def _levels(a: ChartedAttempt, s: _Scale) -> list[str]:
    """The limit and the predicted peak, as lines across the plot labelled on its right."""
    parts = []
    labels: list[tuple[float, str, str]] = []
    if a.limit is not None:
        parts.append(
            f'<line class="limit" x1="{LEFT}" x2="{LEFT + s.plot_w}" y1="{s.y(a.limit)}" y2="{s.y(a.limit)}"/>'
        )
        labels.append((s.y(a.limit), "limit-label", f"limit {size_text(a.limit)}"))
    elif a.unlimited:
        labels.append((float(TOP), "limit-label", "no limit"))
    if a.predicted is not None:
        parts.append(
            f'<line class="predicted" x1="{LEFT}" x2="{LEFT + s.plot_w}" y1="{s.y(a.predicted)}" y2="{s.y(a.predicted)}"/>'
        )
        labels.append((s.y(a.predicted), "predicted-label", f"predicted {size_text(a.predicted)}"))
    # Labels right of the plot, pushed apart when the lines are close.
    placed: list[float] = []
    for at, cls, text in sorted(labels):
        at = max([at + 4, *(p + 14 for p in placed)])
        placed.append(at)
        parts.append(
            f'<text class="label {cls}" x="{LEFT + s.plot_w + 6}" y="{at}">{html.escape(text)}</text>'
        )
    return parts


def _marks(a: ChartedAttempt, s: _Scale) -> list[str]:
    """Where units finished, the peak, and the OOM kills."""
    parts = []
    for t in a.unit_times:
        parts.append(
            f'<line class="unit-tick" x1="{s.x(t)}" x2="{s.x(t)}" y1="{TOP + s.plot_h}" y2="{TOP + s.plot_h - 8}"/>'
        )
    if a.points:
        t, v = max(a.points, key=lambda p: p[1])
        parts.append(
            f'<circle class="peak-dot" cx="{s.x(t)}" cy="{s.y(v)}" r="4"><title>peak {size_text(v)}</title></circle>'
        )
    # A report from before kill times were recorded: the kill is marked where the attempt ended.
    kills = list(a.oom_at) or ([a.points[-1][0] if a.points else s.end] if a.killed else [])
    what = "OOM kill" if a.oom_at else "OOM kill (time not recorded)"
    for t in kills:
        parts.append(f'<line class="oom" x1="{s.x(t)}" x2="{s.x(t)}" y1="{TOP}" y2="{TOP + s.plot_h}"/>')
        parts.append(
            f'<text class="label oom-label" x="{s.x(t) - 4}" y="{TOP + 14}" text-anchor="end">{what}</text>'
        )
    return parts
