"""Checks before publish: a wheel is refused unless it holds what the build promised.

- SASS for every requested CUDA arch, in every extension module that has device code, and for
  no other (unless the build kept the package's own arch list, --keep-package-archs);
- the local version label of the torch variant it was built against (+cu130torch2.11), and a
  METADATA version equal to the file name's;
- a torch pin to the minor it was built against (Requires-Dist: torch==2.11.*).

Pure: a WheelInfo in, the problems out, each as the typed error that explains it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..errors import (
    ArchMissing,
    ArchUnasked,
    BadArgument,
    BadVariant,
    ImportGateFailed,
    InvalidWheel,
    LabelDisagreesWithPin,
    ReportUnreadable,
    TorchNotPinned,
    VersionLabelWrong,
    WheelbuildError,
)
from ..index import tree
from ..report.build_report import REPORT_NAME, BuildReport, read_report
from ..spec.build_spec import BuildSpec, PinMode
from ..variants import DEFAULT_ARCHS, TorchVariant, parse_variant
from ..wheel.abi import check_wheel_abi
from ..wheel.contents import WheelInfo, inspect_wheel
from ..wheel.stamp import stamp_wheel, torch_pin
from ..wheel.tags import one_reading_refusal
from ..wheel.torch_range import written_pin

__all__ = [
    "Expectation",
    "check_wheel",
    "check_wheels",
    "copies_check",
    "describe_torch_range",
    "describe_wheel",
    "expectation_for",
    "first_problem",
    "inspect_or_refuse",
    "stamp_and_check",
    "torch_range_line",
]

REPORT = REPORT_NAME


@dataclass(frozen=True)
class Expectation:
    archs: tuple[int, ...]  # SASS that must be present: (100, 120)
    variant: TorchVariant  # its label (+cu130torch2.11) and its torch pin (torch==2.11.*)
    # The build kept the package's own arch list: SASS beyond `archs` is allowed.
    package_archs: bool = False
    ptx: tuple[int, ...] = ()  # PTX that must be present too (--archs 120+PTX)
    # --pin proven: the torch specifier the wheel's proven range wrote (>=2.12,<2.15), which
    # must admit the minor it was built with; None: that minor alone (torch==2.11.*).
    pin: str | None = None


def _damaged_report(wheel: Path, why: str) -> InvalidWheel:
    return InvalidWheel(
        f"{wheel.name}: the build report beside it ({wheel.parent / REPORT}) is damaged: {why}",
        "rebuild (wheelbuild build writes a whole report), or publish a copy of the wheel from a "
        "directory without a report, with --torch and --archs (it is then checked statically)",
    )


def _report_beside(wheel: Path) -> BuildReport | None:
    """The build report of the run directory a wheel sits in, if it does; InvalidWheel when it
    is there but damaged (it decides the variant, the archs and the gate verdict)."""
    path = wheel.parent / REPORT
    if not path.is_file():
        return None
    try:
        report = read_report(path)
    except ReportUnreadable as unreadable:
        raise _damaged_report(wheel, unreadable.why) from None
    if report.torch is None or not report.torch.variant:
        raise _damaged_report(wheel, "it names no torch.variant")
    if not report.archs:
        raise _damaged_report(wheel, "its archs are not a list of SM numbers")
    if report.inputs_key and not tree.is_inputs_key(report.inputs_key):
        raise _damaged_report(wheel, "its inputs_key is not a sha256 hex digest")
    return report


def expectation_for(
    wheel: Path, variant: TorchVariant | None, archs: tuple[int, ...] | None, info: WheelInfo
) -> tuple[TorchVariant, Expectation]:
    """What `wheel` (read as *info*) must hold: from the options given, else from the build
    report beside it (a run directory of `wheelbuild build`), else from the wheel's own local
    version label (a wheel copied out of its run), and the default archs."""
    report = _report_beside(wheel)
    pin: str | None = None
    if variant is None and report is None:
        variant, pin = _labelled(info)
    elif variant is None:
        assert report is not None and report.torch is not None and report.torch.variant  # _report_beside
        variant = parse_variant(report.torch.variant)
    if archs is None:
        archs = report.archs if report else DEFAULT_ARCHS
    contract = report.contract if report else None
    kept = bool(contract and contract.keep_package_archs)
    ptx = contract.ptx if contract is not None and report is not None and archs == report.archs else ()
    if report is not None and report.torch is not None and report.torch.pin == PinMode.PROVEN:
        pin = written_pin(report.ranges_of(wheel.name))
    return variant, Expectation(archs=archs, variant=variant, package_archs=kept, ptx=ptx, pin=pin)


_LABEL = re.compile(r"(?P<tag>cu\d{3})torch(?P<minor>\d{1,4}\.\d{1,4})")


def _labelled(info: WheelInfo) -> tuple[TorchVariant, str | None]:
    """The variant a wheel's local version label names (+cu130torch2.14), and the torch range
    its METADATA pins when that is a proven range (--pin proven: torch>=2.12,<2.15) rather than
    the label's minor; refused when there is no such label, or when the pin does not admit the
    label's torch (LabelDisagreesWithPin: one of them was changed after the build)."""
    name, label = info.path.name, info.local_label or ""
    found = _LABEL.fullmatch(label)
    if found is None:
        raise BadArgument(
            f"cannot tell which torch variant {name} was built for: no --torch, no {REPORT} beside "
            f"it, and its version's local label ({'+' + label if label else 'none'}) names none",
            "pass --torch (e.g. --torch cu130), or publish from the build's run directory",
        )
    try:
        variant = parse_variant(f"{found['minor']}+{found['tag']}")
    except BadVariant as bad:
        raise BadVariant(
            f"{name}: its label +{label} names no torch variant wheelbuild builds", bad.remedy
        ) from None
    pins = [r for r in info.torch_requirements if ";" not in r]
    if not pins or any(_pins(r, variant.torch_minor) for r in pins):
        return variant, None  # no pin at all: check_wheel says TorchNotPinned
    built = Version(f"{variant.torch_minor}.0")
    for requirement in pins:
        specifier = _specifier(requirement)
        if specifier is None or not {s.operator for s in specifier} >= {">=", "<"}:
            continue  # a proven range is bounded both ways
        if specifier.contains(built, prereleases=True):
            return variant, str(specifier)
    raise LabelDisagreesWithPin(
        f"{name}: its label +{label} says torch {variant.torch_minor}, but its METADATA requires "
        f"{', '.join(pins)}",
        "rebuild it (wheelbuild writes the label and the pin together; never edit or rename a "
        "wheel), or pass --torch for the torch it was built against",
    )


def _specifier(requirement: str) -> SpecifierSet | None:
    try:
        return Requirement(requirement).specifier
    except ValueError:  # unparsable, or a number past Python's 4,300-digit limit
        return None


def _unreadable(path: Path, error: Exception) -> InvalidWheel:
    return InvalidWheel(
        f"{path.name} is not a readable wheel: {error}", "check the path; wheelbuild reads .whl files"
    )


def inspect_or_refuse(path: Path) -> WheelInfo:
    try:
        return inspect_wheel(path)
    except (OSError, ValueError) as error:
        refusal = one_reading_refusal(path.name, error) if isinstance(error, ValueError) else None
        raise refusal or _unreadable(path, error) from error


def inputs_key_beside(wheel: Path) -> str | None:
    """The inputs key the build report beside a wheel records (None: no report, or an old one)."""
    report = _report_beside(wheel)
    return (report.inputs_key or None) if report else None


def gate_verdict(wheel: Path, content: Path | None = None) -> tuple[list[WheelbuildError], str | None]:
    """What the build report beside a wheel says of its import gate: a refusal is a problem; a
    gate that never ran (no report, --no-gate) leaves the static checks (symbol versions against
    the platform tag) of *content* (a copy of the wheel, by default the wheel), and a note that
    says so."""
    report = _report_beside(wheel)
    entry = report.gate_of(wheel.name) if report else None
    if entry is not None and entry.passed:
        return [], None
    if entry is not None:
        why = entry.refusal or "see the report"
        return [
            ImportGateFailed(
                f"{wheel.name}: its build report says the import gate refused it ({why})",
                "fix the build and rebuild; a wheel that does not load is never published",
            )
        ], None
    where = "no build report beside it" if report is None else "its build ran with --no-gate"
    try:
        static = check_wheel_abi(content or wheel)
    except (OSError, ValueError) as error:  # over a cap, not ELF: inspect reads .so only, this .so.N too
        raise _unreadable(wheel, error) from error
    return list(static.errors()), (
        f"{wheel.name}: checked statically only ({where}, so it was never loaded): "
        + (
            "symbol versions fit " + static.limits.label
            if static.fits
            else "its shared objects need more than its tags allow"
        )
    )


def torch_range_line(wheel: Path) -> str | None:
    """The wheel's torch range in one line, from the report beside it ("cp311: imports with
    torch 2.12.1-2.15.0; fails on ..."), for the index page; None without one."""
    report = _report_beside(wheel)
    ranges = report.ranges_of(wheel.name) if report is not None else ()
    return " | ".join(f"{r.python}: {r.summary}" for r in ranges) or None


def describe_wheel(wheel: WheelInfo) -> dict[str, object]:
    """A wheel as `wheelbuild inspect --json` shows it: what it holds, its gate and its torch range."""
    return {
        **wheel.to_json(),
        "gate": describe_gate(wheel.path),
        "torch_range": describe_torch_range(wheel.path),
    }


def describe_torch_range(wheel: Path) -> list[dict[str, object]]:
    """The wheel's torch range as `wheelbuild inspect` shows it: per Python it was gated under,
    the line and every trial; empty when the report beside it has none."""
    report = _report_beside(wheel)
    ranges = report.ranges_of(wheel.name) if report is not None else ()
    return [{"summary": r.summary, "proven": list(r.proven), **r.to_json()} for r in ranges]


def describe_gate(wheel: Path) -> dict[str, object]:
    """The import gate as `wheelbuild inspect` shows it: passed, refused, or never run."""
    refused, note = gate_verdict(wheel)
    if refused:
        return {"status": "refused", "detail": refused[0].cause}
    if note:
        return {"status": "not run", "detail": note}
    report = _report_beside(wheel)
    entry = report.gate_of(wheel.name) if report else None
    assert entry is not None  # gate_verdict found it passed
    modules = ", ".join(i.module for i in entry.imports)
    smoke = entry.smoke or {}
    assert report is not None
    gated = report.gates_of(wheel.name)  # an abi3 wheel: one passed record per Python
    under = f"under each of {', '.join(g.python or '?' for g in gated)}, " if len(gated) > 1 else ""
    return {
        "status": "passed",
        "detail": f"{under}imported {modules} with torch {entry.torch}; GPU smoke test "
        f"{smoke.get('status', 'skipped')}: {smoke.get('reason', '')}",
        "record": entry.to_json(),
    }


def check_wheels(
    paths: Sequence[Path],
    variant: TorchVariant | None,
    archs: tuple[int, ...] | None,
    on_note: Callable[[str], None] = lambda _note: None,
    *,
    copies: Mapping[Path, Path] | None = None,
) -> dict[str, tuple[TorchVariant, tuple[Path, ...]]]:
    """Inspect and check every wheel, the import gate's verdict included; raise the first
    problem (the others in its details). Returns the wheels grouped by the variant they were
    built for (tag -> variant, paths): each variant is its own wheelhouse tree. *copies* maps a
    path to the copy whose bytes to judge (publish's, the file it will serve); the build report
    beside the path still says what the wheel must hold."""
    groups: dict[str, tuple[TorchVariant, list[Path]]] = {}
    problems: list[WheelbuildError] = []
    for path in paths:
        content = (copies or {}).get(path, path)
        wheel = inspect_or_refuse(content)
        wheel_variant, expected = expectation_for(path, variant, archs, wheel)
        groups.setdefault(wheel_variant.tag, (wheel_variant, []))[1].append(path)
        problems += check_wheel(wheel, expected)
        refused, note = gate_verdict(path, content)
        problems += refused
        if note:
            on_note(note)
    if problem := first_problem(problems):
        raise problem
    return {tag: (v, tuple(group)) for tag, (v, group) in groups.items()}


def copies_check(
    variant: TorchVariant | None, archs: tuple[int, ...] | None
) -> Callable[[Mapping[Path, Path]], None]:
    """The checks of :func:`check_wheels`, for publish to run again on the copies it made in the
    tree under its lock (wheel -> copy): what was checked is then what is served, even if a
    wheel was replaced after the first check. Its notes were said the first time."""

    def check(copies: Mapping[Path, Path]) -> None:
        check_wheels(tuple(copies), variant, archs, copies=copies)

    return check


def expectation(spec: BuildSpec) -> Expectation:
    return Expectation(
        archs=spec.archs, variant=spec.variant, package_archs=spec.keep_package_archs, ptx=spec.ptx
    )


def stamp_and_check(
    paths: tuple[Path, ...], spec: BuildSpec, date_epoch: int | None = None
) -> tuple[tuple[WheelInfo, ...], list[WheelbuildError]]:
    """Label and pin each built wheel (METADATA and RECORD rewritten together; with
    *date_epoch*, every entry written the same way whatever wrote it: see stamp_wheel), then
    judge it."""
    wheels = tuple(inspect_wheel(stamp_wheel(path, spec.variant, date_epoch=date_epoch)) for path in paths)
    problems = [problem for wheel in wheels for problem in check_wheel(wheel, expectation(spec))]
    return wheels, problems


def _pins(requirement: str, torch_minor: str, proven: str | None = None) -> bool:
    """Whether a torch requirement admits exactly the built minor (every 2.11.x, no other), or
    is the proven range's specifier *proven* and admits the built minor."""
    try:
        specifier: SpecifierSet = Requirement(requirement).specifier
        if proven is not None:
            built = Version(f"{torch_minor}.0")
            return specifier == SpecifierSet(proven) and specifier.contains(built, prereleases=True)
        return _admits_only(specifier, torch_minor)
    except ValueError:  # a number past Python's 4,300-digit limit, met when the specifier compares
        return False


def _admits_only(specifier: SpecifierSet, torch_minor: str) -> bool:
    major, minor = (int(p) for p in torch_minor.split("."))
    inside = [
        Version(f"{major}.{minor}.0"),
        Version(f"{major}.{minor}.9"),
        Version(f"{major}.{minor}.0+cu130"),
    ]
    outside = [
        Version(f"{major}.{minor - 1}.9") if minor else Version(f"{major - 1}.99"),
        Version(f"{major}.{minor + 1}.0"),
    ]
    return all(specifier.contains(v, prereleases=True) for v in inside) and not any(
        specifier.contains(v, prereleases=True) for v in outside
    )


def check_wheel(wheel: WheelInfo, expected: Expectation) -> list[WheelbuildError]:
    problems: list[WheelbuildError] = []
    name = wheel.path.name
    if wheel.metadata_version != wheel.version:
        problems.append(
            InvalidWheel(
                f"{name}: METADATA says version {wheel.metadata_version}, the file name {wheel.version}; "
                "pip refuses such a wheel",
                "rebuild; never rename a wheel file (wheelbuild sets the label inside METADATA and RECORD)",
            )
        )
    if wheel.local_label != expected.variant.label:
        problems.append(
            VersionLabelWrong(
                f"{name}: local version label is {wheel.local_label or 'absent'}, "
                f"but the wheel was built for {expected.variant.label}",
                f"build it for that variant (the label is set at build time: +{expected.variant.label}), "
                "or publish it under the variant it was built for",
            )
        )
    pins = [r for r in wheel.torch_requirements if ";" not in r]
    wanted = torch_pin(expected.variant.torch_minor) if expected.pin is None else f"torch{expected.pin}"
    if not any(_pins(r, expected.variant.torch_minor, expected.pin) for r in pins):
        problems.append(
            TorchNotPinned(
                f"{name}: METADATA requires {', '.join(wheel.torch_requirements) or 'no torch'}, not "
                f"{wanted}; on another torch it fails at import with undefined symbols",
                "build it with wheelbuild, which pins the torch the wheel was built against "
                "(or, with --pin proven, the range it loaded with)",
            )
        )
    return problems + _arch_problems(wheel, expected)


def _arch_problems(wheel: WheelInfo, expected: Expectation) -> list[WheelbuildError]:
    """Each extension module with device code holds SASS for every asked arch and no other."""
    problems: list[WheelbuildError] = []
    name = wheel.path.name
    with_device_code = [m for m in wheel.modules if m.archs.sass or m.archs.ptx]
    if not with_device_code:
        problems.append(
            ArchMissing(
                f"{name}: no extension module holds CUDA code (asked for sm_{', sm_'.join(map(str, expected.archs))})",
                "it built CPU-only: many packages (torch-scatter, pytorch3d, mmcv) add their CUDA extension "
                "only when torch.cuda.is_available() or FORCE_CUDA=1, and a build has no GPU; rebuild with "
                "--env FORCE_CUDA=1 (or the package's own switch)",
            )
        )
    for module in with_device_code:
        if no_ptx := sorted(set(expected.ptx) - module.archs.ptx):
            problems.append(
                ArchMissing(
                    f"{name}: {module.member} has no PTX for {', '.join(f'compute_{a}' for a in no_ptx)}",
                    "rebuild with --archs N+PTX for those archs (wheelbuild's nvcc then adds their PTX)",
                )
            )
        missing = sorted(set(expected.archs) - module.archs.sass)
        if missing:
            found = ", ".join(f"sm_{a}" for a in sorted(module.archs.sass)) or "none"
            problems.append(
                ArchMissing(
                    f"{name}: {module.member} has no SASS for {', '.join(f'sm_{a}' for a in missing)} "
                    f"(it has {found})",
                    "rebuild with those archs (--archs); PTX alone would JIT at first use, or fail",
                )
            )
        extra = sorted(module.archs.sass - set(expected.archs))
        if extra and not expected.package_archs:
            problems.append(
                ArchUnasked(
                    f"{name}: {module.member} holds SASS for {', '.join(f'sm_{a}' for a in extra)}, "
                    f"which was not asked for (asked: {', '.join(f'sm_{a}' for a in expected.archs)})",
                    "the package compiled an arch list of its own past wheelbuild's nvcc (its own compiler "
                    "call, an options file); rebuild with --keep-package-archs if its kernels need that list",
                )
            )
    return problems


def first_problem(problems: list[WheelbuildError]) -> WheelbuildError | None:
    """The error to raise: the first one, with the others listed in its details."""
    if not problems:
        return None
    first = problems[0]
    if len(problems) > 1:
        others = "\n".join(f"  also: {p.cause}" for p in problems[1:])
        first.details = f"{first.details}\n{others}".strip()
    return first
