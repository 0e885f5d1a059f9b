"""Torch variants: `cu130` or `2.11.0+cu130` -> torch version, its CUDA, where to get it, and
which CUDA compiler must build against it. Pure: no Docker, no network.

torch refuses an nvcc whose CUDA *major* differs from torch.version.cuda (a minor difference
only warns), so cu13x variants compile with the image's CUDA 13.1 and cu12x variants need the
image's optional CUDA 12.x compiler layer (see images/Dockerfile.cuda131).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from builder.errors import BadVariant

PYTORCH_INDEX = "https://download.pytorch.org/whl/{tag}"

# Default torch release for each CUDA tag: the newest release published for it that we know of.
DEFAULT_TORCH: dict[str, str] = {
    "cu126": "2.10.0",
    "cu128": "2.10.0",
    "cu129": "2.8.0",
    "cu130": "2.11.0",
}

# Where the image keeps each compiler. CUDA 13.1 is always there; a 12.x layer is optional.
CUDA13_HOME = "/usr/local/cuda-13.1/nvidia/cu13"
CUDA13_VERSION = "13.1"
# sm_100 and sm_120 first appear in CUDA 12.8, the oldest 12.x compiler that can serve us.
MIN_CUDA12_COMPILER = (12, 8)

_VARIANT_RE = re.compile(r"^(?:(?P<version>\d+\.\d+(?:\.\d+)?)\+)?(?P<tag>cu\d{3})$")


@dataclass(frozen=True)
class CudaCompiler:
    """An nvcc inside the image: its CUDA version and its CUDA_HOME there."""

    version: str
    home: str

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


@dataclass(frozen=True)
class TorchVariant:
    tag: str  # "cu130"
    torch_version: str  # "2.11.0"
    index_url: str

    @property
    def cuda_version(self) -> str:
        digits = self.tag[2:]
        return f"{digits[:-1]}.{digits[-1]}"

    @property
    def cuda_major(self) -> int:
        return int(self.tag[2:-1])

    @property
    def torch_minor(self) -> str:
        """ "2.11" for torch 2.11.0: the ABI a built wheel is tied to."""
        return ".".join(self.torch_version.split(".")[:2])

    @property
    def requirement(self) -> str:
        # `torch==2.11.0` also matches the index's local versions (2.11.0+cu130), per PEP 440.
        return f"torch=={self.torch_version}"

    @property
    def label(self) -> str:
        """Local version label a wheel built against this variant carries: cu130torch2.11."""
        return f"{self.tag}torch{self.torch_minor}"

    def __str__(self) -> str:
        return f"{self.torch_version}+{self.tag}"


def parse_variant(text: str, index_url: str | None = None) -> TorchVariant:
    """`cu130` -> default torch for cu130; `2.11.0+cu130` -> that torch. Raises BadVariant."""
    match = _VARIANT_RE.match(text.strip())
    known = ", ".join(sorted(DEFAULT_TORCH))
    if match is None:
        raise BadVariant(
            f"torch variant {text!r} is not understood",
            f"use a CUDA tag ({known}) or a full version such as 2.11.0+cu130",
        )
    tag = match["tag"]
    if tag not in DEFAULT_TORCH:
        raise BadVariant(
            f"torch variant {text!r} names CUDA tag {tag!r}, which wheelbuild does not support",
            f"use one of {known}",
        )
    version = match["version"] or DEFAULT_TORCH[tag]
    if version.count(".") == 1:
        version += ".0"
    return TorchVariant(tag=tag, torch_version=version, index_url=index_url or PYTORCH_INDEX.format(tag=tag))


def compiler_for(variant: TorchVariant, cuda12: CudaCompiler | None) -> CudaCompiler | None:
    """The image compiler that can build against `variant`, or None when the image lacks one."""
    if variant.cuda_major == 13:
        return CudaCompiler(version=CUDA13_VERSION, home=CUDA13_HOME)
    if variant.cuda_major == 12 and cuda12 is not None:
        major, minor = (int(p) for p in cuda12.version.split(".")[:2])
        if (major, minor) >= MIN_CUDA12_COMPILER:
            return cuda12
    return None
