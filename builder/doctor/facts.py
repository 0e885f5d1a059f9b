"""What `wheelbuild doctor` finds out that is not Docker's: HTTP reach (every URL at once, under
one deadline, credentials never shown), free disk, the CA bundle, the host's GPUs and its cgroup
layout, each as a plain fact for the pure checks in checks.py. Nothing here imports docker."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..host import cgroup
from ..host.ca_bundle import DEFAULT_CA_BUNDLE
from ..index import reader
from ..secrets import redact_url, without_credentials

REACH_TIMEOUT_S = 5.0  # per request; all of them run at once
REACH_DEADLINE_S = 8.0  # what the slowest (DNS that hangs, a trickling answer) may take in all


@dataclass(frozen=True)
class Reach:
    """One HTTP request's outcome: an HTTP status, or the error that came instead."""

    url: str  # as shown: credentials already hidden
    status: int | None = None
    error: str = ""  # set when no HTTP answer came (DNS, TLS, refused, timeout)


@dataclass(frozen=True)
class CaFacts:
    path: Path | None  # None: no bundle given and no host bundle at the default path
    given: bool  # named by --ca-bundle / WHEELBUILD_CA_BUNDLE (not the default)
    exists: bool = False
    certificates: int = 0
    error: str = ""  # ssl could not load it


@dataclass(frozen=True)
class DiskFacts:
    path: str
    free: int | None  # None: the path is not on this machine (a remote daemon's root)


def reach(url: str, timeout: float = REACH_TIMEOUT_S) -> Reach:
    """GET url (credentials moved into a header, never shown) and read a little of the answer."""
    shown = redact_url(url)
    try:
        return Reach(shown, status=reader.probe(url, timeout=timeout))
    except reader.HttpRefused as refused:
        if refused.status:
            return Reach(shown, status=refused.status)
        return Reach(shown, error=_scrub(refused.why, url))


def _scrub(text: str, url: str) -> str:
    bare, _ = without_credentials(url)
    return redact_url(text.replace(url, redact_url(url)).replace(bare, redact_url(bare)))


def reach_all(urls: Mapping[str, str], deadline_s: float = REACH_DEADLINE_S) -> dict[str, Reach]:
    """Every URL at once, each in a thread of its own; whatever has not answered by the deadline
    counts as unreachable (its thread is left to die with the process)."""
    found: dict[str, Reach] = {}
    lock = threading.Lock()

    def one(key: str, url: str) -> None:
        result = reach(url)
        with lock:
            found[key] = result

    threads = [threading.Thread(target=one, args=item, daemon=True) for item in urls.items()]
    for thread in threads:
        thread.start()
    end = time.monotonic() + deadline_s
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    with lock:
        return {
            key: found.get(key, Reach(redact_url(url), error=f"no answer within {deadline_s:g} s"))
            for key, url in urls.items()
        }


def disk_facts(path: Path) -> DiskFacts:
    """Free bytes on the file system that holds `path` (or its nearest existing parent: the
    cache need not exist yet); free None when it cannot be read."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return DiskFacts(str(path), shutil.disk_usage(probe).free)
    except OSError:
        return DiskFacts(str(path), None)


def docker_root_disk(root_dir: str) -> DiskFacts:
    """DockerRootDir's free space when it is on this machine; a remote daemon's is not."""
    path = Path(root_dir)
    return DiskFacts(root_dir, shutil.disk_usage(path).free if root_dir and path.is_dir() else None)


def ca_facts(given: Path | None) -> CaFacts:
    path = given if given is not None else (DEFAULT_CA_BUNDLE if DEFAULT_CA_BUNDLE.is_file() else None)
    if path is None:
        return CaFacts(None, given=False)
    if not path.is_file():
        return CaFacts(path, given=given is not None)
    try:
        context = ssl.create_default_context(cafile=str(path))
    except (ssl.SSLError, OSError, ValueError) as exc:
        return CaFacts(path, given=given is not None, exists=True, error=str(exc) or type(exc).__name__)
    return CaFacts(path, given=given is not None, exists=True, certificates=len(context.get_ca_certs()))


def host_gpus() -> tuple[str, ...] | None:
    """nvidia-smi -L's lines on this host; None when there is no nvidia-smi, () when it lists none
    (or fails: no driver loaded)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if out.returncode != 0:
        return ()
    return tuple(line.strip() for line in out.stdout.splitlines() if line.strip().startswith("GPU "))


def cgroup_hierarchy() -> str:
    """This host's cgroup layout (v1, v2, hybrid, none), for the memory line."""
    try:
        return cgroup.read_limits().version
    except (OSError, ValueError):
        return "unknown"
