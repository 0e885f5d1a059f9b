"""`wheelbuild gc`, decided: which runs, stored results, images and volumes go, and why each of
the others stays. Pure: it takes what the file system and Docker hold as plain values and
returns its decisions; reading them and deleting lives in prune.py (files) and the engine (Docker).

What is kept, whatever else is said:
- a run whose wheel was published (its `published.json` mark, or its wheel's sha256 in a
  published tree under the output dir), the newest N runs, a run a container is working on, and
  a run without its report that was written to in the last day (it may still be building);
- a stored result one of those runs needs (its inputs key), one whose wheel is published, and
  the newest N results;
- the build image of the current inputs (plain and cu12x), the current CUDA 12 layer, the
  sccache-dist fleet's image FROM the current build image, any image a container (running or
  stopped) uses, and the base image;
- the image each kept run and each kept stored result was built in (its report's tag and ID):
  a build made in another environment (another base image, another --output-dir) names an image
  the current inputs here would not, and its result is no use without it;
- every volume a container mounts; the compiler, pip and torch-download caches unless
  `--caches` is given. Only calibrate's torch-headers volumes go by default.
- of the wheel cache (the torch-wheels volume), what its own rule keeps (wheel_cache_use.py:
  within its bound, least recently used trees first past it), and all of it while a running
  container mounts it.

Published trees (`files/`, `simple/`) are never candidates: only run folders under `runs/`
named like a run id, and result-store entries named like an inputs key, are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from ..errors import GcIncomplete
from ..image.names import (
    CACHE_VOLUMES,
    DIST_REPOSITORY,
    IMAGE_REPOSITORIES,
    IMAGE_REPOSITORY,
    LAYER_REPOSITORY,
    PREFIX,
    TORCH_VOLUME_PREFIX,
)
from ..units import format_bytes
from .wheel_cache_use import UNNEEDED, WheelCacheUse

DEFAULT_KEEP_RUNS = 5
# A run without build-report.json written to this recently may still be building.
RECENT_S = 24 * 3600
PUBLISHED_MARK = "published.json"  # in a run folder: where its wheels were published, by publish
DEFAULT_SCOPE = PREFIX  # this process's: names.PREFIX_ENV's value, or wheelbuild
RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")
RESULT_KEY = re.compile(r"[0-9a-f]{64}")


class Kind(StrEnum):
    RUN = "run"
    RESULT = "result"
    IMAGE = "image"
    VOLUME = "volume"
    TREE = "tree"  # a tree of the wheel cache, and what only it needed


@dataclass(frozen=True)
class Scope:
    """The names gc may touch: wheelbuild's own repositories and volumes, under this process's
    prefix (names.PREFIX) or, to name another's objects, under the prefix given."""

    prefix: str = DEFAULT_SCOPE

    @property
    def image_repository(self) -> str:
        """The default toolkit's build images."""
        return self.retag(IMAGE_REPOSITORY)

    @property
    def image_repositories(self) -> tuple[str, ...]:
        """The build images of every toolkit (wheelbuild-cuda131, wheelbuild-cuda132)."""
        return tuple(self.retag(repository) for repository in IMAGE_REPOSITORIES)

    @property
    def layer_repository(self) -> str:
        return self.retag(LAYER_REPOSITORY)

    @property
    def dist_repository(self) -> str:
        """The sccache-dist fleet's images: wbdist-sccache, or under another prefix its own."""
        return DIST_REPOSITORY if self.prefix == DEFAULT_SCOPE else f"{self.prefix}-dist-sccache"

    @property
    def cache_volumes(self) -> tuple[str, ...]:
        """sccache's store, pip's cache, the gate's torch downloads: refilled by the next build."""
        return tuple(self.retag(v) for v in CACHE_VOLUMES)

    def owns_image(self, tag: str) -> bool:
        repository, sep, version = tag.rpartition(":")
        ours = (*self.image_repositories, self.layer_repository, self.dist_repository)
        return bool(sep and version) and repository in ours

    def volume_kind(self, name: str) -> str | None:
        """'cache', 'torch' (calibrate's torch headers, wheelbuild-torch-<hash>), or None: not ours."""
        if name in self.cache_volumes:
            return "cache"
        if re.fullmatch(rf"{re.escape(self.retag(TORCH_VOLUME_PREFIX))}[0-9a-f]{{16}}", name):
            return "torch"
        return None

    def retag(self, tag: str) -> str:
        """wheelbuild-cuda131:<hash> as this scope names it (itself in the default scope)."""
        if self.prefix == DEFAULT_SCOPE or not tag.startswith(f"{DEFAULT_SCOPE}-"):
            return tag
        return self.prefix + tag[len(DEFAULT_SCOPE) :]


# What there is


@dataclass(frozen=True)
class Run:
    """A folder wheelhouse/runs/<run-id>/."""

    id: str
    path: Path
    size: int
    has_report: bool
    inputs_key: str | None
    wheel_sha256: tuple[str, ...]  # the report's wheels, else the folder's .whl files hashed
    published_to: tuple[str, ...]  # targets its published.json names
    last_write: float  # newest mtime of the folder and its files
    holds_index: bool = False  # a published tree (files/ or simple/) inside: never touched
    image_tag: str | None = None  # the build image its report names: kept while the run is
    image_id: str | None = None  # that image's ID, as the report names it


@dataclass(frozen=True)
class StoredResult:
    """An entry of the result store, ~/.cache/wheelbuild/results/<inputs key>/."""

    key: str
    path: Path
    size: int
    wheel_sha256: tuple[str, ...]
    saved: float  # its build-report.json's mtime
    image_tag: str | None = None  # the build image its report names: kept while the result is
    image_id: str | None = None


@dataclass(frozen=True)
class Published:
    """What is published, as far as this machine can tell: wheel sha256 -> where, inputs keys."""

    sha256: Mapping[str, str] = field(default_factory=dict)
    inputs: frozenset[str] = frozenset()

    def merged(self, other: Published) -> Published:
        return Published({**other.sha256, **self.sha256}, self.inputs | other.inputs)


@dataclass(frozen=True)
class ImageFact:
    tag: str
    id: str
    size: int  # what removing it frees: its layers no other image shares (0: it has other tags)
    untag_only: bool = False  # the image has tags outside wheelbuild's: removing ours untags it


@dataclass(frozen=True)
class VolumeFact:
    name: str
    size: int  # -1: Docker did not say


@dataclass(frozen=True)
class ContainerFact:
    name: str
    image_id: str
    state: str  # Docker's: running, exited, created, paused, ...
    run_id: str  # its wheelbuild.run label, or ""
    volumes: tuple[str, ...]  # names of the volumes it mounts

    @property
    def running(self) -> bool:
        return self.state in ("running", "restarting", "paused")


@dataclass(frozen=True)
class DockerState:
    images: tuple[ImageFact, ...]
    volumes: tuple[VolumeFact, ...]
    containers: tuple[ContainerFact, ...]


# Decisions


@dataclass(frozen=True)
class Decision:
    kind: Kind
    name: str  # run id, inputs key, image tag, volume name
    size: int  # bytes freed by removing it; -1 unknown
    remove: bool
    why: str
    path: Path | None = None  # runs and results

    def line(self, dry_run: bool) -> str:
        verb = ("would remove" if dry_run else "remove") if self.remove else "keep"
        size = format_bytes(self.size) if self.size >= 0 else "size unknown"
        return f"{verb:<12} {self.kind.value:<6} {self.name}  {size}  ({self.why})"


@dataclass(frozen=True)
class GcDecisions:
    decisions: tuple[Decision, ...]

    @property
    def removals(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.remove)

    @property
    def kept(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if not d.remove)


def _container_word(container: ContainerFact) -> str:
    return f"{container.state} container {container.name}"


def decide_runs(
    runs: Iterable[Run],
    *,
    keep_runs: int,
    in_use: Mapping[str, str],
    published: Published,
    now: float,
) -> tuple[Decision, ...]:
    """*in_use*: run id -> the container working on it."""
    ordered = sorted(runs, key=lambda r: r.id, reverse=True)  # run ids start with their UTC time
    newest = {r.id for r in ordered[:keep_runs]}
    decisions = []
    for run in ordered:
        shared = [published.sha256[s] for s in run.wheel_sha256 if s in published.sha256]
        if run.holds_index:
            why = "holds a published tree (files/ or simple/): gc never removes one"
        elif run.published_to:
            why = f"its wheels were published to {', '.join(run.published_to)}"
        elif shared:
            why = f"its wheel is published in {shared[0]}"
        elif run.id in in_use:
            why = f"in use by {in_use[run.id]}"
        elif run.id in newest:
            why = f"one of the newest {keep_runs} run(s)"
        elif not run.has_report and now - run.last_write < RECENT_S:
            why = "no build-report.json yet and written to in the last day: it may still be building"
        else:
            decisions.append(
                Decision(
                    Kind.RUN,
                    run.id,
                    run.size,
                    True,
                    f"older than the newest {keep_runs} run(s), not published",
                    run.path,
                )
            )
            continue
        decisions.append(Decision(Kind.RUN, run.id, run.size, False, why, run.path))
    return tuple(decisions)


def decide_results(
    results: Iterable[StoredResult],
    *,
    keep_results: int,
    needed: Mapping[str, str],
    published: Published,
) -> tuple[Decision, ...]:
    """*needed*: inputs key -> the kept run that made or reused it."""
    ordered = sorted(results, key=lambda r: (r.saved, r.key), reverse=True)
    newest = {r.key for r in ordered[:keep_results]}
    decisions = []
    for result in ordered:
        shared = [published.sha256[s] for s in result.wheel_sha256 if s in published.sha256]
        if shared:
            why = f"its wheel is published in {shared[0]}"
        elif result.key in published.inputs:
            why = "a wheel of these inputs is published"
        elif result.key in needed:
            why = f"the result of kept run {needed[result.key]}"
        elif result.key in newest:
            why = f"one of the newest {keep_results} stored result(s)"
        else:
            decisions.append(
                Decision(
                    Kind.RESULT,
                    result.key,
                    result.size,
                    True,
                    "not published, no kept run's, not among the newest: an unchanged rebuild would build again",
                    result.path,
                )
            )
            continue
        decisions.append(Decision(Kind.RESULT, result.key, result.size, False, why, result.path))
    return tuple(decisions)


def decide_images(
    images: Iterable[ImageFact],
    *,
    current: frozenset[str],
    containers: Sequence[ContainerFact],
    base_ids: frozenset[str],
    kept_runs: Mapping[str, str] | None = None,
) -> tuple[Decision, ...]:
    """Each image kept or removed, and why. *kept_runs*: image tag or ID -> the kept run or
    stored result that was built in it ("kept run <id>"), since a build made in another
    environment than gc's names an image gc would not call current."""
    kept_runs = kept_runs or {}
    users: dict[str, ContainerFact] = {}
    for container in containers:  # a running user names the image before a stopped one
        if container.running or container.image_id not in users:
            users[container.image_id] = container
    decisions = []
    for image in sorted(images, key=lambda i: i.tag):
        if image.tag in current:
            why = "the image of the current inputs"
        elif image.id in users:
            why = f"used by {_container_word(users[image.id])}"
        elif image.id in base_ids:
            why = "the base image"
        elif (user := kept_runs.get(image.tag) or kept_runs.get(image.id)) is not None:
            why = f"the image of {user}"
        else:
            why = "not the current inputs' image, used by no container" + (
                " (it has other tags: only this one goes)" if image.untag_only else ""
            )
            decisions.append(Decision(Kind.IMAGE, image.tag, image.size, True, why))
            continue
        decisions.append(Decision(Kind.IMAGE, image.tag, image.size, False, why))
    return tuple(decisions)


def decide_wheel_cache(
    use: WheelCacheUse | None, *, containers: Sequence[ContainerFact], caches: bool
) -> tuple[Decision, ...]:
    """The wheel cache's trees by its own rule (use.trees' verdicts); none while a running
    container mounts the volume, and none with --caches (the whole volume goes then)."""
    if use is None or caches:
        return ()
    running = next((c for c in containers if c.running and use.volume in c.volumes), None)
    decisions = []
    if use.unneeded > 0:
        decisions.append(
            _tree_decision(use, UNNEEDED, use.unneeded, running, "what nothing needs goes first")
        )
    for tree in sorted(use.trees, key=lambda t: (t.used, t.name)):
        if tree.drop:
            decisions.append(_tree_decision(use, tree.name, tree.frees, running, "the least recently used"))
        else:
            decisions.append(Decision(Kind.TREE, f"{use.volume}/{tree.name}", 0, False, tree.why))
    return tuple(decisions)


def _tree_decision(
    use: WheelCacheUse, name: str, frees: int, running: ContainerFact | None, which: str
) -> Decision:
    if running is not None:
        why = f"past the bound, but {_container_word(running)} mounts the volume: its own run prunes it"
        return Decision(Kind.TREE, f"{use.volume}/{name}", frees, False, why)
    return Decision(Kind.TREE, f"{use.volume}/{name}", frees, True, f"{which}: the cache holds {use.said}")


def decide_volumes(
    volumes: Iterable[VolumeFact],
    *,
    containers: Sequence[ContainerFact],
    caches: bool,
    scope: Scope,
    wheel_cache: WheelCacheUse | None = None,
) -> tuple[Decision, ...]:
    mounted: dict[str, ContainerFact] = {}
    for container in containers:
        for name in container.volumes:
            if container.running or name not in mounted:
                mounted[name] = container
    decisions = []
    for volume in sorted(volumes, key=lambda v: v.name):
        kind = scope.volume_kind(volume.name)
        if kind is None:
            continue  # not wheelbuild's: never a candidate
        size, remove = volume.size, False
        if volume.name in mounted:
            why = f"mounted by {_container_word(mounted[volume.name])}"
        elif kind == "torch":
            why, remove = (
                "calibrate's torch headers, mounted by no container (unpacked again when needed)",
                True,
            )
        elif caches:
            why, remove = "a cache, --caches: the next build refills it", True
        elif wheel_cache is not None and volume.name == wheel_cache.volume:
            why = f"the wheel cache: {wheel_cache.said}, pruned by its rule; removed whole only with --caches"
            size = wheel_cache.bytes
        else:
            why = "a cache: removed only with --caches"
        decisions.append(Decision(Kind.VOLUME, volume.name, size, remove, why))
    return tuple(decisions)


def decide(
    *,
    runs: Sequence[Run],
    results: Sequence[StoredResult],
    docker: DockerState,
    published: Published,
    current_images: frozenset[str],
    base_ids: frozenset[str],
    keep_runs: int,
    caches: bool,
    scope: Scope,
    now: float,
    wheel_cache: WheelCacheUse | None = None,
) -> GcDecisions:
    """Every candidate, with what becomes of it and why."""
    marked = Published(
        {s: ", ".join(r.published_to) for r in runs if r.published_to for s in r.wheel_sha256},
        frozenset(r.inputs_key for r in runs if r.published_to and r.inputs_key),
    )
    published = published.merged(marked)
    in_use = {c.run_id: _container_word(c) for c in docker.containers if c.run_id}
    run_decisions = decide_runs(runs, keep_runs=keep_runs, in_use=in_use, published=published, now=now)
    by_id = {r.id: r for r in runs}
    needed = {
        key: d.name for d in run_decisions if not d.remove and (key := by_id[d.name].inputs_key) is not None
    }
    result_decisions = decide_results(results, keep_results=keep_runs, needed=needed, published=published)
    by_key = {r.key: r for r in results}
    built_in: dict[str, str] = {}
    # Stored results first, so a kept run's own name wins where both name one image.
    built_from: list[tuple[str | None, str | None, str]] = [
        *((by_key[d.name].image_tag, by_key[d.name].image_id, f"kept stored result {d.name[:16]}")
          for d in result_decisions if not d.remove),
        *((by_id[d.name].image_tag, by_id[d.name].image_id, f"kept run {d.name}")
          for d in run_decisions if not d.remove),
    ]  # fmt: skip
    for tag, image_id, name in built_from:
        built_in |= {ref: name for ref in (tag, image_id) if ref}
    return GcDecisions(
        (
            *run_decisions,
            *result_decisions,
            *decide_images(
                docker.images,
                current=current_images,
                containers=docker.containers,
                base_ids=base_ids,
                kept_runs=built_in,
            ),
            *decide_volumes(
                docker.volumes,
                containers=docker.containers,
                caches=caches,
                scope=scope,
                wheel_cache=wheel_cache,
            ),
            *decide_wheel_cache(wheel_cache, containers=docker.containers, caches=caches),
        )
    )


# What happened


class Status(StrEnum):
    REMOVED = "removed"
    GONE = "already gone"  # someone removed it first: nothing freed, nothing wrong
    KEPT = "kept"  # found in use (or published) at the last moment: Docker or the mark said no
    FAILED = "failed"


@dataclass(frozen=True)
class Removal:
    decision: Decision
    status: Status
    detail: str = ""

    def line(self) -> str:
        d = self.decision
        size = format_bytes(d.size) if d.size >= 0 else "size unknown"
        text = f"{self.status.value} {d.kind.value} {d.name} ({size})"
        return f"{text}: {self.detail}" if self.detail else text


def _count(decisions: Sequence[Decision], kind: Kind) -> str:
    mine = [d for d in decisions if d.kind is kind]
    size = sum(max(d.size, 0) for d in mine)
    return f"{len(mine)} {kind.value}{'s' if len(mine) != 1 else ''}" + (
        f" ({format_bytes(size)})" if mine else ""
    )


def summary(decided: GcDecisions, removals: Sequence[Removal] | None = None) -> str:
    """One line: what was (or, for a dry run, would be) freed, by kind, and what was kept."""
    if removals is None:
        gone: Sequence[Decision] = decided.removals
        verb = "would free"
    else:
        gone = [r.decision for r in removals if r.status is Status.REMOVED]
        verb = "freed"
    total = sum(max(d.size, 0) for d in gone)
    unknown = any(d.size < 0 for d in gone)
    # The wheel cache's trees are named only where some go: most gc runs have none to say.
    kinds = ", ".join(_count(gone, k) for k in Kind if k is not Kind.TREE or any(d.kind is k for d in gone))
    kept = len(decided.kept) + (
        len([r for r in removals if r.status is Status.KEPT]) if removals is not None else 0
    )
    line = f"gc: {verb} {format_bytes(total)}{' and more (some sizes unknown)' if unknown else ''}: {kinds}; kept {kept}"
    if removals is not None:
        failed = [r for r in removals if r.status is Status.FAILED]
        if failed:
            line += f"; {len(failed)} failed"
    return line


def check(removals: Sequence[Removal]) -> None:
    failed = [r for r in removals if r.status is Status.FAILED]
    if failed:
        first = failed[0]
        raise GcIncomplete(
            f"{len(failed)} removal(s) failed, the first: {first.decision.kind.value} "
            f"{first.decision.name}: {first.detail}",
            "fix what the failure names (permissions, the Docker daemon) and run wheelbuild gc again; "
            "everything else it decided was done",
        )
