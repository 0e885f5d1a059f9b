"""Orchestration of `wheelbuild gc` (beside build and calibrate): read what the output dir, the
result store and Docker hold, let decisions.py decide, then remove what it said, or only say it for a
dry run. Folders are read and removed here; Docker is read and changed through the engine (ports.py).

A dry run changes nothing: no folder is renamed, no Docker object touched, and (unlike other
commands) not even orphaned containers are swept.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..attempt.config import DEFAULT_WHEEL_CACHE_BOUND
from ..bounded import FileRefused, read_bounded
from ..errors import ReportUnreadable
from ..image.inputs import image_script, production_base
from ..image.names import DIST_DOCKERFILE, TORCH_WHEELS_VOLUME, dist_image_tag
from ..image.options import ImageOptions, cuda12_layer, image_inputs
from ..image.ports import ImageIds
from ..index import tree as index_tree
from ..report.build_report import REPORT_NAME, BuildReport, read_report
from ..spec import held_torch
from ..variants import CUDA13_TOOLKITS
from . import decisions, wheel_cache_use
from .ports import GcEngine

__all__ = ["GcOptions", "collect", "execute", "published_in", "record_published", "scan_results", "scan_runs"]


@dataclass(frozen=True)
class GcOptions:
    output_dir: Path  # the build's --output-dir: its runs/ is pruned, its published trees read
    store: Path  # the result store
    keep_runs: int
    caches: bool
    scope: decisions.Scope
    image_options: ImageOptions
    wheel_cache_bound: int = DEFAULT_WHEEL_CACHE_BOUND  # WHEELBUILD_WHEEL_CACHE_BOUND


# ---------------------------------------------------------------------------------------------
# Marking a published run (written by publish, read by gc)


def record_published(wheels: Iterable[Path], target: str, sha256: Mapping[str, str] | None = None) -> None:
    """Note in each wheel's run folder (one with build-report.json) that its wheels were published
    to *target*, so that gc keeps the run whatever its age. *sha256* is each published file's (by
    name), as publish hashed it; a wheel missing there is hashed here. Best effort: a folder that
    cannot be written is left unmarked (gc still finds wheels published into a tree of the
    output dir)."""
    by_folder: dict[Path, list[Path]] = {}
    for wheel in wheels:
        by_folder.setdefault(wheel.resolve().parent, []).append(wheel)
    for folder, mine in by_folder.items():
        if not (folder / REPORT_NAME).is_file():
            continue
        mark = folder / decisions.PUBLISHED_MARK
        entries = _mark_entries(mark)
        if entries is None:
            continue  # damaged or oversized: left as it is, and gc keeps such a run anyway
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for wheel in mine:
            with contextlib.suppress(OSError, ValueError):  # gone, or no longer a regular file
                published = (sha256 or {}).get(wheel.name) or index_tree.hash_file(wheel)
                entries.append({"wheel": wheel.name, "sha256": published, "target": target, "time": stamp})
        with contextlib.suppress(OSError):
            index_tree.atomic_write(mark, (json.dumps(entries, indent=2) + "\n").encode())


MAX_MARK = 4 * 1024**2  # a mark lists one run's wheels; a bigger file is not one


def _mark_entries(mark: Path) -> list[object] | None:
    """The mark's entries: [] when there is none, None when it is unreadable, not a regular file,
    over MAX_MARK (read no further) or not a JSON list."""
    try:
        entries = json.loads(read_bounded(mark, MAX_MARK, follow_links=False))
    except FileNotFoundError:
        return []
    except (OSError, ValueError, RecursionError):  # FileRefused and bad JSON are ValueErrors
        return None
    return entries if isinstance(entries, list) else None


def _read_mark(folder: Path) -> list[dict[str, object]]:
    entries = _mark_entries(folder / decisions.PUBLISHED_MARK)
    if entries is None:
        # Unreadable or damaged: someone meant to say it was published. Keep the run.
        return [{"target": f"(unreadable {decisions.PUBLISHED_MARK})"}]
    return [e for e in entries if isinstance(e, dict)]


# ---------------------------------------------------------------------------------------------
# Reading folders


def _usage(path: Path) -> tuple[int, float]:
    """Bytes on disk (each inode once, links not followed) and the newest mtime under *path*."""
    seen: set[tuple[int, int]] = set()
    total = 0
    newest = 0.0
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files, "."]:
            try:
                stat = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            newest = max(newest, stat.st_mtime)
            if name in dirs:
                continue
            if (stat.st_dev, stat.st_ino) in seen:
                continue
            seen.add((stat.st_dev, stat.st_ino))
            total += stat.st_blocks * 512
    return total, newest


def _report(folder: Path) -> BuildReport | None:
    try:
        return read_report(folder / REPORT_NAME)
    except ReportUnreadable:
        return None


Skipped = Callable[[str], None]  # told of each file gc did not read, and why


def _not_read(on_skip: Skipped, refused: FileRefused) -> None:
    why = (
        "over its size cap"
        if refused.too_big
        else "not a regular file (a FIFO, a device or a directory is never read)"
    )
    on_skip(f"skipped {refused.path}: {why}")


def _wheel_hashes(folder: Path, report: BuildReport | None, on_skip: Skipped) -> tuple[str, ...]:
    """The report's wheels' sha256, and the hash of each .whl there the report does not list."""
    listed = {w.file: w.sha256 for w in (report.wheels if report else ()) if w.file and w.sha256}
    hashes = set(listed.values())
    for wheel in folder.glob("*.whl"):
        if wheel.name not in listed:
            try:
                hashes.add(index_tree.hash_file(wheel))
            except FileRefused as refused:
                _not_read(on_skip, refused)
            except OSError:
                pass
    return tuple(sorted(hashes))


def _ignore(_note: str) -> None:
    pass


def scan_runs(runs_dir: Path, on_skip: Skipped = _ignore) -> tuple[decisions.Run, ...]:
    """Every folder of runs/ named like a run id (anything else there is not ours: left alone)."""
    if not runs_dir.is_dir():
        return ()
    found = []
    for folder in sorted(runs_dir.iterdir()):
        if not decisions.RUN_ID.fullmatch(folder.name) or folder.is_symlink() or not folder.is_dir():
            continue
        report = _report(folder)
        size, newest = _usage(folder)
        marks = _read_mark(folder)
        found.append(
            decisions.Run(
                id=folder.name,
                path=folder,
                size=size,
                has_report=report is not None,
                inputs_key=(report.inputs_key or None) if report else None,
                wheel_sha256=_wheel_hashes(folder, report, on_skip),
                published_to=tuple(sorted({str(m.get("target", "?")) for m in marks})),
                last_write=newest,
                holds_index=any(folder.rglob(f"{index_tree.SIMPLE}/index.html"))
                or (folder / index_tree.FILES).is_dir(),
                image_tag=report.image.tag if report and report.image else None,
                image_id=report.image.id if report and report.image else None,
            )
        )
    return tuple(found)


def scan_results(store: Path, on_skip: Skipped = _ignore) -> tuple[decisions.StoredResult, ...]:
    """Entries of the result store (a staging or retired entry, dot-named, is a save in progress)."""
    if not store.is_dir():
        return ()
    found = []
    for entry in sorted(store.iterdir()):
        if not decisions.RESULT_KEY.fullmatch(entry.name) or entry.is_symlink() or not entry.is_dir():
            continue
        size, newest = _usage(entry)
        report = entry / REPORT_NAME
        saved = report.stat().st_mtime if report.is_file() else newest
        stored = _report(entry)
        hashes = _wheel_hashes(entry, stored, on_skip)
        image = stored.image if stored else None
        found.append(
            decisions.StoredResult(
                entry.name,
                entry,
                size,
                hashes,
                saved,
                image.tag if image else None,
                image.id if image else None,
            )
        )
    return tuple(found)


def published_in(output_dir: Path, on_skip: Skipped = _ignore) -> decisions.Published:
    """The wheels of the published trees directly under the output dir (wheelhouse/cu130/ ...):
    their sha256 and the inputs keys publish wrote beside them."""
    sha256: dict[str, str] = {}
    inputs: set[str] = set()
    if not output_dir.is_dir():
        return decisions.Published()
    for tree in sorted(output_dir.iterdir()):
        files = tree / index_tree.FILES
        if tree.name == "runs" or not files.is_dir():
            continue
        for wheel in files.glob("*.whl"):
            try:
                sha256[index_tree.file_sha256(wheel)] = str(tree)
            except FileRefused as refused:
                _not_read(on_skip, refused)
            except OSError:
                pass
            try:
                inputs |= index_tree.read_inputs(wheel)
            except FileRefused as refused:
                _not_read(on_skip, refused)
            except ValueError:  # not text, or a line that is no key: it names none
                on_skip(f"skipped {wheel}{index_tree.INPUTS_SUFFIX}: not a list of inputs keys")
            except OSError:
                pass
    return decisions.Published(sha256, frozenset(inputs))


# ---------------------------------------------------------------------------------------------
# Planning and doing


def current_images(images: ImageIds, options: ImageOptions, scope: decisions.Scope) -> frozenset[str]:
    """The tags a build with these options would use now: the plain image of each CUDA 13
    toolkit, and for cu12x the image with the CUDA 12 layer and the layer itself (or
    --cuda12-image's image instead); and the sccache-dist fleet's image FROM the plain default
    one, when that is here (its tag hashes the plain image's ID, as `wheelbuild dist` names it)."""
    plain_by_toolkit = {
        toolkit: image_inputs(images, replace(options, cuda12_redist=False, toolkit=toolkit))
        for toolkit in CUDA13_TOOLKITS
    }
    plain = plain_by_toolkit[options.toolkit]
    tags = {inputs.tag for inputs in plain_by_toolkit.values()}
    if options.cuda12_image is None:
        cu12 = image_inputs(images, replace(options, cuda12_redist=True))
        tags |= {cu12.tag, cuda12_layer().tag}
    current = {scope.retag(t) for t in tags}
    if build_id := images.local_image_id(scope.retag(plain.tag)):
        dockerfile = image_script(DIST_DOCKERFILE).read_bytes()
        current.add(dist_image_tag(dockerfile, build_id, scope.dist_repository))
    return frozenset(current)


def collect(
    engine: GcEngine, options: GcOptions, on_step: Callable[[str], None], on_skip: Skipped = _ignore
) -> decisions.GcDecisions:
    on_step(f"reading {options.output_dir / 'runs'} and the result store {options.store}")
    runs = scan_runs(options.output_dir / "runs", on_skip)
    results = scan_results(options.store, on_skip)
    published = published_in(options.output_dir, on_skip)
    on_step("reading Docker's images, volumes and containers (sizes as Docker counts them)")
    state = engine.gc_state(options.scope)
    base = options.image_options.base_image or production_base()
    base_id = engine.local_image_id(base)
    wheel_cache = None
    volume = options.scope.retag(TORCH_WHEELS_VOLUME)
    if not options.caches and any(v.name == volume for v in state.volumes):
        on_step(f"reading the wheel cache {volume} (bytes on disk, each file once) in a {base} container")
        answer = engine.gc_wheel_cache(volume, base, options.wheel_cache_bound, prune=False)
        try:
            wheel_cache = (
                wheel_cache_use.WheelCacheUse.from_json(volume, answer) if answer is not None else None
            )
        except ValueError as bad:
            on_skip(f"the wheel cache's report was not read: {bad}")
        if answer is None:
            on_skip(f"the wheel cache {volume} was not read: the base image {base} is not here to read it")
    return decisions.decide(
        runs=runs,
        results=results,
        docker=state,
        published=published,
        current_images=current_images(engine, options.image_options, options.scope),
        base_ids=frozenset({base_id} - {""}),
        keep_runs=options.keep_runs,
        caches=options.caches,
        scope=options.scope,
        now=time.time(),
        wheel_cache=wheel_cache,
    )


def _remove_folder(decision: decisions.Decision, parent: Path) -> decisions.Removal:
    """Renamed aside first (a reader sees the whole folder or none of it), then deleted."""
    path = decision.path
    assert path is not None and path.parent == parent
    if decision.kind is decisions.Kind.RUN and _read_mark(path):
        return decisions.Removal(decision, decisions.Status.KEPT, "published since gc looked")
    aside = parent / f".gc-{path.name}-{secrets.token_hex(3)}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return decisions.Removal(decision, decisions.Status.GONE)
    except OSError as error:
        return decisions.Removal(decision, decisions.Status.FAILED, error.strerror or str(error))
    try:
        shutil.rmtree(aside)
    except OSError as error:
        return decisions.Removal(
            decision, decisions.Status.FAILED, f"{error.strerror or error} (left in {aside})"
        )
    return decisions.Removal(decision, decisions.Status.REMOVED)


def _prune_wheel_cache(
    engine: GcEngine, trees: list[decisions.Decision], options: GcOptions
) -> tuple[decisions.Removal, ...]:
    """The wheel cache pruned by its rule, once, in a container: each decided tree removed, or
    kept when the rule no longer drops it (used since gc looked)."""
    volume = options.scope.retag(TORCH_WHEELS_VOLUME)
    base = options.image_options.base_image or production_base()
    answer = engine.gc_wheel_cache(volume, base, options.wheel_cache_bound, prune=True)
    if answer is None:
        return tuple(
            decisions.Removal(d, decisions.Status.FAILED, f"the prune in a {base} container gave no answer")
            for d in trees
        )
    if answer.get("busy"):
        why = "a build was filling the cache for two minutes; its own run prunes it"
        return tuple(decisions.Removal(d, decisions.Status.KEPT, why) for d in trees)
    gone = answer.get("gone")
    removed = {f"{volume}/{name}" for name in (gone.get("trees", []) if isinstance(gone, dict) else [])}
    if isinstance(gone, dict) and isinstance(gone.get("locks"), list):
        # The store's cache folder: a build no longer counts on a torch whose lock went.
        held_torch.forget(options.store.parent, (str(lock) for lock in gone["locks"]))
    done = []
    for decision in trees:
        if decision.name in removed or decision.name.endswith(wheel_cache_use.UNNEEDED):
            done.append(decisions.Removal(decision, decisions.Status.REMOVED))
        else:
            done.append(decisions.Removal(decision, decisions.Status.KEPT, "used since gc looked"))
    return tuple(done)


def execute(
    engine: GcEngine, decided: decisions.GcDecisions, options: GcOptions, on_line: Callable[[str], None]
) -> tuple[decisions.Removal, ...]:
    """Remove what the plan says, one at a time; in use at the last moment means kept."""
    done = []
    trees = [d for d in decided.removals if d.kind is decisions.Kind.TREE]
    if trees:
        for removal in _prune_wheel_cache(engine, trees, options):
            on_line(removal.line())
            done.append(removal)
    for decision in decided.removals:
        if decision.kind is decisions.Kind.TREE:
            continue
        if decision.kind is decisions.Kind.RUN:
            removal = _remove_folder(decision, options.output_dir / "runs")
        elif decision.kind is decisions.Kind.RESULT:
            removal = _remove_folder(decision, options.store)
        elif decision.kind is decisions.Kind.IMAGE:
            removal = engine.gc_remove_image(decision, options.scope)
        else:
            removal = engine.gc_remove_volume(decision, options.scope)
        on_line(removal.line())
        done.append(removal)
    return tuple(done)
