"""What wheelbuild names its own in Docker: image repositories and volumes. Pure.

Builds create them by these names and `wheelbuild gc` recognizes them by the same ones
(gc.Scope puts a test's prefix in place of PREFIX), so each is written once, here.
"""

from __future__ import annotations

import hashlib

__all__ = [
    "CACHE_VOLUMES",
    "DIST_DOCKERFILE",
    "DIST_REPOSITORY",
    "IMAGE_REPOSITORY",
    "LAYER_REPOSITORY",
    "PIP_CACHE_VOLUME",
    "PREFIX",
    "SCCACHE_VOLUME",
    "TORCH_VOLUME_PREFIX",
    "TORCH_WHEELS_VOLUME",
    "dist_image_tag",
]

PREFIX = "wheelbuild"
IMAGE_REPOSITORY = f"{PREFIX}-cuda131"  # the build image, tagged by its inputs' hash
LAYER_REPOSITORY = f"{PREFIX}-cuda12-redist"  # the CUDA 12 compiler layer, tagged by its pins' hash
# The sccache-dist fleet's image (wheelbuild dist), FROM the build image: outside PREFIX, as
# scripts/dist-smoke tags the same inputs the same way and both reuse one image.
DIST_REPOSITORY = "wbdist-sccache"
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
