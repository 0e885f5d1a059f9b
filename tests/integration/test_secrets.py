"""Canary: distinct fake secrets in every place a user gives one (the torch index URL's user
info, each shared-cache variable wheelbuild hands a build, TWINE_PASSWORD), a real fixture
build through the import gate and a publish; then no trace of any of them in build.log, gate.log,
build-report.json, the provenance statements (the run folder's and the tree's), the terminal,
`docker inspect` of every container the run made (sampled while they lived) and of the image,
or the process list sampled during the build. The same build
proves it still used the credentialed URL: pip names it, masked, in the log.

PyPI ignores basic auth on its simple pages, so a credentialed PyPI URL works as the index. The
shared-cache variables are set without the ones that switch a storage on (SCCACHE_BUCKET,
SCCACHE_REDIS, SCCACHE_GHA_ENABLED): no S3, Redis or GitHub cache is reachable here."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import docker
from wheelbuild.image.names import TORCH_WHEELS_VOLUME
from wheelbuild.variants import parse_variant

from tests.integration.conftest import REPO, WHEELBUILD, newest_cu130, wheelbuild

CANARIES = {
    "AWS_ACCESS_KEY_ID": "AKIACANARY7Q2W",
    "AWS_SECRET_ACCESS_KEY": "canary-aws-secret-5e1d",
    "AWS_SESSION_TOKEN": "canary-aws-session-81c0",
    "SCCACHE_REDIS_PASSWORD": "canary-redis-pw-3f9a",
    "ACTIONS_RUNTIME_TOKEN": "canary-actions-token-a4b7",
    "TWINE_PASSWORD": "canary-twine-pw-d2e6",
}
INDEX_USER, INDEX_PASSWORD = "canary-index-user-61f", "canary-index-pw-0c8d"
INDEX = f"https://{INDEX_USER}:{INDEX_PASSWORD}@pypi.org/simple"
SECRETS = (*CANARIES.values(), INDEX_USER, INDEX_PASSWORD)


def _hits(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_no_secret_reaches_any_output_and_the_credentialed_index_was_used(
    cuda_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    env = {**os.environ, **CANARIES, "WHEELBUILD_TORCH_INDEX_URL": INDEX}
    # Torch comes from the machine's wheel cache once another build has filled it for this
    # index (its key leaves credentials out); this build must fill it through the credentialed
    # URL, so its lock for cp311 goes first (the files stay: they are content-addressed).
    lock = f"/cache/locks/{parse_variant('cu130', INDEX).cache_key}-cp311.txt"
    docker_client.containers.run(
        cuda_image,
        ["rm", "-f", lock],
        volumes={TORCH_WHEELS_VOLUME: {"bind": "/cache", "mode": "rw"}},
        remove=True,
    )
    proc = subprocess.Popen(
        [WHEELBUILD, "build", "wbdemo", "--torch", "cu130", "--python", "3.11", "--memory", "4g",
         "--output-dir", str(tmp_path), "--rebuild"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen_processes: set[str] = set()
    inspected: dict[str, str] = {}

    def sample() -> None:
        while proc.poll() is None:
            ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
            seen_processes.update(ps.splitlines())
            # The low-level list does not inspect each container, so one removed between the
            # listing and its inspection is skipped instead of ending the sampler.
            for container in docker_client.api.containers(all=True, filters={"label": "wheelbuild.owner"}):
                with contextlib.suppress(docker.errors.NotFound):
                    inspected[container["Id"]] = json.dumps(
                        docker_client.api.inspect_container(container["Id"])
                    )
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    terminal, _ = proc.communicate(timeout=1800)
    sampler.join(timeout=10)
    assert proc.returncode == 0, terminal[-4000:]
    run_id = terminal.split("(run ", 1)[1].split(")", 1)[0]
    run_dir = tmp_path / "runs" / run_id
    build_log = (run_dir / "build.log").read_text()
    # pip names the index it used, masked by pip and then by wheelbuild: the URL had credentials.
    assert "Looking in indexes: https://***@pypi.org/simple" in build_log
    assert (
        f"wheelbuild: wheel cache: downloading torch=={newest_cu130().version} once for this machine"
        in build_log
    )

    publish = subprocess.run(
        [WHEELBUILD, "publish", *map(str, run_dir.glob("*.whl")), "--to", str(tmp_path / "tree")],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert publish.returncode == 0, publish.stderr

    # The provenance statements: beside each wheel in the run folder, and the tree's envelope
    # of each (its payload decoded: base64 would hide a canary from a plain search).
    statements = [p.read_text() for p in run_dir.glob("*.whl.intoto.json")]
    envelopes = [json.loads(p.read_bytes()) for p in (tmp_path / "tree" / "files").glob("*.whl.intoto.jsonl")]
    assert statements and len(envelopes) == len(statements)
    statements += [base64.b64decode(e["payload"]).decode() for e in envelopes]

    image = docker_client.api.inspect_image(cuda_image)
    history = docker_client.api.history(cuda_image)
    assert len(inspected) >= 2  # the attempt's container and the gate's, at least
    places = {
        "build.log": build_log,
        "gate.log": (run_dir / "gate.log").read_text(),
        "build-report.json": (run_dir / "build-report.json").read_text(),
        "terminal": terminal,
        "publish": publish.stdout + publish.stderr,
        "provenance statements": "\n".join(statements),
        "docker inspect (containers)": "\n".join(inspected.values()),
        "docker inspect (image)": json.dumps(image) + json.dumps(history),
        "process list": "\n".join(seen_processes),
    }
    assert {where: _hits(text) for where, text in places.items() if _hits(text)} == {}
    assert wheelbuild("inspect", *map(str, run_dir.glob("*.whl"))).returncode == 0


def test_calibrates_torch_headers_container_gets_the_index_as_a_file_not_in_its_config(
    cuda_image: str, docker_client: docker.DockerClient
) -> None:
    """The container that unpacks torch's headers for `wheelbuild calibrate` (here a small
    package stands in for torch) reads the credentialed index from a mounted file: its Docker
    config, sampled while it runs, holds no trace of it."""
    import secrets as token

    from wheelbuild.engine.docker_engine import DockerEngine

    index = f"https://{INDEX_USER}-{token.token_hex(3)}:{INDEX_PASSWORD}@pypi.org/simple"
    inspected: list[str] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for container in docker_client.api.containers(all=True, filters={"label": "wheelbuild.owner"}):
                with contextlib.suppress(docker.errors.NotFound):
                    inspected.append(json.dumps(docker_client.api.inspect_container(container["Id"])))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        volume = DockerEngine(docker_client).ensure_torch_headers(
            cuda_image, "six==1.17.0", index, lambda _line: None
        )
    finally:
        done.set()
        sampler.join(timeout=10)
    try:
        listing = docker_client.containers.run(
            cuda_image, ["ls", "/v"], volumes={volume: {"bind": "/v", "mode": "ro"}}, remove=True
        ).decode()
        assert "six.py" in listing  # installed: the credentialed index was used
        assert inspected, "the container was never seen running"
        assert [s for s in SECRETS if any(s in text for text in inspected)] == []
    finally:
        docker_client.volumes.get(volume).remove(force=True)
