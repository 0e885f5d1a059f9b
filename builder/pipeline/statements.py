"""The provenance statement a build writes beside each of its wheels (``<wheel>.intoto.json``):
the facts gathered from the build's spec, its image inputs, its source and what its last attempt
installed from the machine's wheel cache, made into an in-toto Statement by provenance/statement.py.
Publish carries it into the tree (``files/<wheel>.intoto.jsonl``, a DSSE envelope), signed with
``--sign-key``, and refuses one whose subject is not the wheel it serves.

Its externalParameters are `wheelbuild build`'s own arguments (the package as `build` takes it,
the torch release, archs, Pythons, env), so `wheelbuild verify --rebuild` builds the same inputs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import assert_never

from ..attempt.config import SHARED_CACHE_ENV
from ..attempt.outcome import AttemptResult
from ..bounded import FileRefused, read_bounded
from ..errors import (
    SignatureInvalid,
    StatementOfAnotherWheel,
    StatementUnusable,
    WheelAltered,
    WheelbuildError,
)
from ..image.cuda_redist import redist_url
from ..image.inputs import ImageInputs
from ..index.pages import ENVELOPE_SUFFIX
from ..index.tree import hash_file
from ..index.wheel_names import is_served_name
from ..plan.planner import Plan
from ..provenance.signing import SigningKey, VerifyingKey, signed, signed_by
from ..provenance.statement import (
    MAX_STATEMENT,
    PAYLOAD_TYPE,
    STATEMENT_SUFFIX,
    BuildFacts,
    Envelope,
    Material,
    Statement,
    StatementRefused,
    envelope_bytes,
    read_statement_or_envelope,
    statement,
    statement_bytes,
    subject_problem,
)
from ..recipes import (
    IndexLookup,
    LocalProject,
    LocalSdist,
    Recipe,
    RemoteSdist,
    known_recipes,
    resolve_recipe,
)
from ..secrets import Redactor, redact_url, run_secrets, without_credentials
from ..spec.build_spec import BuildSpec
from ..spec.sources import SourceDate
from ..wheel.contents import WheelInfo
from .results import builder_versions, source_key

__all__ = [
    "TREE_DIGEST",
    "build_facts",
    "clean_url",
    "for_publish",
    "package_argument",
    "read_beside",
    "run_redactor",
    "source_material",
    "subject_error",
    "subjects_check",
    "without_statement",
    "write_statements",
]

# What a folder's digest is (pipeline/results.py source_digest): no standard digest names one.
TREE_DIGEST = "wheelbuildTreeSha256"


def clean_url(url: str) -> str:
    """A URL as a statement names it: no user info, every query value hidden."""
    return redact_url(without_credentials(url)[0])


def source_material(recipe: Recipe) -> Material:
    """The source as a material: an sdist by its sha256 and where it came from, a project
    folder by the digest of its files (relative paths, modes and contents)."""
    source = recipe.source
    match source:
        case RemoteSdist(url, sha256):
            return Material("source", {"sha256": sha256}, clean_url(url))
        case LocalSdist(path):
            return Material("source", {"sha256": source_key(source)}, path.as_uri())
        case LocalProject(path):
            return Material(
                "source",
                {TREE_DIGEST: source_key(source)},
                path.as_uri(),
                {"digest": "sha256 over each file's relative path, mode and sha256, build output left out"},
            )
        case IndexLookup(project, version):
            raise AssertionError(f"{project}=={version} is looked up before its statement is made")
        case _:
            assert_never(source)


def package_argument(recipe: Recipe) -> str:
    """What `wheelbuild build` takes to build this recipe again: a known recipe's name, an sdist
    URL with its #sha256= pin, or a local path."""
    if recipe.name in known_recipes():
        known = resolve_recipe(recipe.name, version=recipe.version).source
        if known == recipe.source or (
            isinstance(known, IndexLookup) and isinstance(recipe.source, RemoteSdist)
        ):
            return recipe.name
    match recipe.source:
        case RemoteSdist(url, sha256):
            return f"{clean_url(url)}#sha256={sha256}"
        case LocalProject(path) | LocalSdist(path):
            return str(path)
        case IndexLookup(project, version):
            return f"{project}=={version}"
        case _:
            assert_never(recipe.source)


def build_facts(
    spec: BuildSpec,
    inputs: ImageInputs,
    key: str,
    pythons: tuple[str, ...],
    date: SourceDate,
    last: tuple[Plan, AttemptResult],
    run_id: str,
) -> BuildFacts:
    """Everything a statement of this build says, but the wheel itself."""
    recipe, (plan, result) = spec.recipe, last
    locked = tuple(
        Material(name, {"sha256": sha256}, annotations={"lock": lock})
        for lock, sha256, name in result.locked_files
    )
    build_env = recipe.build_env(spec.archs, 1, 1, spec.variant.label, ptx=spec.ptx)
    return BuildFacts(
        package=package_argument(recipe),
        recipe_version=recipe.version if package_argument(recipe) == recipe.name else None,
        arch_env=recipe.arch_env,
        env=dict(recipe.extra_env),
        torch=str(spec.variant),
        torch_index_url=clean_url(spec.variant.index_url),
        archs=spec.archs,
        ptx=spec.ptx,
        pythons=pythons,
        pin=spec.pin.value,
        keep_package_archs=spec.keep_package_archs,
        build_network=spec.build_network,
        keep_package_std=spec.keep_package_std,
        inputs_key=key,
        source_date_epoch=date.epoch,
        source_date_from=date.why,
        build_env={k: v for k, v in build_env.items() if k not in {"MAX_JOBS", "NVCC_THREADS"}},
        max_jobs=plan.max_jobs,
        nvcc_threads=plan.nvcc_threads,
        compiler_cache=spec.compiler_cache,
        materials=(source_material(recipe), *inputs.materials(redist_url(os.environ)), *locked),
        builder_version=builder_versions(),
        run_id=run_id,
    )


def run_redactor(spec: BuildSpec, environ: Mapping[str, str]) -> Redactor:
    """Every secret value this build could know: the shared cache's variables, the torch
    index's and the source URL's credentials."""
    urls = [spec.variant.index_url]
    if isinstance(spec.recipe.source, RemoteSdist):
        urls.append(spec.recipe.source.url)
    return Redactor(run_secrets(environ, SHARED_CACHE_ENV, urls))


def write_statements(wheels: Iterable[WheelInfo], facts: BuildFacts, redactor: Redactor) -> tuple[Path, ...]:
    """``<wheel>.intoto.json`` beside each wheel: its Statement."""
    written = []
    for wheel in wheels:
        path = wheel.path.with_name(wheel.path.name + STATEMENT_SUFFIX)
        path.write_bytes(statement_bytes(statement(wheel.path.name, wheel.sha256, facts, redactor)))
        written.append(path)
    return tuple(written)


# ---------------------------------------------------------------------------------------------
# Publish: the statement beside each wheel, signed, into the tree


def read_beside(wheel: Path, given: Path | None = None) -> tuple[Statement, Envelope, Path] | None:
    """The statement of *wheel*: the file *given*, else the envelope a tree serves beside it
    (``.intoto.jsonl``), else the run folder's statement (``.intoto.json``), in an envelope
    (without signatures when it was bare); None when there is none. StatementUnusable for one
    that is there but cannot be read (not a regular file, over its cap, not ours)."""
    for path in (
        (given,) if given is not None else (_beside(wheel, ENVELOPE_SUFFIX), _beside(wheel, STATEMENT_SUFFIX))
    ):
        try:
            data = read_bounded(path, MAX_STATEMENT)
        except FileNotFoundError:
            if given is not None:
                raise StatementUnusable(
                    f"the statement {path} does not exist", "name the wheel's .intoto.jsonl"
                ) from None
            continue
        except (FileRefused, OSError) as error:
            raise StatementUnusable(
                f"the statement {path} cannot be read: {getattr(error, 'strerror', None) or error}",
                "name a regular file: the wheel's .intoto.jsonl (published) or .intoto.json (its run folder)",
            ) from None
        try:
            found, envelope = read_statement_or_envelope(data)
        except StatementRefused as refused:
            raise StatementUnusable(
                f"{path.name} is not a wheelbuild provenance statement: {refused}",
                "use the statement wheelbuild wrote beside the wheel (build's run folder, or the tree's files/)",
            ) from None
        return found, envelope or Envelope(PAYLOAD_TYPE, found.raw), path
    return None


def _beside(wheel: Path, suffix: str) -> Path:
    return wheel.with_name(wheel.name + suffix)


def subject_error(found: Statement, wheel: str, sha256: str) -> WheelbuildError | None:
    """Why *found* is not the statement of the wheel *wheel* with this sha256; None when it is."""
    problem = subject_problem(found, wheel, sha256)
    if problem is None:
        return None
    kind, said = problem
    if kind == "altered":
        return WheelAltered(
            f"{wheel} has sha256 {sha256[:16]}..., its statement says {said[:16]}...: the wheel is "
            "not the file its build made (changed after it was built)",
            "get the wheel again from where it was published, or rebuild it (wheelbuild verify --rebuild)",
        )
    return StatementOfAnotherWheel(
        f"the statement given for {wheel} is the statement of {said}",
        f"use {wheel}'s own statement ({wheel}{ENVELOPE_SUFFIX} beside it in the tree)",
    )


def for_publish(
    wheels: Sequence[Path],
    sign_key: SigningKey | None,
    keys: Sequence[VerifyingKey],
    require_signed: bool,
) -> dict[str, bytes]:
    """Each wheel's statement as the tree serves it (file name -> one envelope line), signed
    with *sign_key*. With *require_signed*, a wheel without a statement that *keys* (and
    *sign_key*) verify is refused, before anything is published."""
    trusted = (*keys, *((sign_key.verifying,) if sign_key else ()))
    statements: dict[str, bytes] = {}
    for wheel in wheels:
        found = read_beside(wheel)
        if found is None:
            if require_signed:
                raise StatementUnusable(
                    f"{wheel.name} has no provenance statement beside it ({wheel.name}{STATEMENT_SUFFIX} "
                    f"or {ENVELOPE_SUFFIX}), and --require-signed asks for a signed one",
                    "publish the wheel from the run folder `wheelbuild build` wrote, with --sign-key",
                )
            continue
        _statement, envelope, path = found
        if sign_key is not None:
            envelope = signed(envelope, sign_key)
        if require_signed and signed_by(envelope, trusted) is None:
            raise SignatureInvalid(
                f"the statement of {wheel.name} ({path.name}) carries no signature of "
                + ", ".join(k.keyid for k in trusted),
                "sign it now with --sign-key, or name the key that signed it with --key",
            )
        if not is_served_name(wheel.name + ENVELOPE_SUFFIX):
            raise StatementUnusable(
                f"{wheel.name}{ENVELOPE_SUFFIX} is too long a name to serve",
                "give the wheel a shorter name (project, version and local label)",
            )
        statements[wheel.name] = envelope_bytes(envelope)
    return statements


def without_statement(wheel_name: str) -> str:
    """Publish's one line for a wheel that has no statement beside it: what follows, and the remedy."""
    return (
        f"{wheel_name} has no provenance statement beside it ({wheel_name}{STATEMENT_SUFFIX}), so the "
        "index will have none for `wheelbuild verify`; publish it from the run folder `wheelbuild build` "
        "wrote, where its statement is"
    )


CopiesCheck = Callable[[Mapping[Path, Path]], None]  # index.publish's, on the copies it made


def subjects_check(statements: Mapping[str, bytes], first: CopiesCheck) -> CopiesCheck:
    """Publish's check of its copies (under its lock): *first*, then each statement names its
    copy's sha256, so no tree serves a statement beside a wheel it does not describe."""

    def check(copies: Mapping[Path, Path]) -> None:
        first(copies)
        for given, copy in copies.items():
            if given.name not in statements:
                continue
            found, _envelope = read_statement_or_envelope(statements[given.name])
            sha256 = hash_file(copy)
            if (error := subject_error(found, given.name, sha256)) is not None:
                raise error

    return check
