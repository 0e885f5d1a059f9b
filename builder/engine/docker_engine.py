"""DockerEngine, the one holder of a docker client in the engine room: image
builds, preflight, one cibuildwheel attempt in one container (watched for OOM evidence), the
import gate, calibration compiles, gc, and cleanup by label. Everything it returns is a plain
dataclass; what the observations mean is decided in attempt/, not here.

A command builds one DockerEngine at the CLI's edge and passes it down; the pipeline sees it only
through the Protocols in ports.py. It connects on first use, so a command that turns out not to
need Docker never asks for it, and as a context manager it removes its runs' containers on any
exception (cibuildwheel's OCIContainer is the model).

Every container carries labels naming the run, the attempt and the owning process, so that
whatever happens (Ctrl-C, SIGTERM, a crash, kill -9) the container and every compiler in it can
be found and removed, now or by the next run's sweep. In-container scripts are real files in
images/, bind-mounted read-only (wheelbuild-memory-limit, -calibrate-unit, -gate-python,
-torch-headers; the build's -check-memory, -before-build, -check-torch, -site-packages through
cibuildwheel's create_args) or, for the admission wrapper, copied into the image.

The engine's parts, a module each, take its client or its labelled `containers.run`: containers.py
(what they share), attempt_run.py and watcher.py (one attempt, watched), gate_container.py (the
import gate), unit_compile.py (calibration's compiles).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import docker
import docker.errors
import docker.types
import requests

from .. import secrets
from ..attempt.buildlog import BuildLog, MemorySample
from ..attempt.config import WHEEL_CACHE_SCRIPT, AttemptConfig
from ..attempt.outcome import AttemptResult
from ..attempt.ownership import ATTEMPT_LABEL, OWNER_LABEL, RUN_LABEL, owner_alive, owner_token
from ..doctor import checks
from ..errors import DockerUnavailable, ImageBuildFailed, NvidiaRuntimeMissing
from ..gc import decisions
from ..host.gpu import GpuMode
from ..image.cuda_redist import CudaLayer
from ..image.inputs import DOCKERFILE, LABEL, Image, ImageInputs, production_base
from ..image.names import IMAGE_REPOSITORIES
from ..image.ports import OnLine
from . import attempt_run, gate_container, unit_compile
from .containers import remove_all, script_volume, set_network, transient_retry
from .ports import GateJob, UnitCompile, UnitResult
from .watcher import AttemptWatcher


def _docker_host() -> str:
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


class DockerEngine:
    """The docker client and everything done with it. `client` wraps one the caller made;
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

    @property
    def client(self) -> Any:
        """The connected client, for dist_fleet's fleet containers and networks: opened here,
        as every other use of Docker is."""
        return self._docker

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
        build_image(self._docker, context, DOCKERFILE, inputs.tag, inputs.buildargs(), on_line)
        return _image(self._docker.images.get(inputs.tag), inputs.tag, reused=False)

    def ensure_dockerfile_image(
        self, dockerfile: bytes, tag: str, buildargs: dict[str, str], labels: dict[str, str], on_line: OnLine
    ) -> str:
        """The image *tag*, built from the Dockerfile alone when missing: no context, so no file of
        the machine can go in (the sccache-dist fleet's image)."""
        if self.local_image_id(tag):
            return tag
        with tempfile.TemporaryFile() as context:
            with tarfile.open(fileobj=context, mode="w") as tar:
                info = tarfile.TarInfo("Dockerfile")
                info.size = len(dockerfile)
                tar.addfile(info, io.BytesIO(dockerfile))
            context.seek(0)
            build_image(self._docker, context, "Dockerfile", tag, buildargs, on_line, labels)
        return tag

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
            build_image(self._docker, context, "Dockerfile", layer.tag, {}, on_line)
        return layer.tag

    @transient_retry
    def list_images(self) -> list[Image]:
        found = []
        for image in self._docker.images.list(filters={"label": LABEL}):
            tags = [t for t in image.tags if _is_build_image(t)] or image.tags or ["<none>"]
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
            (image for name in IMAGE_REPOSITORIES for image in self._docker.images.list(name=name)),
            key=lambda i: str(i.attrs.get("Created", "")),
            reverse=True,
        )
        return next((t for i in ours for t in i.tags if _is_build_image(t)), "")

    def _probe_memory(self, image: str) -> tuple[str | None, str]:
        """(what the container reads as its memory limit, error) for a --memory 64m container."""
        memory = checks.PROBE_MEMORY
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

    def facts(self, base_image: str | None = None) -> checks.DockerFacts:
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
            return checks.DockerFacts(
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
            return checks.DockerFacts(host=host, error=why, base_pin=pin, base_pin_error=pin_error)

    # -----------------------------------------------------------------------------------------
    # Ownership and cleanup

    @transient_retry
    def remove_containers(self, label: str) -> int:
        """Kill and remove every container carrying `label` (key=value). Returns how many."""
        return remove_all(
            self._docker.containers.list(all=True, filters={"label": label}, ignore_removed=True)
        )

    @transient_retry
    def sweep_orphans(self) -> int:
        """Remove containers whose owning wheelbuild is gone: every container wheelbuild makes
        carries OWNER_LABEL (attempts, gates, calibration units, probes)."""
        containers = self._docker.containers.list(
            all=True, filters={"label": OWNER_LABEL}, ignore_removed=True
        )
        return remove_all(
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
    # One attempt: one cibuildwheel run in one container, watched (attempt_run.py, watcher.py)

    def watch(
        self,
        attempt_id: str,
        on_memory: Callable[[MemorySample], None] | None = None,
        measured_dir: Path | None = None,
    ) -> AttemptWatcher:
        return AttemptWatcher(self._docker, attempt_id, on_memory, measured_dir)

    def run_attempt(
        self,
        config: AttemptConfig,
        on_line: Callable[[str, BuildLog], None],
        on_memory: Callable[[MemorySample], None] | None = None,
    ) -> AttemptResult:
        """Run cibuildwheel once, watched for OOM evidence. Whatever happens, the attempt's
        container is gone afterwards. What the run means is outcome.classify's to say."""
        self._runs.add(config.run_id)
        label = f"{ATTEMPT_LABEL}={config.attempt_id}"
        return attempt_run.run_attempt(
            config, on_line, lambda: self.watch(config.attempt_id, on_memory, config.admit_dir), self.remove_containers,
            lambda online: set_network(self._docker, label, online),
        )  # fmt: skip

    # -----------------------------------------------------------------------------------------
    # Calibration: one unit compiled alone in its own container (unit_compile.py)

    def ensure_torch_headers(self, image: str, requirement: str, index_url: str, on_line: OnLine) -> str:
        """A volume with torch unpacked (its headers), made once per torch requirement and index."""
        return unit_compile.ensure_torch_headers(
            self._docker, self._run, image, requirement, index_url, on_line
        )

    def compile_unit_alone(self, job: UnitCompile) -> UnitResult:
        """Run one unit's compile in a container of its own and read back what it cost."""
        return unit_compile.compile_unit_alone(self._run, job)

    # -----------------------------------------------------------------------------------------
    # The import gate: a wheel installed and imported in a fresh container (gate_container.py)

    def run_gate(self, job: GateJob, on_line: OnLine) -> tuple[dict[str, object] | None, str]:
        """Run the gate for one wheel; its JSON answer (None when the container died first) and
        the log's tail. The container is gone afterwards, whatever happens."""
        return gate_container.run_gate(self._run, job, on_line)

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
    def gc_state(self, scope: decisions.Scope) -> decisions.DockerState:
        """The images and volumes in *scope*, with the sizes Docker counts, and every container
        (running or stopped) with its image and volumes: in use means kept."""
        return _gc_state(self._disk_usage(), scope)

    def gc_remove_image(self, decision: decisions.Decision, scope: decisions.Scope) -> decisions.Removal:
        """Remove one tag of wheelbuild's (its layers go when no other tag or image needs them).
        Never forced: an image a container uses is refused by Docker, and so kept."""
        if decision.kind is not decisions.Kind.IMAGE or not scope.owns_image(decision.name):
            raise ValueError(f"not an image gc may remove: {decision.name}")
        return _unforced(
            decision, lambda: self._docker.images.remove(decision.name, force=False, noprune=False)
        )

    def gc_wheel_cache(self, volume: str, image: str, bound: int, prune: bool) -> dict[str, object] | None:
        """images/wheelbuild-wheel-cache --report (or --prune) over the torch-wheels *volume*, in
        a container of the base *image* (the volume is Docker's: only a container reads it); its
        JSON answer, or None when the image is not here or the script gave no answer."""
        if not self.local_image_id(image):
            return None
        script, mount = script_volume(WHEEL_CACHE_SCRIPT)
        command = ["python3", script, "/cache", "--prune" if prune else "--report", "--bound", str(bound)]
        try:
            output = self._run(
                image, command, network_disabled=True, remove=True,
                volumes={**mount, volume: {"bind": "/cache", "mode": "rw"}},
            )  # fmt: skip
            found = json.loads(output.decode(errors="replace").strip().splitlines()[-1])
        except (docker.errors.ContainerError, docker.errors.APIError, ValueError, IndexError):
            return None
        return found if isinstance(found, dict) else None

    def gc_remove_volume(self, decision: decisions.Decision, scope: decisions.Scope) -> decisions.Removal:
        """Remove one of wheelbuild's volumes. Never forced: a volume a container mounts, running
        or stopped, is refused by Docker, and so kept."""
        if decision.kind is not decisions.Kind.VOLUME or scope.volume_kind(decision.name) is None:
            raise ValueError(f"not a volume gc may remove: {decision.name}")
        return _unforced(decision, lambda: self._docker.volumes.get(decision.name).remove(force=False))


# ---------------------------------------------------------------------------------------------
# Helpers of the engine's (the SDK's objects are untyped here, and go no further)


def _image(found: Any, tag: str, reused: bool) -> Image:
    size = found.attrs.get("Size") if isinstance(getattr(found, "attrs", None), dict) else None
    return Image(tag, str(found.id), dict(found.labels or {}), reused, size if isinstance(size, int) else 0)


def reap_when_gone(owner: str, run_id: str, poll_s: float = 1.0) -> int:
    """Wait for the owner to end, then remove the run's containers; how many were left. The
    reaper's own process: its own engine."""
    while owner_alive(owner):
        time.sleep(poll_s)
    return DockerEngine(sweep=False, timeout=120).remove_containers(f"{RUN_LABEL}={run_id}")


def _gc_state(usage: dict[str, Any], scope: decisions.Scope) -> decisions.DockerState:
    images = []
    for entry in usage.get("Images") or []:
        tags = [t for t in entry.get("RepoTags") or [] if t != "<none>:<none>"]
        unique = max(int(entry.get("Size") or 0) - max(int(entry.get("SharedSize") or 0), 0), 0)
        for tag in tags:
            if scope.owns_image(tag):
                shared_tag = len(tags) > 1
                images.append(
                    decisions.ImageFact(tag, str(entry["Id"]), 0 if shared_tag else unique, shared_tag)
                )
    volumes = [
        decisions.VolumeFact(str(v["Name"]), int((v.get("UsageData") or {}).get("Size", -1)))
        for v in usage.get("Volumes") or []
        if scope.volume_kind(str(v.get("Name", ""))) is not None
    ]
    containers = [
        decisions.ContainerFact(
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
    return decisions.DockerState(tuple(images), tuple(volumes), tuple(containers))


def _unforced(decision: decisions.Decision, remove: Callable[[], object]) -> decisions.Removal:
    """One unforced removal: gone already, kept (Docker refused: in use), failed or removed."""
    try:
        remove()
    except docker.errors.NotFound:
        return decisions.Removal(decision, decisions.Status.GONE)
    except docker.errors.APIError as error:
        if error.status_code == 409:
            return decisions.Removal(decision, decisions.Status.KEPT, f"in use: {error.explanation or error}")
        return decisions.Removal(decision, decisions.Status.FAILED, str(error.explanation or error))
    return decisions.Removal(decision, decisions.Status.REMOVED)


def build_image(
    client: docker.DockerClient,
    context: IO[bytes],
    dockerfile: str,
    tag: str,
    buildargs: dict[str, str],
    on_line: Callable[[str], None],
    labels: dict[str, str] | None = None,
) -> None:
    """Build *tag* from a tar context, its log streamed live; ImageBuildFailed with the log's
    tail when the build fails."""
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
            labels=labels,
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


def _is_build_image(tag: str) -> bool:
    """A build image's tag, of any toolkit: wheelbuild-cuda131:<hash>, wheelbuild-cuda132:<hash>."""
    return tag.partition(":")[0] in IMAGE_REPOSITORIES
