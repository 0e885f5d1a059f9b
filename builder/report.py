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
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from .attempt import AttemptResult
from .errors import ReportUnreadable
from .gate import GateResult
from .planner import Plan
from .wheels import WheelInfo

__all__ = [
    "MAX_REPORT_SIZE",
    "REPORT_NAME",
    "SCHEMA",
    "AttemptRecord",
    "BuildReport",
    "CacheStats",
    "CheckRecord",
    "GateRecord",
    "GateSkipped",
    "ImageRecord",
    "ImportRecord",
    "MemorySeriesRecord",
    "PlanRecord",
    "RecipeRecord",
    "Reused",
    "SourceRecord",
    "TorchRecord",
    "UnitRecord",
    "WheelRecord",
    "attempt_record",
    "read_report",
    "read_report_json",
    "report_from_json",
    "write_report",
]

SCHEMA = 1  # the newest this wheelbuild writes and reads; absent in a file means 1
REPORT_NAME = "build-report.json"
MAX_REPORT_SIZE = 64 * 1024**2  # a report is tens of KiB; this only bounds a hostile one

_T = TypeVar("_T")
Json = dict[str, Any]


# A field written only when it holds a value (the keys wheelbuild has always written that way).
_OMIT = {"omit_when_none": True}


def _plain(value: object) -> Any:
    """A record as JSON: a dataclass as its fields in order, a tuple as a list."""
    if is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain(getattr(value, f.name))
            for f in fields(value)
            if not (f.metadata.get("omit_when_none") and getattr(value, f.name) is None)
        }
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


class _Record:
    """A part of the report: to_json() gives its fields in order, as build-report.json holds them."""

    def to_json(self) -> Json:
        data: Json = _plain(self)
        return data


class _Bad(ValueError):
    """A field of the wrong type (its message is the reason, for ReportUnreadable)."""


# ---------------------------------------------------------------------------------------------
# Typed reading of one JSON object: absent or null is the default; a wrong type is refused.


class _Obj:
    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise _Bad(
                f"its {where} is not a table"
                if where
                else f"it holds a JSON {type(data).__name__}, not an object"
            )
        self.data: Mapping[str, Any] = data
        self.where = f"{where}." if where else ""

    def _typed(self, key: str, kinds: tuple[type, ...], what: str) -> Any:
        value = self.data.get(key)
        return None if value is None else _checked(value, kinds, what, f"{self.where}{key}")

    def text(self, key: str) -> str | None:
        value: str | None = self._typed(key, (str,), "text")
        return value

    def int(self, key: str) -> int | None:
        value: int | None = self._typed(key, (int,), "a whole number")
        return value

    def num(self, key: str) -> float | None:
        value: float | None = self._typed(key, (int, float), "a number")
        return value

    def flag(self, key: str) -> bool | None:
        value: bool | None = self._typed(key, (bool,), "true or false")
        return value

    def obj(self, key: str) -> _Obj | None:
        value = self.data.get(key)
        return None if value is None else _Obj(value, f"{self.where}{key}")

    def table(self, key: str) -> Mapping[str, Any]:
        """An opaque JSON table (kept as it is; only its type is checked)."""
        value: Mapping[str, Any] | None = self._typed(key, (dict,), "a table")
        return value or {}

    def items(self, key: str, read: Callable[[object, str], _T]) -> tuple[_T, ...]:
        value: list[object] | None = self._typed(key, (list,), "a list")
        return tuple(read(item, f"{self.where}{key}[{i}]") for i, item in enumerate(value or ()))


def _checked(value: object, kinds: tuple[type, ...], what: str, where: str) -> Any:
    if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
        raise _Bad(f"its {where} is not {what}")
    return value


def _scalar(kinds: tuple[type, ...], what: str) -> Callable[[object, str], Any]:
    return lambda value, where: _checked(value, kinds, what, where)


_text = _scalar((str,), "text")
_int = _scalar((int,), "a whole number")
_num = _scalar((int, float), "a number")


# ---------------------------------------------------------------------------------------------
# The records


@dataclass(frozen=True)
class SourceRecord(_Record):
    location: str | None  # credentials redacted
    sha256: str | None


@dataclass(frozen=True)
class RecipeRecord(_Record):
    name: str | None
    version: str | None
    source: SourceRecord | None

    @classmethod
    def read(cls, o: _Obj) -> RecipeRecord:
        s = o.obj("source")
        return cls(
            o.text("name"),
            o.text("version"),
            None if s is None else SourceRecord(s.text("location"), s.text("sha256")),
        )


@dataclass(frozen=True)
class TorchRecord(_Record):
    variant: str | None  # 2.11.0+cu130
    index_url: str | None  # credentials redacted


@dataclass(frozen=True)
class ImageRecord(_Record):
    tag: str | None
    id: str | None
    labels: Mapping[str, Any]


@dataclass(frozen=True)
class PlanRecord(_Record):
    """Plan.as_dict(): the numbers the build ran with and why (the model by name only)."""

    memory: int | None
    cpus: float | None
    max_jobs: int | None
    nvcc_threads: int | None
    archs: int | None
    predicted_peak: int | None
    predicted_seconds: float | None
    model: Mapping[str, Any]
    admission_budget: int | None
    reasons: tuple[str, ...]

    @classmethod
    def of(cls, plan: Plan) -> PlanRecord:
        return cls.read(_Obj(plan.as_dict(), "plan"))

    @classmethod
    def read(cls, o: _Obj) -> PlanRecord:
        return cls(
            memory=o.int("memory"),
            cpus=o.num("cpus"),
            max_jobs=o.int("max_jobs"),
            nvcc_threads=o.int("nvcc_threads"),
            archs=o.int("archs"),
            predicted_peak=o.int("predicted_peak"),
            predicted_seconds=o.num("predicted_seconds"),
            model=o.table("model"),
            admission_budget=o.int("admission_budget"),
            reasons=o.items("reasons", _text),
        )


@dataclass(frozen=True)
class UnitRecord(_Record):
    unit: str  # cp311-manylinux_x86_64:reduce.o
    finished_s: float | None
    predicted_peak: int | None  # None where the model does not know the unit
    predicted_s: float | None

    @classmethod
    def read(cls, value: object, where: str) -> UnitRecord:
        o = _Obj(value, where)
        return cls(o.text("unit") or "", o.num("finished_s"), o.int("predicted_peak"), o.num("predicted_s"))


@dataclass(frozen=True)
class CacheStats(_Record):
    hits: int
    misses: int


@dataclass(frozen=True)
class MemorySeriesRecord(_Record):
    step_s: float | None
    points: tuple[tuple[float, int], ...]  # (seconds since the attempt began, working set)


def _point(value: object, where: str) -> tuple[float, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise _Bad(f"its {where} is not a pair of time and bytes")
    return _num(value[0], where), _int(value[1], where)


@dataclass(frozen=True)
class AttemptRecord(_Record):
    attempt: int | None
    max_jobs: int | None
    nvcc_threads: int | None
    memory: int | None
    returncode: int | None
    duration_s: float | None
    build_s: float | None
    build_s_by_python: Mapping[str, float]
    memory_limit_seen: int | None
    peak_memory: int | None
    peak_memory_compile: int | None
    predicted_peak: int | None
    oom_evidence: tuple[str, ...]
    oom_at_s: tuple[float, ...]
    memory_series: MemorySeriesRecord | None
    units_finished: int | None
    units: tuple[UnitRecord, ...]
    cache_hits: int | None
    cache_misses: int | None
    cache_by_python: Mapping[str, CacheStats]
    # Only on a successful retry: units an earlier attempt finished, and how many of them were
    # compiled again here (sccache misses beyond the units no earlier attempt finished; goal 0).
    units_finished_before: int | None = field(default=None, metadata=_OMIT)
    units_recompiled: int | None = field(default=None, metadata=_OMIT)

    @classmethod
    def read(cls, value: object, where: str) -> AttemptRecord:
        o = _Obj(value, where)
        series = o.obj("memory_series")
        by_python = o.obj("build_s_by_python")
        cache = o.obj("cache_by_python")
        return cls(
            attempt=o.int("attempt"),
            max_jobs=o.int("max_jobs"),
            nvcc_threads=o.int("nvcc_threads"),
            memory=o.int("memory"),
            returncode=o.int("returncode"),
            duration_s=o.num("duration_s"),
            build_s=o.num("build_s"),
            build_s_by_python={k: by_python.num(k) or 0.0 for k in by_python.data} if by_python else {},
            memory_limit_seen=o.int("memory_limit_seen"),
            peak_memory=o.int("peak_memory"),
            peak_memory_compile=o.int("peak_memory_compile"),
            predicted_peak=o.int("predicted_peak"),
            oom_evidence=o.items("oom_evidence", _text),
            oom_at_s=o.items("oom_at_s", _num),
            memory_series=None
            if series is None
            else MemorySeriesRecord(series.num("step_s"), series.items("points", _point)),
            units_finished=o.int("units_finished"),
            units=o.items("units", UnitRecord.read),
            cache_hits=o.int("cache_hits"),
            cache_misses=o.int("cache_misses"),
            cache_by_python={k: _cache_stats(cache.obj(k)) for k in cache.data} if cache else {},
            units_finished_before=o.int("units_finished_before"),
            units_recompiled=o.int("units_recompiled"),
        )


def _cache_stats(o: _Obj | None) -> CacheStats:
    return CacheStats(0, 0) if o is None else CacheStats(o.int("hits") or 0, o.int("misses") or 0)


def attempt_record(
    plan: Plan, result: AttemptResult, before: Sequence[tuple[Plan, AttemptResult]]
) -> AttemptRecord:
    """An attempt as the report keeps it: the plan it ran with, what the engine measured, and
    each unit that finished against the model's prediction."""
    retried = bool(before) and result.returncode == 0
    finished_before: set[str] = set().union(*(r.finished_units for _, r in before)) if retried else set()
    return AttemptRecord(
        attempt=result.attempt,
        max_jobs=plan.max_jobs,
        nvcc_threads=plan.nvcc_threads,
        memory=plan.memory,
        returncode=result.returncode,
        duration_s=round(result.duration_s, 1),
        build_s=round(result.build_seconds, 1),
        build_s_by_python={identifier: round(s, 1) for identifier, s in result.build_seconds_by_identifier},
        memory_limit_seen=result.memory_limit_seen,
        peak_memory=result.peak_memory,
        peak_memory_compile=result.peak_memory_compile,
        predicted_peak=plan.predicted_peak,
        oom_evidence=tuple(result.oom.fired),
        oom_at_s=tuple(result.oom_at_s),
        memory_series=MemorySeriesRecord(result.memory_step_s, tuple(result.memory_series)),
        units_finished=len(result.finished_units),
        units=_unit_records(plan, result),
        cache_hits=result.cache_hits,
        cache_misses=result.cache_misses,
        cache_by_python={i: CacheStats(hits, misses) for i, hits, misses in result.cache_by_identifier},
        units_finished_before=len(finished_before) if retried else None,
        units_recompiled=max(0, result.cache_misses - (result.units_total - len(finished_before)))
        if retried
        else None,
    )


def _unit_records(plan: Plan, result: AttemptResult) -> tuple[UnitRecord, ...]:
    """Each unit that finished, when, and what the model predicted for it (matched by the
    output's stem, reduce.o <- csrc/reduce.cu; None where the model does not know the unit)."""
    known = {u.name.rsplit("/", 1)[-1].split(".")[0]: u for u in plan.model.units}
    records = []
    for unit, finished_s in result.unit_finished_s:
        cost = known.get(unit.rsplit(":", 1)[-1].split(".")[0])
        records.append(
            UnitRecord(
                unit=unit,
                finished_s=finished_s,
                predicted_peak=None
                if cost is None
                else plan.model.unit_peak(cost, plan.nvcc_threads, plan.archs),
                predicted_s=None if cost is None else round(cost.wall(plan.nvcc_threads, plan.archs), 1),
            )
        )
    return tuple(records)


@dataclass(frozen=True)
class ModuleRecord(_Record):
    sass: tuple[int, ...]
    ptx: tuple[int, ...]
    cudart: tuple[str, ...]


@dataclass(frozen=True)
class WheelRecord(_Record):
    """WheelInfo.to_json(): a wheel as the report lists it."""

    file: str
    name: str | None
    version: str | None
    tags: tuple[str, ...]
    sha256: str | None
    size: int | None
    metadata: Mapping[str, Any]
    torch_requirement: tuple[str, ...]
    extension_modules: Mapping[str, ModuleRecord]

    @classmethod
    def of(cls, wheel: WheelInfo) -> WheelRecord:
        return cls.read(wheel.to_json(), "wheels[]")

    @classmethod
    def read(cls, value: object, where: str) -> WheelRecord:
        o = _Obj(value, where)
        modules = o.obj("extension_modules")
        found = {}
        for member in modules.data if modules else ():
            m = modules.obj(member) if modules else None
            if m is not None:
                found[member] = ModuleRecord(
                    m.items("sass", _int), m.items("ptx", _int), m.items("cudart", _text)
                )
        return cls(
            file=o.text("file") or "",
            name=o.text("name"),
            version=o.text("version"),
            tags=o.items("tags", _text),
            sha256=o.text("sha256"),
            size=o.int("size"),
            metadata=o.table("metadata"),
            torch_requirement=o.items("torch_requirement", _text),
            extension_modules=found,
        )


@dataclass(frozen=True)
class CheckRecord(_Record):
    error: str | None  # the error's class name: ArchMissing
    cause: str | None


@dataclass(frozen=True)
class ImportRecord(_Record):
    module: str
    ok: bool
    error: str | None = None
    undefined_symbol: str | None = None
    demangled: str | None = None

    @classmethod
    def read(cls, value: object, where: str) -> ImportRecord:
        o = _Obj(value, where)
        module = o.text("module")
        if module is None:
            raise _Bad(f"its {where} names no module")
        return cls(
            module, bool(o.flag("ok")), o.text("error"), o.text("undefined_symbol"), o.text("demangled")
        )


@dataclass(frozen=True)
class GateRecord(_Record):
    """GateResult.to_json(): one wheel installed and imported in a fresh base container."""

    wheel: str
    python: str | None = None
    passed: bool = False
    install_error: str | None = None
    torch: str | None = None  # as imported: 2.11.0+cu130
    imports: tuple[ImportRecord, ...] = ()
    unresolved: Mapping[str, Any] = field(default_factory=dict)
    load_errors: Mapping[str, Any] = field(default_factory=dict)
    smoke: Mapping[str, Any] | None = None  # {"status": passed|failed|skipped, "reason": ...}
    abi_problems: tuple[str, ...] = ()

    @classmethod
    def of(cls, result: GateResult) -> GateRecord:
        return cls.read(result.to_json(), "gate[]")

    @classmethod
    def read(cls, value: object, where: str) -> GateRecord:
        if not isinstance(value, dict) or not isinstance(value.get("wheel"), str):
            raise _Bad("a gate entry is not a table naming its wheel")
        o = _Obj(value, f"gate entry of {value['wheel']}")
        smoke = o.obj("smoke")
        return cls(
            wheel=value["wheel"],
            passed=bool(o.flag("passed")),
            python=o.text("python"),
            install_error=o.text("install_error"),
            torch=o.text("torch"),
            imports=o.items("imports", ImportRecord.read),
            unresolved=o.table("unresolved"),
            load_errors=o.table("load_errors"),
            smoke=None if smoke is None else smoke.data,
            abi_problems=o.items("abi_problems", _text),
        )


@dataclass(frozen=True)
class GateSkipped(_Record):
    """The build ran with --no-gate: its wheels were never loaded."""

    skipped: str = "--no-gate: the wheels were not loaded; publish checks them statically only"


@dataclass(frozen=True)
class Reused(_Record):
    """This run's wheels are an earlier run's, found in the result store by their inputs key."""

    key: str
    from_run: str


@dataclass(frozen=True)
class BuildReport(_Record):
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
    abi: tuple[Mapping[str, Any], ...] = ()  # AbiReport.to_json() per wheel, kept as written
    # The import gate per wheel; GateSkipped for --no-gate; None in a report from before the gate.
    gate: tuple[GateRecord, ...] | GateSkipped | None = None
    reused: Reused | None = field(default=None, metadata=_OMIT)

    def gate_of(self, wheel: str) -> GateRecord | None:
        gates = self.gate if isinstance(self.gate, tuple) else ()
        return next((g for g in gates if g.wheel == wheel), None)


def _check(value: object, where: str) -> CheckRecord:
    o = _Obj(value, where)
    return CheckRecord(o.text("error"), o.text("cause"))


def _table(value: object, where: str) -> Mapping[str, Any]:
    return _Obj(value, where).data


def _gate(o: _Obj) -> tuple[GateRecord, ...] | GateSkipped | None:
    gate = o.data.get("gate")
    if gate is None:
        return None
    if isinstance(gate, dict):
        return GateSkipped(str(gate.get("skipped", "")))
    if not isinstance(gate, list):
        raise _Bad("its gate is neither a list of results nor a --no-gate note")
    return o.items("gate", GateRecord.read)


def _schema(o: _Obj) -> int:
    schema = o.int("schema")
    if schema is None:
        return 1
    if not 1 <= schema <= SCHEMA:
        raise _Bad(f"it is of schema {schema}, and this wheelbuild reads schema 1 to {SCHEMA}")
    return schema


def report_from_json(data: object) -> BuildReport:
    """The report a parsed build-report.json holds; ReportUnreadable when it is not one."""
    try:
        o = _Obj(data, "")
        schema = _schema(o)
        torch, image, plan, reused = o.obj("torch"), o.obj("image"), o.obj("plan"), o.obj("reused")
        recipe = o.obj("recipe")
        return BuildReport(
            run_id=o.text("run_id"),
            inputs_key=o.text("inputs_key"),
            recipe=None if recipe is None else RecipeRecord.read(recipe),
            torch=None if torch is None else TorchRecord(torch.text("variant"), torch.text("index_url")),
            archs=o.items("archs", _int),
            pythons=o.items("pythons", _text),
            image=None
            if image is None
            else ImageRecord(image.text("tag"), image.text("id"), image.table("labels")),
            plan=None if plan is None else PlanRecord.read(plan),
            attempts=o.items("attempts", AttemptRecord.read),
            wheels=o.items("wheels", WheelRecord.read),
            checks=o.items("checks", _check),
            abi=o.items("abi", _table),
            gate=_gate(o),
            reused=None
            if reused is None
            else Reused(reused.text("key") or "", reused.text("from_run") or ""),
            schema=schema,
        )
    except _Bad as bad:
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
        with target.open("rb") as file:
            # The size first (a hostile file is not read at all), the read bounded all the same.
            too_big = os.fstat(file.fileno()).st_size > MAX_REPORT_SIZE
            data = b"" if too_big else file.read(MAX_REPORT_SIZE + 1)
        if too_big or len(data) > MAX_REPORT_SIZE:
            raise _Bad(f"it is over {MAX_REPORT_SIZE // 1024**2} MiB")
        # JSONDecodeError and UnicodeDecodeError are ValueErrors; deep nesting is a RecursionError.
        found = json.loads(data)
        _schema(_Obj(found, ""))
    except _Bad as bad:
        raise _unreadable(target, str(bad)) from None
    except OSError as error:
        raise _unreadable(target, error.strerror or str(error)) from None
    except (ValueError, RecursionError) as error:
        raise _unreadable(target, f"it is not readable JSON ({error})") from None
    return dict(found)


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
