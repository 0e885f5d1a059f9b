"""wheelbuild.image.inputs: the image's inputs, their content-hash tag, build args and build context."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import re
import tarfile
from pathlib import Path

import pytest
from wheelbuild.errors import ImageInputsMissing
from wheelbuild.image.inputs import IMAGES_DIR, NO_CUDA12, ImageInputs, production_base

REPO = Path(__file__).resolve().parents[2]
DIGEST_BASE = "quay.io/pypa/manylinux_2_28_x86_64@sha256:" + "e" * 64
CUDA_REQS = (
    b"# CUDA 13.1 compiler\n"
    b"nvidia-cuda-nvcc==13.1.115 --hash=sha256:" + b"1" * 64 + b"\n"
    b"nvidia-nvvm==13.1.115 --hash=sha256:" + b"2" * 64 + b"\n"
    b"\n"
    b"nvidia-cuda-runtime==13.1.80 --hash=sha256:" + b"3" * 64 + b"\n"
)
TOOL_REQS = (
    b"ninja==1.13.0 --hash=sha256:" + b"4" * 64 + b"\nauditwheel==6.8.2 --hash=sha256:" + b"5" * 64 + b"\n"
)


def _inputs() -> ImageInputs:
    return ImageInputs(
        dockerfile=b"FROM scratch\n",
        tool_requirements=TOOL_REQS,
        cuda_requirements=CUDA_REQS,
        ca_bundle=b"-----BEGIN CERTIFICATE-----\n",
        admit_script=b"#!/usr/bin/env python3\n",
        base_image="wheelbuild-base:bookworm",
        base_id="sha256:" + "b" * 64,
        cuda12_image=NO_CUDA12,
        cuda12_version="12.8",
    )


def test_same_inputs_give_the_same_tag() -> None:
    assert _inputs().tag == _inputs().tag
    assert _inputs().sha256 == _inputs().sha256


def test_tag_is_the_repository_and_16_hex_of_the_inputs_sha256() -> None:
    inputs = _inputs()
    assert re.fullmatch(r"wheelbuild-cuda131:[0-9a-f]{16}", inputs.tag)
    assert inputs.tag == f"wheelbuild-cuda131:{inputs.sha256[:16]}"
    assert re.fullmatch(r"[0-9a-f]{64}", inputs.sha256)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dockerfile", b"FROM scratch\nRUN true\n"),
        ("tool_requirements", TOOL_REQS + b"packaging==25.0\n"),
        ("cuda_requirements", CUDA_REQS.replace(b"13.1.80", b"13.1.81")),
        ("ca_bundle", b""),
        ("ca_bundle", b"-----BEGIN CERTIFICATE-----\nX\n"),
        ("base_image", DIGEST_BASE),
        ("base_id", ""),
        ("base_id", "sha256:" + "c" * 64),
        ("cuda12_image", "nvidia/cuda:12.8.1-devel-rockylinux8@sha256:" + "d" * 64),
        ("cuda12_version", "12.9"),
        ("admit_script", b"#!/usr/bin/env python3\n# changed\n"),
    ],
)
def test_changing_any_single_input_changes_the_tag(field: str, value: object) -> None:
    before = _inputs()
    after = dataclasses.replace(before, **{field: value})  # type: ignore[arg-type]
    assert after.tag != before.tag
    assert after.sha256 != before.sha256


def test_moving_bytes_between_requirement_files_changes_the_tag() -> None:
    before = _inputs()
    after = dataclasses.replace(before, tool_requirements=CUDA_REQS, cuda_requirements=TOOL_REQS)
    assert after.tag != before.tag


def test_buildargs_carry_hashed_inputs_and_the_inputs_sha256() -> None:
    inputs = _inputs()
    assert inputs.buildargs() == {
        "BASE_IMAGE": "wheelbuild-base:bookworm",
        "CUDA12_IMAGE": NO_CUDA12,
        "CUDA12_VERSION": "12.8",
        "CUDA12_PINS": "none",
        "CUDA_VERSION": "13.1",
        "BASE_DIGEST": "sha256:" + "b" * 64,
        "DOCKERFILE_SHA256": hashlib.sha256(b"FROM scratch\n").hexdigest(),
        "INPUTS_SHA256": inputs.sha256,
        "CA_BUNDLE_SHA256": hashlib.sha256(b"-----BEGIN CERTIFICATE-----\n").hexdigest(),
        "CUDA_PACKAGES": "nvidia-cuda-nvcc==13.1.115 nvidia-nvvm==13.1.115 nvidia-cuda-runtime==13.1.80",
        "TOOL_PACKAGES": "ninja==1.13.0 auditwheel==6.8.2",
    }


def test_buildargs_base_digest_comes_from_a_digest_pin_and_no_bundle_says_none() -> None:
    inputs = dataclasses.replace(_inputs(), base_image=DIGEST_BASE, base_id="", ca_bundle=b"")
    args = inputs.buildargs()
    assert args["BASE_DIGEST"] == "sha256:" + "e" * 64
    assert args["CA_BUNDLE_SHA256"] == "none"


def test_buildargs_base_digest_is_unknown_without_pin_or_id() -> None:
    assert dataclasses.replace(_inputs(), base_id="").buildargs()["BASE_DIGEST"] == "unknown"


def test_context_tar_holds_exactly_the_files_the_dockerfile_copies() -> None:
    inputs = _inputs()
    with tarfile.open(fileobj=io.BytesIO(inputs.context_tar())) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
        modes = {m.name: m.mode for m in tar.getmembers()}
    assert members == {
        "Dockerfile.cuda131": inputs.dockerfile,
        "requirements-tools.txt": inputs.tool_requirements,
        "requirements-cuda.txt": inputs.cuda_requirements,  # whichever toolkit
        "ca-bundle.crt": inputs.ca_bundle,
        "wheelbuild-admit": inputs.admit_script,
    }
    assert set(modes.values()) == {0o644}


def test_context_tar_carries_an_empty_ca_bundle_when_none_is_given() -> None:
    inputs = dataclasses.replace(_inputs(), ca_bundle=b"")
    with tarfile.open(fileobj=io.BytesIO(inputs.context_tar())) as tar:
        assert tar.getmember("ca-bundle.crt").size == 0


def test_load_reads_the_real_images_dir(tmp_path: Path) -> None:
    bundle = tmp_path / "corp.crt"
    bundle.write_bytes(b"-----BEGIN CERTIFICATE-----\ncorp\n")
    inputs = ImageInputs.load(base_image=DIGEST_BASE, ca_bundle=bundle)
    assert IMAGES_DIR == REPO / "images"
    assert inputs.dockerfile == (REPO / "images" / "Dockerfile.cuda131").read_bytes()
    assert inputs.tool_requirements == (REPO / "images" / "requirements-tools.txt").read_bytes()
    assert inputs.cuda_requirements == (REPO / "images" / "requirements-cuda131.txt").read_bytes()
    assert inputs.ca_bundle == b"-----BEGIN CERTIFICATE-----\ncorp\n"
    assert (inputs.base_image, inputs.base_id) == (DIGEST_BASE, "")
    assert (inputs.cuda12_image, inputs.cuda12_version) == (NO_CUDA12, "12.8")
    packages = inputs.buildargs()["CUDA_PACKAGES"].split()
    assert "nvidia-cuda-nvcc==13.1.115" in packages
    assert all("--hash" not in p and "sha256" not in p for p in packages)
    assert inputs.tag == ImageInputs.load(base_image=DIGEST_BASE, ca_bundle=bundle).tag


def test_load_without_ca_bundle_uses_empty_bytes() -> None:
    assert ImageInputs.load(base_image=DIGEST_BASE, ca_bundle=None).ca_bundle == b""


def test_production_base_is_manylinux_2_28_pinned_by_digest() -> None:
    assert re.fullmatch(r"quay\.io/pypa/manylinux_2_28_x86_64@sha256:[0-9a-f]{64}", production_base())


def test_dockerfile_default_base_is_cibuildwheels_production_pin() -> None:
    dockerfile = (REPO / "images" / "Dockerfile.cuda131").read_text()
    defaults = re.findall(r"^ARG BASE_IMAGE=(\S+)\s*$", dockerfile, re.MULTILINE)
    assert defaults == [production_base()]


@pytest.mark.parametrize("name", ["requirements-tools.txt", "requirements-cuda131.txt"])
def test_every_image_requirement_is_pinned_with_a_sha256_hash(name: str) -> None:
    lines = [
        line.strip()
        for line in (REPO / "images" / name).read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert lines, f"{name} lists no requirements"
    for line in lines:
        assert re.fullmatch(
            r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.]+(\s+--hash=sha256:[0-9a-f]{64})+", line
        ), line


def test_cuda_requirements_pin_nvcc_13_1() -> None:
    text = (REPO / "images" / "requirements-cuda131.txt").read_text()
    assert re.search(r"^nvidia-cuda-nvcc==13\.1\.\d+ ", text, re.MULTILINE)


def test_a_cuda12_layer_names_the_image_stage_and_puts_its_pins_on_a_label(tmp_path: Path) -> None:
    from wheelbuild.image.cuda_redist import CudaLayer, RedistArchive

    archive = RedistArchive("cuda_nvcc", "12.8.93", "cuda_nvcc/x/a.tar.xz", "c" * 64, 1, False)
    layer = CudaLayer(version="12.8", release="12.8.1", manifest="m.json", archives=(archive,))
    inputs = dataclasses.replace(_inputs(), cuda12_image=layer.tag, cuda12_layer=layer)
    assert inputs.buildargs()["CUDA12_IMAGE"] == layer.tag
    assert inputs.buildargs()["CUDA12_PINS"] == f"cuda_nvcc=12.8.93@sha256:{'c' * 64}"
    other = dataclasses.replace(layer, archives=(dataclasses.replace(archive, sha256="d" * 64),))
    assert other.tag != layer.tag  # new pins, new layer image, new build image
    assert dataclasses.replace(inputs, cuda12_image=other.tag, cuda12_layer=other).tag != inputs.tag


def test_a_toolkit_is_an_input_of_the_image_and_its_tag_carries_it() -> None:
    """13.2's pinned wheels (images/requirements-cuda132.txt) make another image, named for its
    toolkit; the Dockerfile learns the toolkit from CUDA_VERSION and reads its pins under one name."""
    default = ImageInputs.load(base_image=DIGEST_BASE, ca_bundle=None)
    cu132 = ImageInputs.load(base_image=DIGEST_BASE, ca_bundle=None, toolkit="13.2")
    assert default.tag.startswith("wheelbuild-cuda131:") and cu132.tag.startswith("wheelbuild-cuda132:")
    assert b"nvidia-cuda-nvcc==13.2.86 --hash=sha256:" in cu132.cuda_requirements
    assert b"nvidia-cuda-nvcc==13.1." in default.cuda_requirements
    assert cu132.buildargs()["CUDA_VERSION"] == "13.2" and default.buildargs()["CUDA_VERSION"] == "13.1"
    assert "nvidia-nvvm==13.2.86" in cu132.buildargs()["CUDA_PACKAGES"]
    materials = {m.name for m in cu132.materials()}
    assert {"images/requirements-cuda132.txt", "pypi:nvidia-cuda-nvcc==13.2.86"} <= materials
    dockerfile = default.dockerfile.decode()
    assert "ARG CUDA_VERSION=13.1" in dockerfile and "requirements-cuda.txt" in dockerfile


def test_a_toolkit_without_pins_is_an_incomplete_images_folder(tmp_path: Path) -> None:
    for name in (
        "Dockerfile.cuda131",
        "requirements-tools.txt",
        "requirements-cuda131.txt",
        "wheelbuild-admit",
    ):
        (tmp_path / name).write_text("x")
    with pytest.raises(ImageInputsMissing) as caught:
        ImageInputs.load(base_image=DIGEST_BASE, ca_bundle=None, toolkit="13.2", images_dir=tmp_path)
    assert "requirements-cuda132.txt is missing" in caught.value.cause
