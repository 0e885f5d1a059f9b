"""The one room with Docker in it, and DockerEngine the one holder of a docker client: image
builds, preflight, one cibuildwheel attempt in one container (watched for OOM evidence), the
import gate, calibration compiles, gc, and cleanup by label. Everything it returns is a plain
dataclass; what the observations mean is decided in attempt.py, not here.

A command builds one DockerEngine at the CLI's edge and passes it down; the pipeline sees it only
through the Protocols in ports.py. It connects on first use, so a command that turns out not to
need Docker never asks for it, and as a context manager it removes its runs' containers on any
exception (cibuildwheel's OCIContainer is the model).

Every container carries labels naming the run, the attempt and the owning process, so that
whatever happens (Ctrl-C, SIGTERM, a crash, kill -9) the container and every compiler in it can
be found and removed, now or by the next run's sweep. In-container scripts are real files in
images/, bind-mounted read-only (wheelbuild-memory-limit, -calibrate-unit, -gate-python,
-torch-headers) or, for the admission wrapper, copied into the image.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import docker
import docker.errors
import docker.types
import requests
import tenacity

from .. import secrets
from ..errors import DockerUnavailable, ImageBuildFailed, ImageInputsMissing, NvidiaRuntimeMissing
from ..names import IMAGE_REPOSITORY, TORCH_VOLUME_PREFIX, TORCH_WHEELS_VOLUME
from ..plan import cgroup
from ..spec import GpuMode
from . import doctor, gc
from .attempt import AttemptConfig, AttemptResult, OomEvidence, cibuildwheel_env, redactor_for
from .buildlog import BuildLog, MemorySample, MemorySeries
from .cuda_redist import CudaLayer
from .image import DOCKERFILE, IMAGES_DIR, LABEL, Image, ImageInputs, production_base
from .ownership import ATTEMPT_LABEL, OWNER_LABEL, RUN_LABEL, owner_alive, owner_token
from .ports import GateJob, OnLine, UnitCompile, UnitResult

COMPILE_STEP = "Building wheel"  # cibuildwheel's step that runs the package's build
CALIBRATE_MARK = "wheelbuild-calibrate:"  # the line images/wheelbuild-calibrate-unit ends with
TORCH_HEADERS_DIR = "/opt/wheelbuild-torch"
GATE_SCRIPT = "wheelbuild-gate"
SMOKE_DIR = "smoke"  # images/smoke: recipes' GPU smoke tests
# torch and its CUDA wheels (~3 GB), downloaded once per machine for the gate's installs.
_GATE_WORK = "/run/wheelbuild"
_SCRIPTS = "/usr/local/bin"  # where images/ scripts are bind-mounted in a container


def is_transient(error: BaseException) -> bool:
    """Connection resets and a restarting or overloaded daemon pass; a 4xx answer does not."""
    if isinstance(error, requests.exceptions.ConnectionError):
        return True
    if isinstance(error, docker.errors.APIError):
        status = error.status_code or 0
        restarting = "restarting" in str(error.explanation or "").lower()
        return status in (502, 503, 504) or (status >= 500 and restarting)
    return False


# Docker API calls outside the build itself are retried with backoff on transient errors.
transient_retry = tenacity.retry(
    retry=tenacity.retry_if_exception(is_transient),
    stop=tenacity.stop_after_attempt(5),
    wait=tenacity.wait_exponential(multiplier=0.5, max=8),
    reraise=True,
)


def _docker_host() -> str:
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def script_volume(name: str, images_dir: Path = IMAGES_DIR) -> tuple[str, dict[str, dict[str, str]]]:
    """One of images/ scripts, bind-mounted read-only: (its path in the container, the volumes
    entry that mounts it there). A wheelbuild without it is exit 31, with its remedy."""
    path = images_dir / name
    if not path.is_file():
        raise ImageInputsMissing(
            f"{path} is missing: this wheelbuild has no complete images/ folder",
            "reinstall wheelbuild from its wheel or sdist (pip install --force-reinstall wheelbuild), "
            "or run it from a full checkout",
        )
    inside = f"{_SCRIPTS}/{name}"
    return inside, {str(path.resolve()): {"bind": inside, "mode": "ro"}}


class DockerEngine:
    """The docker client and everything done with it. `client` wraps one already made (tests);
    otherwise the first use connects (DOCKER_HOST or the local socket), pings, and, with `sweep`,
    removes containers whose wheelbuild is gone."""

    def __init__(self, client: Any = None, *, sweep: bool = True, timeout: int = 600) -> None:
        self._client = client
        self._sweep = sweep
        self._timeout = timeout
        self._runs: set[str] = set()  # the runs whose containers this engine started

    def __enter__(self) -> DockerEngine:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        """On any exception, no container of this engine's runs is left behind (after a normal
        end there is none: each attempt, gate and compile removes its own)."""
        if kind is None or self._client is None:
            return
        # Should the daemon be gone too, the reaper and the next run's sweep remain.
        for run_id in sorted(self._runs):
            with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
                self.remove_containers(f"{RUN_LABEL}={run_id}")

    def _open(self) -> Any:
        """A client that has answered a ping (docker's own errors raised as they are)."""
        client = docker.from_env(timeout=self._timeout)
        client.ping()
        return client

    @property
    def _docker(self) -> Any:
        if self._client is None:
            try:
                self._client = self._open()
            except docker.errors.DockerException as exc:
                raise DockerUnavailable(
                    f"no Docker daemon answers at {_docker_host()}",
                    "start one (as root: scripts/install-docker), or point DOCKER_HOST at a running daemon",
                ) from exc
            if self._sweep:
                self.sweep_orphans()
        return self._client

    def connect(self) -> DockerEngine:
        """Connect now rather than at first use: a command that needs Docker says so before any
        other work (DockerUnavailable, exit 20)."""
        _ = self._docker
        return self

    def _run(self, image: str, command: list[str], run_id: str | None = None, **kwargs: Any) -> Any:
        """containers.run with the owner's label (and the run's, which __exit__ cleans up)."""
        labels = {OWNER_LABEL: owner_token(), **kwargs.pop("labels", {})}
        if run_id is not None:
            labels[RUN_LABEL] = run_id
            self._runs.add(run_id)
        return self._docker.containers.run(image, command, labels=labels, **kwargs)

    # -----------------------------------------------------------------------------------------
    # Images

    @transient_retry
    def local_image_id(self, reference: str) -> str:
        """The local ID of an image, or "" when it is not present here."""
        try:
            return str(self._docker.images.get(reference).id)
        except docker.errors.ImageNotFound:
            return ""

    def ensure_image(self, inputs: ImageInputs, on_line: OnLine) -> Image:
        """Reuse the image tagged by the inputs' hash, or build it with the log streamed live."""
        try:
            return _image(self._docker.images.get(inputs.tag), inputs.tag, reused=True)
        except docker.errors.ImageNotFound:
            pass
        on_line(f"building {inputs.tag} from {inputs.base_image} (once per set of inputs)")
        context = io.BytesIO(inputs.context_tar())
        _build(self._docker, context, DOCKERFILE, inputs.tag, inputs.buildargs(), on_line)
        return _image(self._docker.images.get(inputs.tag), inputs.tag, reused=False)

    def ensure_cuda_layer_image(self, layer: CudaLayer, tree: Path, on_line: OnLine) -> str:
        """The local image holding the CUDA 12 layer's tree at its CUDA_HOME, labelled with its
        pins; built once per set of pins (FROM scratch: the build image copies the folder out)."""
        try:
            self._docker.images.get(layer.tag)
            return layer.tag
        except docker.errors.ImageNotFound:
            pass
        on_line(f"building {layer.tag}: CUDA {layer.release} from NVIDIA's redistributable archives")
        dockerfile = (
            "FROM scratch\nCOPY cuda "
            + layer.home
            + "\n"
            + "".join(f"LABEL {key}={json.dumps(value)}\n" for key, value in layer.labels.items())
        )
        with tempfile.TemporaryFile() as context:
            with tarfile.open(fileobj=context, mode="w") as tar:
                info = tarfile.TarInfo("Dockerfile")
                info.size = len(dockerfile.encode())
                tar.addfile(info, io.BytesIO(dockerfile.encode()))
                tar.add(tree, arcname="cuda", filter=lambda m: None if m.name == "cuda/.complete" else m)
            context.seek(0)
            _build(self._docker, context, "Dockerfile", layer.tag, {}, on_line)
        return layer.tag

    @transient_retry
    def list_images(self) -> list[Image]:
        found = []
        for image in self._docker.images.list(filters={"label": LABEL}):
            tags = [t for t in image.tags if t.startswith(f"{IMAGE_REPOSITORY}:")] or image.tags or ["<none>"]
            found.append(_image(image, tags[0], reused=True))
        return sorted(found, key=lambda i: i.tag)

    @transient_retry
    def image_pythons(self, tag: str) -> list[str]:
        """cibuildwheel tags (cp311, ...) of the CPython interpreters under /opt/python in the image."""
        output = self._run(tag, ["ls", "/opt/python"], remove=True, network_disabled=True)
        names = output.decode().split()
        tags = {n.split("-")[0] for n in names if re.fullmatch(r"cp3\d+-cp3\d+", n)}
        tags.discard("cp39")  # cibuildwheel's env-dump link, not a build target here
        return sorted(tags, key=lambda t: int(t[3:]))

    # -----------------------------------------------------------------------------------------
    # Preflight

    @transient_retry
    def resolve_gpus(self, mode: GpuMode) -> bool:
        """Whether to pass the GPU through. `all` without an NVIDIA runtime is an error."""
        if mode is GpuMode.NONE:
            return False
        runtimes = self._docker.info().get("Runtimes") or {}
        has_nvidia = "nvidia" in runtimes
        if mode is GpuMode.ALL and not has_nvidia:
            raise NvidiaRuntimeMissing(
                f"--gpus all asked for a GPU, but the Docker daemon has no NVIDIA runtime "
                f"(runtimes: {', '.join(sorted(runtimes)) or 'none'})",
                "install nvidia-container-toolkit and restart dockerd, or use --gpus auto|none "
                "(compiling needs no GPU)",
            )
        return has_nvidia

    def _probe_image(self, base_image: str | None) -> str:
        """A local image to start the probe from (never pulled): the base when given and present,
        else the newest local build image; "" when there is none."""
        if base_image and self.local_image_id(base_image):
            return base_image
        ours = sorted(
            self._docker.images.list(name=IMAGE_REPOSITORY),
            key=lambda i: str(i.attrs.get("Created", "")),
            reverse=True,
        )
        return next((t for i in ours for t in i.tags if t.startswith(f"{IMAGE_REPOSITORY}:")), "")

    def _probe_memory(self, image: str) -> tuple[str | None, str]:
        """(what the container reads as its memory limit, error) for a --memory 64m container."""
        memory = doctor.PROBE_MEMORY
        script, mount = script_volume("wheelbuild-memory-limit")
        try:
            output = self._run(
                image, ["sh", script], mem_limit=memory, memswap_limit=memory, network_disabled=True,
                volumes=mount, remove=True,
            )  # fmt: skip
        except docker.errors.ContainerError as exc:
            return (
                None,
                f"exit {exc.exit_status}: {(exc.stderr or b'').decode(errors='replace').strip()[-200:]}",
            )
        except docker.errors.APIError as exc:
            return None, str(exc.explanation or exc)
        return output.decode(errors="replace").strip(), ""

    def facts(self, base_image: str | None = None) -> doctor.DockerFacts:
        """What `wheelbuild doctor` needs of the daemon: version, rootless, cgroups, runtimes, its
        root, a real memory limit read back from a container, and the base image's presence. No
        daemon is an answer too (facts.error), not an exception. Nothing is pulled."""
        host = secrets.redact_url(_docker_host())
        try:
            pin, pin_error = production_base(), ""
        except Exception as exc:  # a missing or changed cibuildwheel: said, not raised
            pin, pin_error = "", f"{type(exc).__name__}: {exc}"
        try:
            if self._client is None:
                self._client = self._open()
            info = self._client.info()
            version = self._client.version()
            image = self._probe_image(base_image)
            limit, probe_error = self._probe_memory(image) if image else (None, "")
            return doctor.DockerFacts(
                host=host,
                version=str(version.get("Version") or info.get("ServerVersion", "?")),
                api_version=str(version.get("ApiVersion", "?")),
                rootless=any("name=rootless" in str(o) for o in info.get("SecurityOptions") or []),
                cgroup_version=str(info.get("CgroupVersion", "")),
                cgroup_driver=str(info.get("CgroupDriver", "")),
                runtimes=tuple(sorted(info.get("Runtimes") or {})),
                root_dir=str(info.get("DockerRootDir", "")),
                probe_image=image,
                probe_limit=limit,
                probe_error=probe_error,
                base_pin=pin,
                base_pin_present=bool(pin) and bool(self.local_image_id(pin)),
                base_pin_error=pin_error,
                base_override=base_image or "",
                base_override_present=bool(base_image) and bool(self.local_image_id(base_image or "")),
            )
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            why = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
            return doctor.DockerFacts(host=host, error=why, base_pin=pin, base_pin_error=pin_error)

    # -----------------------------------------------------------------------------------------
    # Ownership and cleanup

    @transient_retry
    def remove_containers(self, label: str) -> int:
        """Kill and remove every container carrying `label` (key=value). Returns how many."""
        return _remove(self._docker.containers.list(all=True, filters={"label": label}))

    @transient_retry
    def sweep_orphans(self) -> int:
        """Remove containers whose owning wheelbuild is gone: every container wheelbuild makes
        carries OWNER_LABEL (attempts, gates, calibration units, probes)."""
        containers = self._docker.containers.list(all=True, filters={"label": OWNER_LABEL})
        return _remove(
            c
            for c in containers
            if (token := (c.labels or {}).get(OWNER_LABEL, "")) and not owner_alive(token)
        )

    def start_reaper(self, run_id: str) -> None:
        """A watcher in a session of its own that outlives a `kill -9` of this process: once this
        process is gone it removes every container of the run, and every compiler with them. (A
        killed wheelbuild cannot clean up; cibuildwheel, in a session of its own, would otherwise
        keep its container compiling until it next wrote to the dead pipe.)"""
        self.connect()  # first: no reaper for a daemon that is not there
        self._runs.add(run_id)
        subprocess.Popen(
            [sys.executable, "-m", f"{__package__}.reaper", owner_token(), run_id],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def interrupt_cleanup(self, run_id: str) -> int:
        """After Ctrl-C/SIGTERM: remove every container of the run (all its attempts)."""
        return self.remove_containers(f"{RUN_LABEL}={run_id}")

    # -----------------------------------------------------------------------------------------
    # One attempt: one cibuildwheel run in one container, watched

    def watch(
        self, attempt_id: str, on_memory: Callable[[MemorySample], None] | None = None
    ) -> AttemptWatcher:
        return AttemptWatcher(self._docker, attempt_id, on_memory)

    def run_attempt(
        self,
        config: AttemptConfig,
        on_line: Callable[[str, BuildLog], None],
        on_memory: Callable[[MemorySample], None] | None = None,
    ) -> AttemptResult:
        """Run cibuildwheel once, watched for OOM evidence. Whatever happens, the attempt's
        container is gone afterwards. What the run means is attempt.classify's to say."""
        config.output_dir.mkdir(parents=True, exist_ok=True)
        self._runs.add(config.run_id)
        secrets_dir = Path(tempfile.mkdtemp(prefix="wheelbuild-secrets-"))
        try:
            write_secrets(config, os.environ, secrets_dir)
            return self._run_attempt(config, secrets_dir, on_line, on_memory)
        finally:
            shutil.rmtree(secrets_dir, ignore_errors=True)

    def _run_attempt(
        self,
        config: AttemptConfig,
        secrets_dir: Path,
        on_line: Callable[[str, BuildLog], None],
        on_memory: Callable[[MemorySample], None] | None,
    ) -> AttemptResult:
        redact = redactor_for(config, os.environ)
        env = {key: value for key, value in os.environ.items() if not key.startswith("CIBW_")}
        env.update(cibuildwheel_env(config, secrets_dir))
        env["PYTHONUNBUFFERED"] = "1"
        command = [
            sys.executable,
            "-m",
            "cibuildwheel",
            "--output-dir",
            str(config.output_dir),
            config.package,
        ]
        tail: deque[str] = deque(maxlen=400)
        progress = BuildLog()
        started = time.monotonic()
        watcher = self.watch(config.attempt_id, on_memory)
        with config.log_path.open("a", encoding="utf-8") as log, watcher:
            log.write(f"=== attempt {config.attempt_id}: {shlex.join(command)}\n")
            # A session of its own: a terminal's Ctrl-C reaches only us, and we stop it in order.
            proc = subprocess.Popen(
                command, cwd=config.project_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1, start_new_session=True,
            )  # fmt: skip
            try:
                for raw in _lines(proc):
                    line = redact(raw.rstrip("\n"))
                    log.write(line + "\n")
                    tail.append(line)
                    progress.feed(line, time.monotonic())
                    watcher.phase = progress.step
                    on_line(line, progress)
                returncode = proc.wait()
            finally:
                _terminate(proc)
                self.remove_containers(f"{ATTEMPT_LABEL}={config.attempt_id}")
        return _attempt_result(config, returncode, time.monotonic() - started, tuple(tail), progress, watcher)

    # -----------------------------------------------------------------------------------------
    # Calibration: one unit compiled alone in its own container (its own cgroup)

    @transient_retry
    def ensure_torch_headers(self, image: str, requirement: str, index_url: str, on_line: OnLine) -> str:
        """A volume with torch unpacked (no dependencies: only its headers are needed), made once
        per torch requirement and index. The index URL travels in a mounted file, never in a
        command or the container's env (docker inspect shows those)."""
        name = TORCH_VOLUME_PREFIX + hashlib.sha256(f"{requirement} {index_url}".encode()).hexdigest()[:16]
        try:
            self._docker.volumes.get(name)
            self._run(
                image, ["test", "-f", f"{TORCH_HEADERS_DIR}/.complete"], remove=True, network_disabled=True,
                volumes={name: {"bind": TORCH_HEADERS_DIR, "mode": "ro"}},
            )  # fmt: skip
            return name
        except (docker.errors.NotFound, docker.errors.ContainerError):
            pass
        on_line(f"unpacking {requirement} into volume {name} (its headers, for compiling units alone)")
        script, mount = script_volume("wheelbuild-torch-headers")
        with tempfile.TemporaryDirectory(prefix="wheelbuild-secrets-") as work:
            index_file = Path(work) / secrets.TORCH_INDEX_FILE
            index_file.touch(mode=0o600)
            index_file.write_text(index_url)
            self._run(
                image,
                ["sh", script, f"{secrets.MOUNT}/{secrets.TORCH_INDEX_FILE}", TORCH_HEADERS_DIR],
                environment={"TORCH_REQUIREMENT": requirement},
                volumes={
                    name: {"bind": TORCH_HEADERS_DIR, "mode": "rw"},
                    work: {"bind": secrets.MOUNT, "mode": "ro"},
                    **mount,
                },
                remove=True,
            )
        return name

    def compile_unit_alone(self, job: UnitCompile) -> UnitResult:
        """Run one unit's compile in a container of its own and read back what it cost."""
        script, mount = script_volume("wheelbuild-calibrate-unit")
        container = self._run(
            job.image,
            ["sh", script, *unit_compile_command(job)],
            run_id=job.run_id,
            detach=True,
            mem_limit=job.memory,
            memswap_limit=job.memory,
            nano_cpus=int(job.cpus * 1e9),
            network_disabled=True,
            volumes={
                str(job.source_dir): {"bind": "/src", "mode": "ro"},
                job.torch_volume: {"bind": TORCH_HEADERS_DIR, "mode": "ro"},
                **mount,
            },
        )
        try:
            status = container.wait()
            lines = container.logs().decode(errors="replace").splitlines()
        finally:
            _remove([container])
        return parse_unit_report(lines, int(status.get("StatusCode", 1)))

    # -----------------------------------------------------------------------------------------
    # The import gate: a wheel installed and imported in a fresh container of the base image

    def run_gate(self, job: GateJob, on_line: OnLine) -> tuple[dict[str, Any] | None, str]:
        """Run the gate for one wheel; its JSON answer (None when the container died first) and
        the log's tail. The container is gone afterwards, whatever happens."""
        with tempfile.TemporaryDirectory(prefix="wheelbuild-gate-", ignore_cleanup_errors=True) as work:
            workdir = Path(work)
            (workdir / "out").mkdir()
            secret = workdir / "torch-index-url"
            secret.touch(mode=0o600)
            secret.write_text(job.torch_index_url)
            (workdir / "spec.json").write_text(json.dumps(_gate_spec(job)))
            finder, finder_mount = script_volume("wheelbuild-gate-python", job.images_dir)
            gate, gate_mount = script_volume(GATE_SCRIPT, job.images_dir)
            volumes = {
                str(job.wheel.parent.resolve()): {"bind": "/wheels", "mode": "ro"},
                str(workdir): {"bind": _GATE_WORK, "mode": "rw"},
                **gate_mount,
                **finder_mount,
                str((job.images_dir / SMOKE_DIR).resolve()): {"bind": "/opt/wheelbuild-smoke", "mode": "ro"},
                TORCH_WHEELS_VOLUME: {"bind": "/cache", "mode": "rw"},
            }
            environment = {
                "WB_PYTHON": str(job.spec["python"]),
                "PIP_ROOT_USER_ACTION": "ignore",
                "PYTHONUNBUFFERED": "1",
            }
            if job.ca_bundle is not None:
                volumes[str(job.ca_bundle.resolve())] = {"bind": "/run/wheelbuild-ca.crt", "mode": "ro"}
                environment |= {
                    key: "/run/wheelbuild-ca.crt"
                    for key in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE")
                }
            gpus = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if job.gpus else None
            container = self._run(
                job.image,
                ["sh", finder, gate, f"{_GATE_WORK}/spec.json", f"{_GATE_WORK}/out/gate.json"],
                run_id=job.run_id,
                detach=True,
                environment=environment,
                volumes=volumes,
                mem_limit=job.memory,
                memswap_limit=job.memory,
                device_requests=gpus,
                labels={"wheelbuild.gate": job.wheel.name},
            )
            try:
                tail = _follow_gate(container, job, on_line)
                container.wait()
            finally:
                _remove([container])
            answer = workdir / "out" / "gate.json"
            found = json.loads(answer.read_text()) if answer.is_file() else None
            return found, "\n".join(tail)

    # -----------------------------------------------------------------------------------------
    # wheelbuild gc: what Docker holds of wheelbuild's, and removing it (never forced)

    def _disk_usage(self) -> dict[str, Any]:
        """Docker's own accounting (`docker system df`); the daemon runs one at a time."""
        for attempt in range(10):
            try:
                return dict(self._docker.df())
            except docker.errors.APIError as error:
                if "already running" not in str(error.explanation or error) or attempt == 9:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")

    @transient_retry
    def gc_state(self, scope: gc.Scope) -> gc.DockerState:
        """The images and volumes in *scope*, with the sizes Docker counts, and every container
        (running or stopped) with its image and volumes: in use means kept."""
        return _gc_state(self._disk_usage(), scope)

    def gc_remove_image(self, decision: gc.Decision, scope: gc.Scope) -> gc.Removal:
        """Remove one tag of wheelbuild's (its layers go when no other tag or image needs them).
        Never forced: an image a container uses is refused by Docker, and so kept."""
        if decision.kind is not gc.Kind.IMAGE or not scope.owns_image(decision.name):
            raise ValueError(f"not an image gc may remove: {decision.name}")
        return _unforced(
            decision, lambda: self._docker.images.remove(decision.name, force=False, noprune=False)
        )

    def gc_remove_volume(self, decision: gc.Decision, scope: gc.Scope) -> gc.Removal:
        """Remove one of wheelbuild's volumes. Never forced: a volume a container mounts, running
        or stopped, is refused by Docker, and so kept."""
        if decision.kind is not gc.Kind.VOLUME or scope.volume_kind(decision.name) is None:
            raise ValueError(f"not a volume gc may remove: {decision.name}")
        return _unforced(decision, lambda: self._docker.volumes.get(decision.name).remove(force=False))


# ---------------------------------------------------------------------------------------------
# Helpers of the engine's (the SDK's objects are untyped here, and go no further)


def _image(found: Any, tag: str, reused: bool) -> Image:
    return Image(tag=tag, id=str(found.id), labels=dict(found.labels or {}), reused=reused)


def _build(
    client: Any,
    context: IO[bytes],
    dockerfile: str,
    tag: str,
    buildargs: dict[str, str],
    on_line: Callable[[str], None],
) -> None:
    tail: deque[str] = deque(maxlen=20)
    try:
        chunks = client.api.build(
            fileobj=context,
            custom_context=True,
            dockerfile=dockerfile,
            tag=tag,
            buildargs=buildargs,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
        )
        for chunk in chunks:
            if "error" in chunk or "errorDetail" in chunk:
                message = str(chunk.get("error") or chunk["errorDetail"].get("message", "")).strip()
                raise ImageBuildFailed(
                    f"image build failed: {message.splitlines()[-1] if message else 'unknown error'}",
                    "read the build log above; check the base image exists here "
                    "(scripts/make-base-image) and the network reaches PyPI",
                    details="\n".join(tail),
                )
            for line in str(chunk.get("stream", "")).splitlines():
                if line.strip():
                    tail.append(line)
                    on_line(line)
    except docker.errors.APIError as exc:
        raise ImageBuildFailed(
            f"image build failed: {exc.explanation or exc}",
            "check that the base image exists locally (scripts/make-base-image) or can be pulled",
        ) from exc


def _remove(containers: Iterable[Any]) -> int:
    """Kill and remove these containers (one already gone counts as not removed)."""
    removed = 0
    for container in containers:
        try:
            container.remove(force=True)
            removed += 1
        except docker.errors.NotFound:
            pass
    return removed


def write_secrets(config: AttemptConfig, environ: Mapping[str, str], directory: Path) -> None:
    """The attempt's secret files: the torch index URL, and the shared cache's settings for the
    sccache server (readable by this user only; removed with the attempt)."""
    directory.chmod(0o700)
    index = directory / secrets.TORCH_INDEX_FILE
    index.touch(mode=0o600)
    index.write_text(config.torch.index_url)
    shared = (
        {name: environ[name] for name in config.pass_env if environ.get(name)}
        if config.compiler_cache
        else {}
    )
    env_file = directory / secrets.SCCACHE_ENV_FILE
    env_file.touch(mode=0o600)
    env_file.write_text(secrets.sccache_env_file(shared))


def _terminate(proc: subprocess.Popen[str]) -> None:
    """Stop cibuildwheel and everything it started (docker CLI children included)."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _lines(proc: subprocess.Popen[str]) -> Iterator[str]:
    assert proc.stdout is not None
    yield from proc.stdout


def _attempt_result(
    config: AttemptConfig,
    returncode: int,
    duration_s: float,
    tail: tuple[str, ...],
    progress: BuildLog,
    watcher: AttemptWatcher,
) -> AttemptResult:
    """What was seen of one attempt: its log's reading and the watcher's evidence, as values."""
    wheels = tuple(sorted(config.output_dir.glob("*.whl")))
    return AttemptResult(
        attempt=config.attempt,
        returncode=returncode,
        duration_s=duration_s,
        wheels=wheels,
        memory_limit_seen=progress.memory_limit_seen,
        log_path=config.log_path,
        log_tail=tail,
        oom=watcher.evidence(progress.killed_lines),
        peak_memory=watcher.peak_memory,
        peak_memory_compile=watcher.peaks.get(COMPILE_STEP),
        finished_units=tuple(
            f"{identifier}:{unit}" for identifier, units in progress.finished_units.items() for unit in units
        ),
        units_total=progress.units_total,
        cache_hits=progress.cache_hits,
        cache_misses=progress.cache_misses,
        build_seconds=progress.build_seconds,
        build_seconds_by_identifier=tuple(progress.build_seconds_by_identifier.items()),
        cache_by_identifier=tuple(
            (identifier, hits, misses) for identifier, (hits, misses) in progress.cache_by_identifier.items()
        ),
        memory_series=tuple(watcher.series.points),
        memory_step_s=watcher.series.step_s,
        oom_at_s=tuple(watcher.oom_at),
        unit_finished_s=tuple(
            (unit, round(progress.finished_at[unit] - watcher.started, 1))
            for identifier, units in progress.finished_units.items()
            for unit in (f"{identifier}:{name}" for name in units)
            if unit in progress.finished_at
        ),
    )


# ---------------------------------------------------------------------------------------------
# Watching an attempt: OOM evidence and memory, without trusting the exit code
#
# When a compiler is OOM-killed, ninja fails, cibuildwheel exits 1 and the container's PID 1
# (cibuildwheel's bash) exits 0: no 137 anywhere. The kernel and Docker know, so we ask them.


class AttemptWatcher:
    """For the whole attempt: Docker's oom events for its label (one thread), and once a second
    the container's State.OOMKilled, its cgroup oom_kill counter and memory use (another)."""

    def __init__(
        self, client: Any, attempt_id: str, on_memory: Callable[[MemorySample], None] | None = None
    ) -> None:
        self._client = client
        self._label = f"{ATTEMPT_LABEL}={attempt_id}"
        self._on_memory = on_memory
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.oom_events = 0
        self.state_oom_killed = False
        self.cgroup_oom_kills = 0
        self.peak_memory: int | None = None
        # cibuildwheel's current step, set by the reader of the log: peaks are kept per step, so
        # the compile's peak is not confused with the page cache of torch's install.
        self.phase = "starting"
        self.peaks: dict[str, int] = {}
        # For build-report.html: memory over time and when the OOM killer struck, in seconds
        # since the watch began.
        self.started = time.monotonic()
        self.series = MemorySeries()
        self.oom_at: list[float] = []
        self._events: Any = None
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> AttemptWatcher:
        # Subscribe before cibuildwheel creates the container, so no event can be missed.
        self._events = self._client.events(decode=True, filters={"label": self._label, "type": "container"})
        for target in (self._watch_events, self._poll):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._poll_once()  # a last look, in case the container is still there
        time.sleep(0.5)  # let the daemon deliver events of the container's last moments
        self._events.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def evidence(self, killed_lines: Sequence[str]) -> OomEvidence:
        return OomEvidence(
            docker_oom_events=self.oom_events,
            state_oom_killed=self.state_oom_killed,
            cgroup_oom_kills=self.cgroup_oom_kills,
            killed_lines=tuple(killed_lines[:5]),
        )

    def _oom_seen(self) -> None:
        """Note when a kill happened (the caller holds the lock). Docker's event and the cgroup
        counter report the same kill about a second apart: one mark for both; at most 100."""
        now = round(time.monotonic() - self.started, 1)
        if len(self.oom_at) < 100 and all(abs(now - t) > 3 for t in self.oom_at):
            self.oom_at.append(now)

    def _watch_events(self) -> None:
        try:
            for event in self._events:
                if event.get("status") == "oom" or event.get("Action") == "oom":
                    with self._lock:
                        self.oom_events += 1
                        self._oom_seen()
        except Exception:  # the stream ends with an error when closed; that is how it stops
            return

    def _poll(self) -> None:
        while not self._stop.wait(1.0):
            self._poll_once()

    def _poll_once(self) -> None:
        try:
            containers = self._client.containers.list(all=True, filters={"label": self._label})
        except docker.errors.DockerException:
            return
        # list() inspects each container it returns, so attrs are fresh: no reload().
        for container in containers:
            state = container.attrs.get("State", {})
            if state.get("OOMKilled"):
                self.state_oom_killed = True
            pid = int(state.get("Pid") or 0)
            if pid:
                self._read_cgroup(pid)

    def _read_cgroup(self, pid: int) -> None:
        try:
            found = cgroup.read_limits(pid=str(pid))
            where = found.memory_cgroup
            used = cgroup.read_working_set(where.path, where.version) if where else None
        except (OSError, ValueError):
            return
        # The container's cgroup is new with the attempt, so its counter started at 0.
        if found.oom_kills is not None:
            with self._lock:
                if found.oom_kills > self.cgroup_oom_kills:
                    self._oom_seen()
                self.cgroup_oom_kills = max(self.cgroup_oom_kills, found.oom_kills)
        if used is not None:
            # Sampled once a second: the working set's peak, not the cache-inflated max_usage.
            self.peak_memory = max(self.peak_memory or 0, used)
            phase = self.phase
            self.peaks[phase] = max(self.peaks.get(phase, 0), used)
            with self._lock:
                self.series.add(time.monotonic() - self.started, used)
            if self._on_memory is not None:
                self._on_memory(MemorySample(used, self.peak_memory, found.memory_limit))


def reap_when_gone(owner: str, run_id: str, poll_s: float = 1.0) -> int:
    """Wait for the owner to end, then remove the run's containers; how many were left. The
    reaper's own process: its own engine."""
    while owner_alive(owner):
        time.sleep(poll_s)
    return DockerEngine(sweep=False, timeout=120).remove_containers(f"{RUN_LABEL}={run_id}")


def unit_compile_command(job: UnitCompile) -> list[str]:
    """nvcc on the unit, as images/wheelbuild-calibrate-unit runs it (it adds Python's include
    directory, then reports the cgroup's peak and the time)."""
    torch_include = f"{TORCH_HEADERS_DIR}/torch/include"
    includes = [f"/src/{d}" for d in job.include_dirs] + [
        torch_include,
        f"{torch_include}/torch/csrc/api/include",
    ]
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in job.archs]
    return [
        f"{job.cuda_home}/bin/nvcc", *(f"-I{d}" for d in includes), *job.flags, *gencode,
        "--threads", str(job.threads), "--compiler-options", "-fPIC", "-c", f"/src/{job.unit}", "-o", "/tmp/unit.o",
    ]  # fmt: skip


def parse_unit_report(lines: Sequence[str], returncode: int) -> UnitResult:
    marks = [line for line in lines if line.startswith(CALIBRATE_MARK)]
    if not marks:
        return UnitResult(
            returncode=returncode or 1, peak=0, wall_s=0.0, oom=False, log_tail=tuple(lines[-30:])
        )
    fields = dict(pair.split("=", 1) for pair in marks[-1][len(CALIBRATE_MARK) :].split())
    rc = int(fields["rc"])
    return UnitResult(
        returncode=rc,
        peak=int(fields["peak"]),
        wall_s=float(fields["end"]) - float(fields["start"]),
        oom=rc != 0 and int(fields.get("ooms", "0") or 0) > 0,
        log_tail=tuple(lines[-30:]),
    )


def _gate_spec(job: GateJob) -> dict[str, Any]:
    """The gate's input, with the paths its container sees."""
    smoke = job.spec.get("smoke")
    return {
        **job.spec,
        "wheel": f"/wheels/{job.wheel.name}",
        "torch_index_file": f"{_GATE_WORK}/torch-index-url",
        "torch_cache": f"/cache/{job.torch_cache_key}",
        "smoke": f"/opt/wheelbuild-smoke/{smoke}" if smoke else None,
    }


def _follow_gate(container: Any, job: GateJob, on_line: OnLine) -> deque[str]:
    """The gate's log, redacted, to its file and the terminal; its tail."""
    tail: deque[str] = deque(maxlen=60)
    redact = secrets.Redactor(secrets.url_secrets(job.torch_index_url))
    with job.log_path.open("a", encoding="utf-8") as log:
        log.write(f"=== import gate: {job.wheel.name} in {job.image}\n")
        for chunk in container.logs(stream=True, follow=True):
            for raw in chunk.decode(errors="replace").splitlines():
                line = redact(raw)
                log.write(line + "\n")
                tail.append(line)
                on_line(line)
    return tail


def _gc_state(usage: dict[str, Any], scope: gc.Scope) -> gc.DockerState:
    images = []
    for entry in usage.get("Images") or []:
        tags = [t for t in entry.get("RepoTags") or [] if t != "<none>:<none>"]
        unique = max(int(entry.get("Size") or 0) - max(int(entry.get("SharedSize") or 0), 0), 0)
        for tag in tags:
            if scope.owns_image(tag):
                shared_tag = len(tags) > 1
                images.append(gc.ImageFact(tag, str(entry["Id"]), 0 if shared_tag else unique, shared_tag))
    volumes = [
        gc.VolumeFact(str(v["Name"]), int((v.get("UsageData") or {}).get("Size", -1)))
        for v in usage.get("Volumes") or []
        if scope.volume_kind(str(v.get("Name", ""))) is not None
    ]
    containers = [
        gc.ContainerFact(
            name=next(iter(c.get("Names") or []), str(c.get("Id", "?"))[:12]).lstrip("/"),
            image_id=str(c.get("ImageID", "")),
            state=str(c.get("State") or "unknown"),
            run_id=str((c.get("Labels") or {}).get(RUN_LABEL, "")),
            volumes=tuple(
                str(m["Name"]) for m in c.get("Mounts") or [] if m.get("Type") == "volume" and m.get("Name")
            ),
        )
        for c in usage.get("Containers") or []
    ]
    return gc.DockerState(tuple(images), tuple(volumes), tuple(containers))


def _unforced(decision: gc.Decision, remove: Callable[[], object]) -> gc.Removal:
    """One unforced removal: gone already, kept (Docker refused: in use), failed or removed."""
    try:
        remove()
    except docker.errors.NotFound:
        return gc.Removal(decision, gc.Status.GONE)
    except docker.errors.APIError as error:
        if error.status_code == 409:
            return gc.Removal(decision, gc.Status.KEPT, f"in use: {error.explanation or error}")
        return gc.Removal(decision, gc.Status.FAILED, str(error.explanation or error))
    return gc.Removal(decision, gc.Status.REMOVED)
