"""What the user says of the build image (its base, CA bundle and CUDA 12 layer), and the image
inputs that makes on this machine: the image stage's values, which build, calibrate, the nightly
and gc (to know which images are current) all read."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..variants import DEFAULT_TOOLKIT, TorchVariant, toolkit_for
from . import cuda_redist
from .cuda_redist import CudaLayer
from .inputs import IMAGES_DIR, ImageInputs, production_base
from .ports import ImageIds


@dataclass(frozen=True)
class ImageOptions:
    base_image: str | None  # None: production manylinux_2_28 pinned by cibuildwheel
    ca_bundle: Path | None
    cuda12_image: str | None = None
    cuda12_version: str = "12.8"
    # Add the CUDA 12 layer made from NVIDIA's pinned redist archives (what a cu12x build needs,
    # unless cuda12_image names an NVIDIA devel image instead).
    cuda12_redist: bool = False
    # The CUDA 13 toolkit the image carries (variants.CUDA13_TOOLKITS): one image per toolkit.
    toolkit: str = DEFAULT_TOOLKIT

    def for_variant(self, variant: TorchVariant) -> ImageOptions:
        """The options a build of `variant` needs: the toolkit that compiles its torch, and for
        cu12x the CUDA 12 layer, without a flag."""
        wants = variant.cuda_major == 12 and self.cuda12_image is None
        return replace(self, cuda12_redist=self.cuda12_redist or wants, toolkit=toolkit_for(variant))


def image_inputs(images: ImageIds, options: ImageOptions) -> ImageInputs:
    base = options.base_image or production_base()
    # A base pinned by digest is its own identity; a local tag is identified by its image ID.
    base_id = "" if "@sha256:" in base else images.local_image_id(base)
    layer = cuda12_layer() if options.cuda12_redist and options.cuda12_image is None else None
    return ImageInputs.load(
        base_image=base,
        base_id=base_id,
        ca_bundle=options.ca_bundle,
        cuda12_image=options.cuda12_image,
        cuda12_version=options.cuda12_version,
        cuda12_layer=layer,
        toolkit=options.toolkit,
    )


def cuda12_layer() -> CudaLayer:
    """The CUDA 12 layer's pins: images/cuda-12.8-redist.toml, or the file WHEELBUILD_CUDA12_PINS names."""
    return cuda_redist.load_layer(cuda_redist.pins_path(IMAGES_DIR, os.environ))
