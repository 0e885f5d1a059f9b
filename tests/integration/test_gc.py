"""`wheelbuild gc` against the real Docker engine, scoped to throwaway objects of its own.

The test makes tiny images tagged under a repository of its own (FROM the local base, 1 MiB of
its own each), volumes of its own, a running and a created container, and a real output dir
with runs and a published index. gc runs under that prefix (WHEELBUILD_DOCKER_PREFIX, as a
second checkout sharing the engine would), so it cannot see, let alone remove, wheelbuild's real
images and volumes (a build may be using them right now): the test checks that too.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import secrets
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import pytest
from wheelbuild.engine.docker_engine import DockerEngine
from wheelbuild.gc import decisions
from wheelbuild.host.ca_bundle import resolve_ca_bundle
from wheelbuild.image import names
from wheelbuild.image.inputs import image_script
from wheelbuild.image.names import DIST_DOCKERFILE, dist_image_tag
from wheelbuild.image.options import ImageOptions, cuda12_layer, image_inputs
from wheelbuild.index import publish as publishing

from tests.indexkit import make_wheel

from .conftest import Completed, wheelbuild

pytestmark = pytest.mark.docker

MIB = 1024 * 1024
TEST_LABEL = "org.wheelbuild.gc-test"


@dataclass(frozen=True)
class Scoped:
    scope: decisions.Scope
    env: dict[str, str]
    out: Path
    store: Path
    images: dict[str, str]  # role -> tag
    volumes: dict[str, str]  # role -> name
    runs: dict[str, str]  # role -> run id
    results: dict[str, str]  # role -> key


def _tiny_image(client: docker.DockerClient, tag: str, base: str | None, scope: str) -> None:
    """An image with 1 MiB of its own: FROM the base (or scratch), one COPY, labelled as the test's."""
    dockerfile = f"FROM {base or 'scratch'}\nCOPY blob /gc-test-blob\nLABEL {TEST_LABEL}={scope}\n".encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("blob", secrets.token_bytes(MIB))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    client.images.build(fileobj=buffer, custom_context=True, tag=tag, rm=True, pull=False)


def _run_folder(runs: Path, run_id: str, payload: str, age_days: float) -> Path:
    folder = runs / run_id
    wheel = make_wheel(folder, payload=payload)
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    report = {"run_id": run_id, "inputs_key": _key(payload), "wheels": [{"file": wheel.name, "sha256": sha}]}
    (folder / "build-report.json").write_text(json.dumps(report))
    old = time.time() - age_days * 86400
    for path in [*folder.iterdir(), folder]:
        os.utime(path, (old, old))
    return wheel


def _key(payload: str) -> str:
    return hashlib.sha256(payload.encode()).hexdigest()


def _stored(store: Path, key: str, age_days: float) -> None:
    make_wheel(store / key, payload=key)
    report = store / key / "build-report.json"
    report.write_text(json.dumps({"run_id": "x", "wheels": []}))
    old = time.time() - age_days * 86400
    os.utime(report, (old, old))


def _wheelbuild_objects(client: docker.DockerClient) -> tuple[set[str], set[str]]:
    """The real wheelbuild images (tags) and volumes: gc in a test scope must leave every one."""
    tags = {t for i in client.images.list() for t in i.tags if t.startswith("wheelbuild-")}
    volumes = {v.name for v in client.volumes.list() if v.name.startswith("wheelbuild-")}
    return tags, volumes


@pytest.fixture
def scoped(docker_client: docker.DockerClient, base_image: str, tmp_path: Path) -> Iterator[Scoped]:
    scope = decisions.Scope(f"wbgctest-{secrets.token_hex(4)}")
    options = ImageOptions(base_image=base_image, ca_bundle=resolve_ca_bundle(None))
    current = scope.retag(image_inputs(DockerEngine(docker_client), options).tag)
    layer = scope.retag(cuda12_layer().tag)
    images = {
        "current": current,
        "old": f"{scope.image_repository}:0123456789abcdef",
        "used": f"{scope.image_repository}:fedcba9876543210",
        "layer-current": layer,
        "layer-old": f"{scope.layer_repository}:0000000000000000",
        "dist-old": f"{scope.dist_repository}:1111111111111111",
    }
    volumes = {
        "sccache": f"{scope.prefix}-sccache",
        "pip": f"{scope.prefix}-pip-cache",
        "torch-unused": f"{scope.prefix}-torch-aaaaaaaaaaaaaaaa",
        "torch-mounted": f"{scope.prefix}-torch-bbbbbbbbbbbbbbbb",
    }
    labels = {TEST_LABEL: scope.prefix}
    out = tmp_path / "wheelhouse"
    store = tmp_path / "cache" / "results"
    runs = {
        "published-old": "20261101-120000-000001",
        "unpublished-old": "20261102-120000-000002",
        "newest": "20261103-120000-000003",
    }
    results = {"newest-run's": _key("newest"), "orphan": "c" * 64}
    try:
        for role, tag in images.items():
            _tiny_image(docker_client, tag, None if role.startswith("layer") else base_image, scope.prefix)
        # The fleet's image FROM the current build image, tagged as `wheelbuild dist` tags it.
        dockerfile = image_script(DIST_DOCKERFILE).read_bytes()
        images["dist-current"] = dist_image_tag(
            dockerfile, docker_client.images.get(current).id, scope.dist_repository
        )
        _tiny_image(docker_client, images["dist-current"], current, scope.prefix)
        for name in volumes.values():
            docker_client.volumes.create(name, labels=labels)
        docker_client.containers.run(
            base_image,
            ["sh", "-c", f"head -c {MIB} /dev/urandom > /v/blob"],
            volumes={volumes["torch-unused"]: {"bind": "/v", "mode": "rw"}},
            labels=labels,
            remove=True,
            network_disabled=True,
        )
        docker_client.containers.run(
            base_image,
            ["sleep", "600"],
            name=f"{scope.prefix}-running",
            volumes={volumes["pip"]: {"bind": "/v", "mode": "rw"}},
            labels=labels,
            detach=True,
            network_disabled=True,
        )
        docker_client.containers.create(
            images["used"],
            ["true"],
            name=f"{scope.prefix}-created",
            volumes={volumes["torch-mounted"]: {"bind": "/v", "mode": "ro"}},
            labels=labels,
        )
        published = _run_folder(out / "runs", runs["published-old"], "published", age_days=30)
        _run_folder(out / "runs", runs["unpublished-old"], "unpublished", age_days=20)
        _run_folder(out / "runs", runs["newest"], "newest", age_days=10)
        publishing.publish([published], out / "cu130")
        _stored(store, results["newest-run's"], age_days=10)
        _stored(store, results["orphan"], age_days=40)
        env = {
            names.PREFIX_ENV: scope.prefix,
            "WHEELBUILD_CACHE_DIR": str(store.parent),
            "WHEELBUILD_BASE_IMAGE": base_image,
            "NO_COLOR": "1",
        }
        yield Scoped(scope, env, out, store, images, volumes, runs, results)
    finally:
        for container in docker_client.containers.list(
            all=True, filters={"label": f"{TEST_LABEL}={scope.prefix}"}
        ):
            container.remove(force=True)
        for tag in reversed(images.values()):  # the fleet's image before the one it is FROM
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(tag, force=True)
        for name in volumes.values():
            with contextlib.suppress(docker.errors.NotFound):
                docker_client.volumes.get(name).remove(force=True)


def _present(client: docker.DockerClient, s: Scoped) -> tuple[set[str], set[str]]:
    tags = {t for image in client.images.list() for t in image.tags}
    names = {v.name for v in client.volumes.list()}
    return {r for r, t in s.images.items() if t in tags}, {r for r, n in s.volumes.items() if n in names}


def _gc(s: Scoped, *args: str) -> Completed:
    return wheelbuild("gc", "--output-dir", str(s.out), "--keep-runs", "1", *args, env=s.env, timeout=300)


def test_gc_dry_run_frees_nothing_and_a_real_run_removes_exactly_the_unneeded(
    docker_client: docker.DockerClient, scoped: Scoped
) -> None:
    s = scoped
    before_images, before_volumes = _present(docker_client, s)
    assert before_images == set(s.images) and before_volumes == set(s.volumes)
    real_before = _wheelbuild_objects(docker_client)
    tree = {p.relative_to(s.out): p.read_bytes() for p in (s.out / "cu130").rglob("*") if p.is_file()}

    dry = _gc(s, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    print(dry.stdout)  # the dry run's lines, for the log
    lines = dry.stdout.splitlines()

    def line(name: str) -> str:
        (found,) = [entry for entry in lines if f" {name} " in entry]
        return found

    assert line(s.images["old"]).startswith("would remove image  ") and "1.0 MiB" in line(s.images["old"])
    assert line(s.images["layer-old"]).startswith("would remove image  ")
    assert line(s.images["dist-old"]).startswith("would remove image  ")
    assert line(s.images["dist-current"]).startswith("keep") and "current inputs" in line(
        s.images["dist-current"]
    )
    assert line(s.images["current"]).startswith("keep") and "current inputs" in line(s.images["current"])
    assert line(s.images["layer-current"]).startswith("keep")
    assert "created container" in line(s.images["used"])
    assert line(s.volumes["torch-unused"]).startswith("would remove volume ") and "MiB" in line(
        s.volumes["torch-unused"]
    )
    assert "mounted by created container" in line(s.volumes["torch-mounted"])
    assert "mounted by running container" in line(s.volumes["pip"])
    assert "only with --caches" in line(s.volumes["sccache"])
    assert line(s.runs["unpublished-old"]).startswith("would remove run ")
    assert "published in" in line(s.runs["published-old"])
    assert line(s.runs["newest"]).startswith("keep")
    assert "kept run" in line(s.results["newest-run's"])
    # sizes in the summary: the 3 images' and the volume's MiB, plus the run's and the result's KiB
    summary = lines[-1]
    assert summary.startswith("gc: would free ") and "3 images (3.0 MiB)" in summary and "1 run (" in summary
    assert "wheelbuild-cuda131" not in dry.stdout and "wheelbuild-sccache" not in dry.stdout
    # the dry run removed nothing
    assert _present(docker_client, s) == (before_images, before_volumes)
    assert sorted(p.name for p in (s.out / "runs").iterdir()) == sorted(s.runs.values())
    assert sorted(p.name for p in s.store.iterdir()) == sorted(s.results.values())

    real = _gc(s)
    assert real.returncode == 0, real.stdout + real.stderr
    assert real.stdout.splitlines()[-1].startswith("gc: freed ")
    images, volumes = _present(docker_client, s)
    assert images == {"current", "used", "layer-current", "dist-current"}
    assert volumes == {"sccache", "pip", "torch-mounted"}
    assert sorted(p.name for p in (s.out / "runs").iterdir()) == sorted(
        [s.runs["published-old"], s.runs["newest"]]
    )
    assert sorted(p.name for p in s.store.iterdir()) == [s.results["newest-run's"]]
    assert {p.relative_to(s.out): p.read_bytes() for p in (s.out / "cu130").rglob("*") if p.is_file()} == tree
    docker_client.images.get(os.environ["WHEELBUILD_BASE_IMAGE"])  # the base image stays

    caches = _gc(s, "--caches")
    assert caches.returncode == 0, caches.stdout + caches.stderr
    images, volumes = _present(docker_client, s)
    assert volumes == {"pip", "torch-mounted"}  # a mounted cache stays even with --caches
    assert images == {"current", "used", "layer-current", "dist-current"}

    real_after = _wheelbuild_objects(docker_client)
    assert real_before[0] <= real_after[0] and real_before[1] <= real_after[1]


_TWO_TREES = """
import os, pathlib, time
trees = pathlib.Path("/cache/trees/cp311")
for name, age in (("old", 3 * 86400), ("new", 0)):
    tree = trees / f"{name}.0123456789abcdef.2"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "blob").write_bytes(os.urandom(1 << 20))
    (tree / f"{name}-1.0.dist-info").mkdir()
    (tree / f"{name}-1.0.dist-info" / "RECORD").write_text(f"pkg/blob,,{1 << 20}\\n")
    stamp = trees / f"{tree.name}.used"
    stamp.write_text("")
    then = time.time() - age
    os.utime(stamp, (then, then))
    os.symlink(tree.name, trees / name)
"""


def test_gc_prunes_the_wheel_cache_past_its_bound_in_a_base_container_without_caches(
    docker_client: docker.DockerClient, base_image: str, tmp_path: Path
) -> None:
    """Two trees of 1 MiB in a wheel cache bounded at 1 MiB: gc reads the volume through the
    script's --report in a base-image container and says the tree used three days ago goes and
    the one used now stays; the real gc prunes it (the same rule, --prune) and leaves the
    volume and the recent tree."""
    scope = decisions.Scope(f"wbgctest-{secrets.token_hex(4)}")
    volume = scope.retag(names.TORCH_WHEELS_VOLUME)
    env = {names.PREFIX_ENV: scope.prefix, "WHEELBUILD_BASE_IMAGE": base_image, "NO_COLOR": "1",
           "WHEELBUILD_CACHE_DIR": str(tmp_path / "cache"), "WHEELBUILD_WHEEL_CACHE_BOUND": "1m"}  # fmt: skip
    docker_client.volumes.create(volume, labels={TEST_LABEL: scope.prefix})
    try:
        docker_client.containers.run(
            base_image, ["python3", "-c", _TWO_TREES], volumes={volume: {"bind": "/cache", "mode": "rw"}},
            remove=True, network_disabled=True,
        )  # fmt: skip
        out = tmp_path / "wheelhouse"
        dry = wheelbuild("gc", "--output-dir", str(out), "--dry-run", env=env, timeout=300)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        lines = dry.stdout.splitlines()
        (old,) = [entry for entry in lines if f"{volume}/cp311/old." in entry]
        (new,) = [entry for entry in lines if f"{volume}/cp311/new." in entry]
        (whole,) = [entry for entry in lines if f"volume {volume} " in entry]
        assert old.startswith("would remove tree ") and "1.0 MiB" in old and "the least recently used" in old
        assert new.startswith("keep") and "used in the last hour" in new
        assert whole.startswith("keep") and "of its 1.0 MiB bound" in whole

        real = wheelbuild("gc", "--output-dir", str(out), env=env, timeout=300)
        assert real.returncode == 0, real.stdout + real.stderr
        said = real.stdout + real.stderr
        assert f"removed tree {volume}/cp311/old." in said, said
        left = docker_client.containers.run(
            base_image, ["ls", "/cache/trees/cp311"], volumes={volume: {"bind": "/cache", "mode": "ro"}},
            remove=True, network_disabled=True,
        ).decode().split()  # fmt: skip
        assert left == ["new", "new.0123456789abcdef.2", "new.0123456789abcdef.2.used"]
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            docker_client.volumes.get(volume).remove(force=True)


def _report_naming(folder: Path, image: docker.models.images.Image, tag: str, **fields: object) -> None:
    """The build-report.json a build writes, naming the image it was built in (tag and ID)."""
    report = {"run_id": "x", "wheels": [], **fields, "image": {"tag": tag, "id": image.id, "labels": {}}}
    (folder / "build-report.json").write_text(json.dumps(report))


def test_gc_outside_setups_environment_keeps_the_images_its_kept_builds_were_made_in(
    docker_client: docker.DockerClient, base_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build made in scripts/setup's environment (WHEELBUILD_BASE_IMAGE set) into another
    --output-dir left its stored result, and a run here names an image of another day; gc from a
    shell without that environment computes other current inputs. It used to keep the stored
    result and remove the image it was built in ("not the current inputs' image, used by no
    container"). Each kept build's image stays, by its report's tag; an image no build names goes.
    Tiny images FROM scratch under a prefix of the test's own, a store and output dir of its own."""
    scope = decisions.Scope(f"wbgctest-{secrets.token_hex(4)}")
    setups = image_inputs(
        DockerEngine(docker_client), ImageOptions(base_image=base_image, ca_bundle=resolve_ca_bundle(None))
    )
    images = {
        "setup": scope.retag(setups.tag),  # the tag a build under setup's base image uses
        "run": f"{scope.image_repository}:{secrets.token_hex(8)}",
        "unnamed": f"{scope.image_repository}:{secrets.token_hex(8)}",
    }
    out, store = tmp_path / "wheelhouse", tmp_path / "cache" / "results"
    key, run_id = "d" * 64, "20261205-120000-0000aa"
    try:
        for tag in images.values():
            _tiny_image(docker_client, tag, None, scope.prefix)
        made = {role: docker_client.images.get(tag) for role, tag in images.items()}
        (store / key).mkdir(parents=True)
        _report_naming(store / key, made["setup"], images["setup"], inputs_key=key)
        (out / "runs" / run_id).mkdir(parents=True)
        _report_naming(out / "runs" / run_id, made["run"], images["run"], inputs_key="e" * 64)
        monkeypatch.delenv("WHEELBUILD_BASE_IMAGE", raising=False)  # a shell without setup's environment
        env = {names.PREFIX_ENV: scope.prefix, "WHEELBUILD_CACHE_DIR": str(store.parent), "NO_COLOR": "1"}

        dry = wheelbuild("gc", "--output-dir", str(out), "--dry-run", env=env, timeout=300)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        said = {
            role: [line for line in dry.stdout.splitlines() if f" {tag} " in line]
            for role, tag in images.items()
        }
        assert said["setup"] == [
            f"keep         image  {images['setup']}  1.0 MiB  (the image of kept stored result {key[:16]})"
        ], dry.stdout
        assert said["run"] == [
            f"keep         image  {images['run']}  1.0 MiB  (the image of kept run {run_id})"
        ]
        (unnamed,) = said["unnamed"]
        assert unnamed.startswith("would remove image ") and "not the current inputs' image" in unnamed
        assert all(t in {t for i in docker_client.images.list() for t in i.tags} for t in images.values())

        real = wheelbuild(
            "gc", "--output-dir", str(out), env=env, timeout=300
        )  # the test's own store and prefix
        assert real.returncode == 0, real.stdout + real.stderr
        left = {t for i in docker_client.images.list() for t in i.tags}
        assert {role for role, tag in images.items() if tag in left} == {"setup", "run"}
        assert (store / key).is_dir() and (out / "runs" / run_id).is_dir()
    finally:
        for tag in images.values():
            with contextlib.suppress(docker.errors.ImageNotFound):
                docker_client.images.remove(tag, force=True)
