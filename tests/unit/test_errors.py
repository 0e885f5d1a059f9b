"""wheelbuild.errors: every failure has its own exit code, and the codes never change meaning."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

from wheelbuild import errors
from wheelbuild.errors import WheelbuildError

DOCS = Path(__file__).resolve().parents[2] / "docs"

KNOWN_CODES = {
    "PlanOverBudget": 28,
    "UnknownPackage": 10,
    "BadVariant": 11,
    "BadMemory": 12,
    "BadArgument": 13,
    "CaBundleMissing": 14,
    "SourceUnavailable": 15,
    "ConfigKeyUnknown": 17,
    "ConfigValueInvalid": 18,
    "ReportUnreadable": 19,
    "DockerUnavailable": 20,
    "NvidiaRuntimeMissing": 21,
    "CompilerUnavailable": 22,
    "CudaRedistUnreachable": 23,
    "CudaRedistMismatch": 24,
    "TorchIndexUnreachable": 25,
    "DoctorFound": 26,
    "GcIncomplete": 27,
    "ImageBuildFailed": 30,
    "ImageInputsMissing": 31,
    "CompileFailed": 40,
    "MemoryLimitNotApplied": 41,
    "BuildFailed": 42,
    "OutOfMemory": 43,
    "ArchMissing": 44,
    "VersionLabelWrong": 45,
    "TorchNotPinned": 46,
    "AbiMismatch": 47,
    "ImportGateFailed": 48,
    "SmokeTestFailed": 49,
    "PublishLocked": 50,
    "WheelConflict": 51,
    "InvalidWheel": 52,
    "WheelArchiveAmbiguous": 65,
    "WheelTagsDisagree": 66,
    "NotPublished": 53,
    "IndexWriteFailed": 54,
    "BadHtpasswd": 55,
    "NoIndex": 56,
    "ServeFailed": 57,
    "UploadFailed": 58,
    "PublishTargetMissing": 16,
    "PublishedIndexUnreachable": 59,
    "NightIncomplete": 60,
    "StableAbiBroken": 61,
    "ArchUnasked": 62,
    "NotBuiltHere": 63,
    "LabelDisagreesWithPin": 64,
    "WheelsDiffer": 70,
    "StatementUnusable": 71,
    "SignatureInvalid": 72,
    "WheelAltered": 73,
    "StatementOfAnotherWheel": 74,
    "MaterialMismatch": 75,
    "SigningKeyUnusable": 76,
    "KeylessSigningFailed": 77,
    "OriginNotChecked": 78,
    "EnvironmentUnreadable": 80,
    "EnvironmentWithoutTorch": 81,
    "EnvironmentUnbuildable": 82,
    "InstallFailed": 83,
    "BadUrl": 32,
    "ConfigUnreadable": 33,
    "BadEnv": 34,
    "OutOfRange": 35,
    "BadPython": 36,
    "BadVersion": 37,
    "BadArchs": 38,
    "BadPackageArgument": 39,
    "Interrupted": 130,
}


def _all_subclasses(cls: type[WheelbuildError]) -> list[type[WheelbuildError]]:
    found = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_all_subclasses(sub))
    return found


def _error_classes() -> list[type[WheelbuildError]]:
    # Subclasses defined in wheelbuild.errors itself (tests elsewhere may define their own).
    return [c for c in _all_subclasses(WheelbuildError) if c.__module__ == errors.__name__]


def test_every_error_class_has_a_distinct_exit_code() -> None:
    codes = [c.exit_code for c in _error_classes()]
    assert len(codes) == len(set(codes)), sorted(codes)
    assert WheelbuildError.exit_code not in codes


def test_exit_codes_are_exactly_the_documented_set() -> None:
    assert {c.__name__: c.exit_code for c in _error_classes()} == KNOWN_CODES


def _reference_hook() -> ModuleType:
    """docs/reference_hook.py, the mkdocs hook that writes the docs' reference tables."""
    spec = importlib.util.spec_from_file_location("reference_hook", DOCS / "reference_hook.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_table_lists_every_exit_code_and_no_other() -> None:
    # The exit codes page shows the table the hook makes from the code when the site is built.
    page = (DOCS / "reference" / "exit-codes.md").read_text()
    assert "<!-- generated: exit-codes -->" in page.splitlines()
    table = _reference_hook().exit_codes_reference()
    rows = re.findall(r"^\| (\d+) \| (.*) \| (.*) \|$", table, re.MULTILINE)
    documented = {int(code) for code, _, _ in rows}
    assert documented == {c.exit_code for c in _error_classes()} | {2, 130}
    assert [code for code, _, meaning in rows if not meaning.strip()] == []  # each says what it means


def test_no_error_uses_click_usage_code_2_or_success_0() -> None:
    assert all(c.exit_code not in (0, 2) for c in _error_classes())


def test_error_keeps_cause_remedy_and_details_and_renders_both() -> None:
    error = errors.BadMemory("memory size '6x' is not understood", "write 6g", details="tail")
    assert error.cause == "memory size '6x' is not understood"
    assert error.remedy == "write 6g"
    assert error.details == "tail"
    assert str(error) == "memory size '6x' is not understood (remedy: write 6g)"
    assert error.args == ("memory size '6x' is not understood",)


def test_the_generated_table_lists_every_code_once_in_order_with_its_meaning() -> None:
    table = errors.exit_codes()
    assert [row.code for row in table] == sorted(KNOWN_CODES.values())
    assert {row.name: row.code for row in table} == KNOWN_CODES
    source = next(row for row in table if row.name == "SourceUnavailable")
    assert source.meaning.startswith("A source path or sdist is missing")
    assert all(row.meaning for row in table), [row.name for row in table if not row.meaning]
