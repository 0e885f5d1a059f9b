"""The import gate, as values: what to ask of a wheel (its extension modules, its top-level
packages, the undefined symbols of each .so that nothing in the wheel defines) and what the
answer means. A wheel that installs and then dies at import with `undefined symbol: ...` is
worse than no wheel, so none is called done before it has loaded in a fresh container of the
base image (engine.run_gate) with only what it declares installed.

Pure: the wheel's member names and the static ABI report in, the gate's spec out; the
container's JSON in, a GateResult and the typed error that explains a failure out.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import ImportGateFailed, SmokeTestFailed
from .abi import AbiFindings, demangle

# `flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so`, `_C.abi3.so`: an extension module.
_EXTENSION = re.compile(r"^([A-Za-z_]\w*)\.(?:cpython-[^./]+|abi3)\.so$")
_UNDEFINED = re.compile(r"undefined symbol: (\S+?)(?:,|$|\s)")
MAX_MEMBERS = 100_000  # a wheel's listing is read whole: cap it like any hostile archive


@dataclass(frozen=True)
class GateChecks:
    """What the gate container is asked to do for one wheel."""

    python: str  # cp311
    modules: tuple[str, ...]  # extension modules, dotted: wbdemo._C, flash_attn_2_cuda
    packages: tuple[str, ...]  # top-level packages: wbdemo, flash_attn
    undefined: dict[str, tuple[str, ...]]  # .so member -> strong undefined symbols the wheel lacks
    archs: tuple[int, ...]
    smoke: str | None  # the recipe's smoke test script name (images/smoke/), if any

    def to_json(self, torch_requirement: str) -> dict[str, object]:
        """The container's input; engine.run_gate adds the paths it mounts."""
        return {
            "python": self.python,
            "torch_requirement": torch_requirement,
            "modules": list(self.modules),
            "packages": list(self.packages),
            "undefined": {member: list(names) for member, names in self.undefined.items()},
            "archs": list(self.archs),
            "smoke": self.smoke,
        }


def _python_of(wheel: Path) -> str:
    # cp311-cp311-manylinux_2_34_x86_64.whl: the interpreter tag, the gate's Python.
    return wheel.name.removesuffix(".whl").split("-")[-3].split(".")[0]


def gate_checks(
    wheel: Path,
    abi: AbiFindings,
    archs: tuple[int, ...],
    smoke: str | None,
    packages: tuple[str, ...] | None = None,
) -> GateChecks:
    """The gate for one wheel: every extension module, the top-level packages (or the recipe's
    own list), and per .so the symbols the container must find in torch, Python or the system."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()[:MAX_MEMBERS]
    modules, found_packages = [], []
    for name in names:
        path = PurePosixPath(name)
        if ".dist-info" in path.parts[0] or ".data" in path.parts[0] or path.parts[0].endswith(".libs"):
            continue
        if match := _EXTENSION.match(path.name):
            modules.append(".".join([*path.parts[:-1], match[1]]))
        elif len(path.parts) == 2 and path.name == "__init__.py":
            found_packages.append(path.parts[0])
    undefined = {
        module.member: tuple(sorted({s.name for s in module.unresolved if not s.weak}))
        for module in abi.modules
        if _EXTENSION.match(PurePosixPath(module.member).name)
    }
    return GateChecks(
        python=_python_of(wheel),
        modules=tuple(sorted(modules)),
        packages=packages if packages is not None else tuple(sorted(found_packages)),
        undefined=undefined,
        archs=archs,
        smoke=smoke,
    )


@dataclass(frozen=True)
class ImportCheck:
    module: str
    ok: bool
    error: str  # the ImportError as Python said it
    undefined_symbol: str | None = None  # the first undefined symbol the loader named
    demangled: str | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "module": self.module,
            "ok": self.ok,
            "error": self.error,
            "undefined_symbol": self.undefined_symbol,
            "demangled": self.demangled,
        }


@dataclass(frozen=True)
class GateResult:
    wheel: str
    python: str
    install_error: str | None
    torch: str | None  # 2.11.0+cu130 (CUDA 13.0), as imported
    imports: tuple[ImportCheck, ...]
    unresolved: dict[str, tuple[str, ...]]  # .so -> symbols nothing loaded provides (mangled)
    load_errors: dict[str, str]  # .so -> why it would not even load lazily
    smoke: Mapping[str, object] | None  # {"status": passed|failed|skipped, "reason": ...}
    abi_problems: tuple[str, ...]  # static: symbol versions over the platform tag's limits

    @property
    def passed(self) -> bool:
        smoke_ok = self.smoke is None or self.smoke.get("status") != "failed"
        return (
            self.install_error is None
            and all(i.ok for i in self.imports)
            and bool(self.imports)
            and not any(self.unresolved.values())
            and not self.load_errors
            and smoke_ok
        )

    @property
    def summary(self) -> str:
        """One line for a person: what loaded, and the smoke test."""
        if not self.passed:
            problem = failure(self)
            return f"REFUSED: {problem.cause if problem else 'failed'}"
        smoke = self.smoke or {"status": "skipped", "reason": "the recipe names no smoke test"}
        modules = ", ".join(i.module for i in self.imports)
        return f"passed (imported {modules} with torch {self.torch}); GPU smoke test {smoke['status']}: {smoke.get('reason', '')}"

    def to_json(self) -> dict[str, object]:
        return {
            "wheel": self.wheel,
            "python": self.python,
            "passed": self.passed,
            "install_error": self.install_error,
            "torch": self.torch,
            "imports": [i.to_json() for i in self.imports],
            "unresolved": {
                member: [{"symbol": s, "demangled": demangle(s)} for s in symbols]
                for member, symbols in self.unresolved.items()
                if symbols
            },
            "load_errors": self.load_errors,
            "smoke": self.smoke or {"status": "skipped", "reason": "the recipe names no smoke test"},
            "abi_problems": list(self.abi_problems),
        }


def summary_of(results: Sequence[GateResult]) -> str:
    """One line for one wheel gated under one or several Pythons (an abi3 wheel is loaded under
    each Python of its build): the first refusal, else what loaded and under which Pythons."""
    if len(results) == 1:
        return results[0].summary
    refused = next((r for r in results if not r.passed), None)
    if refused is not None:
        return f"under {refused.python}: {refused.summary}"
    return f"under each of {', '.join(r.python for r in results)}: {results[0].summary}"


def _import_check(entry: Mapping[str, object]) -> ImportCheck:
    error = str(entry.get("error", ""))
    match = _UNDEFINED.search(error)
    symbol = match[1] if match else None
    return ImportCheck(
        module=str(entry["module"]),
        ok=bool(entry["ok"]),
        error=error,
        undefined_symbol=symbol,
        demangled=demangle(symbol) if symbol else None,
    )


def _table(value: object) -> Mapping[str, object]:
    """A JSON object of the container's answer; anything else (it is not trusted) reads as empty."""
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def read_result(wheel: str, output: Mapping[str, object], abi: AbiFindings) -> GateResult:
    """The gate container's JSON answer as a GateResult."""
    torch = _table(output.get("torch"))
    found = {member: _table(entry) for member, entry in _table(output.get("unresolved")).items()}
    install_error, smoke = output.get("install_error"), output.get("smoke")
    return GateResult(
        wheel=wheel,
        python=str(output.get("python", "")),
        install_error=None if install_error is None else str(install_error),
        torch=f"{torch['version']} (CUDA {torch['cuda']})" if torch else None,
        imports=tuple(_import_check(_table(entry)) for entry in _list(output.get("imports"))),
        unresolved={member: tuple(map(str, _list(entry.get("symbols")))) for member, entry in found.items()},
        load_errors={
            member: str(entry["load_error"]) for member, entry in found.items() if entry.get("load_error")
        },
        smoke=_table(smoke) if smoke is not None else None,
        abi_problems=abi.problems,
    )


def failure(result: GateResult) -> ImportGateFailed | SmokeTestFailed | None:
    """The typed error that explains why the gate refused the wheel, or None."""
    if result.passed:
        return None
    if result.install_error is not None:
        return ImportGateFailed(
            f"{result.wheel} could not be installed for the import gate: {result.install_error.splitlines()[-1]}",
            "read the gate's log in the run directory; check the torch index and the wheel's requirements",
            details=result.install_error,
        )
    broken = next((i for i in result.imports if not i.ok), None)
    if broken is not None:
        if broken.undefined_symbol:
            what = f"undefined symbol {broken.demangled} ({broken.undefined_symbol})"
            if broken.demangled == broken.undefined_symbol:
                what = f"undefined symbol {broken.undefined_symbol}"
        else:
            what = broken.error.splitlines()[-1] if broken.error else "import failed"
        return ImportGateFailed(
            f"{result.wheel} does not load: import {broken.module} fails with {what}",
            "the extension calls something no library in the wheel, torch, Python or the system "
            "defines: add the missing source or library to the build, or build against the torch "
            "the wheel pins; the wheel is not published",
            details=broken.error,
        )
    for member, symbols in result.unresolved.items():
        if symbols:
            names = ", ".join(demangle(s) for s in symbols[:5])
            return ImportGateFailed(
                f"{result.wheel}: {member} has symbols nothing provides: {names}"
                + (f" and {len(symbols) - 5} more" if len(symbols) > 5 else ""),
                "they fail when first called: add what defines them to the build",
            )
    for member, error in result.load_errors.items():
        return ImportGateFailed(f"{result.wheel}: {member} does not load: {error}", "see the gate's log")
    if result.smoke and result.smoke.get("status") == "failed":
        return SmokeTestFailed(
            f"{result.wheel} loads, but its GPU smoke test failed: {result.smoke.get('reason', '')}",
            "the kernels compute wrong results on this GPU: check the archs and the compiler; "
            "the wheel is not published",
        )
    return ImportGateFailed(f"{result.wheel}: the gate imported nothing", "see the gate's log")
