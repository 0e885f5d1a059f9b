"""A wheel's provenance: an in-toto Statement (v1) with a SLSA provenance predicate (v1) saying
what went into the build that made it, and the DSSE envelope that carries it signed.

Beside each wheel a build writes ``<wheel>.intoto.json`` (the Statement); publish puts it into
the tree as ``files/<wheel>.intoto.jsonl``, one DSSE envelope on one line (signed with
``--sign-key``). The Statement names:

- the subject: the wheel's file name and sha256;
- as resolvedDependencies (the materials): the source (sha256, its URL without credentials),
  the image's inputs (base image digest, Dockerfile, the pinned CUDA and tool wheels, the CUDA 12
  redist archives when the build used them), each file installed from the machine's wheel cache
  (torch and its CUDA wheels, by sha256);
- as externalParameters what `wheelbuild build` was asked (enough to build it again:
  `wheelbuild verify --rebuild`), as internalParameters what wheelbuild derived (the inputs key,
  SOURCE_DATE_EPOCH, the env the inputs key sees) and what does not change the output
  (MAX_JOBS, NVCC_THREADS, the compiler cache: the bit-identical test shows it);
- the builder: wheelbuild's version and the digest of its code.

No secret reaches it: every string passes the run's Redactor (secret values, any URL's
credentials and query values), and an env value whose name or shape is a credential's is
hidden. Pure: values in, bytes out; no Docker, no network, no file.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import cast

from ..secrets import SECRET_NAME, SECRET_VALUE

__all__ = [
    "BUILDER_ID",
    "BUILD_TYPE",
    "HIDDEN",
    "MAX_STATEMENT",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_SUFFIX",
    "STATEMENT_TYPE",
    "BuildFacts",
    "Envelope",
    "Material",
    "Signature",
    "Statement",
    "StatementRefused",
    "envelope_bytes",
    "material_differences",
    "pae",
    "read_envelope",
    "read_statement",
    "read_statement_or_envelope",
    "statement",
    "statement_bytes",
    "subject_problem",
]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"  # DSSE's payloadType for an in-toto Statement
# What this predicate's parameters mean (docs/guides/reproducible.md); a URN: it names, it resolves nowhere.
BUILD_TYPE = "urn:wheelbuild:build:v1"
BUILDER_ID = "urn:wheelbuild:builder"
STATEMENT_SUFFIX = ".intoto.json"  # beside a wheel in its run folder: the Statement
MAX_STATEMENT = 4 << 20  # bytes: a few hundred materials at most; anything bigger is not ours
HIDDEN = "***"
_SHA256 = re.compile(r"[0-9a-f]{64}")


class StatementRefused(ValueError):
    """Bytes that are not a Statement or envelope this module writes (the reason says why)."""


@dataclass(frozen=True)
class Material:
    """One resolvedDependency: a name, its digest, and where it came from (no credentials)."""

    name: str
    digest: Mapping[str, str]  # algorithm -> hex ("sha256"; "wheelbuildTreeSha256" for a folder)
    uri: str | None = None
    annotations: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def to_json(self) -> dict[str, object]:
        found: dict[str, object] = {"name": self.name, "digest": dict(sorted(self.digest.items()))}
        if self.uri:
            found["uri"] = self.uri
        if self.annotations:
            found["annotations"] = dict(sorted(self.annotations.items()))
        return found


@dataclass(frozen=True)
class BuildFacts:
    """What a build knew about its inputs, gathered by build.py: the statement of each of its
    wheels is made from this and the wheel's own name and sha256."""

    # `wheelbuild build`'s own arguments: what `verify --rebuild` passes back.
    package: str  # a recipe's name, an sdist URL with #sha256=, or a local path
    recipe_version: str | None
    arch_env: str | None
    env: Mapping[str, str]  # the recipe's extra env: --env and the switches its build files called for
    torch: str  # 2.11.0+cu130
    torch_index_url: str
    archs: tuple[int, ...]
    ptx: tuple[int, ...]
    pythons: tuple[str, ...]  # cp311
    pin: str  # built | proven
    keep_package_archs: bool
    build_network: bool
    keep_package_std: bool
    # What wheelbuild derived from them.
    inputs_key: str
    source_date_epoch: int
    source_date_from: str
    build_env: Mapping[str, str]  # the env as the inputs key sees it (MAX_JOBS/NVCC_THREADS left out)
    # How fast, not what: the bit-identical test builds with other values and the same bytes.
    max_jobs: int
    nvcc_threads: int
    compiler_cache: bool
    materials: tuple[Material, ...]
    builder_version: Mapping[str, str]  # wheelbuild, its code digest, cibuildwheel
    run_id: str


def _scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """An env for the statement: a value named or shaped like a credential is hidden."""
    return {
        name: HIDDEN if SECRET_NAME.search(name) or SECRET_VALUE.search(value) else value
        for name, value in sorted(env.items())
    }


def _scrubbed(value: object, redact: Callable[[str], str]) -> object:
    """*value* with every string in it, keys too, through *redact*."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): _scrubbed(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrubbed(v, redact) for v in value]
    return value


def statement(wheel: str, sha256: str, facts: BuildFacts, redact: Callable[[str], str]) -> dict[str, object]:
    """The in-toto Statement for the wheel *wheel* (its file name) of sha256 *sha256*, every
    string through *redact* (secrets.Redactor: the run's secret values, any URL's credentials)."""
    not_output = {
        "MAX_JOBS": str(facts.max_jobs),
        "NVCC_THREADS": str(facts.nvcc_threads),
        "compilerCache": facts.compiler_cache,
    }
    predicate = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "package": facts.package,
                "version": facts.recipe_version,
                "archEnv": facts.arch_env,
                "env": _scrub_env(facts.env),
                "torch": facts.torch,
                "torchIndexUrl": facts.torch_index_url,
                "archs": list(facts.archs),
                "ptx": list(facts.ptx),
                "pythons": list(facts.pythons),
                "pin": facts.pin,
                "keepPackageArchs": facts.keep_package_archs,
                "buildNetwork": facts.build_network,
                "keepPackageStd": facts.keep_package_std,
            },
            "internalParameters": {
                "inputsKey": facts.inputs_key,
                "SOURCE_DATE_EPOCH": facts.source_date_epoch,
                "sourceDateFrom": facts.source_date_from,
                "buildEnv": _scrub_env(facts.build_env),
                # Told apart from the rest: these change how fast a wheel is built, not its bytes.
                "doesNotChangeOutput": not_output,
            },
            "resolvedDependencies": [m.to_json() for m in facts.materials],
        },
        "runDetails": {
            "builder": {"id": BUILDER_ID, "version": dict(sorted(facts.builder_version.items()))},
            "metadata": {"invocationId": facts.run_id},
        },
    }
    found = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": wheel, "digest": {"sha256": sha256}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }
    return cast(dict[str, object], _scrubbed(found, redact))


def statement_bytes(found: Mapping[str, object]) -> bytes:
    """The Statement as the bytes a file and an envelope's payload hold: the same every time."""
    return (json.dumps(found, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


# ---------------------------------------------------------------------------------------------
# DSSE: the envelope a signature covers (secure-systems-lab/dsse, protocol v1)


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: the bytes a signature covers. The type is inside
    them, so a signature over one kind of payload never passes for another kind."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


@dataclass(frozen=True)
class Signature:
    keyid: str  # a hint only: which key to try (signing.key_id)
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...] = ()


def envelope_bytes(envelope: Envelope) -> bytes:
    """One DSSE envelope as one line of JSON (the .intoto.jsonl form)."""
    found = {
        "payloadType": envelope.payload_type,
        "payload": base64.b64encode(envelope.payload).decode(),
        "signatures": [
            {"keyid": s.keyid, "sig": base64.b64encode(s.sig).decode()} for s in envelope.signatures
        ],
    }
    return (json.dumps(found, sort_keys=True, separators=(",", ":")) + "\n").encode()


@dataclass(frozen=True)
class Statement:
    """A Statement as read back: the parts verify and rebuild use, and its exact bytes."""

    subjects: tuple[tuple[str, str], ...]  # (name, sha256)
    external: Mapping[str, object]
    internal: Mapping[str, object]
    materials: tuple[Material, ...]
    builder_version: Mapping[str, str]
    raw: bytes


def _decode(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise StatementRefused(f"its {what} is not base64 text")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise StatementRefused(f"its {what} is not base64") from None


def _json(data: bytes, what: str) -> dict[str, object]:
    try:
        found = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise StatementRefused(f"{what} is not JSON") from None
    if not isinstance(found, dict):
        raise StatementRefused(f"{what} is not a JSON object")
    return found


def read_envelope(data: bytes) -> Envelope:
    """A DSSE envelope: the first non-empty line of an .intoto.jsonl, or a JSON document."""
    if len(data) > MAX_STATEMENT:
        raise StatementRefused(f"it is over {MAX_STATEMENT} bytes")
    found = _json(data, "the envelope")
    signatures = found.get("signatures")
    if not isinstance(signatures, list) or not all(isinstance(s, dict) for s in signatures):
        raise StatementRefused("its signatures are not a list of objects")
    payload_type = found.get("payloadType")
    if payload_type != PAYLOAD_TYPE:
        raise StatementRefused(f"its payloadType is {payload_type!r}, not {PAYLOAD_TYPE}")
    return Envelope(
        payload_type=payload_type,
        payload=_decode(found.get("payload"), "payload"),
        signatures=tuple(
            Signature(keyid=str(s.get("keyid", "")), sig=_decode(s.get("sig"), "signature"))
            for s in signatures
        ),
    )


def read_statement(data: bytes) -> Statement:
    """The Statement in *data*; StatementRefused for anything this module did not write."""
    if len(data) > MAX_STATEMENT:
        raise StatementRefused(f"it is over {MAX_STATEMENT} bytes")
    found = _json(data, "the statement")
    if found.get("_type") != STATEMENT_TYPE:
        raise StatementRefused(f"its _type is {found.get('_type')!r}, not {STATEMENT_TYPE}")
    if found.get("predicateType") != PREDICATE_TYPE:
        raise StatementRefused(f"its predicateType is {found.get('predicateType')!r}, not {PREDICATE_TYPE}")
    subjects = []
    for subject in _list(found.get("subject"), "subject"):
        digest = _dict(subject.get("digest"), "subject's digest")
        name, sha256 = subject.get("name"), digest.get("sha256")
        if not isinstance(name, str) or not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
            raise StatementRefused("a subject has no name or no sha256")
        subjects.append((name, sha256))
    if not subjects:
        raise StatementRefused("it names no subject")
    predicate = _dict(found.get("predicate"), "predicate")
    definition = _dict(predicate.get("buildDefinition"), "buildDefinition")
    if definition.get("buildType") != BUILD_TYPE:
        raise StatementRefused(f"its buildType is {definition.get('buildType')!r}, not {BUILD_TYPE}")
    builder = _dict(_dict(predicate.get("runDetails"), "runDetails").get("builder"), "builder")
    return Statement(
        subjects=tuple(subjects),
        external=_dict(definition.get("externalParameters"), "externalParameters"),
        internal=_dict(definition.get("internalParameters"), "internalParameters"),
        materials=tuple(_material(m) for m in _list(definition.get("resolvedDependencies"), "materials")),
        builder_version={str(k): str(v) for k, v in _dict(builder.get("version"), "version").items()},
        raw=data,
    )


def read_statement_or_envelope(data: bytes) -> tuple[Statement, Envelope | None]:
    """A Statement, bare or in a DSSE envelope (then returned too, for its signatures)."""
    if len(data) > MAX_STATEMENT:
        raise StatementRefused(f"it is over {MAX_STATEMENT} bytes")
    line = next((line for line in data.splitlines() if line.strip()), b"")
    if b'"payloadType"' in line and b'"_type"' not in line:
        envelope = read_envelope(line)
        return read_statement(envelope.payload), envelope
    return read_statement(data), None


def _list(value: object, what: str) -> list[dict[str, object]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise StatementRefused(f"its {what} is not a list of objects")
    return value


def _dict(value: object, what: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise StatementRefused(f"its {what} is not an object")
    return value


def _material(found: dict[str, object]) -> Material:
    digest = _dict(found.get("digest"), "material's digest")
    annotations = found.get("annotations", {})
    uri = found.get("uri")
    return Material(
        name=str(found.get("name", "")),
        digest={str(k): str(v) for k, v in digest.items()},
        uri=uri if isinstance(uri, str) else None,
        annotations={str(k): str(v) for k, v in _dict(annotations, "annotations").items()},
    )


def subject_problem(found: Statement, wheel: str, sha256: str) -> tuple[str, str] | None:
    """None when the statement names *wheel* with this sha256; else ("altered", its sha256)
    when it names the same file name with other bytes, or ("another", the names it has)."""
    same_name = [digest for name, digest in found.subjects if name == wheel]
    if sha256 in same_name:
        return None
    if same_name:
        return "altered", same_name[0]
    return "another", ", ".join(name for name, _digest in found.subjects)


def material_differences(
    claimed: Sequence[Material], here: Mapping[str, Mapping[str, str]]
) -> tuple[list[str], list[str]]:
    """(one line per material whose digest here differs, the names of those that matched),
    comparing the statement's *claimed* materials with the digests *here* (name -> digest set)
    for the names both know."""
    differs: list[str] = []
    matched: list[str] = []
    for material in claimed:
        local = here.get(material.name)
        if local is None:
            continue
        shared = sorted(set(local) & set(material.digest))
        if not shared:
            continue
        algorithm = shared[0]
        if local[algorithm] == material.digest[algorithm]:
            matched.append(material.name)
        else:
            differs.append(
                f"{material.name}: the statement says {algorithm} {material.digest[algorithm][:16]}..., "
                f"here it is {local[algorithm][:16]}..."
            )
    return differs, matched
