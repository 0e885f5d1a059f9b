"""The build image: images/Dockerfile.cuda131 plus its inputs, tagged by their content hash, one
image per CUDA 13 toolkit (wheelbuild-cuda131:<hash>, wheelbuild-cuda132:<hash>).

An unchanged Dockerfile with unchanged build args gives the same tag, so the image is reused,
never rebuilt. No Docker here: building and listing through the docker SDK live in engine/.
"""

from __future__ import annotations

import configparser
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..bundled import bundled_dir
from ..errors import ImageInputsMissing
from ..provenance.statement import Material
from ..units import format_bytes
from ..variants import DEFAULT_TOOLKIT
from .cuda_redist import DEFAULT_REDIST_URL, CudaLayer
from .names import image_repository

IMAGES_DIR = bundled_dir("images")
DOCKERFILE = "Dockerfile.cuda131"
TOOL_REQUIREMENTS = "requirements-tools.txt"
# The toolkit's pinned wheels go into the build context under one name, whichever toolkit it is.
CUDA_REQUIREMENTS_IN_CONTEXT = "requirements-cuda.txt"


def cuda_requirements(toolkit: str) -> str:
    """images/ file pinning a CUDA 13 toolkit's wheels: requirements-cuda132.txt for 13.2."""
    return f"requirements-cuda{toolkit.replace('.', '')}.txt"


ADMIT_SCRIPT = "wheelbuild-admit"
NO_CUDA12 = "wheelbuild-no-cuda12"  # the Dockerfile's empty stand-in stage
LABEL = "org.wheelbuild.inputs.sha256"


# Where images/ scripts are bind-mounted, read-only, in the containers that run them.
SCRIPTS_INSIDE = "/usr/local/bin"


def image_script(name: str, images_dir: Path = IMAGES_DIR) -> Path:
    """One of images/ scripts, resolved. A wheelbuild without it is exit 31, with its remedy."""
    path = images_dir / name
    if not path.is_file():
        raise ImageInputsMissing(
            f"{path} is missing: this wheelbuild has no complete images/ folder",
            "reinstall wheelbuild from its wheel or sdist (pip install --force-reinstall wheelbuild), "
            "or run it from a full checkout",
        )
    return path.resolve()


def production_base() -> str:
    """manylinux_2_28 x86_64 pinned by digest: the pin the installed cibuildwheel ships."""
    pins = resources.files("cibuildwheel") / "resources" / "pinned_docker_images.cfg"
    config = configparser.ConfigParser()
    config.read_string(pins.read_text())
    return config["x86_64"]["manylinux_2_28"].split("#")[0].strip()


def _hashed_pins(requirements: bytes) -> list[tuple[str, str]]:
    """(name==version, sha256) of each `name==version --hash=sha256:...` line."""
    found = []
    for line in requirements.decode(errors="replace").splitlines():
        pin, _, hashes = line.partition("--hash=sha256:")
        if pin.strip() and not pin.lstrip().startswith("#") and hashes:
            found.append((pin.strip(), hashes.split()[0]))
    return found


def _pins(requirements: bytes) -> str:
    lines = (line.split("--hash")[0].strip() for line in requirements.decode().splitlines())
    return " ".join(line for line in lines if line and not line.startswith("#"))


@dataclass(frozen=True)
class ImageInputs:
    """Every input of the image. Its hash is the tag."""

    dockerfile: bytes
    tool_requirements: bytes
    cuda_requirements: bytes
    ca_bundle: bytes  # empty: use the base image's own trust store
    admit_script: bytes  # images/wheelbuild-admit, copied into the image
    base_image: str
    base_id: str  # local image ID of the base when it is not pinned by digest, else ""
    cuda12_image: str = NO_CUDA12
    cuda12_version: str = "12.8"
    # The CUDA 12 layer made from NVIDIA's redist archives (cuda12_image is then its local tag).
    cuda12_layer: CudaLayer | None = None
    toolkit: str = DEFAULT_TOOLKIT  # the CUDA 13 toolkit cuda_requirements pins

    @classmethod
    def load(
        cls,
        *,
        base_image: str,
        base_id: str = "",
        ca_bundle: Path | None,
        cuda12_image: str | None = None,
        cuda12_version: str = "12.8",
        cuda12_layer: CudaLayer | None = None,
        toolkit: str = DEFAULT_TOOLKIT,
        images_dir: Path = IMAGES_DIR,
    ) -> ImageInputs:
        names = (DOCKERFILE, TOOL_REQUIREMENTS, cuda_requirements(toolkit), ADMIT_SCRIPT)
        missing = [n for n in names if not (images_dir / n).is_file()]
        if missing:
            raise ImageInputsMissing(
                f"{images_dir / missing[0]} is missing: this wheelbuild has no complete images/ folder",
                "reinstall wheelbuild from its wheel or sdist (pip install --force-reinstall wheelbuild), "
                "or run it from a full checkout",
            )
        return cls(
            dockerfile=(images_dir / DOCKERFILE).read_bytes(),
            tool_requirements=(images_dir / TOOL_REQUIREMENTS).read_bytes(),
            cuda_requirements=(images_dir / cuda_requirements(toolkit)).read_bytes(),
            ca_bundle=ca_bundle.read_bytes() if ca_bundle else b"",
            admit_script=(images_dir / ADMIT_SCRIPT).read_bytes(),
            base_image=base_image,
            base_id=base_id,
            cuda12_image=cuda12_layer.tag if cuda12_layer else cuda12_image or NO_CUDA12,
            cuda12_version=cuda12_layer.version if cuda12_layer else cuda12_version,
            cuda12_layer=cuda12_layer,
            toolkit=toolkit,
        )

    def _hashed_args(self) -> dict[str, str]:
        return {
            "BASE_IMAGE": self.base_image,
            "CUDA12_IMAGE": self.cuda12_image,
            "CUDA12_VERSION": self.cuda12_version,
            # The layer's tag already names its pins' hash; the pins themselves go on a label.
            "CUDA12_PINS": self.cuda12_layer.pins if self.cuda12_layer else "none",
            "CUDA_VERSION": self.toolkit,
        }

    @property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        for part in (
            self.dockerfile,
            self.tool_requirements,
            self.cuda_requirements,
            self.ca_bundle,
            self.admit_script,
        ):
            digest.update(hashlib.sha256(part).digest())
        digest.update(json.dumps({**self._hashed_args(), "base_id": self.base_id}, sort_keys=True).encode())
        return digest.hexdigest()

    @property
    def tag(self) -> str:
        return f"{image_repository(self.toolkit)}:{self.sha256[:16]}"

    def materials(self, redist_url: str = DEFAULT_REDIST_URL) -> tuple[Material, ...]:
        """The image's inputs as a provenance statement names them: the base image by digest,
        each images/ file the image is made of by sha256, each pinned wheel and (when this image
        carries the CUDA 12 layer) each NVIDIA redist archive by the sha256 its pin names."""
        base_digest = self.base_image.partition("@")[2] or self.base_id
        algorithm, _, hexdigest = base_digest.partition(":")
        local = (
            {} if "@" in self.base_image else {"local": "a local image ID: the base is not pinned by digest"}
        )
        found = [
            Material("image", {"sha256": self.sha256}, annotations={"tag": self.tag}),
            Material("image/base", {algorithm or "sha256": hexdigest or "unknown"}, self.base_image, local),
        ]
        files = {
            DOCKERFILE: self.dockerfile,
            TOOL_REQUIREMENTS: self.tool_requirements,
            cuda_requirements(self.toolkit): self.cuda_requirements,
            ADMIT_SCRIPT: self.admit_script,
        }
        for name, data in files.items():
            found.append(Material(f"images/{name}", {"sha256": hashlib.sha256(data).hexdigest()}))
        if self.ca_bundle:  # the host's CA bundle, copied in: public certificates
            found.append(Material("image/ca-bundle", {"sha256": hashlib.sha256(self.ca_bundle).hexdigest()}))
        for requirements in (self.cuda_requirements, self.tool_requirements):
            for pin, sha256 in _hashed_pins(requirements):
                found.append(Material(f"pypi:{pin}", {"sha256": sha256}))
        for archive in self.cuda12_layer.archives if self.cuda12_layer else ():
            found.append(
                Material(
                    f"cuda-redist:{archive.name}=={archive.version}",
                    {"sha256": archive.sha256},
                    f"{redist_url}/{archive.path}",
                )
            )
        return tuple(found)

    def buildargs(self) -> dict[str, str]:
        """Build args: the hashed inputs, plus label values derived from them."""
        return {
            **self._hashed_args(),
            "BASE_DIGEST": self.base_image.partition("@")[2] or self.base_id or "unknown",
            "DOCKERFILE_SHA256": hashlib.sha256(self.dockerfile).hexdigest(),
            "INPUTS_SHA256": self.sha256,
            "CA_BUNDLE_SHA256": hashlib.sha256(self.ca_bundle).hexdigest() if self.ca_bundle else "none",
            "CUDA_PACKAGES": _pins(self.cuda_requirements),
            "TOOL_PACKAGES": _pins(self.tool_requirements),
        }

    def context_tar(self) -> bytes:
        """The build context: only the files the Dockerfile copies, nothing else of the repo."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            files = {
                DOCKERFILE: self.dockerfile,
                TOOL_REQUIREMENTS: self.tool_requirements,
                CUDA_REQUIREMENTS_IN_CONTEXT: self.cuda_requirements,
                "ca-bundle.crt": self.ca_bundle,
                ADMIT_SCRIPT: self.admit_script,
            }
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
        return buffer.getvalue()


@dataclass(frozen=True)
class Image:
    tag: str
    id: str
    labels: dict[str, str]
    reused: bool
    size: int = 0  # bytes, as the engine reports it (0: not asked)

    @property
    def cuda12_image(self) -> str | None:
        value = self.labels.get("org.wheelbuild.cuda12.image", NO_CUDA12)
        return None if value == NO_CUDA12 else value

    @property
    def cuda12_version(self) -> str:
        return self.labels.get("org.wheelbuild.cuda12.version", "")

    @property
    def cuda12_pins(self) -> str | None:
        value = self.labels.get("org.wheelbuild.cuda12.pins", "none")
        return None if value == "none" else value


def image_table(images: list[Image]) -> list[str]:
    """`wheelbuild image ls`: a header, then one row per image, columns aligned; the CUDA 12
    layer's pins (long) close the row."""
    rows = [("TAG", "ID", "SIZE", "BASE", "CUDA", "CUDA12")]
    for image in images:
        rows.append(
            (
                image.tag,
                image.id.removeprefix("sha256:")[:12],
                format_bytes(image.size),
                image.labels.get("org.opencontainers.image.base.name", "?"),
                image.labels.get("org.wheelbuild.cuda.version", "?"),
                (image.cuda12_image or "none") + (f" ({image.cuda12_pins})" if image.cuda12_pins else ""),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]) for row in rows
    ]
