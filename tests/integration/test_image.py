"""The CUDA image, built from the local base through the docker SDK."""

from __future__ import annotations

import hashlib
from pathlib import Path

import docker

from tests.integration.conftest import REPO, wheelbuild


def run_in(client: docker.DockerClient, image: str, script: str) -> str:
    return client.containers.run(image, ["bash", "-c", script], remove=True).decode()


def test_image_labels_record_every_input(
    docker_client: docker.DockerClient, cuda_image: str, base_image: str
) -> None:
    labels = docker_client.images.get(cuda_image).labels
    dockerfile = (REPO / "images" / "Dockerfile.cuda131").read_bytes()
    assert labels["org.opencontainers.image.base.name"] == base_image
    assert labels["org.opencontainers.image.base.digest"] == docker_client.images.get(base_image).id
    assert labels["org.wheelbuild.dockerfile.sha256"] == hashlib.sha256(dockerfile).hexdigest()
    assert labels["org.wheelbuild.inputs.sha256"].startswith(cuda_image.split(":")[1])
    assert "nvidia-cuda-nvcc==13.1.115" in labels["org.wheelbuild.cuda.packages"]
    assert "auditwheel==" in labels["org.wheelbuild.tools.packages"]
    assert labels["org.wheelbuild.cuda12.image"] == "wheelbuild-no-cuda12"
    host_bundle = Path("/etc/ssl/certs/ca-certificates.crt").read_bytes()
    assert labels["org.wheelbuild.ca-bundle.sha256"] == hashlib.sha256(host_bundle).hexdigest()


def test_image_has_cuda_13_1_toolchain_and_cibuildwheel_layout(
    docker_client: docker.DockerClient, cuda_image: str
) -> None:
    out = run_in(
        docker_client,
        cuda_image,
        "nvcc --version | grep -o 'release [0-9.]*'; echo CUDA_HOME=$CUDA_HOME;"
        " readlink $CUDA_HOME/lib/libcudart.so; test -x $CUDA_HOME/nvvm/bin/cicc && echo cicc-ok;"
        " /opt/python/cp39-cp39/bin/python -c 'print(\"cp39-link-ok\")';"
        " /opt/python/cp311-cp311/bin/python -V; /opt/python/cp313-cp313/bin/python -V; patchelf --version; auditwheel --version | cut -d' ' -f1-2;"
        " python3 -c 'import ssl,os; print(os.environ[\"PIP_CERT\"])'",
    )
    assert "release 13.1" in out
    assert "CUDA_HOME=/usr/local/cuda-13.1/nvidia/cu13" in out
    assert "libcudart.so.13" in out
    assert "cicc-ok" in out and "cp39-link-ok" in out
    assert "Python 3.11" in out and "Python 3.13" in out  # Debian's, and the one compiled into the base
    assert "patchelf 0.17.2" in out
    assert "/usr/local/share/wheelbuild/ca-bundle.crt" in out


def test_unchanged_inputs_reuse_the_image(cuda_image: str, base_image: str) -> None:
    again = wheelbuild("image", "build", "--base-image", base_image)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().splitlines()[-1] == cuda_image
    assert "(reused)" in again.stdout
    assert "Step 1/" not in again.stdout  # nothing was built


def test_image_ls_lists_the_image(cuda_image: str) -> None:
    listed = wheelbuild("image", "ls")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["TAG", "ID", "SIZE", "BASE", "CUDA", "CUDA12"]
    line = next(line for line in rows if line.startswith(cuda_image))
    tag, _id, size, unit, _base, cuda, cuda12, *_ = line.split()
    assert tag == cuda_image and cuda == "13.1" and cuda12 == "none", line
    assert float(size) > 0 and unit.endswith("B"), line


def test_missing_base_image_fails_the_image_build() -> None:
    # No registry is reachable, so the classic builder's pull of an absent base fails.
    result = wheelbuild("image", "build", "--base-image", "wheelbuild-base:absent-for-test")
    assert result.returncode == 30, result.stderr
    assert "error: image build failed" in result.stderr
    assert "remedy:" in result.stderr
