"""`wheelbuild verify`: a wheel checked against its provenance statement, with no network.

In order, each failure with its own exit code: the statement is there and is one wheelbuild
writes (71); a signature on it is the key's (72); its subject is this wheel: the same file name
(74 when it names another wheel) with the same sha256 (73 when a byte changed); the materials
that can be seen here are the ones it names (75): this checkout's images/ files, the pinned
wheels and CUDA archives they list, the source (`--source`, a local project the statement names,
or the sdist in the download cache).

`--rebuild` then builds the statement's parameters again (`wheelbuild build`'s own, the compiler
cache off so every unit compiles) and compares the sha256: the strongest check there is. When the
two differ, wheel/diff.py names the first member and ELF section, and the two statements' materials
that differ are named.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..bounded import FileRefused, regular_file_sha256
from ..engine.ports import Engine
from ..errors import (
    BadArgument,
    InvalidWheel,
    MaterialMismatch,
    SignatureInvalid,
    StatementUnusable,
    WheelsDiffer,
)
from ..image.cuda_redist import load_layer, pins_path
from ..image.inputs import IMAGES_DIR, ImageInputs
from ..image.options import ImageOptions
from ..index.tree import hash_file
from ..progress.console import Console
from ..provenance.signing import VerifyingKey, signed_by
from ..provenance.statement import HIDDEN, Material, Statement, material_differences
from ..recipes import resolve_recipe
from ..spec.build_spec import BuildSpec, PinMode, Resources, parse_python
from ..spec.sources import cache_dir
from ..variants import parse_variant
from ..wheel.diff import first_difference
from .build import run_build
from .results import builder_versions, source_digest
from .statements import TREE_DIGEST, read_beside, subject_error

__all__ = ["Builder", "Verdict", "builder", "rebuild", "rebuild_spec", "verify_wheel"]

TORCH_INDEX_ENV = "WHEELBUILD_TORCH_INDEX_URL"  # a credentialed index, by name (the statement hides it)
# The image's own inputs: the base and a host's CA bundle are the build machine's, not this checkout's.
_NOT_HERE = ("image", "image/base", "image/ca-bundle")


@dataclass(frozen=True)
class Verdict:
    wheel: Path
    sha256: str
    statement: Path
    signed_by: str | None  # the key id whose signature verified; None: no key was given
    matched: tuple[str, ...]  # the materials seen here, each the same
    unseen: int  # the materials this machine has no copy of (torch's files, the base image)
    statement_of: Statement
    notes: tuple[str, ...] = ()


def _no_statement(wheel: Path) -> StatementUnusable:
    """A wheel with no statement beside it. In a published tree (its files/ beside simple/) the
    index has none to give: it was published without one, and no download will find it."""
    tree = wheel.parent.parent
    if wheel.parent.name == "files" and (tree / "simple").is_dir():
        return StatementUnusable(
            f"{wheel.name} has no provenance statement: the index {tree} has none for it "
            "(it was published without one)",
            "publish it again from the run folder `wheelbuild build` wrote, where its statement is, "
            "or name a statement you have with --statement",
        )
    return StatementUnusable(
        f"{wheel.name} has no provenance statement beside it ({wheel.name}.intoto.jsonl or .intoto.json)",
        f"download files/{wheel.name}.intoto.jsonl from beside the wheel on its index if its project "
        "page links one ('provenance'; a wheel published without one has none), or name it with --statement",
    )


def verify_wheel(
    wheel: Path,
    *,
    statement: Path | None = None,
    keys: Sequence[VerifyingKey] = (),
    source: Path | None = None,
    materials: bool = True,
) -> Verdict:
    """Check *wheel* against its statement (see the module docstring); raises the first failure."""
    try:
        sha256 = hash_file(wheel)
    except (FileRefused, OSError) as error:
        raise InvalidWheel(
            f"{wheel} cannot be read as a wheel: {getattr(error, 'strerror', None) or error}",
            "name the wheel file",
        ) from None
    found = read_beside(wheel, statement)
    if found is None:
        raise _no_statement(wheel)
    parsed, envelope, path = found
    key = None
    if keys:
        key = signed_by(envelope, keys)
        if key is None:
            said = ", ".join(s.keyid or "no key id" for s in envelope.signatures) or "none: it is not signed"
            raise SignatureInvalid(
                f"no signature on {path.name} verifies with {', '.join(k.keyid for k in keys)} (signatures: {said})",
                "check with the publisher's public key; a statement changed after signing verifies with none",
            )
    if (wrong := subject_error(parsed, wheel.name, sha256)) is not None:
        raise wrong
    matched: tuple[str, ...] = ()
    if materials:
        here = local_materials(parsed, source)
        differs, same = material_differences(parsed.materials, here)
        if differs:
            raise MaterialMismatch(
                f"{wheel.name} was built from other inputs than the ones here: {'; '.join(differs)}",
                f"check out the wheelbuild ({_builder(parsed)}) and source the statement names, "
                "or pass --no-materials to check only the signature and the subject",
            )
        matched = tuple(same)
    notes = []
    if parsed.builder_version.get("wheelbuild-code") != builder_versions()["wheelbuild-code"]:
        notes.append(f"built by another wheelbuild ({_builder(parsed)}): a rebuild here may differ")
    return Verdict(
        wheel=wheel,
        sha256=sha256,
        statement=path,
        signed_by=key.keyid if key else None,
        matched=matched,
        unseen=len(parsed.materials) - len(matched),
        statement_of=parsed,
        notes=tuple(notes),
    )


def _builder(found: Statement) -> str:
    code = found.builder_version.get("wheelbuild-code", "?")
    return f"wheelbuild {found.builder_version.get('wheelbuild', '?')}, code {code[:12]}"


def _sha256(path: Path) -> str:
    """A source file's sha256: a regular file only (a statement may name /dev/zero or a FIFO)."""
    try:
        return regular_file_sha256(path)
    except FileRefused:
        raise StatementUnusable(
            f"the statement's source {path} is not a regular file (a FIFO, a device, or a link to one)",
            "give the source to compare with --source",
        ) from None


def local_materials(found: Statement, source: Path | None) -> dict[str, dict[str, str]]:
    """The digests this machine has for the statement's materials, by name: this checkout's
    images/ files and the pins they hold, and the source where a copy is here."""
    uses_layer = any(m.name.startswith("cuda-redist:") for m in found.materials)
    layer = load_layer(pins_path(IMAGES_DIR, os.environ)) if uses_layer else None
    inputs = ImageInputs.load(base_image="", ca_bundle=None, cuda12_layer=layer)
    here = {m.name: dict(m.digest) for m in inputs.materials() if m.name not in _NOT_HERE}
    claimed = next((m for m in found.materials if m.name == "source"), None)
    if claimed is not None and (copy := _source_here(claimed, source)) is not None:
        here["source"] = {TREE_DIGEST: source_digest(copy)} if copy.is_dir() else {"sha256": _sha256(copy)}
    return here


def _source_here(claimed: Material, given: Path | None) -> Path | None:
    """The source to compare: --source, else the local path the statement names if it is here,
    else the sdist in the download cache under the sha256 it names."""
    if given is not None:
        return given
    if claimed.uri and claimed.uri.startswith("file://"):
        path = Path(claimed.uri.removeprefix("file://"))
        return path if path.exists() else None
    sha256 = claimed.digest.get("sha256", "")
    # Only a sha256 becomes a path: a hostile statement's '../../..' would walk out of the cache.
    cached = (
        sorted((cache_dir() / "sdists" / sha256).glob("*")) if re.fullmatch(r"[0-9a-f]{64}", sha256) else []
    )
    return cached[0] if cached else None


# ---------------------------------------------------------------------------------------------
# --rebuild


def rebuild_spec(
    found: Statement, output_dir: Path, source: Path | None, environ: Mapping[str, str]
) -> BuildSpec:
    """`wheelbuild build` with the statement's own arguments: the same inputs key, so the same
    bytes are due. Every unit compiles (no compiler cache); MAX_JOBS is this machine's to plan."""
    given = found.external
    env = given.get("env") or {}
    if not isinstance(env, dict) or any(v == HIDDEN for v in env.values()):
        raise BadArgument(
            "the statement hides a value of the build's env (a credential), so it cannot be rebuilt as it was",
            "rebuild it with `wheelbuild build` and the values you hold",
        )
    package = str(source) if source is not None else str(given.get("package"))
    version, arch_env = given.get("version"), given.get("archEnv")
    recipe = resolve_recipe(
        package,
        version=version if isinstance(version, str) else None,
        arch_env=arch_env if isinstance(arch_env, str) else None,
    ).with_env({str(k): str(v) for k, v in env.items()})
    index = str(given.get("torchIndexUrl", ""))
    if HIDDEN in index:
        index = environ.get(TORCH_INDEX_ENV, "")
        if not index:
            raise BadArgument(
                "the statement's torch index had credentials, which it does not hold",
                f"export {TORCH_INDEX_ENV} with the credentialed index URL (read by name)",
            )
    try:
        pin = PinMode(str(given.get("pin", PinMode.BUILT.value)))
    except ValueError:
        raise StatementUnusable(
            f"the statement's pin {given.get('pin')!r} is not one wheelbuild knows",
            "rebuild from its own statement",
        ) from None
    return BuildSpec(
        recipe=recipe,
        variant=parse_variant(str(given.get("torch", "")), index or None),
        archs=_archs(given.get("archs")),
        ptx=_archs(given.get("ptx")),
        pythons=tuple(parse_python(str(p)) for p in _list(given.get("pythons"))),
        output_dir=output_dir.resolve(),
        rebuild=True,
        compiler_cache=False,
        keep_package_archs=bool(given.get("keepPackageArchs")),
        build_network=bool(given.get("buildNetwork")),
        keep_package_std=bool(given.get("keepPackageStd")),
        # The gate changes no byte of a wheel; --pin proven writes the range it found into METADATA.
        gate=pin is PinMode.PROVEN,
        torch_range=pin is PinMode.PROVEN,
        pin=pin,
        resources=Resources(),  # MAX_JOBS and NVCC_THREADS change no byte: this machine's plan
    )


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _archs(value: object) -> tuple[int, ...]:
    found = _list(value)
    if not all(isinstance(a, int) and 0 < a < 1000 for a in found):
        raise StatementUnusable(
            f"the statement's archs {found!r} are not SM numbers", "rebuild from its own statement"
        )
    return tuple(int(str(a)) for a in found)


# A build of a spec with these image options: the wheels it made (builder(): `wheelbuild build`
# itself on an engine; rebuild takes any).
Builder = Callable[[BuildSpec, ImageOptions], Sequence[Path]]


def builder(console: Console, engine: Engine) -> Builder:
    """`wheelbuild build` itself (build.run_build), on this engine, saying its steps."""

    def build(spec: BuildSpec, options: ImageOptions) -> list[Path]:
        return [wheel.path for wheel in run_build(spec, options, console, engine).wheels]

    return build


def rebuild(
    verdict: Verdict, options: ImageOptions, output_dir: Path, source: Path | None, build: Builder
) -> Path:
    """Build the statement's inputs again and compare: the rebuilt wheel's path when it is the
    same bytes; WheelsDiffer (70) naming where it first differs when not."""
    found = verdict.statement_of
    base = next((m.uri for m in found.materials if m.name == "image/base" and m.uri), None)
    if options.base_image is None and base:
        options = replace(options, base_image=base)
    wheels = build(rebuild_spec(found, output_dir, source, os.environ), options)
    rebuilt = next((w for w in wheels if w.name == verdict.wheel.name), None)
    if rebuilt is None:
        raise WheelsDiffer(
            f"the rebuild made {', '.join(w.name for w in wheels) or 'no wheel'}, not {verdict.wheel.name}",
            f"compare the statement {verdict.statement} with the rebuild's beside its wheels",
        )
    if hash_file(rebuilt) == verdict.sha256:
        return rebuilt
    raise WheelsDiffer(
        f"the rebuild of {verdict.wheel.name} differs: {first_difference(verdict.wheel, rebuilt)}"
        + _inputs_apart(found, rebuilt),
        f"diffoscope {verdict.wheel} {rebuilt} shows every difference",
    )


def _inputs_apart(found: Statement, wheel: Path) -> str:
    """The materials the two builds did not share (a torch file, an images/ file), if any."""
    rebuilt = read_beside(wheel)
    if rebuilt is None:
        return ""
    theirs = {m.name: dict(m.digest) for m in rebuilt[0].materials}
    differs, _same = material_differences(found.materials, theirs)
    return f"; inputs that differ: {'; '.join(differs)}" if differs else "; every input the same"
