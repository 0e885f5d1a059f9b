"""What wheelbuild names its own in Docker: image repositories and volumes.

Builds create them by these names and `wheelbuild gc` recognizes them by the same ones, so each
is written once, here. All begin with PREFIX: `wheelbuild`, or WHEELBUILD_DOCKER_PREFIX's value,
read once per process, so that checkouts, users or CI runners sharing one Docker engine can each
keep their images, caches and gc apart (gc.Scope names them under any prefix).
"""

from __future__ import annotations

import hashlib
import os
import re

from ..errors import BadArgument
from ..variants import CUDA13_TOOLKITS, DEFAULT_TOOLKIT

__all__ = [
    "CACHE_VOLUMES",
    "DEFAULT_PREFIX",
    "DIST_DOCKERFILE",
    "DIST_REPOSITORY",
    "IMAGE_REPOSITORIES",
    "IMAGE_REPOSITORY",
    "LAYER_REPOSITORY",
    "PIP_CACHE_VOLUME",
    "PREFIX",
    "PREFIX_ENV",
    "SCCACHE_VOLUME",
    "TORCH_VOLUME_PREFIX",
    "TORCH_WHEELS_VOLUME",
    "checked_prefix",
    "dist_image_tag",
    "image_repository",
]

PREFIX_ENV = "WHEELBUILD_DOCKER_PREFIX"
DEFAULT_PREFIX = "wheelbuild"
PREFIX = os.environ.get(PREFIX_ENV) or DEFAULT_PREFIX  # checked by the CLI before any command
_VALID_PREFIX = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")


def image_repository(toolkit: str) -> str:
    """The build image of a CUDA 13 toolkit, tagged by its inputs' hash: wheelbuild-cuda132 for 13.2."""
    return f"{PREFIX}-cuda{toolkit.replace('.', '')}"


IMAGE_REPOSITORY = image_repository(DEFAULT_TOOLKIT)  # the default toolkit's
IMAGE_REPOSITORIES = tuple(image_repository(toolkit) for toolkit in CUDA13_TOOLKITS)
LAYER_REPOSITORY = f"{PREFIX}-cuda12-redist"  # the CUDA 12 compiler layer, tagged by its pins' hash
# The sccache-dist fleet's image (wheelbuild dist), FROM the build image: under the default prefix
# outside it, as scripts/dist-smoke tags the same inputs the same way and both reuse one image.
DIST_REPOSITORY = "wbdist-sccache" if PREFIX == DEFAULT_PREFIX else f"{PREFIX}-dist-sccache"
DIST_DOCKERFILE = "Dockerfile.sccache-dist"  # in images/

PIP_CACHE_VOLUME = f"{PREFIX}-pip-cache"
# sccache's local store, shared by every attempt, Python and night on this machine: a retry after
# an OOM kill finds every unit that finished before it in the cache, so nothing is recompiled.
SCCACHE_VOLUME = f"{PREFIX}-sccache"
# The machine's wheel cache: torch and its CUDA wheels, content-addressed and locked per
# torch, index and Python (images/wheelbuild-wheel-cache), for every build and import gate.
TORCH_WHEELS_VOLUME = f"{PREFIX}-torch-wheels"
# Caches the next build refills: kept by gc unless --caches.
CACHE_VOLUMES = (SCCACHE_VOLUME, PIP_CACHE_VOLUME, TORCH_WHEELS_VOLUME)
# calibrate's torch headers: this prefix and 16 hex digits of the requirement and index's hash.
TORCH_VOLUME_PREFIX = f"{PREFIX}-torch-"


def dist_image_tag(dockerfile: bytes, build_image_id: str, repository: str = DIST_REPOSITORY) -> str:
    """The fleet image's tag: its recipe and the build image it starts from, hashed (the same
    digest scripts/dist-smoke computes, so both reuse one image)."""
    digest = hashlib.sha256(dockerfile + build_image_id.encode() + b"\n").hexdigest()
    return f"{repository}:{digest[:16]}"


def checked_prefix(text: str) -> str:
    """*text* if it can begin a Docker repository and volume name; else BadArgument."""
    if not _VALID_PREFIX.fullmatch(text):
        raise BadArgument(
            f"{PREFIX_ENV}={text!r} is not a name prefix (lower-case letters, digits, '.', '_', '-')",
            f"set {PREFIX_ENV} to one such as wheelbuild-ci, or unset it for the default ({DEFAULT_PREFIX})",
        )
    return text
