"""build-report.json: one typed, versioned record of a build, written and read here only.

`write_report(path, report)` writes a :class:`BuildReport`; `read_report(path)` reads one back
(`read_report_json` gives the checked JSON object, for the page renderer that draws any report).
Build writes it (fresh, and for reused wheels the stored one with this run's id); check, publish,
gc, the nightly and the result store read it.

Schema 1 is the format wheelbuild has always written; a report without a `schema` field is
version 1. A report of a newer schema, one over the size cap, one that is not JSON, and one whose
fields have the wrong types are refused with ReportUnreadable (exit 19). A field an older report
lacks reads as its default (None, empty), so every report wheelbuild ever wrote still reads.
Reports are untrusted input (a run folder may come from anywhere): the size is capped before the
file is read, and every value's type is checked before use.

The records are frozen dataclasses whose fields are the JSON keys, in the order written
(records.py reads and writes them by their fields' types), so a field added to a record is
written and read, type-checked, with nothing else to change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..bounded import FileRefused, read_bounded
from ..errors import ReportUnreadable
from ..records import OMIT, REQUIRED, Json, Record, RecordError, read_record
from ..wheel.abi3 import Abi3Use
from ..wheel.contents import WheelInfo
from ..wheel.gate import GateResult
from ..wheel.torch_range import TorchRange
from .attempt_records import AttemptRecord, PlanRecord

__all__ = [
    "MAX_REPORT_SIZE",
    "REPORT_NAME",
    "SCHEMA",
    "Abi3Record",
    "BuildReport",
    "GateRecord",
    "GateSkipped",
    "Reused",
    "read_report",
    "read_report_json",
    "report_from_json",
    "write_report",
]

SCHEMA = 1  # the newest this wheelbuild writes and reads; absent in a file means 1
REPORT_NAME = "build-report.json"
MAX_REPORT_SIZE = 64 * 1024**2  # a report is tens of KiB; this only bounds a hostile one
# Every number a report holds is a size in bytes (an int64 at most), a time or a count: past
# this it is damage, and a page that drew it to scale would need memory without end.
MAX_REPORT_NUMBER = 2**64


# ---------------------------------------------------------------------------------------------
# The records


@dataclass(frozen=True)
class SourceRecord(Record):
    location: str | None  # credentials redacted
    sha256: str | None
    # SOURCE_DATE_EPOCH: every zip entry's date, taken from the inputs; None before it was recorded
    date_epoch: int | None = None
    date_from: str = ""  # where it came from: "the newest file in causal_conv1d-1.7.0.tar.gz"


@dataclass(frozen=True)
class RecipeRecord(Record):
    name: str | None
    version: str | None
    source: SourceRecord | None


@dataclass(frozen=True)
class TorchRecord(Record):
    variant: str | None  # 2.11.0+cu130
    index_url: str | None  # credentials redacted
    chosen: str = ""  # why this release: "torch 2.14.1: newest on https://... with cp311 wheels"
    pin: str = "built"  # what each wheel requires of torch: the built minor, or its proven range


@dataclass(frozen=True)
class ImageRecord(Record):
    tag: str | None
    id: str | None
    labels: Mapping[str, object]
    # How long this run took to have it (built, or found and reused); absent before it was kept.
    seconds: float | None = field(default=None, metadata=OMIT)


@dataclass(frozen=True)
class ModuleRecord(Record):
    sass: tuple[int, ...]
    ptx: tuple[int, ...]
    cudart: tuple[str, ...]


@dataclass(frozen=True)
class WheelRecord(Record):
    """WheelInfo.to_json(): a wheel as the report lists it."""

    file: str
    name: str | None
    version: str | None
    tags: tuple[str, ...]
    sha256: str | None
    size: int | None
    metadata: Mapping[str, object]
    torch_requirement: tuple[str, ...]
    extension_modules: Mapping[str, ModuleRecord]

    @classmethod
    def of(cls, wheel: WheelInfo) -> WheelRecord:
        return read_record(cls, wheel.to_json(), "wheels[]")


@dataclass(frozen=True)
class CheckRecord(Record):
    error: str | None  # the error's class name: ArchMissing
    cause: str | None


@dataclass(frozen=True)
class ImportRecord(Record):
    module: str = field(metadata=REQUIRED)
    ok: bool = False
    error: str | None = None
    undefined_symbol: str | None = None
    demangled: str | None = None


@dataclass(frozen=True)
class GateRecord(Record):
    """GateResult.to_json(): one wheel installed and imported in a fresh base container."""

    wheel: str = field(metadata=REQUIRED)
    python: str | None = None
    passed: bool = False
    install_error: str | None = None
    torch: str | None = None  # as imported: 2.11.0+cu130
    imports: tuple[ImportRecord, ...] = ()
    unresolved: Mapping[str, object] = field(default_factory=dict)
    load_errors: Mapping[str, object] = field(default_factory=dict)
    smoke: Mapping[str, object] | None = None  # {"status": passed|failed|skipped, "reason": ...}
    abi_problems: tuple[str, ...] = ()

    @classmethod
    def of(cls, result: GateResult) -> GateRecord:
        return read_record(cls, result.to_json(), "gate[]")

    @property
    def refusal(self) -> str | None:
        """Why the gate refused the wheel, in one line; None when it passed."""
        if self.passed:
            return None
        first = next((i for i in self.imports if not i.ok), None)
        if first is not None:
            return f"import {first.module} failed: {first.demangled or _last_line(first.error or '')}"
        if self.install_error:
            return f"it could not be installed: {_last_line(self.install_error)}"
        if unresolved := next((member for member, symbols in self.unresolved.items() if symbols), None):
            return f"{unresolved} has symbols nothing provides"
        if load_error := next(iter(self.load_errors), None):
            return f"{load_error} does not load"
        if self.smoke and self.smoke.get("status") == "failed":
            return f"its GPU smoke test failed: {self.smoke.get('reason', '')}"
        return "see the report"


def _last_line(text: str) -> str:
    """The last line that says something (pip's and Python's errors end with their cause)."""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


@dataclass(frozen=True)
class GateSkipped(Record):
    """The build ran with --no-gate: its wheels were never loaded."""

    skipped: str = "--no-gate: the wheels were not loaded; publish checks them statically only"


@dataclass(frozen=True)
class ContractRecord(Record):
    """How the build kept its word: the archs asked (or, asked to, the package's), all linked here."""

    keep_package_archs: bool = False
    ptx: tuple[int, ...] = ()  # the archs whose PTX was asked for besides their SASS (120+PTX)
    switches: tuple[str, ...] = ()  # "NAME=VALUE: why", set from what the package's build files read
    nvcc_rewrites: tuple[str, ...] = ()  # what wheelbuild-nvcc rewrote, each once
    keep_package_std: bool = False  # --keep-package-std: the package's C++ standard kept as it is
    std_raised: tuple[str, ...] = ()  # the package's C++ standard raised to torch's, each once
    link_checks: tuple[str, ...] = ()  # per Python: "cp312-manylinux_x86_64: linked here: 1 of 1 ..."
    network: str = ""  # during the package's build: "off", or "on: <why>"


@dataclass(frozen=True)
class Reused(Record):
    """This run's wheels are an earlier run's, found in the result store by their inputs key."""

    key: str
    from_run: str


@dataclass(frozen=True)
class Abi3Record(Record):
    """A wheel for every Python (abi3, the stable ABI): the Python whose build made it, the later
    Pythons that reused it instead of building, and those the import gate loaded it under."""

    wheel: str = field(metadata=REQUIRED)
    tag: str = ""  # cp310-abi3
    built_under: str | None = None  # cp311
    reused_under: tuple[str, ...] = ()  # cp313
    gated_under: tuple[str, ...] = ()  # cp311, cp313

    @classmethod
    def of(cls, use: Abi3Use, gates: Sequence[GateResult]) -> Abi3Record:
        """The wheel's use, with the Pythons whose gate passed it."""
        passed = tuple(g.python for g in gates if g.wheel == use.wheel and g.passed)
        return cls(use.wheel, use.tag, use.built_under, use.reused_under, passed)


@dataclass(frozen=True)
class BuildReport(Record):
    schema: int = SCHEMA
    run_id: str | None = None
    inputs_key: str | None = None  # None in a report from before the result store
    recipe: RecipeRecord | None = None
    torch: TorchRecord | None = None
    archs: tuple[int, ...] = ()
    pythons: tuple[str, ...] = ()
    image: ImageRecord | None = None
    plan: PlanRecord | None = None
    attempts: tuple[AttemptRecord, ...] = ()
    wheels: tuple[WheelRecord, ...] = ()
    checks: tuple[CheckRecord, ...] = ()
    abi: tuple[Mapping[str, object], ...] = ()  # AbiFindings.to_json() per wheel, kept as written
    # The import gate per wheel; GateSkipped for --no-gate; None in a report from before the gate.
    gate: tuple[GateRecord, ...] | GateSkipped | None = None
    reused: Reused | None = field(default=None, metadata=OMIT)
    # The abi3 wheels among `wheels`, each serving several Pythons; absent when there is none.
    abi3: tuple[Abi3Record, ...] | None = field(default=None, metadata=OMIT)
    contract: ContractRecord | None = field(default=None, metadata=OMIT)
    # Each wheel (under each Python it was gated under) against the torch releases around its own.
    torch_range: tuple[TorchRange, ...] | None = field(default=None, metadata=OMIT)

    def ranges_of(self, wheel: str) -> tuple[TorchRange, ...]:
        return tuple(r for r in self.torch_range or () if r.wheel == wheel)

    def gates_of(self, wheel: str) -> tuple[GateRecord, ...]:
        """The gate's records of one wheel: one, or one per Python for an abi3 wheel."""
        gates = self.gate if isinstance(self.gate, tuple) else ()
        return tuple(g for g in gates if g.wheel == wheel)

    def gate_of(self, wheel: str) -> GateRecord | None:
        """The record that decides a wheel's verdict: the first refusal under any Python, else
        the first record; None when the gate never ran for it."""
        gates = self.gates_of(wheel)
        return next((g for g in gates if not g.passed), gates[0] if gates else None)


# ---------------------------------------------------------------------------------------------
# JSON out and in, by the records' field types


def _gate(value: object) -> tuple[GateRecord, ...] | GateSkipped | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return GateSkipped(str(value.get("skipped", "")))
    if not isinstance(value, list):
        raise RecordError("its gate is neither a list of results nor a --no-gate note")
    return tuple(read_record(GateRecord, entry, f"gate[{i}]") for i, entry in enumerate(value))


def _plan(value: object) -> PlanRecord | None:
    """The plan; a report from before 2026-12-03 calls cicc admission by its old name, cicc_gate."""
    if isinstance(value, dict) and "cicc_admission" not in value and "cicc_gate" in value:
        value = {**value, "cicc_admission": value["cicc_gate"]}
    return None if value is None else read_record(PlanRecord, value, "plan")


def _schema(data: object) -> int:
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema is None:
        return 1
    if type(schema) is not int or not 1 <= schema <= SCHEMA:
        raise RecordError(
            f"it is of schema {schema!r}; this wheelbuild reads schema {SCHEMA} and older (a newer one wrote it?)"
        )
    return schema


def report_from_json(data: object) -> BuildReport:
    """The report a parsed build-report.json holds; ReportUnreadable when it is not one."""
    try:
        if not isinstance(data, dict):
            return read_record(BuildReport, data, "")  # refused: not an object
        given = {"schema": _schema(data), "gate": _gate(data.get("gate")), "plan": _plan(data.get("plan"))}
        return read_record(BuildReport, data, "", **given)
    except RecordError as bad:
        raise _unreadable(None, str(bad)) from None


def _unreadable(path: Path | None, why: str) -> ReportUnreadable:
    where = f" at {path}" if path else ""
    return ReportUnreadable(
        f"cannot read a build report{where}: {why}",
        "name a run folder (wheelhouse/runs/<run-id>) or its build-report.json, written by "
        "wheelbuild build; rebuild where the report is damaged",
        why=why,
    )


def read_report_json(path: Path) -> Json:
    """The JSON object of the build report at *path* (a run folder or the file itself), its size
    capped before it is read and its schema one this wheelbuild reads. For the page renderer,
    which draws any report; everything else reads the typed record (read_report)."""
    target = path / REPORT_NAME if path.is_dir() else path
    try:
        # JSONDecodeError and UnicodeDecodeError are ValueErrors; deep nesting is a RecursionError.
        found = json.loads(
            read_bounded(target, MAX_REPORT_SIZE),
            parse_int=_bounded_int,
            parse_float=_bounded_float,
            parse_constant=_no_constant,
        )
        if not isinstance(found, dict):
            raise RecordError(f"it holds a JSON {type(found).__name__}, not an object")
        _schema(found)
    except FileRefused as refused:  # a ValueError too: caught before the JSON errors
        why = (
            f"it is over {MAX_REPORT_SIZE // 1024**2} MiB" if refused.too_big else "it is not a regular file"
        )
        raise _unreadable(target, why) from None
    except RecordError as bad:
        raise _unreadable(target, str(bad)) from None
    except OSError as error:
        raise _unreadable(target, error.strerror or str(error)) from None
    except (ValueError, RecursionError) as error:
        raise _unreadable(target, f"it is not readable JSON ({error})") from None
    return dict(found)


def _out_of_range(text: str) -> RecordError:
    shown = text if len(text) <= 24 else f"{text[:12]}…({len(text)} characters)"
    return RecordError(
        f"it holds the number {shown}, out of any real range (no size, time or count in a report "
        f"passes 2**64)"
    )


def _bounded_int(text: str) -> int:
    """A JSON integer within ±MAX_REPORT_NUMBER; its digits are counted before it is converted
    (Python refuses over 4,300 of them, and nothing real has over 20)."""
    if len(text.lstrip("-")) > 20 or abs(number := int(text)) > MAX_REPORT_NUMBER:
        raise _out_of_range(text)
    return number


def _bounded_float(text: str) -> float:
    """A JSON number with a fraction or exponent, finite and within ±MAX_REPORT_NUMBER (1e400
    reads as inf)."""
    number = float(text)
    if not abs(number) <= MAX_REPORT_NUMBER:
        raise _out_of_range(text)
    return number


def _no_constant(text: str) -> float:
    """NaN, Infinity and -Infinity: Python's JSON reads them, JSON has none, and no report holds one."""
    raise RecordError(f"it holds {text}, which is not a number a report holds")


def read_report(path: Path) -> BuildReport:
    """The build report at *path* (a run folder or its build-report.json)."""
    data = read_report_json(path)
    try:
        return report_from_json(data)
    except ReportUnreadable as unreadable:
        raise _unreadable(path / REPORT_NAME if path.is_dir() else path, unreadable.why) from None


def write_report(path: Path, report: BuildReport) -> None:
    """Write *report* as build-report.json at *path*."""
    path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
