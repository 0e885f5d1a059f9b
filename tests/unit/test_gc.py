"""wheelbuild gc's decisions (wheelbuild.gc.decisions, pure) and its folder side (wheelbuild.gc.prune) on real
temp folders: what is kept, what goes, and that a published wheel's run is never a candidate."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument, GcIncomplete
from wheelbuild.gc import decisions as gc
from wheelbuild.gc import prune, wheel_cache_use
from wheelbuild.image import names
from wheelbuild.image.options import ImageOptions
from wheelbuild.index import publish as publishing
from wheelbuild.spec import held_torch
from wheelbuild.variants import parse_variant

from tests.clikit import NO_DOCKER, WHEELBUILD
from tests.indexkit import make_wheel

NOW = 1_800_000_000.0
DAY = 24 * 3600.0


def run(n: int, **kw: object) -> gc.Run:
    """Run number n: a higher n is newer (its id's time is later)."""
    fields: dict[str, object] = {
        "id": f"202611{n:02d}-120000-abcdef",
        "path": Path(f"/w/runs/202611{n:02d}-120000-abcdef"),
        "size": 1000 * n,
        "has_report": True,
        "inputs_key": f"key{n}",
        "wheel_sha256": (f"sha{n}",),
        "published_to": (),
        "last_write": NOW - 30 * DAY,
    }
    fields.update(kw)
    return gc.Run(**fields)  # type: ignore[arg-type]


def by_name(decisions: tuple[gc.Decision, ...]) -> dict[str, gc.Decision]:
    return {d.name: d for d in decisions}


def removed(decisions: tuple[gc.Decision, ...]) -> set[str]:
    return {d.name for d in decisions if d.remove}


# ---------------------------------------------------------------------------------------------
# Runs


def test_the_newest_n_runs_are_kept_and_older_unpublished_ones_go() -> None:
    runs = [run(n) for n in range(1, 8)]
    decided = gc.decide_runs(runs, keep_runs=3, in_use={}, published=gc.Published(), now=NOW)
    assert removed(decided) == {run(n).id for n in (1, 2, 3, 4)}
    kept = by_name(decided)[run(7).id]
    assert not kept.remove and "newest 3" in kept.why


def test_a_run_whose_wheel_was_published_is_kept_even_when_older_than_n() -> None:
    runs = [run(1, published_to=("/srv/wheels/cu130",)), run(2), run(3), run(4)]
    decided = by_name(gc.decide_runs(runs, keep_runs=1, in_use={}, published=gc.Published(), now=NOW))
    assert not decided[run(1).id].remove
    assert "published to /srv/wheels/cu130" in decided[run(1).id].why
    assert decided[run(2).id].remove and decided[run(3).id].remove


def test_a_run_whose_wheel_sits_in_a_published_tree_is_kept_without_a_mark() -> None:
    published = gc.Published({"sha2": "/w/cu130"})
    decided = by_name(
        gc.decide_runs([run(1), run(2), run(3)], keep_runs=1, in_use={}, published=published, now=NOW)
    )
    assert not decided[run(2).id].remove and "published in /w/cu130" in decided[run(2).id].why
    assert decided[run(1).id].remove


def test_keep_runs_zero_still_keeps_published_in_use_and_building_runs() -> None:
    runs = [
        run(1, published_to=("x",)),
        run(2),
        run(3, has_report=False, last_write=NOW - 60),
        run(4, has_report=False, last_write=NOW - 2 * DAY),
        run(5, holds_index=True),
    ]
    decided = gc.decide_runs(
        runs, keep_runs=0, in_use={run(2).id: "running container c"}, published=gc.Published(), now=NOW
    )
    assert removed(decided) == {run(4).id}
    why = by_name(decided)
    assert "in use by running container c" in why[run(2).id].why
    assert "may still be building" in why[run(3).id].why
    assert "never removes" in why[run(5).id].why


def test_a_run_a_container_works_on_is_kept_through_its_label() -> None:
    container = gc.ContainerFact("cibw", "sha256:img", "running", run(1).id, ())
    decided = gc.decide(
        runs=[run(1), run(2)],
        results=[],
        docker=gc.DockerState((), (), (container,)),
        published=gc.Published(),
        current_images=frozenset(),
        base_ids=frozenset(),
        keep_runs=1,
        caches=False,
        scope=gc.Scope(),
        now=NOW,
    )
    assert not decided.removals


# ---------------------------------------------------------------------------------------------
# Results


def result(n: int, **kw: object) -> gc.StoredResult:
    fields: dict[str, object] = {
        "key": f"key{n}",
        "path": Path(f"/c/results/key{n}"),
        "size": 10 * n,
        "wheel_sha256": (f"sha{n}",),
        "saved": NOW - (100 - n) * 60,
    }
    fields.update(kw)
    return gc.StoredResult(**fields)  # type: ignore[arg-type]


def test_results_kept_runs_need_published_ones_and_the_newest_n_stay() -> None:
    results = [result(n) for n in range(1, 8)]
    decided = gc.decide_results(
        results,
        keep_results=2,
        needed={"key1": "r1"},
        published=gc.Published({"sha2": "/w/cu130"}, frozenset({"key3"})),
    )
    assert removed(decided) == {"key4", "key5"}
    why = by_name(decided)
    assert "kept run r1" in why["key1"].why
    assert "published in /w/cu130" in why["key2"].why
    assert "inputs is published" in why["key3"].why
    assert "newest 2" in why["key7"].why


def test_plan_keeps_the_results_of_kept_runs_and_of_published_runs() -> None:
    decided = gc.decide(
        runs=[run(1, published_to=("x",)), run(2), run(3)],
        results=[result(1), result(2), result(3)],
        docker=gc.DockerState((), (), ()),
        published=gc.Published(),
        current_images=frozenset(),
        base_ids=frozenset(),
        keep_runs=1,
        caches=False,
        scope=gc.Scope(),
        now=NOW,
    )
    assert {(d.kind, d.name) for d in decided.removals} == {
        (gc.Kind.RUN, run(2).id),
        (gc.Kind.RESULT, "key2"),
    }


# ---------------------------------------------------------------------------------------------
# Images and volumes


def image(tag: str, image_id: str, size: int = 100, untag_only: bool = False) -> gc.ImageFact:
    return gc.ImageFact(tag, image_id, size, untag_only)


def test_the_current_image_used_and_base_images_are_kept_the_rest_go() -> None:
    images = [
        image("wheelbuild-cuda131:current", "sha256:a"),
        image("wheelbuild-cuda131:old", "sha256:b"),
        image("wheelbuild-cuda131:stopped-user", "sha256:c"),
        image("wheelbuild-cuda131:running-user", "sha256:d"),
        image("wheelbuild-cuda131:base-retagged", "sha256:base"),
        image("wheelbuild-cuda12-redist:current", "sha256:e"),
        image("wheelbuild-cuda12-redist:old", "sha256:f", untag_only=True, size=0),
    ]
    containers = [
        gc.ContainerFact("s", "sha256:c", "exited", "", ()),
        gc.ContainerFact("r", "sha256:d", "running", "", ()),
    ]
    decided = gc.decide_images(
        images,
        current=frozenset({"wheelbuild-cuda131:current", "wheelbuild-cuda12-redist:current"}),
        containers=containers,
        base_ids=frozenset({"sha256:base"}),
    )
    assert removed(decided) == {"wheelbuild-cuda131:old", "wheelbuild-cuda12-redist:old"}
    why = by_name(decided)
    assert why["wheelbuild-cuda131:current"].why == "the image of the current inputs"
    assert "exited container s" in why["wheelbuild-cuda131:stopped-user"].why
    assert "running container r" in why["wheelbuild-cuda131:running-user"].why
    assert why["wheelbuild-cuda131:base-retagged"].why == "the base image"
    assert "only this one goes" in why["wheelbuild-cuda12-redist:old"].why


def test_volumes_mounted_are_kept_torch_headers_go_caches_only_when_asked() -> None:
    volumes = [
        gc.VolumeFact("wheelbuild-sccache", 5),
        gc.VolumeFact("wheelbuild-pip-cache", 6),
        gc.VolumeFact("wheelbuild-torch-wheels", 7),
        gc.VolumeFact("wheelbuild-torch-0123456789abcdef", 8),
        gc.VolumeFact("wheelbuild-torch-fedcba9876543210", 9),
        gc.VolumeFact("someone-elses", 10),
        gc.VolumeFact("wheelbuild-torch-notahash", 11),
    ]
    containers = [
        gc.ContainerFact(
            "c", "i", "running", "r", ("wheelbuild-pip-cache", "wheelbuild-torch-fedcba9876543210")
        )
    ]
    plain = gc.decide_volumes(volumes, containers=containers, caches=False, scope=gc.Scope())
    assert removed(plain) == {"wheelbuild-torch-0123456789abcdef"}
    assert {d.name for d in plain} == {v.name for v in volumes[:5]}  # others' volumes are never listed
    with_caches = gc.decide_volumes(volumes, containers=containers, caches=True, scope=gc.Scope())
    assert removed(with_caches) == {
        "wheelbuild-torch-0123456789abcdef",
        "wheelbuild-sccache",
        "wheelbuild-torch-wheels",
    }
    assert "mounted by running container c" in by_name(with_caches)["wheelbuild-pip-cache"].why


def test_the_default_scope_names_are_the_ones_builds_use() -> None:
    scope = gc.Scope()
    assert scope.image_repository == names.IMAGE_REPOSITORY
    assert scope.layer_repository == names.LAYER_REPOSITORY
    assert set(scope.cache_volumes) == {
        names.SCCACHE_VOLUME,
        names.PIP_CACHE_VOLUME,
        names.TORCH_WHEELS_VOLUME,
    }
    assert scope.retag("wheelbuild-cuda131:abc") == "wheelbuild-cuda131:abc"


def test_a_scope_of_another_prefix_sees_only_its_own_names() -> None:
    scope = gc.Scope(names.checked_prefix("wbgctest-1a2b"))
    assert scope.retag("wheelbuild-cuda131:abc") == "wbgctest-1a2b-cuda131:abc"
    assert scope.retag("wheelbuild-cuda12-redist:abc") == "wbgctest-1a2b-cuda12-redist:abc"
    assert scope.owns_image("wbgctest-1a2b-cuda131:x")
    assert not scope.owns_image("wheelbuild-cuda131:x")
    assert not scope.owns_image("wheelbuild-base:bookworm-4f9f0ef91ad7")
    assert scope.volume_kind("wbgctest-1a2b-sccache") == "cache"
    assert scope.volume_kind("wbgctest-1a2b-torch-0123456789abcdef") == "torch"
    assert scope.volume_kind("wheelbuild-sccache") is None
    assert scope.volume_kind("wheelbuild-torch-0123456789abcdef") is None
    for bad in ("Upper", "-dash", "a b", "x" * 70, "a/b"):
        with pytest.raises(BadArgument):
            names.checked_prefix(bad)


def test_a_docker_prefix_that_cannot_name_images_is_refused_before_any_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHEELBUILD_")}
    env |= {names.PREFIX_ENV: "Not/A-Name", "DOCKER_HOST": NO_DOCKER}
    done = subprocess.run(
        [WHEELBUILD, "gc", "--dry-run", "--output-dir", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == BadArgument.exit_code, done.stderr
    assert f"{names.PREFIX_ENV}='Not/A-Name' is not a name prefix" in done.stderr
    assert "no Docker daemon" not in done.stderr  # refused before gc reached for the engine


def test_the_summary_totals_what_goes_human_readable() -> None:
    decided = gc.GcDecisions(
        (
            gc.Decision(gc.Kind.IMAGE, "wheelbuild-cuda131:a", 3 * 1024**3, True, "old"),
            gc.Decision(gc.Kind.VOLUME, "wheelbuild-torch-0123456789abcdef", 1024**3, True, "unused"),
            gc.Decision(gc.Kind.RUN, "r", 512 * 1024, True, "old"),
            gc.Decision(gc.Kind.IMAGE, "wheelbuild-cuda131:b", 5, False, "current"),
        )
    )
    assert gc.summary(decided) == (
        "gc: would free 4.0 GiB: 1 run (512.0 KiB), 0 results, 1 image (3.0 GiB), 1 volume (1.0 GiB); kept 1"
    )
    assert (
        decided.decisions[0]
        .line(dry_run=True)
        .startswith("would remove image  wheelbuild-cuda131:a  3.0 GiB")
    )
    removals = [
        gc.Removal(decided.decisions[0], gc.Status.REMOVED),
        gc.Removal(decided.decisions[1], gc.Status.KEPT, "in use"),
        gc.Removal(decided.decisions[2], gc.Status.FAILED, "Permission denied"),
    ]
    assert gc.summary(decided, removals) == (
        "gc: freed 3.0 GiB: 0 runs, 0 results, 1 image (3.0 GiB), 0 volumes; kept 2; 1 failed"
    )
    with pytest.raises(GcIncomplete) as raised:
        gc.check(removals)
    assert raised.value.exit_code == 27 and "Permission denied" in raised.value.cause


# ---------------------------------------------------------------------------------------------
# The folder side, on a real output dir with a published index


def make_run(runs: Path, run_id: str, payload: str, *, report: bool = True, age_s: float = 30 * DAY) -> Path:
    folder = runs / run_id
    wheel = make_wheel(folder, payload=payload)
    if report:
        (folder / "build-report.json").write_text(
            json.dumps(
                {
                    "run_id": run_id,
                    "inputs_key": f"key-{run_id}",
                    "wheels": [{"file": wheel.name, "sha256": _sha(wheel)}],
                }
            )
        )
    old = time.time() - age_s
    for path in [*folder.iterdir(), folder]:
        os.utime(path, (old, old))
    return wheel


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_runs_of_a_real_output_dir_published_tree_mark_and_removal(tmp_path: Path) -> None:
    out = tmp_path / "wheelhouse"
    runs = out / "runs"
    ids = [f"2026110{n}-120000-00000{n}" for n in range(1, 7)]
    in_tree = make_run(runs, ids[0], "published into the tree")
    elsewhere = make_run(runs, ids[1], "published elsewhere")
    make_run(runs, ids[2], "old, unpublished")
    make_run(runs, ids[3], "killed mid-build", report=False)
    make_run(runs, ids[4], "newest but one")
    make_run(runs, ids[5], "newest")
    (runs / "not-a-run").mkdir()  # not ours: never a candidate
    publishing.publish([in_tree], out / "cu130")
    prune.record_published([elsewhere], "ci@wheels.example:/srv/wheels/cu130")
    mark = json.loads((runs / ids[1] / gc.PUBLISHED_MARK).read_text())
    assert mark[0]["target"] == "ci@wheels.example:/srv/wheels/cu130" and mark[0]["sha256"] == _sha(elsewhere)
    published_tree = {p.relative_to(out) for p in (out / "cu130").rglob("*")}

    scanned = prune.scan_runs(runs)
    assert [r.id for r in scanned] == ids
    decided = gc.decide(
        runs=scanned,
        results=(),
        docker=gc.DockerState((), (), ()),
        published=prune.published_in(out),
        current_images=frozenset(),
        base_ids=frozenset(),
        keep_runs=2,
        caches=False,
        scope=gc.Scope(),
        now=time.time(),
    )
    assert {d.name for d in decided.removals} == {ids[2], ids[3]}
    why = by_name(decided.decisions)
    assert f"published in {out / 'cu130'}" in why[ids[0]].why
    assert "published to ci@wheels.example" in why[ids[1]].why
    assert all(d.size > 0 for d in decided.decisions)

    options = prune.GcOptions(out, tmp_path / "store", 2, False, gc.Scope(), None)  # type: ignore[arg-type]
    done = prune.execute(None, decided, options, lambda line: None)  # type: ignore[arg-type]  # no Docker asked
    assert [r.status for r in done] == [gc.Status.REMOVED, gc.Status.REMOVED]
    assert sorted(p.name for p in runs.iterdir()) == sorted([ids[0], ids[1], ids[4], ids[5], "not-a-run"])
    assert {p.relative_to(out) for p in (out / "cu130").rglob("*")} == published_tree  # the tree is untouched
    assert (out / "cu130" / "files" / in_tree.name).read_bytes() == in_tree.read_bytes()


def test_a_run_published_after_gc_looked_is_kept(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    wheel = make_run(runs, "20261101-120000-000001", "late")
    decided = gc.decide(
        runs=prune.scan_runs(runs),
        results=(),
        docker=gc.DockerState((), (), ()),
        published=gc.Published(),
        current_images=frozenset(),
        base_ids=frozenset(),
        keep_runs=0,
        caches=False,
        scope=gc.Scope(),
        now=time.time(),
    )
    assert len(decided.removals) == 1
    prune.record_published([wheel], "/srv/late")
    options = prune.GcOptions(tmp_path, tmp_path / "store", 0, False, gc.Scope(), None)  # type: ignore[arg-type]
    (done,) = prune.execute(None, decided, options, lambda line: None)  # type: ignore[arg-type]  # no Docker asked
    assert done.status is gc.Status.KEPT and wheel.is_file()


def test_result_store_entries_are_scanned_and_staging_entries_left_alone(tmp_path: Path) -> None:
    store = tmp_path / "results"
    key = "a" * 64
    wheel = make_wheel(store / key, payload="stored")
    (store / key / "build-report.json").write_text(json.dumps({"run_id": "r", "wheels": []}))
    (store / f".{key[:12]}-xyz").mkdir()  # a save in progress
    (store / "README").write_text("not ours")
    (found,) = prune.scan_results(store)
    assert found.key == key and found.wheel_sha256 == (_sha(wheel),) and found.size > 0


@pytest.mark.parametrize("shape", ["oversized", "fifo", "not a list"])
def test_a_hostile_published_mark_is_read_no_further_kept_and_never_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    monkeypatch.setattr(prune, "MAX_MARK", 1024)
    runs = tmp_path / "runs"
    wheel = make_run(runs, "20261101-120000-000001", "marked")
    mark = runs / "20261101-120000-000001" / gc.PUBLISHED_MARK
    if shape == "oversized":
        mark.write_text(json.dumps([{"target": "/srv/x" * 400}]))  # valid JSON, over the cap
    elif shape == "fifo":
        os.mkfifo(mark)  # a read would block forever
    else:
        mark.write_text('{"target": "/srv/x"}')
    before = mark.stat()
    (scanned,) = prune.scan_runs(runs)
    assert scanned.published_to, "a mark gc cannot read still says the run was published"
    prune.record_published([wheel], "/srv/again")  # must not block, nor replace what it could not read
    after = mark.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )


def test_every_inputs_key_beside_a_published_wheel_keeps_its_stored_result(tmp_path: Path) -> None:
    # A nightly's abi3 wheel serves its cells of every Python: one key per line beside it.
    out = tmp_path / "wheelhouse"
    wheel = make_wheel(tmp_path / "in", tag="cp39-abi3-linux_x86_64")
    cp311, cp313 = "311" * 21 + "1", "313" * 21 + "3"
    publishing.publish(
        [wheel], out / "cu130", sidecars=publishing.Sidecars(inputs={wheel.name: (cp311, cp313)})
    )
    assert prune.published_in(out).inputs == frozenset({cp311, cp313})


def test_the_dist_fleets_images_are_gcs_too_under_a_tests_prefix_its_own() -> None:
    real, test = gc.Scope(), gc.Scope("wbgctest-1234")
    assert real.owns_image("wbdist-sccache:0123456789abcdef")
    assert not test.owns_image("wbdist-sccache:0123456789abcdef")  # a test never sees the real fleet's
    assert test.owns_image("wbgctest-1234-dist-sccache:0123456789abcdef")
    assert not real.owns_image("wbdist-sccache") and not real.owns_image("wbdist-other:0123456789abcdef")


SCAN_IN_A_CHILD = """
import sys
from pathlib import Path
from wheelbuild.gc import prune
out = Path(sys.argv[1])
runs = prune.scan_runs(out / "runs", print)
published = prune.published_in(out, print)
print("hashes", *sorted(h for r in runs for h in r.wheel_sha256))
print("published", *sorted(published.sha256))
"""


def test_gc_reads_no_fifo_or_device_named_like_a_wheel_and_says_what_it_skipped(tmp_path: Path) -> None:
    out = tmp_path / "wheelhouse"
    run_id = "20261101-120000-000001"
    wheel = make_run(out / "runs", run_id, "real", report=False)
    os.mkfifo(out / "runs" / run_id / "fifo-1.0-py3-none-any.whl")  # no writer: a read blocks for ever
    (out / "runs" / run_id / "zero-1.0-py3-none-any.whl").symlink_to("/dev/zero")  # a read never ends
    published = make_wheel(tmp_path / "in", "served", "1.0")
    publishing.publish([published], out / "cu130")
    os.mkfifo(out / "cu130" / "files" / "fifo-2.0-py3-none-any.whl")
    os.mkfifo(out / "cu130" / "files" / f"{published.name}.inputs")
    # In a child, so that a scan that blocks fails this test instead of hanging the suite.
    child = subprocess.run(
        [sys.executable, "-c", SCAN_IN_A_CHILD, str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    skipped = sorted(line for line in lines if line.startswith("skipped "))
    files = out / "cu130" / "files"
    assert skipped == sorted(
        f"skipped {path}: not a regular file (a FIFO, a device or a directory is never read)"
        for path in (
            out / "runs" / run_id / "fifo-1.0-py3-none-any.whl",
            out / "runs" / run_id / "zero-1.0-py3-none-any.whl",
            files / "fifo-2.0-py3-none-any.whl",
            files / f"{published.name}.inputs",
        )
    )
    assert f"hashes {_sha(wheel)}" in lines  # the real wheels are still read
    assert f"published {_sha(published)}" in lines


# ---------------------------------------------------------------------------------------------
# The wheel cache: pruned by its own rule without --caches


def wheel_cache(**kw: object) -> wheel_cache_use.WheelCacheUse:
    """The script's --report of a volume past its bound: one old tree it drops, one it keeps."""
    answer: dict[str, object] = {
        "bound": 40 * 2**30,
        "bytes": 52 * 2**30,
        "bytes_after": 30 * 2**30,
        "unneeded": 2 * 2**30,
        "trees": [
            {
                "name": "cp311/aaaa.0123456789abcdef.2",
                "used": NOW - 3 * DAY,
                "drop": True,
                "why": "least recently used, past the bound",
                "frees": 20 * 2**30,
            },
            {
                "name": "cp313/bbbb.fedcba9876543210.2",
                "used": NOW - 60,
                "drop": False,
                "why": "used in the last hour: a build may hold it",
                "frees": 0,
            },
        ],
    }
    answer.update(kw)
    return wheel_cache_use.WheelCacheUse.from_json("wheelbuild-torch-wheels", answer)


def test_past_its_bound_the_wheel_caches_least_recently_used_tree_goes_without_caches() -> None:
    use = wheel_cache()
    volumes = [gc.VolumeFact("wheelbuild-torch-wheels", 99 * 2**30)]  # Docker counts links twice
    decided = gc.decide(
        runs=(), results=(), docker=gc.DockerState((), tuple(volumes), ()), published=gc.Published(),
        current_images=frozenset(), base_ids=frozenset(), keep_runs=5, caches=False, scope=gc.Scope(),
        now=NOW, wheel_cache=use,
    )  # fmt: skip
    by = by_name(decided.decisions)
    old = by["wheelbuild-torch-wheels/cp311/aaaa.0123456789abcdef.2"]
    assert old.remove and old.kind is gc.Kind.TREE and old.size == 20 * 2**30
    assert "the least recently used" in old.why and "52.0 GiB on disk of its 40.0 GiB bound" in old.why
    recent = by["wheelbuild-torch-wheels/cp313/bbbb.fedcba9876543210.2"]
    assert not recent.remove and "used in the last hour" in recent.why
    unneeded = by[f"wheelbuild-torch-wheels/{wheel_cache_use.UNNEEDED}"]
    assert unneeded.remove and unneeded.size == 2 * 2**30
    volume = by["wheelbuild-torch-wheels"]
    assert not volume.remove and volume.size == 52 * 2**30  # each inode once, as the script counts
    assert "pruned by its rule" in volume.why
    assert "would free 22.0 GiB" in gc.summary(decided)


def test_the_wheel_cache_is_not_pruned_while_a_running_container_mounts_it_and_goes_whole_with_caches() -> (
    None
):
    use = wheel_cache()
    running = [gc.ContainerFact("b", "i", "running", "r", ("wheelbuild-torch-wheels",))]
    held = gc.decide_wheel_cache(use, containers=running, caches=False)
    assert held and not removed(held)
    assert all("running container b mounts the volume" in d.why for d in held if d.size)
    stopped = [gc.ContainerFact("b", "i", "exited", "r", ("wheelbuild-torch-wheels",))]
    assert removed(gc.decide_wheel_cache(use, containers=stopped, caches=False))
    assert gc.decide_wheel_cache(use, containers=(), caches=True) == ()  # the volume goes whole instead
    assert gc.decide_wheel_cache(None, containers=(), caches=False) == ()  # not read: nothing decided
    within = wheel_cache(bytes=10 * 2**30, bytes_after=10 * 2**30, unneeded=0, trees=[])
    assert gc.decide_wheel_cache(within, containers=(), caches=False) == ()


def test_an_answer_that_is_not_the_wheel_caches_report_is_refused() -> None:
    with pytest.raises(ValueError, match="not the wheel cache's report"):
        wheel_cache_use.WheelCacheUse.from_json("v", {"bound": 1, "bytes": "many"})


class _PruningEngine:
    """gc_wheel_cache only: the prune's answer, as the script gives it."""

    def __init__(self, answer: dict[str, object] | None) -> None:
        self.answer = answer
        self.asked: list[tuple[str, int, bool]] = []

    def gc_wheel_cache(self, volume: str, image: str, bound: int, prune: bool) -> dict[str, object] | None:
        self.asked.append((volume, bound, prune))
        return self.answer


def _prune_options(output_dir: Path, store: Path, bound: int) -> prune.GcOptions:
    """gc's options for a prune of the wheel cache: keep 5 runs, no --caches, the base image named."""
    return prune.GcOptions(
        output_dir, store, 5, False, gc.Scope(), ImageOptions(base_image="base:1", ca_bundle=None), bound
    )


def test_gc_prunes_the_wheel_cache_once_and_says_which_tree_went_and_which_was_used_since(
    tmp_path: Path,
) -> None:
    use = wheel_cache(
        trees=[
            {
                "name": f"cp311/{n}.0123456789abcdef.2",
                "used": NOW - 3 * DAY,
                "drop": True,
                "why": "",
                "frees": 1,
            }
            for n in ("aaaa", "cccc")
        ]
    )
    decided = gc.GcDecisions(gc.decide_wheel_cache(use, containers=(), caches=False))
    engine = _PruningEngine({"gone": {"trees": ["cp311/aaaa.0123456789abcdef.2"]}, "pruned": True})
    options = _prune_options(tmp_path, tmp_path / "store", bound=7 * 2**30)
    pruned = prune.execute(engine, decided, options, lambda _: None)  # type: ignore[arg-type]
    done = {r.decision.name.rsplit("/", 1)[-1]: r for r in pruned}
    assert engine.asked == [("wheelbuild-torch-wheels", 7 * 2**30, True)]  # one prune, the bound passed
    assert done["aaaa.0123456789abcdef.2"].status is gc.Status.REMOVED
    assert done["cccc.0123456789abcdef.2"].status is gc.Status.KEPT
    assert "used since gc looked" in done["cccc.0123456789abcdef.2"].detail
    assert done[wheel_cache_use.UNNEEDED.rsplit("/", 1)[-1]].status is gc.Status.REMOVED
    busy = prune.execute(_PruningEngine({"busy": True}), decided, options, lambda _: None)  # type: ignore[arg-type]
    assert {r.status for r in busy} == {gc.Status.KEPT}


def test_the_locks_gc_prunes_are_forgotten_by_the_record_of_held_torch(tmp_path: Path) -> None:
    """A build recorded torch 2.13.0 for cp311 and cp313 in the wheel cache; gc's prune answers
    that cp311's lock went: a build no longer counts on it without the index, cp313 it still does."""
    variant = parse_variant("2.13.0+cu130", "https://pypi.org/simple")
    locks = [
        (f"{variant.cache_key}-{tag}", "a" * 64, f"torch-2.13.0+cu130-{tag}-{tag}-manylinux_2_28_x86_64.whl")
        for tag in ("cp311", "cp313")
    ]
    cache = tmp_path / "cache"
    held_torch.record(cache, variant, locks, "r")
    use = wheel_cache(
        trees=[
            {
                "name": "cp311/aaaa.0123456789abcdef.2",
                "used": NOW - 3 * DAY,
                "drop": True,
                "why": "",
                "frees": 1,
            }
        ]
    )
    decided = gc.GcDecisions(gc.decide_wheel_cache(use, containers=(), caches=False))
    gone = {"trees": ["cp311/aaaa.0123456789abcdef.2"], "locks": [f"{variant.cache_key}-cp311"]}
    options = _prune_options(tmp_path, cache / "results", bound=2**30)
    prune.execute(_PruningEngine({"gone": gone, "pruned": True}), decided, options, lambda _: None)  # type: ignore[arg-type]
    assert [h.python for h in held_torch.held(cache, variant)] == ["cp313"]


def test_the_image_a_kept_run_used_is_kept_though_not_current_here() -> None:
    """A build made in another environment (scripts/setup's base image) named its image; gc run
    from a shell without that environment computes other current inputs. The kept run's image
    stays while the run does; the removed run's image goes."""
    decided = gc.decide(
        runs=[run(1, image_tag="wheelbuild-cuda131:older"), run(2, image_tag="wheelbuild-cuda131:newer")],
        results=[],
        docker=gc.DockerState(
            (image("wheelbuild-cuda131:older", "sha256:o"), image("wheelbuild-cuda131:newer", "sha256:n")),
            (),
            (),
        ),
        published=gc.Published(),
        current_images=frozenset({"wheelbuild-cuda131:elsewhere"}),
        base_ids=frozenset(),
        keep_runs=1,
        caches=False,
        scope=gc.Scope(),
        now=NOW,
    )
    removals = {(d.kind, d.name) for d in decided.removals}
    assert (gc.Kind.IMAGE, "wheelbuild-cuda131:older") in removals
    assert (gc.Kind.IMAGE, "wheelbuild-cuda131:newer") not in removals
    kept = next(d for d in decided.decisions if d.name == "wheelbuild-cuda131:newer")
    assert kept.why == f"the image of kept run {run(2).id}"


def test_the_image_a_kept_stored_result_was_built_in_is_kept_by_tag_or_id() -> None:
    """A build into another --output-dir leaves no run here, only its stored result: the image
    its report names stays while the result does, found by tag or (retagged) by ID."""
    decided = gc.decide(
        runs=[],
        results=[
            result(1, image_tag="wheelbuild-cuda131:gone-result"),
            result(2, image_tag="wheelbuild-cuda131:kept-result"),
            result(3, image_tag="wheelbuild-cuda131:renamed", image_id="sha256:r"),
        ],
        docker=gc.DockerState(
            (
                image("wheelbuild-cuda131:gone-result", "sha256:g"),
                image("wheelbuild-cuda131:kept-result", "sha256:k"),
                image("wheelbuild-cuda131:retagged", "sha256:r"),
            ),
            (),
            (),
        ),
        published=gc.Published(),
        current_images=frozenset({"wheelbuild-cuda131:elsewhere"}),
        base_ids=frozenset(),
        keep_runs=2,
        caches=False,
        scope=gc.Scope(),
        now=NOW,
    )
    why = {d.name: d for d in decided.decisions if d.kind is gc.Kind.IMAGE}
    assert why["wheelbuild-cuda131:gone-result"].remove
    assert why["wheelbuild-cuda131:kept-result"].why == "the image of kept stored result key2"
    assert why["wheelbuild-cuda131:retagged"].why == "the image of kept stored result key3"
    assert not why["wheelbuild-cuda131:retagged"].remove
