"""What wheelbuild names its own in Docker: image repositories and volumes. Pure.

Builds create them by these names and `wheelbuild gc` recognizes them by the same ones
(gc.Scope puts a test's prefix in place of PREFIX), so each is written once, here.
"""

from __future__ import annotations

__all__ = [
    "CACHE_VOLUMES",
    "IMAGE_REPOSITORY",
    "LAYER_REPOSITORY",
    "PIP_CACHE_VOLUME",
    "PREFIX",
    "SCCACHE_VOLUME",
    "TORCH_VOLUME_PREFIX",
    "TORCH_WHEELS_VOLUME",
]

PREFIX = "wheelbuild"
IMAGE_REPOSITORY = f"{PREFIX}-cuda131"  # the build image, tagged by its inputs' hash
LAYER_REPOSITORY = f"{PREFIX}-cuda12-redist"  # the CUDA 12 compiler layer, tagged by its pins' hash

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
