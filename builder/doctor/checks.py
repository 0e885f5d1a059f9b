"""`wheelbuild doctor`: is this machine ready to build? One check per line, ok / warn / fail.

Two halves. The checks (`check_*`) are pure: plain facts in, a `Check` out, so every status
path is tested without Docker or a network. facts.py gathers what is not Docker's
(HTTP reach, free disk, the CA bundle, nvidia-smi); engine.docker_facts gathers Docker's into a
`DockerFacts`. Nothing here imports docker.

`fail` means a build would fail as things are; `warn` means it may work but something will cost
time or a feature (a pull on the first build, no GPU smoke test, no CUDA 12 layer).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from ..host.ca_bundle import DEFAULT_CA_BUNDLE
from ..image.cuda_redist import REDIST_URL_ENV, redist_url
from ..secrets import redact_url
from ..units import format_bytes
from ..variants import PYTORCH_INDEX
from .facts import (
    REACH_DEADLINE_S,
    CaFacts,
    DiskFacts,
    Reach,
    ca_facts,
    cgroup_hierarchy,
    disk_facts,
    docker_root_disk,
    host_gpus,
    reach_all,
)

Status = Literal["ok", "warn", "fail"]

PROBE_MEMORY = 64 * 1024**2  # the probe container's --memory and --memory-swap
DISK_WARN = 40 * 1024**3  # a flash-attn build image plus torch wheels need tens of GB
DISK_FAIL = 10 * 1024**3
PYPI_URL = "https://pypi.org/simple/pip/"
DEFAULT_TORCH_INDEX = PYTORCH_INDEX.format(tag="cu130")


@dataclass(frozen=True)
class Check:
    check: str
    status: Status
    found: str
    remedy: str = ""  # empty when ok

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    def line(self) -> str:
        text = f"{self.status:<4}  {self.check:<14} {self.found}"
        return f"{text}; remedy: {self.remedy}" if self.remedy else text


@dataclass(frozen=True)
class DockerFacts:
    """What the Docker daemon says about itself, as engine.docker_facts gathers it."""

    host: str  # DOCKER_HOST, or the default socket
    error: str = ""  # non-empty: no daemon answered (the rest is then empty)
    version: str = ""
    api_version: str = ""
    rootless: bool = False
    cgroup_version: str = ""  # "1" or "2"
    cgroup_driver: str = ""
    runtimes: tuple[str, ...] = ()
    root_dir: str = ""  # DockerRootDir
    probe_image: str = ""  # the local image the memory probe ran in; "" when none was found
    probe_limit: str | None = None  # what the probe read back (memory.max / limit_in_bytes), raw
    probe_error: str = ""  # the probe container could not run or exited non-zero
    base_pin: str = ""  # image.production_base(): cibuildwheel's pin of manylinux_2_28
    base_pin_present: bool = False
    base_pin_error: str = ""  # the pin could not be read from the installed cibuildwheel
    base_override: str = ""  # WHEELBUILD_BASE_IMAGE / --base-image, when given
    base_override_present: bool = False

    @property
    def answered(self) -> bool:
        return not self.error


# ---------------------------------------------------------------------------------------------
# The checks: pure


_NO_DOCKER = "not checked: no Docker daemon answered"
_DOCKER_FIRST = "start Docker (see the docker line), then run wheelbuild doctor again"


def check_docker(facts: DockerFacts) -> Check:
    if not facts.answered:
        return Check(
            "docker",
            "fail",
            f"no Docker daemon answers at {facts.host} ({facts.error})",
            "start one (as root: scripts/install-docker), or point DOCKER_HOST at a running daemon",
        )
    mode = "rootless" if facts.rootless else "rootful"
    found = f"Docker {facts.version} (API {facts.api_version}) at {facts.host}, {mode}"
    if facts.rootless and facts.cgroup_version != "2":
        return Check(
            "docker",
            "warn",
            f"{found} on cgroup v{facts.cgroup_version or '?'}",
            "rootless Docker cannot limit memory on cgroup v1: use a rootful Docker, or cgroup v2 "
            "with the memory controller delegated",
        )
    return Check("docker", "ok", found)


def parse_limit(text: str | None) -> int | None:
    """The probe's answer (memory.max or memory.limit_in_bytes) in bytes; None: no limit."""
    value = (text or "").strip()
    if not value.isdigit():
        return None  # "max", empty, or anything else: no limit was seen
    number = int(value)
    return None if number >= 1 << 62 else number  # v1's "no limit" is a huge page-aligned number


def check_memory_limit(facts: DockerFacts, host_hierarchy: str = "") -> Check:
    """host_hierarchy: this host's cgroup layout (v1, v2, hybrid), when known."""
    name = "memory-limit"
    if not facts.answered:
        return Check(name, "warn", _NO_DOCKER, _DOCKER_FIRST)
    cgroups = f"cgroup v{facts.cgroup_version or '?'} (driver {facts.cgroup_driver or '?'}"
    cgroups += f", host {host_hierarchy})" if host_hierarchy else ")"
    if not facts.probe_image:
        return Check(
            name,
            "warn",
            f"{cgroups}; not probed: no local image to start a container from (nothing is pulled)",
            "build the image once (wheelbuild image build), or set WHEELBUILD_BASE_IMAGE to a local image",
        )
    if facts.probe_error:
        return Check(
            name,
            "fail",
            f"{cgroups}; a container with --memory {format_bytes(PROBE_MEMORY)} in {facts.probe_image} "
            f"failed: {facts.probe_error}",
            "use a rootful Docker with the memory cgroup controller enabled",
        )
    limit = parse_limit(facts.probe_limit)
    if limit != PROBE_MEMORY:
        seen = "no limit" if limit is None else format_bytes(limit)
        return Check(
            name,
            "fail",
            f"{cgroups}; a container given --memory {format_bytes(PROBE_MEMORY)} reads {seen} inside: "
            "Docker ignores --memory, so builds stop (exit 41) rather than run without their limit",
            "use a rootful Docker with the memory cgroup controller enabled (rootless Docker on "
            "cgroup v1 cannot limit memory; on cgroup v2 delegate the memory controller)",
        )
    return Check(
        name,
        "ok",
        f"{cgroups}; a container given --memory {format_bytes(PROBE_MEMORY)} reads {format_bytes(limit)} "
        f"back inside ({facts.probe_image})",
    )


def check_nvidia(facts: DockerFacts, gpus: tuple[str, ...] | None) -> Check:
    """gpus: nvidia-smi -L's lines; None when nvidia-smi is not on this machine."""
    name = "nvidia"
    seen = (
        "no nvidia-smi on this host"
        if gpus is None
        else f"{len(gpus)} GPU(s)" + (f": {'; '.join(gpus)}" if gpus else "")
    )
    if not facts.answered:
        return Check(name, "warn", f"{seen}; runtime {_NO_DOCKER}", _DOCKER_FIRST)
    runtimes = ", ".join(facts.runtimes) or "none"
    has_runtime = "nvidia" in facts.runtimes
    if has_runtime and gpus:
        return Check(name, "ok", f"NVIDIA runtime present; {seen}")
    if has_runtime:
        return Check(
            name,
            "warn",
            f"NVIDIA runtime present, but {seen}",
            "compiling needs no GPU; for the GPU smoke test, install the NVIDIA driver (nvidia-smi -L lists the GPUs)",
        )
    return Check(
        name,
        "warn",
        f"no NVIDIA runtime in Docker (runtimes: {runtimes}); {seen}",
        "compiling needs no GPU, so builds work; for the import gate's GPU smoke test install "
        "nvidia-container-toolkit and restart dockerd (until then --gpus all fails, --gpus auto skips it)",
    )


def check_disk(name: str, where: str, disk: DiskFacts | None) -> Check:
    """disk None: not checked (Docker did not answer)."""
    if disk is None:
        return Check(name, "warn", f"{where}: {_NO_DOCKER}", _DOCKER_FIRST)
    if disk.free is None:
        return Check(
            name,
            "warn",
            f"{where} {disk.path} is not on this machine (a remote daemon?): free space not checked",
            f"check the free space of {disk.path} on the daemon's machine (40 GiB or more)",
        )
    found = f"{format_bytes(disk.free)} free in {where} {disk.path}"
    if disk.free < DISK_FAIL:
        return Check(
            name,
            "fail",
            found,
            f"free space there (under {format_bytes(DISK_FAIL)}, a build image plus torch wheels do not fit); "
            "`docker image prune` and `docker builder prune` free what old builds left",
        )
    if disk.free < DISK_WARN:
        return Check(
            name,
            "warn",
            found,
            f"free space there (a flash-attn build image plus torch wheels need tens of GB; "
            f"{format_bytes(DISK_WARN)} or more is comfortable)",
        )
    return Check(name, "ok", found)


def check_ca_bundle(ca: CaFacts) -> Check:
    name = "ca-bundle"
    if ca.path is None:
        return Check(
            name,
            "warn",
            f"no host bundle at {DEFAULT_CA_BUNDLE}: builds trust only the base image's own store",
            "behind a TLS-intercepting proxy set WHEELBUILD_CA_BUNDLE (or --ca-bundle) to a PEM bundle with its CA",
        )
    origin = "WHEELBUILD_CA_BUNDLE/--ca-bundle" if ca.given else "the host's, by default"
    if not ca.exists:
        return Check(
            name,
            "fail",
            f"{ca.path} ({origin}) does not exist",
            "point WHEELBUILD_CA_BUNDLE (or --ca-bundle) at a PEM bundle, or unset it to use the host's",
        )
    if ca.error or ca.certificates == 0:
        why = ca.error or "it holds no CA certificate"
        return Check(
            name,
            "fail",
            f"{ca.path} ({origin}) is not a usable PEM bundle: {why}",
            "give a PEM file of CA certificates (-----BEGIN CERTIFICATE----- blocks)",
        )
    return Check(name, "ok", f"{ca.path} ({origin}): {ca.certificates} CA certificate(s)")


def _answer(reach: Reach) -> str:
    if reach.status is not None:
        return f"HTTP {reach.status} from {reach.url}"
    return f"{reach.url} unreachable: {reach.error}"


def check_reach(name: str, reach: Reach, severity: Status, remedy: str) -> Check:
    """Any HTTP answer below 400 is reach; 401/403 say the credentials are wrong; anything else
    (no answer, 404, 5xx) is `severity`."""
    if reach.status is not None and reach.status < 400:
        return Check(name, "ok", _answer(reach))
    if reach.status in (401, 403):
        return Check(
            name,
            severity,
            f"{_answer(reach)} (credentials missing or refused)",
            "put the index's credentials in its URL (https://user:token@host/...); " + remedy,
        )
    return Check(name, severity, _answer(reach), remedy)


def check_torch_index(reach: Reach) -> Check:
    if reach.status == 404:  # the server answered: the network is fine, the URL is not
        remedy = (
            "the index has no torch page there: check WHEELBUILD_TORCH_INDEX_URL (--torch-index-url) "
            "for a typo, e.g. https://download.pytorch.org/whl/cu130 or https://pypi.org/simple"
        )
    else:
        remedy = (
            "check the network (proxy, CA bundle), or set WHEELBUILD_TORCH_INDEX_URL (--torch-index-url) "
            "to an index that serves torch"
        )
    return check_reach("torch-index", reach, "fail", remedy)


def check_pypi(reach: Reach) -> Check:
    return check_reach(
        "pypi",
        reach,
        "fail",
        "builds install their tools from PyPI: check the network, the proxy and the CA bundle",
    )


def check_cuda_downloads(reach: Reach, cuda12_image: str = "") -> Check:
    if cuda12_image:
        found = f"not needed: --cuda12-image {cuda12_image} serves cu12x variants ({_answer(reach)})"
        return Check("cuda-downloads", "ok", found)
    return check_reach(
        "cuda-downloads",
        reach,
        "warn",
        f"only cu12x variants need them: point {REDIST_URL_ENV} at a mirror of NVIDIA's redist tree, "
        "or pass --cuda12-image with an NVIDIA CUDA 12.8+ devel image pinned by digest",
    )


def check_sccache(set_names: Iterable[str]) -> Check:
    """Which shared sccache storage the names set (never their values) make, and whether it is whole."""
    names = set(set_names)
    name = "sccache"
    if not names:
        return Check(
            name, "ok", "no shared storage set: sccache caches in the local volume wheelbuild-sccache"
        )
    shown = ", ".join(sorted(names))
    problems = []
    storages = []
    s3_settings = {"SCCACHE_REGION", "SCCACHE_ENDPOINT", "SCCACHE_S3_KEY_PREFIX", "SCCACHE_S3_USE_SSL"}
    if "SCCACHE_BUCKET" in names:
        storages.append("S3")
        keys = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
        if "SCCACHE_S3_NO_CREDENTIALS" not in names and not keys <= names:
            missing = " and ".join(sorted(keys - names))
            problems.append(f"SCCACHE_BUCKET without {missing} (nor SCCACHE_S3_NO_CREDENTIALS)")
        if not names & {"SCCACHE_REGION", "SCCACHE_ENDPOINT"}:
            problems.append("SCCACHE_BUCKET without SCCACHE_REGION or SCCACHE_ENDPOINT")
    elif names & s3_settings:
        problems.append(f"{', '.join(sorted(names & s3_settings))} without SCCACHE_BUCKET (ignored)")
    redis = {"SCCACHE_REDIS", "SCCACHE_REDIS_ENDPOINT"}
    if names & redis:
        storages.append("Redis")
    elif names & {"SCCACHE_REDIS_PASSWORD", "SCCACHE_REDIS_KEY_PREFIX"}:
        problems.append("Redis settings without SCCACHE_REDIS or SCCACHE_REDIS_ENDPOINT (ignored)")
    if "SCCACHE_GHA_ENABLED" in names:
        storages.append("GitHub Actions cache")
        if not names & {"ACTIONS_CACHE_URL", "ACTIONS_RESULTS_URL"} or "ACTIONS_RUNTIME_TOKEN" not in names:
            problems.append(
                "SCCACHE_GHA_ENABLED without ACTIONS_CACHE_URL/ACTIONS_RESULTS_URL and ACTIONS_RUNTIME_TOKEN"
            )
    if problems:
        return Check(
            name,
            "warn",
            f"set: {shown}; incomplete: {'; '.join(problems)}",
            "set the missing variables (sccache's docs list each storage's), or unset the others; "
            "builds still work, caching only locally",
        )
    if not storages:
        return Check(name, "ok", f"set: {shown}; no shared storage among them: sccache caches locally")
    return Check(name, "ok", f"{' and '.join(storages)} storage set: {shown}")


def check_base_image(facts: DockerFacts, source: str = "") -> Check:
    """source: where the override came from (WHEELBUILD_BASE_IMAGE, --base-image, a config file)."""
    name = "base-image"
    if not facts.answered:
        return Check(name, "warn", f"{facts.base_pin or 'the production base'}: {_NO_DOCKER}", _DOCKER_FIRST)
    if facts.base_pin_error:
        return Check(
            name,
            "fail",
            f"cibuildwheel's pin of manylinux_2_28 cannot be read: {facts.base_pin_error}",
            "reinstall wheelbuild (it needs its pinned cibuildwheel)",
        )
    if facts.base_override:
        here = "present here" if facts.base_override_present else "not present here"
        found = f"{source or 'WHEELBUILD_BASE_IMAGE/--base-image'} {facts.base_override} ({here}) replaces the pin {facts.base_pin}"
        if facts.base_override_present:
            return Check(name, "ok", found)
        return Check(
            name,
            "warn",
            found,
            "the image build pulls it: make it here first (scripts/make-base-image, docker load) "
            "if no registry is reachable",
        )
    if facts.base_pin_present:
        return Check(name, "ok", f"{facts.base_pin} (cibuildwheel's pin) is present here")
    return Check(
        name,
        "warn",
        f"{facts.base_pin} (cibuildwheel's pin) is not present here",
        "the first build pulls it from quay.io: `docker pull` it now, or set "
        "WHEELBUILD_BASE_IMAGE to a local base where no registry is reachable",
    )


def failed(checks: Iterable[Check]) -> list[Check]:
    return [c for c in checks if c.status == "fail"]


def reach_targets(environ: Mapping[str, str], torch_index_url: str | None) -> dict[str, str]:
    """What `doctor` asks for: torch's page on the torch index, pip's on PyPI, and NVIDIA's
    redist tree (or its mirror)."""
    index = torch_index_url or environ.get("WHEELBUILD_TORCH_INDEX_URL") or DEFAULT_TORCH_INDEX
    return {
        "torch-index": f"{index.rstrip('/')}/torch/",
        "pypi": PYPI_URL,
        "cuda-downloads": f"{redist_url(environ)}/",
    }


# ---------------------------------------------------------------------------------------------
# The whole doctor


def diagnose(
    docker: Callable[[], DockerFacts],
    environ: Mapping[str, str],
    *,
    shared_cache_env: Iterable[str],
    cache: Path,
    ca_bundle: Path | None = None,
    torch_index_url: str | None = None,
    cuda12_image: str | None = None,
    base_image_source: str = "",
) -> list[Check]:
    """Every check, in the order printed. The HTTP requests run in threads while `docker`
    gathers the daemon's facts (a probe container included), so all of it takes seconds."""
    targets = reach_targets(environ, torch_index_url)
    reached: dict[str, Reach] = {}
    network = threading.Thread(target=lambda: reached.update(reach_all(targets)), daemon=True)
    network.start()
    facts = docker()
    gpus = host_gpus()
    ca = ca_facts(ca_bundle)
    cache_disk = disk_facts(cache)
    network.join(REACH_DEADLINE_S + 2)
    late = {key: Reach(redact_url(url), error="no answer") for key, url in targets.items()}
    reached = {**late, **reached}
    return [
        check_docker(facts),
        check_memory_limit(facts, cgroup_hierarchy()),
        check_nvidia(facts, gpus),
        check_disk(
            "disk-docker", "Docker's root", docker_root_disk(facts.root_dir) if facts.answered else None
        ),
        check_disk("disk-cache", "the wheelbuild cache", cache_disk),
        check_ca_bundle(ca),
        check_torch_index(reached["torch-index"]),
        check_pypi(reached["pypi"]),
        check_cuda_downloads(reached["cuda-downloads"], cuda12_image or ""),
        check_sccache(name for name in shared_cache_env if environ.get(name)),
        check_base_image(facts, base_image_source),
    ]
