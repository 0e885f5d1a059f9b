"""The one room with Docker in it: preflight, image build, one cibuildwheel attempt in one
container, and cleanup by label. Everything it returns is a plain dataclass.

An attempt's container carries labels naming the run, the attempt and the owning process, so
that whatever happens (Ctrl-C, SIGTERM, a crash) the container and every compiler in it can be
found and removed, now or by the next run's sweep.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors
import docker.types
import requests
import tenacity

from . import cgroup, doctor, gc, secrets
from .buildlog import (
    MEMORY_MARK,
    MEMORY_MISSING_MARK,
    TORCH_MISMATCH_MARK,
    BuildLog,
    MemorySample,
    MemorySeries,
)
from .cuda_redist import CudaLayer
from .errors import (
    BuildFailed,
    CompileFailed,
    DockerUnavailable,
    ImageBuildFailed,
    MemoryLimitNotApplied,
    NvidiaRuntimeMissing,
    OutOfMemory,
)
from .image import DOCKERFILE, LABEL, REPOSITORY, Image, ImageInputs, production_base
from .spec import GpuMode

RUN_LABEL = "wheelbuild.run"
ATTEMPT_LABEL = "wheelbuild.attempt"
OWNER_LABEL = "wheelbuild.owner"  # host:pid:process-start-time of the wheelbuild that owns it
PIP_CACHE_VOLUME = "wheelbuild-pip-cache"
# sccache's local store, shared by every attempt, Python and night on this machine: a retry after
# an OOM kill finds every unit that finished before it in the cache, so nothing is recompiled.
SCCACHE_VOLUME = "wheelbuild-sccache"
SCCACHE_DIR = "/root/.cache/sccache"
ADMIT_COSTS_PATH = "/tmp/wheelbuild-admit-costs.json"
COMPILE_STEP = "Building wheel"  # cibuildwheel's step that runs the package's build

# A compiler diagnostic: `file.cpp:12:3: error: ...` or `file.cu(12): error: ...`, perhaps indented
# (pip -v indents what the build backend prints).
_COMPILER_ERROR = re.compile(r"^\s*\S+?(?::\d+(?::\d+)?:|\(\d+\):)\s*(?:fatal\s+)?error\b.*$", re.MULTILINE)


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


def connect(sweep: bool = True) -> Any:
    """A docker client that has answered a ping, or DockerUnavailable. Every command that
    touches Docker first removes containers whose wheelbuild is gone (sweep_orphans)."""
    try:
        client = docker.from_env(timeout=600)
        client.ping()
        if sweep:
            sweep_orphans(client)
        return client
    except docker.errors.DockerException as exc:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise DockerUnavailable(
            f"no Docker daemon answers at {host}",
            "start one (as root: scripts/install-docker), or point DOCKER_HOST at a running daemon",
        ) from exc


# ---------------------------------------------------------------------------------------------
# Images


@transient_retry
def local_image_id(client: Any, reference: str) -> str:
    """The local ID of an image, or "" when it is not present here."""
    try:
        return str(client.images.get(reference).id)
    except docker.errors.ImageNotFound:
        return ""


def _image(found: Any, tag: str, reused: bool) -> Image:
    return Image(tag=tag, id=str(found.id), labels=dict(found.labels or {}), reused=reused)


def ensure_image(client: Any, inputs: ImageInputs, on_line: Callable[[str], None]) -> Image:
    """Reuse the image tagged by the inputs' hash, or build it with the log streamed live."""
    try:
        return _image(client.images.get(inputs.tag), inputs.tag, reused=True)
    except docker.errors.ImageNotFound:
        pass
    on_line(f"building {inputs.tag} from {inputs.base_image} (once per set of inputs)")
    _build(client, io.BytesIO(inputs.context_tar()), DOCKERFILE, inputs.tag, inputs.buildargs(), on_line)
    return _image(client.images.get(inputs.tag), inputs.tag, reused=False)


def ensure_cuda_layer_image(client: Any, layer: CudaLayer, tree: Path, on_line: Callable[[str], None]) -> str:
    """The local image holding the CUDA 12 layer's tree at its CUDA_HOME, labelled with its pins;
    built once per set of pins (FROM scratch: the build image copies the folder out of it)."""
    try:
        client.images.get(layer.tag)
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
        _build(client, context, "Dockerfile", layer.tag, {}, on_line)
    return layer.tag


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


@transient_retry
def list_images(client: Any) -> list[Image]:
    found = []
    for image in client.images.list(filters={"label": LABEL}):
        tags = [t for t in image.tags if t.startswith(f"{REPOSITORY}:")] or image.tags or ["<none>"]
        found.append(_image(image, tags[0], reused=True))
    return sorted(found, key=lambda i: i.tag)


@transient_retry
def image_pythons(client: Any, tag: str) -> list[str]:
    """cibuildwheel tags (cp311, ...) of the CPython interpreters under /opt/python in the image."""
    output = client.containers.run(
        tag, ["ls", "/opt/python"], remove=True, network_disabled=True, labels={OWNER_LABEL: owner_token()}
    )
    names = output.decode().split()
    tags = {n.split("-")[0] for n in names if re.fullmatch(r"cp3\d+-cp3\d+", n)}
    tags.discard("cp39")  # cibuildwheel's env-dump link, not a build target here
    return sorted(tags, key=lambda t: int(t[3:]))


# ---------------------------------------------------------------------------------------------
# Preflight


@transient_retry
def resolve_gpus(client: Any, mode: GpuMode) -> bool:
    """Whether to pass the GPU through. `all` without an NVIDIA runtime is an error."""
    if mode is GpuMode.NONE:
        return False
    runtimes = client.info().get("Runtimes") or {}
    has_nvidia = "nvidia" in runtimes
    if mode is GpuMode.ALL and not has_nvidia:
        raise NvidiaRuntimeMissing(
            f"--gpus all asked for a GPU, but the Docker daemon has no NVIDIA runtime "
            f"(runtimes: {', '.join(sorted(runtimes)) or 'none'})",
            "install nvidia-container-toolkit and restart dockerd, or use --gpus auto|none "
            "(compiling needs no GPU)",
        )
    return has_nvidia


# The memory probe: is the limit Docker was given the limit the container lives under?
_READ_MEMORY_LIMIT = (
    "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
)


def _probe_image(client: Any, base_image: str | None) -> str:
    """A local image to start the probe from (never pulled): the base when given and present,
    else the newest local build image; "" when there is none."""
    if base_image and local_image_id(client, base_image):
        return base_image
    ours = sorted(
        client.images.list(name=REPOSITORY), key=lambda i: str(i.attrs.get("Created", "")), reverse=True
    )
    return next((t for i in ours for t in i.tags if t.startswith(f"{REPOSITORY}:")), "")


def _probe_memory(client: Any, image: str) -> tuple[str | None, str]:
    """(what the container reads as its memory limit, error) for a --memory 64m container."""
    memory = doctor.PROBE_MEMORY
    try:
        output = client.containers.run(
            image, ["sh", "-c", _READ_MEMORY_LIMIT], mem_limit=memory, memswap_limit=memory,
            network_disabled=True, labels={OWNER_LABEL: owner_token()}, remove=True,
        )  # fmt: skip
    except docker.errors.ContainerError as exc:
        return None, f"exit {exc.exit_status}: {(exc.stderr or b'').decode(errors='replace').strip()[-200:]}"
    except docker.errors.APIError as exc:
        return None, str(exc.explanation or exc)
    return output.decode(errors="replace").strip(), ""


def docker_facts(base_image: str | None = None) -> doctor.DockerFacts:
    """What `wheelbuild doctor` needs of the daemon: version, rootless, cgroups, runtimes, its
    root, a real memory limit read back from a container, and the base image's presence. No
    daemon is an answer too (facts.error), not an exception. Nothing is pulled."""
    host = secrets.redact_url(os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"))
    try:
        pin, pin_error = production_base(), ""
    except Exception as exc:  # a missing or changed cibuildwheel: said, not raised
        pin, pin_error = "", f"{type(exc).__name__}: {exc}"
    try:
        client = docker.from_env(timeout=30)
        client.ping()
        info = client.info()
        version = client.version()
        image = _probe_image(client, base_image)
        limit, probe_error = _probe_memory(client, image) if image else (None, "")
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
            base_pin_present=bool(pin) and bool(local_image_id(client, pin)),
            base_pin_error=pin_error,
            base_override=base_image or "",
            base_override_present=bool(base_image) and bool(local_image_id(client, base_image or "")),
        )
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        return doctor.DockerFacts(host=host, error=why, base_pin=pin, base_pin_error=pin_error)


# ---------------------------------------------------------------------------------------------
# Ownership labels and cleanup


def _process_start(pid: int) -> str:
    """The process's start time in clock ticks: with the pid, it names one process for good."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def process_namespace() -> str:
    """Where a pid means one process: this boot of this host, this PID namespace. CI runners
    that share a hostname in separate PID namespaces must not judge each other's pids."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        pidns = os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    except OSError:
        boot, pidns = "unknown", "unknown"
    return f"{socket.gethostname()}/{boot}/{pidns}"


def owner_token(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{process_namespace()}:{pid}:{_process_start(pid)}"


def _owner_alive(token: str) -> bool:
    namespace, _, rest = token.partition(":")
    pid_text, _, start = rest.partition(":")
    if namespace != process_namespace() or not pid_text.isdigit():
        return True  # another machine's or namespace's run: not ours to judge
    return _process_start(int(pid_text)) == start != ""


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


@transient_retry
def remove_containers(client: Any, label: str) -> int:
    """Kill and remove every container carrying `label` (key=value). Returns how many."""
    return _remove(client.containers.list(all=True, filters={"label": label}))


@transient_retry
def sweep_orphans(client: Any) -> int:
    """Remove containers whose owning wheelbuild is gone: every container wheelbuild makes
    carries OWNER_LABEL (attempts, gates, calibration units, probes)."""
    containers = client.containers.list(all=True, filters={"label": OWNER_LABEL})
    return _remove(
        c for c in containers if (token := (c.labels or {}).get(OWNER_LABEL, "")) and not _owner_alive(token)
    )


# ---------------------------------------------------------------------------------------------
# Watching an attempt: OOM evidence and memory, without trusting the exit code
#
# When a compiler is OOM-killed, ninja fails, cibuildwheel exits 1 and the container's PID 1
# (cibuildwheel's bash) exits 0: no 137 anywhere. The kernel and Docker know, so we ask them.


@dataclass(frozen=True)
class OomEvidence:
    docker_oom_events: int = 0  # Docker's `oom` events for the attempt's label
    state_oom_killed: bool = False  # State.OOMKilled, seen while the container lived
    cgroup_oom_kills: int = 0  # rise of the container cgroup's oom_kill counter
    killed_lines: tuple[str, ...] = ()  # "Killed", "died due to signal 9" in the log

    @property
    def fired(self) -> tuple[str, ...]:
        found = []
        if self.docker_oom_events:
            found.append(f"docker oom event x{self.docker_oom_events}")
        if self.state_oom_killed:
            found.append("State.OOMKilled")
        if self.cgroup_oom_kills:
            found.append(f"cgroup oom_kill +{self.cgroup_oom_kills}")
        # "Killed" in the log is what any SIGKILL prints (a timeout, a person's pkill): it
        # counts only when the kernel or Docker also says the memory limit was hit.
        if self.killed_lines and found:
            found.append(f"log: {self.killed_lines[0]}")
        return tuple(found)


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


# ---------------------------------------------------------------------------------------------
# One attempt: one cibuildwheel run in one container


@dataclass(frozen=True)
class AttemptConfig:
    run_id: str
    attempt: int
    image: str
    project_dir: Path  # copied into the container as /project
    package: str  # what cibuildwheel builds: "." or an sdist path
    identifiers: tuple[str, ...]  # cp311-manylinux_x86_64 ...
    memory: int
    cpus: float
    gpus: bool
    build_env: Mapping[str, str]
    cuda_home: str
    torch_requirement: str
    torch_minor: str
    torch_cuda_major: int
    torch_index_url: str
    output_dir: Path
    log_path: Path
    compiler_cache: bool = True
    # Admission by memory (images/wheelbuild-admit): the budget and the JSON costs file's text.
    admission: tuple[int, str] | None = None
    # Host env vars handed to the build by name (values never on a command line): a shared
    # sccache storage's settings and credentials (see SHARED_CACHE_ENV).
    pass_env: tuple[str, ...] = ()
    repair_excludes: tuple[str, ...] = (
        "libtorch*.so",
        "libc10*.so",
        "libcudart.so*",
        "libcuda.so*",
        "libshm.so",
    )

    @property
    def attempt_id(self) -> str:
        return f"{self.run_id}.{self.attempt}"


@dataclass(frozen=True)
class AttemptResult:
    attempt: int
    returncode: int
    duration_s: float
    wheels: tuple[Path, ...]
    memory_limit_seen: int | None
    log_path: Path
    log_tail: tuple[str, ...] = field(default_factory=tuple)
    oom: OomEvidence = field(default_factory=OomEvidence)
    peak_memory: int | None = None  # peak working set, sampled once a second
    peak_memory_compile: int | None = None  # the same, during cibuildwheel's "Building wheel" step
    finished_units: tuple[str, ...] = ()  # "identifier:unit.o" of each unit that completed here
    units_total: int = 0
    cache_hits: int = 0  # sccache, over the builds that got as far as the repair step
    cache_misses: int = 0
    build_seconds: float = 0.0  # time in cibuildwheel's "Building wheel..." steps
    build_seconds_by_identifier: tuple[tuple[str, float], ...] = ()  # the same, per Python
    cache_by_identifier: tuple[tuple[str, int, int], ...] = ()  # (identifier, hits, misses)
    # For build-report.html, in seconds since the attempt began: the working set (each point the
    # highest sample of its interval, memory_step_s long), the OOM kills, each unit's finish.
    memory_series: tuple[tuple[float, int], ...] = ()
    memory_step_s: float = 0.0
    oom_at_s: tuple[float, ...] = ()
    unit_finished_s: tuple[tuple[str, float], ...] = ()


def _env_assignments(env: Mapping[str, str]) -> str:
    return " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())


# sccache's shared storages (S3 and compatible, Redis, GitHub Actions' cache) and their
# credentials: when the host has any of these, the build gets them, so that runners share what
# any of them compiled.
SHARED_CACHE_ENV = (
    "SCCACHE_BUCKET", "SCCACHE_REGION", "SCCACHE_ENDPOINT", "SCCACHE_S3_KEY_PREFIX", "SCCACHE_S3_USE_SSL",
    "SCCACHE_S3_NO_CREDENTIALS", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
    "SCCACHE_REDIS", "SCCACHE_REDIS_ENDPOINT", "SCCACHE_REDIS_PASSWORD", "SCCACHE_REDIS_KEY_PREFIX",
    "SCCACHE_GHA_ENABLED", "SCCACHE_GHA_VERSION", "ACTIONS_CACHE_URL", "ACTIONS_RESULTS_URL", "ACTIONS_RUNTIME_TOKEN",
)  # fmt: skip


def shared_cache_env(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The SHARED_CACHE_ENV names set in `environ`."""
    return tuple(name for name in SHARED_CACHE_ENV if environ.get(name))


# Each Python's torch headers are the same, but live in that Python's own site-packages, a path
# the preprocessed text sccache hashes names. sccache strips SCCACHE_BASEDIRS from it, so the
# second Python reuses the first one's kernels (a unit that includes Python.h still differs in
# content and recompiles). The path is asked of the build's python, resolved too: manylinux's
# /opt/python/<tag> is a link to /opt/_internal/cpython-<version>.
SITE_PACKAGES_BASEDIRS = (
    "SCCACHE_BASEDIRS=\"$(python -c \"import os, sysconfig; p = sysconfig.get_path('purelib'); "
    "print(p + ':' + os.path.realpath(p))\")\""
)


def cibuildwheel_env(config: AttemptConfig, secrets_dir: Path | None = None) -> dict[str, str]:
    """The CIBW_* settings of one attempt. Pure, so unit tests can read it. Secrets (the torch
    index URL, a shared cache's credentials) are never among them: cibuildwheel prints its
    options and runs commands as `env K=V ...`, so they reach the container as files in
    `secrets_dir`, mounted read-only (secrets.MOUNT), and only the commands that need them read them."""
    create_args = [
        f"--memory={config.memory}",
        f"--memory-swap={config.memory}",  # equal: no swap, so the limit is real
        f"--cpus={config.cpus:g}",
        f"--label={RUN_LABEL}={config.run_id}",
        f"--label={ATTEMPT_LABEL}={config.attempt_id}",
        f"--label={OWNER_LABEL}={owner_token()}",
        f"--volume={PIP_CACHE_VOLUME}:/root/.cache/pip",
    ]
    if config.compiler_cache:
        create_args.append(f"--volume={SCCACHE_VOLUME}:{SCCACHE_DIR}")
    if secrets_dir is not None:
        create_args.append(f"--volume={secrets_dir}:{secrets.MOUNT}:ro")
    if config.gpus:
        create_args.append("--gpus=all")
    container_env = {
        **config.build_env,
        "CUDA_HOME": config.cuda_home,
        "WHEELBUILD_MEMORY_LIMIT": str(config.memory),
    }
    if config.compiler_cache:
        # torch's cpp_extension puts PYTORCH_NVCC in place of nvcc and CXX in place of c++.
        # sccache-c++ goes through wheelbuild-admit too, which admits only when its env is set.
        container_env.update(
            {
                "PYTORCH_NVCC": f"{'wheelbuild-admit ' if config.admission else ''}sccache {config.cuda_home}/bin/nvcc",
                "CXX": "/usr/local/bin/sccache-c++",
                "SCCACHE_DIR": SCCACHE_DIR,
                "SCCACHE_IDLE_TIMEOUT": "0",
            }
        )
    elif config.admission:
        container_env["PYTORCH_NVCC"] = f"wheelbuild-admit {config.cuda_home}/bin/nvcc"
    if config.admission:
        budget, costs = config.admission
        container_env.update(
            {
                "WHEELBUILD_ADMIT_BUDGET": str(budget),
                "WHEELBUILD_ADMIT_COSTS": ADMIT_COSTS_PATH,
                "WHEELBUILD_ADMIT_COSTS_JSON": costs,
            }
        )
    # The container must enforce the limit it was promised: rootless or v1-rootless Docker can
    # silently ignore --memory, and then the plan's MAX_JOBS means nothing.
    check_memory = (
        "lim=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || "
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || echo none); "
        f'echo "{MEMORY_MARK} $lim (asked $WHEELBUILD_MEMORY_LIMIT)"; '
        f'[ "$lim" = "$WHEELBUILD_MEMORY_LIMIT" ] || {{ echo "{MEMORY_MISSING_MARK}: the container '
        'runs without the requested limit" >&2; exit 86; }'
    )
    # A wheel built against the wrong torch breaks at import, so check what the index served.
    check_torch = (
        'import sys, torch; v = torch.__version__; c = torch.version.cuda or "none"; '
        f'ok = v.startswith("{config.torch_minor}.") and c.split(".")[0] == "{config.torch_cuda_major}"; '
        f'print("wheelbuild: torch", v, "CUDA", c) if ok else print("{TORCH_MISMATCH_MARK}:", v, '
        f'"with CUDA", c, "was installed; the variant needs torch {config.torch_minor}.* with CUDA '
        f'{config.torch_cuda_major}.x"); sys.exit(0 if ok else 87)'
    )
    excludes = " ".join(f"--exclude {shlex.quote(e)}" for e in config.repair_excludes)
    before_build = (
        "python -m pip install 'setuptools>=70' wheel && "
        f'PIP_INDEX_URL="$(cat {secrets.MOUNT}/{secrets.TORCH_INDEX_FILE})" '
        f"python -m pip install {shlex.quote(config.torch_requirement)} && "
        f"python -c {shlex.quote(check_torch)}"
    )
    repair = f"auditwheel repair {excludes} -w {{dest_dir}} {{wheel}}"
    if config.admission:
        # The wrapper reads its costs from a file; the env carries the text into the container.
        before_build = f'printf %s "$WHEELBUILD_ADMIT_COSTS_JSON" > {ADMIT_COSTS_PATH} && ' + before_build
    if config.compiler_cache:
        # Counted per build: zeroed before it, printed after it (read back from the log). A fresh
        # server per build, since the server keeps the SCCACHE_BASEDIRS of the build that
        # started it, and builds run one after another.
        # The server is the one process that needs a shared cache's credentials: it alone is
        # started with them (sourced from the mounted file), and the compilers only talk to it.
        before_build += (
            " && { sccache --stop-server >/dev/null 2>&1 || true; } && "
            f"( set -a && . {secrets.MOUNT}/{secrets.SCCACHE_ENV_FILE} && exec sccache --start-server >/dev/null ) && "
            "sccache --zero-stats >/dev/null"
        )
        repair = f"sccache --show-stats; {repair}"
    return {
        "CIBW_PLATFORM": "linux",
        "CIBW_ARCHS_LINUX": "x86_64",
        "CIBW_BUILD": " ".join(config.identifiers),
        "CIBW_MANYLINUX_X86_64_IMAGE": config.image,
        "CIBW_CONTAINER_ENGINE": "docker; create_args: " + " ".join(create_args),
        "CIBW_BUILD_FRONTEND": "pip; args: --no-build-isolation",
        "CIBW_BUILD_VERBOSITY": "1",
        "CIBW_BEFORE_ALL_LINUX": check_memory,
        "CIBW_BEFORE_BUILD_LINUX": before_build,
        # PATH keeps cibuildwheel's python first (it checks) and puts the variant's nvcc next.
        "CIBW_ENVIRONMENT_LINUX": " ".join(
            [
                _env_assignments(container_env),
                *([SITE_PACKAGES_BASEDIRS] if config.compiler_cache else []),
                f'PATH="$PATH:{config.cuda_home}/bin"',
            ]
        ),
        "CIBW_ENVIRONMENT_PASS_LINUX": "",
        "CIBW_REPAIR_WHEEL_COMMAND_LINUX": repair,
        "CIBW_TEST_COMMAND": "",
    }


def write_secrets(config: AttemptConfig, environ: Mapping[str, str], directory: Path) -> None:
    """The attempt's secret files: the torch index URL, and the shared cache's settings for the
    sccache server (readable by this user only; removed with the attempt)."""
    directory.chmod(0o700)
    index = directory / secrets.TORCH_INDEX_FILE
    index.touch(mode=0o600)
    index.write_text(config.torch_index_url)
    shared = (
        {name: environ[name] for name in config.pass_env if environ.get(name)}
        if config.compiler_cache
        else {}
    )
    env_file = directory / secrets.SCCACHE_ENV_FILE
    env_file.touch(mode=0o600)
    env_file.write_text(secrets.sccache_env_file(shared))


def redactor_for(config: AttemptConfig, environ: Mapping[str, str]) -> secrets.Redactor:
    """What every line of the attempt passes through before a log or a terminal sees it."""
    return secrets.Redactor(secrets.run_secrets(environ, SHARED_CACHE_ENV, (config.torch_index_url,)))


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


def run_attempt(
    client: Any,
    config: AttemptConfig,
    on_line: Callable[[str, BuildLog], None],
    on_memory: Callable[[MemorySample], None] | None = None,
) -> AttemptResult:
    """Run cibuildwheel once, watched for OOM evidence. Whatever happens, the attempt's container
    is gone afterwards."""
    config.output_dir.mkdir(parents=True, exist_ok=True)
    secrets_dir = Path(tempfile.mkdtemp(prefix="wheelbuild-secrets-"))
    try:
        write_secrets(config, os.environ, secrets_dir)
        return _run_attempt(client, config, secrets_dir, on_line, on_memory)
    finally:
        shutil.rmtree(secrets_dir, ignore_errors=True)


def _run_attempt(
    client: Any,
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
    watcher = AttemptWatcher(client, config.attempt_id, on_memory)
    with config.log_path.open("a", encoding="utf-8") as log, watcher:
        log.write(f"=== attempt {config.attempt_id}: {shlex.join(command)}\n")
        # A session of its own: a terminal's Ctrl-C reaches only us, and we stop it in order.
        proc = subprocess.Popen(
            command,
            cwd=config.project_dir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
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
            remove_containers(client, f"{ATTEMPT_LABEL}={config.attempt_id}")
    wheels = tuple(sorted(config.output_dir.glob("*.whl")))
    return AttemptResult(
        attempt=config.attempt,
        returncode=returncode,
        duration_s=time.monotonic() - started,
        wheels=wheels,
        memory_limit_seen=progress.memory_limit_seen,
        log_path=config.log_path,
        log_tail=tuple(tail),
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


def raise_for_failure(result: AttemptResult) -> None:
    """Turn a failed attempt into the typed error that explains it."""
    if result.returncode == 0 and result.wheels:
        return
    text = "\n".join(result.log_tail)
    tail = "\n".join(result.log_tail[-25:])
    where = f"full log: {result.log_path}"
    # Marks count only at the start of a line: cibuildwheel also echoes the commands that print them.
    if any(line.startswith(MEMORY_MISSING_MARK) for line in result.log_tail):
        raise MemoryLimitNotApplied(
            "the build container runs without the memory limit it was given "
            f"(it read {result.memory_limit_seen or 'no limit'}); Docker ignored --memory",
            "use a rootful Docker with the memory cgroup controller enabled "
            "(rootless Docker on cgroup v1 cannot limit memory)",
            details=tail,
        )
    mismatch = next((line for line in result.log_tail if line.startswith(TORCH_MISMATCH_MARK)), None)
    if mismatch:
        raise BuildFailed(
            mismatch.removeprefix("wheelbuild: "),
            "point --torch-index-url at an index serving that variant, or pick the variant the index has",
            details=tail,
        )
    if result.oom.fired:
        raise OutOfMemory(
            f"a compiler was OOM-killed in attempt {result.attempt} "
            f"(evidence: {'; '.join(result.oom.fired)})",
            "give the container more memory (--memory) or lower --max-jobs / --nvcc-threads; " + where,
            details=tail,
        )
    first_error = _COMPILER_ERROR.search(text)
    if first_error:
        raise CompileFailed(
            f"compile failed: {first_error.group(0).strip()}",
            f"fix the source (this is not an out-of-memory kill, so it is not retried); {where}",
            details=tail,
        )
    raise BuildFailed(
        f"cibuildwheel exited with code {result.returncode} without a wheel",
        f"read the log tail above; {where}",
        details=tail,
    )


def start_reaper(run_id: str) -> subprocess.Popen[bytes]:
    """A watcher in a session of its own that outlives a `kill -9` of this process: once this
    process is gone it removes every container of the run, and every compiler with them. (A
    killed wheelbuild cannot clean up; cibuildwheel, in a session of its own, would otherwise
    keep its container compiling until it next wrote to the dead pipe.)"""
    return subprocess.Popen(
        [sys.executable, "-m", f"{__package__}.reaper", owner_token(), run_id],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def reap_when_gone(owner: str, run_id: str, poll_s: float = 1.0) -> int:
    """Wait for the owner to end, then remove the run's containers; how many were left."""
    while _owner_alive(owner):
        time.sleep(poll_s)
    client = docker.from_env(timeout=120)
    return remove_containers(client, f"{RUN_LABEL}={run_id}")


def interrupt_cleanup(client: Any, run_id: str) -> int:
    """After Ctrl-C/SIGTERM: remove every container of the run (all its attempts)."""
    return remove_containers(client, f"{RUN_LABEL}={run_id}")


# ---------------------------------------------------------------------------------------------
# Calibration: one unit compiled alone in its own container (its own cgroup)

CALIBRATE_MARK = "wheelbuild-calibrate:"
TORCH_HEADERS_DIR = "/opt/wheelbuild-torch"


@dataclass(frozen=True)
class UnitCompile:
    """One compile of one unit, as `wheelbuild calibrate` runs it."""

    run_id: str
    image: str
    source_dir: Path  # the unpacked sdist on this machine, mounted read-only at /src
    torch_volume: str  # a volume holding torch (headers) at TORCH_HEADERS_DIR
    unit: str  # relative to the source root
    flags: tuple[str, ...]  # the package's nvcc flags
    include_dirs: tuple[str, ...]  # relative to the source root
    archs: tuple[int, ...]
    threads: int
    memory: int
    cpus: float
    cuda_home: str


@dataclass(frozen=True)
class UnitResult:
    returncode: int
    peak: int  # the container cgroup's peak memory, bytes
    wall_s: float  # nvcc's own wall time, measured inside the container
    oom: bool
    log_tail: tuple[str, ...]


def unit_compile_script(job: UnitCompile) -> str:
    """The shell the container runs: nvcc on the unit, then its cgroup's peak and the time."""
    torch_include = f"{TORCH_HEADERS_DIR}/torch/include"
    includes = [f"/src/{d}" for d in job.include_dirs] + [
        torch_include,
        f"{torch_include}/torch/csrc/api/include",
    ]
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in job.archs]
    command = [
        f"{job.cuda_home}/bin/nvcc", *(f"-I{d}" for d in includes), *job.flags, *gencode,
        "--threads", str(job.threads), "--compiler-options", "-fPIC", "-c", f"/src/{job.unit}", "-o", "/tmp/unit.o",
    ]  # fmt: skip
    return (
        "py_include=$(python3 -c \"import sysconfig; print(sysconfig.get_paths()['include'])\"); "
        "start=$(date +%s.%N); "
        f'{shlex.join(command)} -I"$py_include"; rc=$?; '
        "end=$(date +%s.%N); "
        "peak=$(cat /sys/fs/cgroup/memory.peak 2>/dev/null || cat /sys/fs/cgroup/memory/memory.max_usage_in_bytes); "
        "ooms=$(grep -h '^oom_kill ' /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control "
        "2>/dev/null | head -n 1 | cut -d' ' -f2); "
        f'echo "{CALIBRATE_MARK} rc=$rc peak=$peak ooms=${{ooms:-0}} start=$start end=$end"'
    )


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


@transient_retry
def ensure_torch_headers(
    client: Any, image: str, requirement: str, index_url: str, on_line: Callable[[str], None]
) -> str:
    """A volume with torch unpacked (no dependencies: only its headers are needed), made once per
    torch requirement and index. The index URL travels in the environment, never in a command."""
    name = "wheelbuild-torch-" + hashlib.sha256(f"{requirement} {index_url}".encode()).hexdigest()[:16]
    try:
        client.volumes.get(name)
        client.containers.run(
            image, ["test", "-f", f"{TORCH_HEADERS_DIR}/.complete"], volumes={name: {"bind": TORCH_HEADERS_DIR, "mode": "ro"}},
            remove=True, network_disabled=True, labels={OWNER_LABEL: owner_token()},
        )  # fmt: skip
        return name
    except (docker.errors.NotFound, docker.errors.ContainerError):
        pass
    on_line(f"unpacking {requirement} into volume {name} (its headers, for compiling units alone)")
    # The index URL may hold credentials: a mounted file, never the container's env (docker
    # inspect shows that).
    with tempfile.TemporaryDirectory(prefix="wheelbuild-secrets-") as work:
        index_file = Path(work) / secrets.TORCH_INDEX_FILE
        index_file.touch(mode=0o600)
        index_file.write_text(index_url)
        client.containers.run(
            image,
            ["sh", "-c", f'PIP_INDEX_URL="$(cat {secrets.MOUNT}/{secrets.TORCH_INDEX_FILE})" '
             f'python3 -m pip install -q --no-deps --target {TORCH_HEADERS_DIR} "$TORCH_REQUIREMENT" '
             f'&& touch {TORCH_HEADERS_DIR}/.complete'],
            environment={"TORCH_REQUIREMENT": requirement},
            volumes={name: {"bind": TORCH_HEADERS_DIR, "mode": "rw"}, work: {"bind": secrets.MOUNT, "mode": "ro"}},
            labels={OWNER_LABEL: owner_token()},
            remove=True,
        )  # fmt: skip
    return name


def compile_unit_alone(client: Any, job: UnitCompile) -> UnitResult:
    """Run one unit's compile in a container of its own and read back what it cost."""
    container = client.containers.run(
        job.image,
        ["sh", "-c", unit_compile_script(job)],
        detach=True,
        mem_limit=job.memory,
        memswap_limit=job.memory,
        nano_cpus=int(job.cpus * 1e9),
        network_disabled=True,
        volumes={
            str(job.source_dir): {"bind": "/src", "mode": "ro"},
            job.torch_volume: {"bind": TORCH_HEADERS_DIR, "mode": "ro"},
        },
        labels={RUN_LABEL: job.run_id, OWNER_LABEL: owner_token()},
    )
    try:
        status = container.wait()
        lines = container.logs().decode(errors="replace").splitlines()
    finally:
        _remove([container])
    return parse_unit_report(lines, int(status.get("StatusCode", 1)))


# ---------------------------------------------------------------------------------------------
# The import gate: a wheel installed and imported in a fresh container of the base image

GATE_SCRIPT = "wheelbuild-gate"
SMOKE_DIR = "smoke"  # images/smoke: recipes' GPU smoke tests
# torch and its CUDA wheels (~3 GB), downloaded once per machine for the gate's installs.
TORCH_WHEELS_VOLUME = "wheelbuild-torch-wheels"
_GATE_WORK = "/run/wheelbuild"
_FIND_PYTHON = (
    'ver="3.${WB_PYTHON#cp3}"; '
    'for py in "/opt/python/$WB_PYTHON-$WB_PYTHON/bin/python" "/opt/cpython/bin/python$ver" '
    '"/usr/local/bin/python$ver" "/usr/bin/python$ver"; do '
    f'  if [ -x "$py" ]; then exec "$py" /usr/local/bin/{GATE_SCRIPT} {_GATE_WORK}/spec.json {_GATE_WORK}/out/gate.json; fi; '
    "done; "
    'echo "wheelbuild-gate: the base image has no Python $ver" >&2; exit 3'
)


@dataclass(frozen=True)
class GateJob:
    run_id: str
    image: str  # the base image: no CUDA toolkit, as on a user's machine
    wheel: Path
    spec: Mapping[str, Any]  # gate.GateSpec.to_json(...) less the paths this function fills in
    torch_index_url: str  # may hold credentials: travels as a mounted file, never env or argv
    torch_cache_key: str  # the folder of TORCH_WHEELS_VOLUME for this torch and index
    ca_bundle: Path | None
    gpus: bool
    memory: int
    log_path: Path
    images_dir: Path


def run_gate(client: Any, job: GateJob, on_line: Callable[[str], None]) -> tuple[dict[str, Any] | None, str]:
    """Run the gate for one wheel; its JSON answer (None when the container died first) and the
    log's tail. The container is gone afterwards, whatever happens."""
    with tempfile.TemporaryDirectory(prefix="wheelbuild-gate-", ignore_cleanup_errors=True) as work:
        workdir = Path(work)
        (workdir / "out").mkdir()
        secret = workdir / "torch-index-url"
        secret.touch(mode=0o600)
        secret.write_text(job.torch_index_url)
        smoke = job.spec.get("smoke")
        spec = {
            **job.spec,
            "wheel": f"/wheels/{job.wheel.name}",
            "torch_index_file": f"{_GATE_WORK}/torch-index-url",
            "torch_cache": f"/cache/{job.torch_cache_key}",
            "smoke": f"/opt/wheelbuild-smoke/{smoke}" if smoke else None,
        }
        (workdir / "spec.json").write_text(json.dumps(spec))
        volumes = {
            str(job.wheel.parent.resolve()): {"bind": "/wheels", "mode": "ro"},
            str(workdir): {"bind": _GATE_WORK, "mode": "rw"},
            str((job.images_dir / GATE_SCRIPT).resolve()): {
                "bind": f"/usr/local/bin/{GATE_SCRIPT}",
                "mode": "ro",
            },
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
                key: "/run/wheelbuild-ca.crt" for key in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE")
            }
        device_requests = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if job.gpus else None
        container = client.containers.run(
            job.image,
            ["sh", "-c", _FIND_PYTHON],
            detach=True,
            environment=environment,
            volumes=volumes,
            mem_limit=job.memory,
            memswap_limit=job.memory,
            device_requests=device_requests,
            labels={RUN_LABEL: job.run_id, OWNER_LABEL: owner_token(), "wheelbuild.gate": job.wheel.name},
        )
        tail: deque[str] = deque(maxlen=60)
        redact = secrets.Redactor(secrets.url_secrets(job.torch_index_url))
        try:
            with job.log_path.open("a", encoding="utf-8") as log:
                log.write(f"=== import gate: {job.wheel.name} in {job.image}\n")
                for chunk in container.logs(stream=True, follow=True):
                    for raw in chunk.decode(errors="replace").splitlines():
                        line = redact(raw)
                        log.write(line + "\n")
                        tail.append(line)
                        on_line(line)
            container.wait()
        finally:
            _remove([container])
        answer = workdir / "out" / "gate.json"
        found = json.loads(answer.read_text()) if answer.is_file() else None
        return found, "\n".join(tail)


# ---------------------------------------------------------------------------------------------
# wheelbuild gc: what Docker holds of wheelbuild's, and removing it (never forced)


def _disk_usage(client: Any) -> dict[str, Any]:
    """Docker's own accounting (`docker system df`); the daemon runs one at a time."""
    for attempt in range(10):
        try:
            return dict(client.df())
        except docker.errors.APIError as error:
            if "already running" not in str(error.explanation or error) or attempt == 9:
                raise
            time.sleep(1.0)
    raise AssertionError("unreachable")


@transient_retry
def gc_state(client: Any, scope: gc.Scope) -> gc.DockerState:
    """The images and volumes in *scope*, with the sizes Docker counts, and every container
    (running or stopped) with its image and volumes: in use means kept."""
    usage = _disk_usage(client)
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


def gc_remove_image(client: Any, decision: gc.Decision, scope: gc.Scope) -> gc.Removal:
    """Remove one tag of wheelbuild's (its layers go when no other tag or image needs them).
    Never forced: an image a container uses is refused by Docker, and so kept."""
    if decision.kind is not gc.Kind.IMAGE or not scope.owns_image(decision.name):
        raise ValueError(f"not an image gc may remove: {decision.name}")
    try:
        client.images.remove(decision.name, force=False, noprune=False)
    except docker.errors.ImageNotFound:
        return gc.Removal(decision, gc.Status.GONE)
    except docker.errors.APIError as error:
        if error.status_code == 409:
            return gc.Removal(decision, gc.Status.KEPT, f"in use: {error.explanation or error}")
        return gc.Removal(decision, gc.Status.FAILED, str(error.explanation or error))
    return gc.Removal(decision, gc.Status.REMOVED)


def gc_remove_volume(client: Any, decision: gc.Decision, scope: gc.Scope) -> gc.Removal:
    """Remove one of wheelbuild's volumes. Never forced: a volume a container mounts, running or
    stopped, is refused by Docker, and so kept."""
    if decision.kind is not gc.Kind.VOLUME or scope.volume_kind(decision.name) is None:
        raise ValueError(f"not a volume gc may remove: {decision.name}")
    try:
        client.volumes.get(decision.name).remove(force=False)
    except docker.errors.NotFound:
        return gc.Removal(decision, gc.Status.GONE)
    except docker.errors.APIError as error:
        if error.status_code == 409:
            return gc.Removal(decision, gc.Status.KEPT, f"in use: {error.explanation or error}")
        return gc.Removal(decision, gc.Status.FAILED, str(error.explanation or error))
    return gc.Removal(decision, gc.Status.REMOVED)
