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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ..errors import TorchIndexUnreachable, WheelbuildError
from ..progress.console import Console
from ..spec.build_spec import BuildSpec
from ..spec.pythons import has_wheel
from ..spec.sources import cache_dir
from ..spec.torch_releases import TorchIndex, TorchRelease
from ..wheel.abi import AbiFindings
from ..wheel.abi3 import gate_pythons
from ..wheel.contents import WheelInfo, inspect_wheel
from ..wheel.gate import failure as gate_failure
from ..wheel.stamp import stamp_wheel
from ..wheel.torch_range import TorchRange, TorchTrial, neighbours, written_pin
from ..wheel.torch_symbols import first_missing, needed_from_torch, torch_exports
from .check import check_wheel, expectation
from .import_gate import GateRun

__all__ = ["other_requirements", "pinned_to_ranges", "torch_ranges"]

MAX_EXPORTS = 256 << 20  # a kept list is ~3 MB gzipped; a bigger file is not one
# Trials run side by side: each mostly waits on its container unpacking and importing torch
# (one core), and two gate containers (GATE_MEMORY each) fit a machine that built the wheel.
TRIALS_AT_ONCE = 2


def torch_ranges(
    gate: GateRun,
    index: TorchIndex,
    wheels: tuple[WheelInfo, ...],
    abi_findings: Mapping[str, AbiFindings],
    pythons: tuple[str, ...],
) -> tuple[TorchRange, ...]:
    """Each wheel's torch range under each Python it was gated under. The trials of all of them
    run TRIALS_AT_ONCE at a time, each gate logging to a file of its own; what they print, and
    their logs added to gate.log, come in the order of a one-by-one run."""
    console = gate.console
    console.step("torch range: each wheel against the torch releases around its own")
    ranges = [
        _range_of(gate, index, wheel, abi_findings[wheel.path.name], python)
        for wheel, python in ((w, p) for w in wheels for p in gate_pythons(w.path.name, pythons))
    ]
    pending = [trial for _, trials in ranges for trial in trials]
    logs = [gate.run_dir / f".gate-range-{number}.log" for number in range(len(pending))]
    pool = ThreadPoolExecutor(max_workers=TRIALS_AT_ONCE, thread_name_prefix="wheelbuild-range")
    try:
        done = iter(list(pool.map(lambda trial, log: trial.run(gate, index, log), pending, logs)))
        with (gate.run_dir / "gate.log").open("a", encoding="utf-8") as whole:
            for log in logs:
                if log.exists():  # a trial refused by its symbols ran no gate
                    whole.write(log.read_text(encoding="utf-8", errors="replace"))
    finally:
        # Stopped (Ctrl-C, an error): no trial starts after this; the build's containers, those
        # running included, are removed on its way out as ever.
        pool.shutdown(wait=False, cancel_futures=True)
        for log in logs:
            log.unlink(missing_ok=True)
    found = []
    for started, trials in ranges:
        tried = tuple(next(done) for _ in trials)
        whole_range = replace(started, trials=started.trials + tried)
        for trial in tried:
            console.info(f"  torch {trial.torch}: {_said(trial)}")
        console.info(f"{whole_range.wheel} under {whole_range.python}: {whole_range.summary}")
        found.append(whole_range)
    return tuple(found)


def pinned_to_ranges(
    wheels: tuple[WheelInfo, ...],
    ranges: tuple[TorchRange, ...],
    spec: BuildSpec,
    console: Console,
    date_epoch: int | None = None,
) -> tuple[tuple[WheelInfo, ...], list[WheelbuildError]]:
    """--pin proven: each wheel made to require the torch releases its range proved (written_pin),
    then checked again; the wheels as they now are, and any problem the check finds."""
    repinned, problems = [], []
    for wheel in wheels:
        pin = written_pin([r for r in ranges if r.wheel == wheel.path.name])
        again = inspect_wheel(stamp_wheel(wheel.path, spec.variant, pin, date_epoch))
        console.info(f"{wheel.path.name}: requires torch{pin or ''} (--pin proven)")
        problems += check_wheel(again, replace(expectation(spec), pin=pin))
        repinned.append(again)
    return tuple(repinned), problems


@dataclass(frozen=True)
class _Pending:
    """One trial to run: the wheel against one more torch release."""

    release: TorchRelease
    wheel: WheelInfo
    abi: AbiFindings
    python: str
    needed: Mapping[str, tuple[str, ...]]
    others: tuple[str, ...]

    def run(self, gate: GateRun, index: TorchIndex, log: Path) -> TorchTrial:
        """The trial, its gate's log (if one runs) written to *log*."""
        version = Version(self.release.version).public
        try:
            missing = first_missing(self.needed, _exports(index, self.release, self.python, gate.console))
        except (TorchIndexUnreachable, ValueError) as failed:
            return TorchTrial(version, detail=f"its symbols could not be read: {_cause(failed)}")
        if missing is not None:
            # A strong undefined symbol fails the import for certain (extensions load with RTLD_NOW).
            return TorchTrial(
                version, static=str(missing), detail="not installed: a symbol it needs is missing"
            )
        torch = replace(gate.spec.variant, torch_version=version)
        gate.console.doing(f"gating {self.wheel.path.name} under torch {version}", self.python)
        result = gate.run(self.wheel, self.abi, self.python, torch, self.others, log_path=log)
        refused = gate_failure(result)
        return TorchTrial(version, imported=result.passed, detail=refused.cause if refused else "")


def _range_of(
    gate: GateRun, index: TorchIndex, wheel: WheelInfo, abi: AbiFindings, python: str
) -> tuple[TorchRange, tuple[_Pending, ...]]:
    """The wheel's range as far as it is known before any trial (its own torch), and the trials
    still to run."""
    spec, console = gate.spec, gate.console
    built = spec.variant.torch_version
    releases: dict[str, TorchRelease] = {}
    for release in index.releases:  # newest first: a public version's first release is its own
        if has_wheel(release.pythons, python):
            releases.setdefault(Version(release.version).public, release)
    own = TorchRange(wheel.path.name, python, built, (TorchTrial(built, imported=True),))
    if built not in releases:
        return own, ()
    try:
        tried = neighbours(
            tuple(releases),
            built,
            lambda version: index.cuda_of(releases[version], python=python),
            spec.torch_range_older,
        )
        needed = needed_from_torch(abi, _exports(index, releases[built], python, console))
    except (TorchIndexUnreachable, ValueError) as failed:
        console.warn(f"the torch range of {wheel.path.name} was not tried: {_cause(failed)}")
        return own, ()
    console.info(
        f"{wheel.path.name} under {python}: built with torch {built}; trying {', '.join(tried) or 'none'}"
    )
    others = other_requirements(wheel.requires_dist)
    return own, tuple(_Pending(releases[version], wheel, abi, python, needed, others) for version in tried)


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


def _exports(index: TorchIndex, release: TorchRelease, python: str, console: Console) -> frozenset[str]:
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
    console.info(f"reading the symbols torch {release.version} exports ({wheel.filename}, downloaded once)")
    console.doing(f"downloading {wheel.filename} to read its symbols")
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
