"""The import gate's container: one wheel installed and imported in a fresh container of the
base image (images/wheelbuild-gate, bind-mounted), its log followed and redacted, its JSON answer
read back. What the answer means is wheel/gate.py's to say."""

from __future__ import annotations

import json
import os
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types

from .. import secrets
from ..attempt.config import WHEEL_CACHE_BOUND_ENV, WHEEL_CACHE_SCRIPT, wheel_cache_bound
from ..bounded import read_bounded
from ..image.inputs import SCRIPTS_INSIDE
from ..image.names import TORCH_WHEELS_VOLUME
from ..image.ports import OnLine
from .containers import StartContainer, remove_all, script_volume
from .ports import GateJob

GATE_SCRIPT = "wheelbuild-gate"
SMOKE_DIR = "smoke"  # images/smoke: recipes' GPU smoke tests

_GATE_WORK = "/run/wheelbuild"


def run_gate(start: StartContainer, job: GateJob, on_line: OnLine) -> tuple[dict[str, object] | None, str]:
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
        _, cache_mount = script_volume(WHEEL_CACHE_SCRIPT, job.images_dir)
        volumes = {
            str(job.wheel.parent.resolve()): {"bind": "/wheels", "mode": "ro"},
            str(workdir): {"bind": _GATE_WORK, "mode": "rw"},
            **gate_mount,
            **finder_mount,
            **cache_mount,
            str((job.images_dir / SMOKE_DIR).resolve()): {"bind": "/opt/wheelbuild-smoke", "mode": "ro"},
            TORCH_WHEELS_VOLUME: {"bind": "/cache", "mode": "rw"},
        }
        environment = {
            "WB_PYTHON": str(job.spec["python"]),
            "PIP_ROOT_USER_ACTION": "ignore",
            "PYTHONUNBUFFERED": "1",
            # The gate's venv has torch and the wheel, not numpy; torch's import warns of that at
            # every import and smoke test. A wheel that needs numpy still fails where it uses it.
            "PYTHONWARNINGS": "ignore:Failed to initialize NumPy:UserWarning",
        }
        if (bound := wheel_cache_bound(os.environ)) is not None:
            environment[WHEEL_CACHE_BOUND_ENV] = str(bound)
        if job.ca_bundle is not None:
            volumes[str(job.ca_bundle.resolve())] = {"bind": "/run/wheelbuild-ca.crt", "mode": "ro"}
            environment |= {
                key: "/run/wheelbuild-ca.crt" for key in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE")
            }
        gpus = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if job.gpus else None
        container = start(
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
            remove_all([container])
        return gate_answer(workdir / "out" / "gate.json"), "\n".join(tail)


# The answer is a few KiB; it is written beside the wheel under test, whose code ran there.
MAX_GATE_ANSWER = 16 * 1024**2


def gate_answer(path: Path) -> dict[str, object] | None:
    """The gate's JSON answer, or None when there is none or it is not one (not a regular file,
    over MAX_GATE_ANSWER, not a JSON object): the gate then fails as for a container that died."""
    try:
        found = json.loads(read_bounded(path, MAX_GATE_ANSWER, follow_links=False))
    except (OSError, ValueError, RecursionError):  # FileRefused and bad JSON are ValueErrors
        return None
    return found if isinstance(found, dict) else None


def _gate_spec(job: GateJob) -> dict[str, object]:
    """The gate's input, with the paths its container sees."""
    smoke = job.spec.get("smoke")
    return {
        **job.spec,
        "wheel": f"/wheels/{job.wheel.name}",
        "torch_index_file": f"{_GATE_WORK}/torch-index-url",
        "wheel_cache": "/cache",
        "wheel_cache_script": f"{SCRIPTS_INSIDE}/{WHEEL_CACHE_SCRIPT}",
        "torch_cache_key": job.torch_cache_key,
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
