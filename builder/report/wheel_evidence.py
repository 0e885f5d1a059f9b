"""build-report.html's wheels: each wheel's facts (its Pythons, size, SASS, METADATA's torch
pin, full sha256), what proved it (the import gate's verdict under each Python, and its torch
range, trial by trial), which torch the build used and why, and the pin mode; the run folder's
logs linked where they are. Every record is read and checked (report.GateRecord,
wheel.torch_range.TorchRange); one that cannot be read is counted, never drawn."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ..records import RecordError, read_record
from ..wheel.abi3 import python_tag
from ..wheel.torch_range import TorchRange
from .build_report import GateRecord
from .values import MAX_ROWS, html_table, items_of, mapping_of, number_of, one_line, size_text, text_of

MAX_TRIALS = 50  # torch releases per torch range: a handful are tried
MAX_VERSION = 64  # characters of a torch release ("2.14.1+cu130"); a longer one is damage
# The run folder's logs the page links to, when they are there beside it.
LOGS = ("build.log", "gate.log")
WHEEL_COLUMNS = ["file", "Pythons", "size", "SASS", "torch pin", "import gate", "torch range", "sha256"]


def pin_mode(torch: Mapping[str, object]) -> str:
    """What each wheel requires of torch, by the report's pin mode."""
    pin = torch.get("pin")
    if pin == "built":
        return "Pin: built (each wheel requires the torch minor it was built with; --pin proven writes its proven range)."
    if pin == "proven":
        return "Pin: proven (each wheel requires the torch releases it was proven to load with)."
    return "Pin mode not recorded (a report from before --pin: each wheel requires the torch minor it was built with)."


def torch_line(torch: Mapping[str, object]) -> str:
    """Which torch the build used and why, and the pin mode."""
    variant = one_line(torch.get("variant")) or "not recorded"
    chosen = one_line(torch.get("chosen")) or (
        "why this release was not recorded (a report from before wheelbuild chose the newest)"
    )
    return f'<p class="torch">torch {html.escape(variant)}: {html.escape(chosen)}. {html.escape(pin_mode(torch))}</p>'


@dataclass(frozen=True)
class Evidence:
    """What the report says its wheels were proven with: the import gate's records (or why it has
    none) and each wheel's torch range, each read and checked; the run folder's logs."""

    gates: tuple[GateRecord, ...]
    gate_note: str  # said of a wheel the gate has no record of
    ranges: tuple[TorchRange, ...]
    unreadable: int  # gate and range entries that could not be read (a damaged report?)
    logs: tuple[str, ...]

    def link(self, log: str) -> str:
        """A relative link to *log* in the run folder, or "" where it is not there."""
        return f'<a href="{log}">{log}</a>' if log in self.logs and log in LOGS else ""

    def gate_cell(self, wheel: str) -> str:
        found = [g for g in self.gates if g.wheel == wheel]
        verdicts = [
            f"passed under {g.python or '?'}" if g.passed else f"refused under {g.python or '?'}: {g.refusal}"
            for g in found
        ]
        text = html.escape(one_line("; ".join(verdicts) or self.gate_note))
        log = self.link("gate.log")
        return f"{text} ({log})" if log and found else text

    def range_cell(self, wheel: str) -> str:
        found = [r for r in self.ranges if r.wheel == wheel]
        lines = [f"{r.python}: {r.summary}" if r.python else r.summary for r in found]
        return html.escape(one_line("; ".join(lines) or "not tried (no torch range in this report)"))


def evidence_of(report: Mapping[str, object], logs: Sequence[str]) -> Evidence:
    """The report's gate records and torch ranges, read; *logs*: those of LOGS beside the page."""
    gate = report.get("gate")
    gates: list[GateRecord] = []
    unreadable = 0
    for i, entry in enumerate(items_of(gate)[:MAX_ROWS]):
        try:
            gates.append(read_record(GateRecord, entry, f"gate[{i}]"))
        except RecordError:
            unreadable += 1
    if isinstance(gate, dict):
        note = f"not run: {text_of(gate.get('skipped')) or '--no-gate'}"
    elif isinstance(gate, list):
        note = "not run (the checks before the gate refused the wheels, or the build stopped)"
    else:
        note = "not recorded (a report from before the import gate)"
    ranges: list[TorchRange] = []
    for i, entry in enumerate(items_of(report.get("torch_range"))[:MAX_ROWS]):
        found = _torch_range(entry, i)
        ranges += [found] if found is not None else []
        unreadable += found is None
    return Evidence(tuple(gates), note, tuple(ranges), unreadable, tuple(log for log in LOGS if log in logs))


def _torch_range(entry: object, i: int) -> TorchRange | None:
    """One wheel's torch range as TorchRange reads it, or None where it cannot be read: a value
    of the wrong type, or a release that is not a short version (its summary sorts by version)."""
    trimmed = {**mapping_of(entry), "trials": items_of(mapping_of(entry).get("trials"))[:MAX_TRIALS]}
    try:
        found = read_record(TorchRange, trimmed, f"torch_range[{i}]")
        for version in (found.built_with, *(t.torch for t in found.trials)):
            if len(version) > MAX_VERSION:
                raise RecordError("a release too long to be a version")
            Version(version)
    except (RecordError, InvalidVersion):
        return None
    return found


def wheel_rows(report: Mapping[str, object], evidence: Evidence) -> list[list[str]]:
    rows = []
    for wheel in items_of(report.get("wheels"))[:MAX_ROWS]:
        w = mapping_of(wheel)
        sass = sorted(
            {
                int(a)
                for module in mapping_of(w.get("extension_modules")).values()
                for a in items_of(mapping_of(module).get("sass"))
                if isinstance(a, int | float) and number_of(a) is not None
            }
        )
        name = text_of(w.get("file"))
        pin = w.get("torch_requirement")
        rows.append(
            [
                html.escape(name),
                _pythons(report, name),
                size_text(w.get("size")),
                html.escape(", ".join(f"sm_{a}" for a in sass) or "none"),
                html.escape(one_line(", ".join(text_of(p) for p in items_of(pin)) or "none"))
                if isinstance(pin, list)
                else "not recorded",
                evidence.gate_cell(name),
                evidence.range_cell(name),
                f"<code>{html.escape(text_of(w.get('sha256'))[:128]) or '—'}</code>",
            ]
        )
    return rows


def _pythons(report: Mapping[str, object], wheel: str) -> str:
    """Which Pythons a wheel serves: for an abi3 wheel (the report's `abi3` entries), the Python
    that built it, those that reused it and those the gate loaded it under; else its own tag."""
    for entry in items_of(report.get("abi3"))[:MAX_ROWS]:
        use = mapping_of(entry)
        if text_of(use.get("wheel")) != wheel:
            continue
        parts = [f"{text_of(use.get('tag'))}: one wheel for every Python"]
        for key, label in (
            ("built_under", "built under"),
            ("reused_under", "reused under"),
            ("gated_under", "gated under"),
        ):
            value = use.get(key)
            names = (
                [text_of(v) for v in items_of(value)]
                if isinstance(value, list)
                else [text_of(value)]
                if value
                else []
            )
            if names:
                parts.append(f"{label} {', '.join(names)}")
        return html.escape("; ".join(parts))
    return html.escape(python_tag(wheel) or "")


def gate_section(evidence: Evidence) -> list[str]:
    """Each wheel under each Python the gate loaded it under: its verdict, and what it imported."""
    log = evidence.link("gate.log")
    intro = (
        "Each wheel installed with what it declares (torch from its index) into a fresh venv, in a "
        "fresh container of the base image, and imported" + (f"; the gate's log: {log}" if log else "") + "."
    )
    rows = []
    for g in evidence.gates:
        smoke = g.smoke or {}
        modules = ", ".join(f"{i.module} {'ok' if i.ok else 'failed'}" for i in g.imports)
        rows.append(
            [
                html.escape(one_line(g.wheel)),
                html.escape(one_line(g.python or "—")),
                '<strong class="outcome good">passed</strong>'
                if g.passed
                else f'<strong class="outcome bad">refused</strong>: {html.escape(one_line(g.refusal))}',
                html.escape(one_line(g.torch or "—")),
                html.escape(one_line(modules or "nothing")),
                html.escape(
                    one_line(
                        f"{text_of(smoke.get('status'))}: {text_of(smoke.get('reason'))}" if smoke else "—"
                    )
                ),
            ]
        )
    header = ["wheel", "Python", "verdict", "torch", "imported", "GPU smoke test"]
    return [
        "<h2>Import gate</h2>",
        f'<p class="note">{intro}</p>',
        html_table(header, rows, "gate", evidence.gate_note[:1].upper() + evidence.gate_note[1:] + "."),
    ]


_TRIAL_RESULT = {True: "imported", False: "import failed", None: "import not run"}


def range_section(evidence: Evidence, pin: str) -> list[str]:
    """Each wheel (under each Python it was gated under) against the torch releases around its
    own: the line, the pin --pin proven writes, and every trial."""
    body = [
        "<h2>Torch range</h2>",
        f'<p class="note">{html.escape(pin)} An import proves that the wheel links and loads with that '
        "torch; it does not prove that its kernels compute right there (a layout change shows only "
        "when run, as the GPU smoke test does where a GPU is).</p>",
    ]
    if not evidence.ranges:
        return [*body, '<p class="note">No torch range in this report: not tried.</p>']
    for r in evidence.ranges:
        proven = set(r.proven)
        rows = [
            [
                html.escape(t.torch) + (" (built with)" if t.torch == r.built_with else ""),
                html.escape(one_line(f"missing {t.static}" if t.static else "all exported")),
                html.escape(one_line(_TRIAL_RESULT[t.imported] + (f": {t.detail}" if t.detail else ""))),
                "in the proven range" if t.torch in proven else "loads" if t.loads else "does not load",
            ]
            for t in sorted(r.trials, key=lambda t: Version(t.torch))
        ]
        written = f"; --pin proven writes torch{r.pin}" if r.pin else ""
        body.append(
            f'<p class="range"><strong>{html.escape(one_line(r.wheel))}</strong> under '
            f"{html.escape(one_line(r.python or '?'))}: "
            f"{html.escape(one_line(r.summary + written))}</p>"
        )
        body.append(html_table(["torch", "its symbols", "import", "result"], rows, "trials", "No trials."))
    return body
