"""The chart of one attempt on build-report.html: the attempt read from its record and checked
(ChartedAttempt, its phases ChartedPhase), then drawn as SVG: the container's memory over time
against its limit, its phases shaded (torch's install, each Python's compile, the repair, the
gate), the plan's predicted peak drawn over the compiles it predicts (and the compile's measured
peak marked), OOM kills marked, units finished ticked along the time axis."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..attempt.buildlog import BEFORE_BUILD_STEP, COMPILE_STEP
from .attempt_records import GATE_PHASE, TORCH_RANGE_PHASE
from .values import (
    MAX_BYTES,
    MAX_ROWS,
    MAX_SECONDS,
    OUT_OF_RANGE,
    items_of,
    mapping_of,
    number_of,
    one_line,
    out_of_range,
    plain_text,
    seconds_text,
    size_text,
    text_of,
    within,
)

# The chart's geometry, in SVG user units (it scales to the page's width).
WIDTH, HEIGHT = 860, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 16, 40
PHASE_LABEL_MIN_WIDTH = 70  # a phase narrower than this on the chart is named in its tooltip only
MAX_POINTS = 5000  # drawn per attempt; a report holds at most ~600, a hostile one may hold more
MAX_PHASES = 400  # per attempt, as buildlog.MAX_STEPS: a few per Python, the gate and the range
MIB = 1024**2

# What the page calls each phase of an attempt (cibuildwheel's steps, then wheelbuild's own
# after the last attempt), and its kind: the colour it is shaded with on the chart.
_PHASE_NAMES = {
    "Copying project into container": ("copy in", "other"),
    "Running before_all": ("before all", "other"),
    "Setting up build environment": ("setup", "other"),
    BEFORE_BUILD_STEP: ("torch install", "torch"),
    COMPILE_STEP: ("compile", "compile"),
    "Repairing wheel": ("repair", "repair"),
    "Testing wheel": ("test", "other"),
    "Auditing wheel": ("audit", "other"),
    "Copying wheels back to host": ("copy out", "other"),
    GATE_PHASE: ("import gate", "gate"),
    TORCH_RANGE_PHASE: ("torch range", "range"),
}


@dataclass(frozen=True)
class ChartedPhase:
    """One phase of an attempt, read and checked: a step of cibuildwheel's for one Python, or
    the gate or the range after the last attempt, in seconds since the attempt began."""

    step: str
    python: str  # cp311; "" for the steps around the Pythons' and for wheelbuild's own
    start: float
    end: float
    peak: tuple[float, float] | None = None  # its highest memory sample: (when, bytes)

    @property
    def kind(self) -> str:
        """compile, torch, repair, gate, range or other: how the chart shades it."""
        return _PHASE_NAMES.get(self.step, ("", "other"))[1]

    @property
    def name(self) -> str:
        """What the page calls its step: "torch install"."""
        return _PHASE_NAMES.get(self.step, (self.step, ""))[0]

    @property
    def label(self) -> str:
        """The step, and the Python it ran for: "cp311 torch install"."""
        return f"{self.python} {self.name}".strip()

    @property
    def sampled(self) -> bool:
        """Whether the attempt's memory series covers it (the gate and the range run elsewhere)."""
        return self.kind not in ("gate", "range")


@dataclass(frozen=True)
class ChartedAttempt:
    """What the chart of one attempt needs, read and checked."""

    number: str
    limit: float | None
    predicted: float | None
    peak: float | None
    duration: float | None
    points: tuple[tuple[float, float], ...]
    oom_at: tuple[float, ...]
    oom_evidence: tuple[str, ...]
    unit_times: tuple[float, ...]
    units_finished: float | None
    returncode: float | None
    unlimited: bool = False  # the container saw no memory limit (cgroup v1's 2**63 - 4096)
    left_out: tuple[str, ...] = ()  # the fields out of range, not drawn: "peak_memory"
    samples_left_out: int = 0  # memory samples out of range, not drawn
    phases: tuple[ChartedPhase, ...] = ()  # where the time went, each with its highest sample
    phases_left_out: int = 0  # phases whose times are out of range, not drawn
    compile_peak: float | None = None  # measured while compiling (every Python's compile)

    @property
    def compiles(self) -> tuple[ChartedPhase, ...]:
        return tuple(p for p in self.phases if p.kind == "compile")

    @property
    def compile_sample(self) -> tuple[float, float] | None:
        """The highest memory sample taken while compiling, where the phases say when that was."""
        peaks = [p.peak for p in self.compiles if p.peak is not None]
        return max(peaks, key=lambda peak: peak[1]) if peaks else None

    @property
    def peak_phase(self) -> ChartedPhase | None:
        """The phase the attempt's highest sample was taken in."""
        if not self.points:
            return None
        top = max(v for _, v in self.points)
        return next((p for p in self.phases if p.peak is not None and p.peak[1] == top), None)

    @property
    def killed(self) -> bool:
        return bool(self.oom_evidence)

    @property
    def limit_text(self) -> str:
        return "no limit" if self.unlimited else self.size("limit", self.limit)

    @property
    def duration_text(self) -> str:
        return OUT_OF_RANGE if "duration_s" in self.left_out else seconds_text(self.duration)

    def size(self, key: str, value: float | None) -> str:
        """The size read from the report's *key*, or that it was out of range."""
        return OUT_OF_RANGE if key in self.left_out else size_text(value)

    @property
    def outcome(self) -> str:
        if self.killed:
            return "OOM-killed"
        if self.returncode == 0:
            return "succeeded"
        return "failed" if self.returncode is None else f"failed (exit {self.returncode:g})"


def charted_attempt(record: Mapping[str, object], plan: Mapping[str, object], last: bool) -> ChartedAttempt:
    """One attempt's record (untrusted) as its chart draws it: every number checked and bounded,
    and what is out of any real range left out with a note; the plan's prediction for the last
    attempt of a report from before attempts carried their own."""
    series = mapping_of(record.get("memory_series"))
    points = []
    dropped = 0
    for point in items_of(series.get("points"))[:MAX_POINTS]:
        pair = items_of(point)
        if len(pair) != 2:
            continue
        t, v = number_of(pair[0]), number_of(pair[1])
        if t is not None and v is not None and t <= MAX_SECONDS and v <= MAX_BYTES:
            points.append((max(0.0, t), max(0.0, v)))
        elif (t is not None or out_of_range(pair[0], MAX_SECONDS)) and (
            v is not None or out_of_range(pair[1], MAX_BYTES)
        ):
            dropped += 1  # numbers, but past what a clock or a machine reaches; junk goes unmentioned
    points.sort()
    units = [mapping_of(u) for u in items_of(record.get("units"))[:MAX_ROWS]]
    # Reports from before attempts carried their own prediction: the plan's is the last attempt's.
    predicted = record.get("predicted_peak")
    if number_of(predicted) is None and last:
        predicted = plan.get("predicted_peak")
    seen = number_of(record.get("memory_limit_seen"))
    unlimited = seen is not None and seen > MAX_BYTES  # cgroup v1 writes "no limit" as 2**63 - 4096
    limit = None if unlimited else (record.get("memory_limit_seen") if seen else record.get("memory"))
    sizes = {
        "limit": limit,
        "peak_memory": record.get("peak_memory"),
        "predicted_peak": predicted,
        "peak_memory_compile": record.get("peak_memory_compile"),
    }
    left_out = [key for key, value in sizes.items() if out_of_range(value, MAX_BYTES)]
    left_out += ["duration_s"] if out_of_range(record.get("duration_s"), MAX_SECONDS) else []
    step_s = within(series.get("step_s"), MAX_SECONDS) or 0.0
    phases, phases_left_out = _read_phases(items_of(record.get("phases"))[:MAX_PHASES], tuple(points), step_s)
    return ChartedAttempt(
        number=plain_text(record.get("attempt")),
        limit=within(limit, MAX_BYTES),
        predicted=within(predicted, MAX_BYTES),
        peak=within(record.get("peak_memory"), MAX_BYTES),
        duration=within(record.get("duration_s"), MAX_SECONDS),
        points=tuple(points),
        oom_at=_times(items_of(record.get("oom_at_s"))[:100]),
        oom_evidence=tuple(text_of(e) for e in items_of(record.get("oom_evidence"))[:20]),
        unit_times=_times([u.get("finished_s") for u in units]),
        units_finished=number_of(record.get("units_finished")),
        returncode=number_of(record.get("returncode")),
        unlimited=unlimited,
        left_out=tuple(left_out),
        samples_left_out=dropped,
        phases=phases,
        phases_left_out=phases_left_out,
        compile_peak=within(record.get("peak_memory_compile"), MAX_BYTES),
    )


def _read_phases(
    entries: Sequence[object], points: tuple[tuple[float, float], ...], step_s: float
) -> tuple[tuple[ChartedPhase, ...], int]:
    """The phases that can be drawn, each with its highest memory sample, and how many were left
    out for times past any real range. A sample stands for the highest of its interval (step_s
    long): it belongs to the phase that overlaps that interval most."""
    found: list[ChartedPhase] = []
    dropped = 0
    for entry in entries:
        phase = mapping_of(entry)
        step = one_line(phase.get("step"))[:80]
        start, end = within(phase.get("start_s"), MAX_SECONDS), within(phase.get("end_s"), MAX_SECONDS)
        if start is None or end is None or end < start or not step:
            if step and any(out_of_range(phase.get(key), MAX_SECONDS) for key in ("start_s", "end_s")):
                dropped += 1  # numbers past any real time; junk goes unmentioned
            continue
        python = text_of(phase.get("python")).split("-")[0][:20]
        found.append(ChartedPhase(step, python, start, end))
    peaks: dict[int, tuple[float, float]] = {}
    for t, v in points:
        owner = _owner(found, t, step_s)
        if owner is not None and v > peaks.get(owner, (0.0, -1.0))[1]:
            peaks[owner] = (t, v)
    return tuple(replace(p, peak=peaks.get(i)) for i, p in enumerate(found)), dropped


def _owner(phases: Sequence[ChartedPhase], t: float, step_s: float) -> int | None:
    """The index of the sampled phase that overlaps [t, t + step_s) most (holds t, when step_s is 0)."""
    best, most = None, 0.0
    for i, phase in enumerate(phases):
        if not phase.sampled:
            continue
        if step_s <= 0:
            if phase.start <= t < phase.end:
                return i
            continue
        overlap = min(t + step_s, phase.end) - max(t, phase.start)
        if overlap > most:
            best, most = i, overlap
    return best


def _times(values: Sequence[object]) -> tuple[float, ...]:
    """The times among *values* that can be drawn: seconds from 0 to MAX_SECONDS."""
    return tuple(t for t in (within(v, MAX_SECONDS) for v in values) if t is not None)


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
    end = max(
        [
            a.duration or 0.0,
            *(t for t, _ in a.points),
            *a.oom_at,
            *a.unit_times,
            *(p.end for p in a.phases),
            1.0,
        ]
    )
    top = (
        max([a.limit or 0.0, a.predicted or 0.0, a.peak or 0.0, *(v for _, v in a.points), 1024.0**3]) * 1.08
    )
    scale = _Scale(end, top)
    parts = [
        f'<svg class="memory-chart" data-attempt="{html.escape(a.number)}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="memory of attempt {html.escape(a.number)} over time">',
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{scale.plot_w}" height="{scale.plot_h}"/>',
        *_phases(a, scale),
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


def _phases(a: ChartedAttempt, s: _Scale) -> list[str]:
    """Each phase as a band behind the series, shaded by its kind, named where it is wide enough
    (and always in its tooltip)."""
    parts = []
    for phase in a.phases:
        x1, x2 = s.x(phase.start), s.x(phase.end)
        width = max(round(x2 - x1, 1), 0.5)
        took = f"{seconds_text(phase.start)} to {seconds_text(phase.end)}"
        where = "" if phase.sampled else " (in a container of its own: its memory is not drawn)"
        parts.append(
            f'<rect class="phase phase-{phase.kind}" data-phase="{html.escape(phase.label)}" x="{x1}" '
            f'y="{TOP}" width="{width}" height="{s.plot_h}"><title>{html.escape(phase.label)}: '
            f"{took}{where}</title></rect>"
        )
        if width >= PHASE_LABEL_MIN_WIDTH and phase.kind != "other":
            parts.append(
                f'<text class="phase-label" x="{round(x1 + 4, 1)}" y="{TOP + 12}">{html.escape(phase.label)}</text>'
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
        # The model predicts the compile's peak: drawn over the compiles where the report times
        # them, across the whole attempt where it does not.
        spans = [(s.x(p.start), s.x(p.end)) for p in a.compiles] or [(LEFT, LEFT + s.plot_w)]
        parts += [
            f'<line class="predicted" x1="{x1}" x2="{x2}" y1="{s.y(a.predicted)}" y2="{s.y(a.predicted)}"/>'
            for x1, x2 in spans
        ]
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
        during = f", during {a.peak_phase.label}" if a.peak_phase is not None else ""
        parts.append(
            f'<circle class="peak-dot" cx="{s.x(t)}" cy="{s.y(v)}" r="4"><title>peak '
            f"{size_text(v)}{html.escape(during)}</title></circle>"
        )
    if (compiled := a.compile_sample) is not None:
        t, v = compiled
        parts.append(
            f'<circle class="compile-peak" cx="{s.x(t)}" cy="{s.y(v)}" r="7"><title>highest sample while '
            f"compiling: {size_text(v)}, the peak the plan predicts</title></circle>"
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
