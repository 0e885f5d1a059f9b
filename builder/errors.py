"""Typed errors: each failure has its own exit code, a one-line cause and a one-line remedy.

Errors are raised where they are understood and rendered once, by the CLI. Exit codes are part
of the interface (scripts and CI branch on them), so a code never changes meaning and is never
reused. The table of codes is generated from the classes here (`exit_codes()`: the docs'
reference prints it); besides these, 2 is a usage error (an unknown option, a missing argument, a
value of the wrong kind or not among an option's choices) and 130 an interrupt (Ctrl-C or
SIGTERM).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


class WheelbuildError(Exception):
    """Base class. `cause` says what happened and why; `remedy` says what to do."""

    exit_code: ClassVar[int] = 1

    def __init__(self, cause: str, remedy: str, details: str = "") -> None:
        super().__init__(cause)
        self.cause = cause
        self.remedy = remedy
        self.details = details  # optional multi-line context (log tail), printed before the cause

    def __str__(self) -> str:
        return f"{self.cause} (remedy: {self.remedy})"


class UnknownPackage(WheelbuildError):
    """PACKAGE is not a known recipe and no such path (a project folder or an sdist) exists."""

    exit_code = 10


class BadVariant(WheelbuildError):
    """The torch variant is not understood, or names a torch release that does not fit the build
    (another CUDA on its index, past a recipe's torch ceiling, no wheel for the Pythons named)."""

    exit_code = 11


class BadMemory(WheelbuildError):
    """A memory size (`--memory`, a config file's `memory`) is not understood: docker units, `64g`."""

    exit_code = 12


class BadArgument(WheelbuildError):
    """A bad argument that none of the more specific codes (32-39) covers: a matrix file's table, a
    --dist option, a publish or serve option, a file refused before reading."""

    exit_code = 13


class BadUrl(BadArgument):
    """A URL wheelbuild was given is not one a request can go to (no http:// or https://, no host:
    `--torch-index-url pypi.org/simple`), or an sdist URL lacks its #sha256= pin."""

    exit_code = 32


class ConfigUnreadable(BadArgument):
    """A TOML file wheelbuild reads (--config-file, wheelbuild.toml, pyproject.toml, the nightly's
    matrix file) is missing, unreadable, or not valid TOML."""

    exit_code = 33


class BadEnv(BadArgument):
    """An `--env` pair is not KEY=VALUE, or passes what looks like a credential by value."""

    exit_code = 34


class OutOfRange(BadArgument):
    """A number outside the range its option takes (`--cpus 0`, `--max-jobs 0`, `--nvcc-threads 0`)."""

    exit_code = 35


class BadPython(BadArgument):
    """A Python version (`--python`) is not understood, has an empty entry, or names a Python the
    build cannot make a wheel for (no torch wheel, outside the package's Requires-Python, not in the
    image)."""

    exit_code = 36


class BadVersion(BadArgument):
    """A package release (`--version`, PACKAGE==VERSION) is not a version, not one the index has an
    sdist of, or given twice."""

    exit_code = 37


class BadArchs(BadArgument):
    """A CUDA arch list (`--archs`) is not understood or has an empty entry."""

    exit_code = 38


class BadPackageArgument(BadArgument):
    """PACKAGE is missing (and the current folder holds no project), empty, given with --example, or
    a path that is neither a project folder nor an sdist."""

    exit_code = 39


class CaBundleMissing(WheelbuildError):
    """The CA bundle path (`--ca-bundle`, WHEELBUILD_CA_BUNDLE) does not exist."""

    exit_code = 14


class SourceUnavailable(WheelbuildError):
    """A source path or sdist is missing, unreadable, or its sha256 does not match the pin."""

    exit_code = 15


class ReportUnreadable(WheelbuildError):
    """A build report (build-report.json) that cannot be used: unreadable, over its size cap, not
    the JSON object wheelbuild writes, or of a newer schema than this wheelbuild reads."""

    exit_code = 19

    def __init__(self, cause: str, remedy: str, details: str = "", *, why: str = "") -> None:
        super().__init__(cause, remedy, details)
        self.why = why or cause  # the reason alone, for a caller that names the file its own way


class DockerUnavailable(WheelbuildError):
    """No Docker daemon answers (not installed, not started, or its socket not reachable)."""

    exit_code = 20


class NvidiaRuntimeMissing(WheelbuildError):
    """`--gpus all` was asked, but the Docker daemon has no NVIDIA runtime."""

    exit_code = 21


class CompilerUnavailable(WheelbuildError):
    """No CUDA compiler the image can get serves the torch variant and archs: its CUDA major is not
    torch's, or it does not compile an arch asked for."""

    exit_code = 22


class ImageBuildFailed(WheelbuildError):
    """The build image (or the sccache-dist fleet's) could not be built; the cause quotes the build's
    last message."""

    exit_code = 30


class ImageInputsMissing(WheelbuildError):
    """A file of images/ is not where this wheelbuild looks (an incomplete install or checkout)."""

    exit_code = 31


class CompileFailed(WheelbuildError):
    """A compile failed: the first compiler error (or what it means, e.g. torch's headers needing
    C++20) and the log's tail are shown. Never retried."""

    exit_code = 40


class MemoryLimitNotApplied(WheelbuildError):
    """The container runs without the memory limit it was promised (e.g. rootless Docker)."""

    exit_code = 41


class BuildFailed(WheelbuildError):
    """cibuildwheel failed for a reason other than a compiler error (install, repair, ...)."""

    exit_code = 42


class OutOfMemory(WheelbuildError):
    """A compiler was OOM-killed (by evidence, not by exit code). Retried at half the jobs until
    the smallest plan also fails; then this is the error the user sees."""

    exit_code = 43


class ArchMissing(WheelbuildError):
    """A CUDA arch the build asked for has no SASS in the wheel's extension modules."""

    exit_code = 44


class VersionLabelWrong(WheelbuildError):
    """The wheel's local version label does not name the torch variant it was built against."""

    exit_code = 45


class TorchNotPinned(WheelbuildError):
    """METADATA does not pin the torch minor the wheel was built against (Requires-Dist: torch==X.Y.*)."""

    exit_code = 46


class LabelDisagreesWithPin(WheelbuildError):
    """The wheel's local version label names a torch its METADATA's torch requirement does not
    admit (+cu130torch2.14 beside torch==2.11.*): one of the two was changed after the build.
    `publish` reads the label for a wheel it has neither `--torch` nor a build report for."""

    exit_code = 64


class Interrupted(WheelbuildError):
    """Interrupted by Ctrl-C or SIGTERM; every container of the run was removed."""

    exit_code = 130


class PublishLocked(WheelbuildError):
    """Another publish (or yank) held the wheelhouse's lock for longer than the timeout."""

    exit_code = 50


class WheelConflict(WheelbuildError):
    """A wheel of the same file name but different content is already published; never overwritten."""

    exit_code = 51


class InvalidWheel(WheelbuildError):
    """Not a usable wheel: bad file name, unreadable zip, or METADATA that disagrees with the name."""

    exit_code = 52


class WheelArchiveAmbiguous(WheelbuildError):
    """The wheel is not one well-formed zip: data before, between or after its entries, or entries
    its two directories disagree on, so that installers and the check could read different files."""

    exit_code = 65


class WheelTagsDisagree(WheelbuildError):
    """The wheel's tags disagree with its binaries (Python, platform, machine), so an installer
    would put it where it cannot load."""

    exit_code = 66


class NotPublished(WheelbuildError):
    """A yank or unyank names a wheel or release the wheelhouse does not have."""

    exit_code = 53


class IndexWriteFailed(WheelbuildError):
    """Writing the wheelhouse failed (disk full, permissions); every page is still whole."""

    exit_code = 54


class BadHtpasswd(WheelbuildError):
    """The htpasswd file is unreadable or holds a hash format the server does not verify."""

    exit_code = 55


class NoIndex(WheelbuildError):
    """`serve` was pointed at a directory without a generated index."""

    exit_code = 56


class ServeFailed(WheelbuildError):
    """The server could not listen on the address (in use, not permitted)."""

    exit_code = 57


class UploadFailed(WheelbuildError):
    """An upload to a PyPI-compatible index was refused or failed (auth, conflict, network)."""

    exit_code = 58


class CudaRedistUnreachable(WheelbuildError):
    """NVIDIA's CUDA redistributable archives (or the mirror named by WHEELBUILD_CUDA_REDIST_URL)
    could not be downloaded, so the CUDA 12 compiler layer cannot be made."""

    exit_code = 23


class CudaRedistMismatch(WheelbuildError):
    """A downloaded CUDA redistributable archive is not what its pin says (sha256, size, or a
    member that would land outside its folder); it is deleted, never used."""

    exit_code = 24


class AbiMismatch(WheelbuildError):
    """An extension module needs a newer glibc/libstdc++ symbol version than its wheel's platform tag allows."""

    exit_code = 47


class StableAbiBroken(WheelbuildError):
    """An abi3 wheel's extension module uses Python C API symbols outside the stable ABI its tag
    claims: it would load in the Python it was built for and fail in a later one."""

    exit_code = 61


class ArchUnasked(WheelbuildError):
    """An extension module holds SASS for archs that were not asked for: the package compiled an
    arch list of its own past wheelbuild-nvcc, so the wheel and its memory plan are not what the
    build said (`--keep-package-archs` allows it)."""

    exit_code = 62


class NotBuiltHere(WheelbuildError):
    """A shared object in the wheel was not linked by this build (a prebuilt wheel downloaded, a
    .so copied into place), or the package's build fetched a prebuilt binary instead of building."""

    exit_code = 63


class TorchIndexUnreachable(WheelbuildError):
    """The torch index could not be read to learn which Pythons the chosen torch has wheels for
    (network, credentials, an answer that is not an index page)."""

    exit_code = 25


class ImportGateFailed(WheelbuildError):
    """A built wheel did not install or import in a fresh container of the base image (an
    undefined symbol, a library only the build image has): it is kept for a look, never published."""

    exit_code = 48


class SmokeTestFailed(WheelbuildError):
    """A built wheel loads, but its recipe's GPU smoke test computed wrong results."""

    exit_code = 49


class PublishTargetMissing(WheelbuildError):
    """The nightly has nowhere durable to publish: no `[publish] to`, --to or NIGHTLY_PUBLISH_TO
    (it never falls back to a folder of the checkout), or a remote target without its index URL."""

    exit_code = 16


class PublishedIndexUnreachable(WheelbuildError):
    """The target's index could not be read over HTTP to learn which builds are published."""

    exit_code = 59


class NightIncomplete(WheelbuildError):
    """A nightly published what passed, but some cells failed or never reported (60-69: the nightly)."""

    exit_code = 60


class DoctorFound(WheelbuildError):
    """`wheelbuild doctor` found at least one check that would make a build fail (its `fail` lines
    say which and what to do)."""

    exit_code = 26


class ConfigKeyUnknown(WheelbuildError):
    """A config file ([tool.wheelbuild] in pyproject.toml or wheelbuild.toml) names a key wheelbuild
    does not have: a typo, most likely, so it is refused, never ignored (the nearest key is named)."""

    exit_code = 17


class ConfigValueInvalid(WheelbuildError):
    """A config file's value has the wrong type, is not understood, or looks like a credential
    (secrets reach wheelbuild by environment variable or mounted file, never from a config file)."""

    exit_code = 18


class PlanOverBudget(WheelbuildError):
    """`wheelbuild plan --strict`: the plan's predicted peak is over its memory limit (without
    --strict, a warning): a build would likely be OOM-killed and retried at half the jobs."""

    exit_code = 28


class GcIncomplete(WheelbuildError):
    """`wheelbuild gc` could not remove something it planned to (permissions, a Docker error);
    the rest was done, and nothing it keeps was touched."""

    exit_code = 27


class WheelsDiffer(WheelbuildError):
    """`wheelbuild diff`, `verify --rebuild`: two wheels that should be the same bytes are not (the
    cause names the first member and, for an ELF file, the first section where they differ)."""

    exit_code = 70


class StatementUnusable(WheelbuildError):
    """A wheel's provenance statement is missing, unreadable, over its cap, or not an in-toto
    Statement (in a DSSE envelope) of the kind wheelbuild writes."""

    exit_code = 71


class SignatureInvalid(WheelbuildError):
    """No signature on a wheel's statement verifies with the key given: signed by another key,
    changed after it was signed, or not signed at all."""

    exit_code = 72


class WheelAltered(WheelbuildError):
    """The statement names this wheel's file, with another sha256: the wheel's bytes are not
    the ones the build made (a changed byte)."""

    exit_code = 73


class StatementOfAnotherWheel(WheelbuildError):
    """The statement beside a wheel is another wheel's: its subject names another file."""

    exit_code = 74


class MaterialMismatch(WheelbuildError):
    """An input the statement names (the sdist, an images/ file, a pinned archive) is here with
    other bytes than the build used."""

    exit_code = 75


class SigningKeyUnusable(WheelbuildError):
    """A signing or verifying key cannot be used: unreadable, not an Ed25519 key, or protected
    by a passphrase that was not given (by name, in the environment) or is wrong."""

    exit_code = 76


class EnvironmentUnreadable(WheelbuildError):
    """`--like PATH` names no Python interpreter or venv, or its interpreter did not answer the probe."""

    exit_code = 80


class EnvironmentWithoutTorch(WheelbuildError):
    """`--like PATH`'s environment has no torch installed, so there is no torch to build for."""

    exit_code = 81


class EnvironmentUnbuildable(WheelbuildError):
    """`--like PATH`'s environment is one wheelbuild cannot build for: a CPU or ROCm torch, another
    platform than linux x86_64, another Python than CPython with the GIL."""

    exit_code = 82


class InstallFailed(WheelbuildError):
    """`build --install`: the built wheel could not be installed into the --like environment."""

    exit_code = 83


class KeylessSigningFailed(WheelbuildError):
    """`--sigstore` cannot sign: the sigstore package is missing, no OIDC identity is ambient, or
    Sigstore's servers refused or could not be reached. Nothing was published."""

    exit_code = 77


class OriginNotChecked(WheelbuildError):
    """`wheelbuild verify` without --key: the wheel's sha256 matches its statement, and nothing
    more. The statement travels beside the wheel, so whoever could replace the one could replace
    the other: who made them was not checked. Give --key (or --rebuild) for exit 0."""

    exit_code = 78


@dataclass(frozen=True)
class ExitCode:
    code: int
    name: str
    meaning: str  # the class's docstring, on one line


def exit_codes() -> tuple[ExitCode, ...]:
    """Every WheelbuildError subclass's exit code, in code order: the generated table."""
    found: list[type[WheelbuildError]] = []
    pending = list(WheelbuildError.__subclasses__())
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    rows = {
        cls.exit_code: ExitCode(cls.exit_code, cls.__name__, " ".join((cls.__doc__ or "").split()))
        for cls in found
    }
    return tuple(rows[code] for code in sorted(rows))
