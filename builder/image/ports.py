"""What the image stage asks of the engine: naming a base image's ID, and making and reading build
images. engine.DockerEngine implements it; the pipeline, the nightly and gc depend on this alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from .cuda_redist import CudaLayer
from .inputs import Image, ImageInputs

OnLine = Callable[[str], None]


class ImageIds(Protocol):
    """Enough to name a build image's inputs: a local base tag is identified by its image ID."""

    def local_image_id(self, reference: str) -> str: ...


class Images(ImageIds, Protocol):
    """Build images: what a build, calibrate and the nightly need of them."""

    def ensure_image(self, inputs: ImageInputs, on_line: OnLine) -> Image: ...

    def ensure_cuda_layer_image(self, layer: CudaLayer, tree: Path, on_line: OnLine) -> str: ...

    def image_pythons(self, tag: str) -> list[str]: ...
