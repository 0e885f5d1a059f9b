"""The values a build-report page prints, checked: numbers within what a machine or a clock
reaches (sizes, durations), text in one line, and tables of escaped cells. A report is untrusted
input: every value's type is checked before use, and nothing is drawn or printed to a scale a
hostile number sets."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence

from ..units import MAX_MEMORY

# What a page draws or prints, at most. No machine has 4 EiB, so a memory limit above it is
# cgroup v1's "no limit" (2**63 - 4096), and any other size above it is not a measurement; no
# attempt runs for a year. Values past these are left out with a note, never drawn to scale.
MAX_BYTES = MAX_MEMORY
MAX_SECONDS = 366 * 24 * 3600
OUT_OF_RANGE = "out of range"
MAX_TEXT = 400  # characters of one message (an install error, a missing symbol) on the page
MAX_ROWS = 5000  # rows of one table (units, wheels), records of one kind read


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


def _printable(value: object, top: float) -> float | str:
    """The number to print, or what to print instead: "—" for none, OUT_OF_RANGE past *top*."""
    n = number_of(value)
    if n is None:
        return "—"
    return OUT_OF_RANGE if abs(n) > top else n


def size_text(value: object) -> str:
    n = _printable(value, MAX_BYTES)
    if isinstance(n, str):
        return n
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def seconds_text(value: object) -> str:
    n = _printable(value, MAX_SECONDS)
    if isinstance(n, str):
        return n
    if n >= 3600:
        return f"{int(n // 3600)} h {int(n % 3600 // 60)} min"
    if n >= 120:
        return f"{int(n // 60)} min {int(n % 60)} s"
    return f"{n:.1f} s"


def text_of(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else json.dumps(value)[:200]


def plain_text(value: object) -> str:
    """A number as written (1, not 1.0), anything else as text."""
    n = number_of(value)
    return fmt_num(int(n) if n is not None and n.is_integer() else n) if n is not None else text_of(value)


def mapping_of(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


def items_of(value: object) -> Sequence[object]:
    return value if isinstance(value, list) else []


def escaped(value: object) -> str:
    return html.escape(plain_text(value))


def fmt_num(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def one_line(value: object) -> str:
    """A message from the report in one line of at most MAX_TEXT characters."""
    text = " ".join(text_of(value).split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]], cls: str, empty: str) -> str:
    """A table whose cells are already escaped HTML."""
    if not rows:
        return f'<p class="note">{html.escape(empty)}</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "\n".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return (
        f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead>\n'
        f"<tbody>\n{body}\n</tbody></table></div>"
    )
