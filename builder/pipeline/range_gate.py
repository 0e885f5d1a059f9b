"""A wheel's torch range, as a build finds it after the import gate passed: the torch releases
around the build's (wheel/torch_range.neighbours) each checked against its exported symbols and
then, where none is missing, gated: the wheel installed without its own torch pin beside that
torch, in a fresh container of the base image, and imported (import_gate.GateRun).

The symbols come from each torch wheel itself, downloaded once to a temporary file, read, and
kept as the list of what it exports (cache_dir()/torch-exports, by the wheel's sha256; ~3 MB
each): the next build that tries the same torch downloads nothing. The gate's torch comes from
the machine's wheel cache, as the build's does: each torch is downloaded once per machine.
A torch that cannot be fetched is "not tried", with why; the build itself never fails here.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ..errors import TorchIndexUnreachable, WheelbuildError
from ..run.reporter import Reporter
from ..spec.build_spec import BuildSpec
from ..spec.pythons import has_wheel
from ..spec.sources import cache_dir
from ..spec.torch_releases import TorchIndex, TorchRelease
from ..wheel.abi import AbiReport
from ..wheel.abi3 import gate_pythons
from ..wheel.gate import failure as gate_failure
from ..wheel.stamp import stamp_wheel
from ..wheel.torch_range import TorchRange, TorchTrial, neighbours, written_pin
from ..wheel.torch_symbols import first_missing, needed_from_torch, torch_exports
from ..wheel.wheels import WheelInfo, inspect_wheel
from .check import check_wheel, expectation
from .import_gate import GateRun

__all__ = ["other_requirements", "pinned_to_ranges", "torch_ranges"]

MAX_EXPORTS = 256 << 20  # a kept list is ~3 MB gzipped; a bigger file is not one


def torch_ranges(
    gate: GateRun,
    index: TorchIndex,
    wheels: tuple[WheelInfo, ...],
    abi_reports: Mapping[str, AbiReport],
    pythons: tuple[str, ...],
) -> tuple[TorchRange, ...]:
    """Each wheel's torch range under each Python it was gated under."""
    reporter = gate.reporter
    reporter.step("torch range: each wheel against the torch releases around its own")
    found = []
    for wheel, python in ((w, p) for w in wheels for p in gate_pythons(w.path.name, pythons)):
        found.append(_range_of(gate, index, wheel, abi_reports[wheel.path.name], python))
        reporter.info(f"{wheel.path.name} under {python}: {found[-1].summary}")
    return tuple(found)


def pinned_to_ranges(
    wheels: tuple[WheelInfo, ...],
    ranges: tuple[TorchRange, ...],
    spec: BuildSpec,
    reporter: Reporter,
    date_epoch: int | None = None,
) -> tuple[tuple[WheelInfo, ...], list[WheelbuildError]]:
    """--pin proven: each wheel made to require the torch releases its range proved (written_pin),
    then checked again; the wheels as they now are, and any problem the check finds."""
    repinned, problems = [], []
    for wheel in wheels:
        pin = written_pin([r for r in ranges if r.wheel == wheel.path.name])
        again = inspect_wheel(stamp_wheel(wheel.path, spec.variant, pin, date_epoch))
        reporter.info(f"{wheel.path.name}: requires torch{pin or ''} (--pin proven)")
        problems += check_wheel(again, replace(expectation(spec), pin=pin))
        repinned.append(again)
    return tuple(repinned), problems


def _range_of(gate: GateRun, index: TorchIndex, wheel: WheelInfo, abi: AbiReport, python: str) -> TorchRange:
    spec, reporter = gate.spec, gate.reporter
    built = spec.variant.torch_version
    releases: dict[str, TorchRelease] = {}
    for release in index.releases:  # newest first: a public version's first release is its own
        if has_wheel(release.pythons, python):
            releases.setdefault(Version(release.version).public, release)
    own = TorchTrial(built, imported=True)
    if built not in releases:
        return TorchRange(wheel.path.name, python, built, (own,))
    try:
        tried = neighbours(
            tuple(releases),
            built,
            lambda version: index.cuda_of(releases[version], python=python),
            spec.torch_range_older,
        )
        needed = needed_from_torch(abi, _exports(index, releases[built], python, reporter))
    except (TorchIndexUnreachable, ValueError) as failed:
        reporter.warn(f"the torch range of {wheel.path.name} was not tried: {_cause(failed)}")
        return TorchRange(wheel.path.name, python, built, (own,))
    reporter.info(
        f"{wheel.path.name} under {python}: built with torch {built}; trying {', '.join(tried) or 'none'}"
    )
    others = other_requirements(wheel.requires_dist)
    trials = [own]
    for version in tried:
        trials.append(_trial(gate, index, releases[version], wheel, abi, python, needed, others))
        reporter.info(f"  torch {version}: {_said(trials[-1])}")
    return TorchRange(wheel.path.name, python, built, tuple(trials))


def _trial(
    gate: GateRun,
    index: TorchIndex,
    release: TorchRelease,
    wheel: WheelInfo,
    abi: AbiReport,
    python: str,
    needed: Mapping[str, tuple[str, ...]],
    others: tuple[str, ...],
) -> TorchTrial:
    version = Version(release.version).public
    try:
        missing = first_missing(needed, _exports(index, release, python, gate.reporter))
    except (TorchIndexUnreachable, ValueError) as failed:
        return TorchTrial(version, detail=f"its symbols could not be read: {_cause(failed)}")
    if missing is not None:
        # A strong undefined symbol fails the import for certain (extensions load with RTLD_NOW).
        return TorchTrial(version, static=str(missing), detail="not installed: a symbol it needs is missing")
    torch = replace(gate.spec.variant, torch_version=version)
    gate.reporter.doing(f"gating {wheel.path.name} under torch {version}", python)
    result = gate.run(wheel, abi, python, torch, others)
    refused = gate_failure(result)
    return TorchTrial(version, imported=result.passed, detail=refused.cause if refused else "")


def _said(trial: TorchTrial) -> str:
    if trial.loads:
        return "imports"
    return trial.static or trial.detail


def _cause(failed: Exception) -> str:
    return failed.cause if isinstance(failed, TorchIndexUnreachable) else str(failed)


def other_requirements(requires_dist: tuple[str, ...]) -> tuple[str, ...]:
    """The wheel's requirements but torch and its extras' (`extra == "..."`), as written: what
    its gate under another torch installs after it."""
    kept = []
    for text in requires_dist:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == "torch" or "extra" in str(requirement.marker or ""):
            continue
        kept.append(text)
    return tuple(kept)


def _exports(index: TorchIndex, release: TorchRelease, python: str, reporter: Reporter) -> frozenset[str]:
    """What the torch of *release* (its wheel for *python*) exports: kept, or its wheel fetched
    and read once. Raises TorchIndexUnreachable or ValueError."""
    wheel = release.wheel_for(python)
    key = wheel.sha256 or hashlib.sha256(f"{index.shown} {wheel.filename}".encode()).hexdigest()
    kept = cache_dir() / "torch-exports" / f"{key[:40]}.txt.gz"
    try:
        if kept.stat().st_size <= MAX_EXPORTS:
            with gzip.open(kept, "rt", encoding="utf-8") as lines:
                return frozenset(line.rstrip("\n") for line in lines if line.strip())
    except (OSError, EOFError, UnicodeDecodeError):
        pass  # absent or damaged: read the wheel
    reporter.info(f"reading the symbols torch {release.version} exports ({wheel.filename}, downloaded once)")
    reporter.doing(f"downloading {wheel.filename} to read its symbols")
    with tempfile.TemporaryDirectory(prefix="wheelbuild-torch-") as scratch:
        path = Path(scratch) / wheel.filename
        with path.open("wb") as dest:
            index.download(wheel, dest)
        exports = torch_exports(path)
    kept.parent.mkdir(parents=True, exist_ok=True)
    part = kept.with_name(f".{kept.name}.{os.getpid()}.part")
    with gzip.open(part, "wt", encoding="utf-8") as out:
        out.writelines(f"{name}\n" for name in sorted(exports))
    os.replace(part, kept)
    return exports
