"""What every part of the engine that starts containers shares (the engine, the gate, the
calibration compiles): the retry on a daemon's passing errors, images/ scripts bind-mounted
read-only, removing containers, taking them off their network, and the engine's labelled
`containers.run` as a callable."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import docker
import docker.errors
import docker.types
import requests
import tenacity

from ..image.inputs import IMAGES_DIR, SCRIPTS_INSIDE, image_script


class StartContainer(Protocol):
    """DockerEngine's `containers.run`, with the owner's label (and the run's, when given)."""

    def __call__(self, image: str, command: list[str], run_id: str | None = None, **kwargs: Any) -> Any: ...


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


def script_volume(name: str, images_dir: Path = IMAGES_DIR) -> tuple[str, dict[str, dict[str, str]]]:
    """One of images/ scripts, bind-mounted read-only: (its path in the container, the volumes
    entry that mounts it there). A wheelbuild without it is exit 31, with its remedy."""
    inside = f"{SCRIPTS_INSIDE}/{name}"
    return inside, {str(image_script(name, images_dir)): {"bind": inside, "mode": "ro"}}


def remove_all(containers: Iterable[Any]) -> int:
    """Kill and remove these containers (one already gone counts as not removed)."""
    removed = 0
    for container in containers:
        try:
            container.remove(force=True)
            removed += 1
        except docker.errors.NotFound:
            pass
    return removed


DEFAULT_NETWORK = "bridge"  # the network Docker starts a container on, cibuildwheel's included


@transient_retry
def set_network(client: docker.DockerClient, label: str, online: bool, network: str = DEFAULT_NETWORK) -> int:
    """Connect the running containers carrying `label` (key=value) to `network`, or disconnect
    them from it; how many changed."""
    changed = 0
    net = client.networks.get(network)
    for container in client.containers.list(filters={"label": label}, ignore_removed=True):
        attached = network in ((container.attrs.get("NetworkSettings") or {}).get("Networks") or {})
        if online and not attached:
            net.connect(container)
            changed += 1
        elif attached and not online:
            net.disconnect(container)
            changed += 1
    return changed
