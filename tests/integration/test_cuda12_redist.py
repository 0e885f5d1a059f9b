"""The CUDA 12 compiler layer from pinned redist archives, end to end against a real HTTP mirror on
127.0.0.1 and the real Docker engine: download, verify, a wrong hash refused, unpack, the layer
image and its labels, the build image that copies it, and the cache reused.

NVIDIA's servers cannot be reached here, so the mirror serves stand-in archives this test makes
in NVIDIA's layout (`<name>-linux-x86_64-<version>-archive/{bin,include,lib}` inside a .tar.xz
under `<name>/linux-x86_64/`), and the pins are swapped for theirs through WHEELBUILD_CUDA12_PINS,
for this test only. The real pins (images/cuda-12.8-redist.toml) are checked for shape."""

from __future__ import annotations

import hashlib
import http.server
import io
import socket
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from wheelbuild.run.cuda_redist import PINS_FILE, load_layer
from wheelbuild.run.image import IMAGES_DIR

from tests.integration.conftest import containers_of_run, wheelbuild

STANDIN_NVCC = """#!/bin/sh
# stand-in for nvcc 12.8 (the test's mirror cannot serve NVIDIA's real one)
echo "nvcc: NVIDIA (R) Cuda compiler driver"
echo "Cuda compilation tools, release 12.8, V12.8.93"
"""


def _archive(root: Path, name: str, version: str, files: dict[str, tuple[bytes, int]]) -> dict[str, object]:
    """A .tar.xz in NVIDIA's layout; returns its pin entry."""
    top = f"{name}-linux-x86_64-{version}-archive"
    relative = f"{name}/linux-x86_64/{top}.tar.xz"
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:xz") as tar:
        for member, (data, mode) in files.items():
            info = tarfile.TarInfo(f"{top}/{member}")
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo(f"{top}/lib/libstandin.so")
        link.type, link.linkname = tarfile.SYMTYPE, "libstandin.so.12"
        tar.addfile(link)
    blob = path.read_bytes()
    return {"name": name, "version": version, "path": relative,
            "sha256": hashlib.sha256(blob).hexdigest(), "size": len(blob)}  # fmt: skip


def _pins(entries: list[dict[str, object]], headers_only: set[str]) -> str:
    text = 'version = "12.8"\nrelease = "12.8.1"\nmanifest = "redistrib_12.8.1.json"\n'
    for entry in entries:
        text += "\n[[archive]]\n" + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in entry.items())
        text += f"headers_only = {'true' if entry['name'] in headers_only else 'false'}\n"
    return text


class Mirror:
    def __init__(self, root: Path) -> None:
        self.requests: list[str] = []
        mirror = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

            def log_message(self, format: str, *args: object) -> None:
                mirror.requests.append(self.path)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/redist"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mirror, Path, str]]:
    """A mirror with three stand-in archives (compiler, runtime, a headers-only library) and a
    pins file for them. The salt makes this run's layer new to the engine."""
    root = tmp_path_factory.mktemp("mirror")
    salt = f"{time.time_ns()}".encode()
    entries = [
        _archive(root / "redist", "cuda_nvcc", "12.8.93", {
            "bin/nvcc": (STANDIN_NVCC.encode(), 0o755), "bin/nvcc.profile": (b"TOP = $(_HERE_)/..\n", 0o644),
            "include/crt/host_config.h": (b"/* " + salt + b" */\n", 0o644)}),
        _archive(root / "redist", "cuda_cudart", "12.8.90", {
            "include/cuda_runtime_api.h": (b"#define CUDART_VERSION 12080\n", 0o644),
            "lib/libstandin.so.12": (b"\x7fELF stand-in\n", 0o755),
            "lib/libcudart_static.a": (b"!<arch>\n", 0o644)}),
        _archive(root / "redist", "libcublas", "12.8.4.1", {
            "include/cublas_v2.h": (b"#define CUBLAS_VER_MAJOR 12\n", 0o644),
            "lib/libcublas.so.12": (b"big library, not wanted\n", 0o755)}),
    ]  # fmt: skip
    pins = tmp_path_factory.mktemp("pins") / "pins.toml"
    pins.write_text(_pins(entries, headers_only={"libcublas"}))
    server = Mirror(root)
    yield server, pins, entries[0]["sha256"]  # type: ignore[misc]
    server.server.shutdown()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_real_pins_name_every_archive_a_torch_extension_compiles_against() -> None:
    layer = load_layer(IMAGES_DIR / PINS_FILE)
    assert layer.version == "12.8" and layer.release == "12.8.1"
    by_name = {a.name: a for a in layer.archives}
    assert by_name["cuda_nvcc"].sha256 == "9961b3484b6b71314063709a4f9529654f96782ad39e72bf1e00f070db8210d3"
    assert by_name["cuda_cudart"].sha256 == "8d566b5fe745c46842dc16945cf36686227536decd2302c372be86da37faca68"
    # ATen/cuda/CUDAContext.h includes cublas_v2.h, cublasLt.h, cusparse.h and cusolverDn.h.
    assert {"cuda_cccl", "libcublas", "libcusparse", "libcusolver"} <= set(by_name)
    assert all(by_name[n].headers_only for n in ("libcublas", "libcusparse", "libcusolver"))
    assert all(a.size for a in layer.archives)


def test_layer_is_downloaded_verified_unpacked_labelled_and_reused(
    mirror: tuple[Mirror, Path, str], base_image: str, cuda_image: str,
    docker_client: docker.DockerClient, tmp_path: Path,
) -> None:  # fmt: skip
    server, pins, _ = mirror
    env = {"WHEELBUILD_CUDA12_PINS": str(pins), "WHEELBUILD_CUDA_REDIST_URL": server.url,
           "WHEELBUILD_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    first = wheelbuild("image", "build", "--cuda12", "--base-image", base_image, env=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    tag = first.stdout.strip().splitlines()[-1]
    assert tag != cuda_image  # the layer is an input of the image
    assert sorted(server.requests) == sorted(f"/redist/{n}" for n in _paths(pins))
    assert "downloading cuda_nvcc-linux-x86_64-12.8.93-archive.tar.xz" in first.stdout + first.stderr

    layer = load_layer(pins)
    labels = docker_client.images.get(tag).labels
    assert labels["org.wheelbuild.cuda12.image"] == layer.tag
    assert labels["org.wheelbuild.cuda12.pins"] == layer.pins
    assert "cuda_nvcc=12.8.93@sha256:" in layer.pins
    assert docker_client.images.get(layer.tag).labels["org.wheelbuild.cuda12.pins"] == layer.pins

    out = docker_client.containers.run(tag, ["sh", "-c",
        "/usr/local/cuda-12.8/bin/nvcc --version; cd /usr/local/cuda-12.8; find . | sort; readlink lib64"],
        remove=True).decode()  # fmt: skip
    assert "release 12.8, V12.8.93" in out
    assert "./include/cublas_v2.h" in out and "./lib/libcublas.so.12" not in out  # headers only
    assert "./lib/libstandin.so" in out and "./lib/libcudart_static.a" not in out
    assert out.strip().endswith("lib")  # lib64 -> lib, where torch's link line looks
    # The image's own CUDA 13.1 stays the default compiler.
    assert "release 13.1" in docker_client.containers.run(tag, ["nvcc", "--version"], remove=True).decode()

    # Both images gone, the archives still cached: the next build downloads nothing.
    docker_client.images.remove(tag)
    docker_client.images.remove(layer.tag)
    server.requests.clear()
    again = wheelbuild("image", "build", "--cuda12", "--base-image", base_image, env=env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr
    assert again.stdout.strip().splitlines()[-1] == tag
    assert server.requests == []


def test_wrong_hash_is_refused_and_nothing_is_kept(
    mirror: tuple[Mirror, Path, str], base_image: str, tmp_path: Path
) -> None:
    server, pins, nvcc_sha = mirror
    bad = tmp_path / "bad.toml"
    bad.write_text(pins.read_text().replace(nvcc_sha, "0" * 64))
    cache = tmp_path / "cache"
    env = {"WHEELBUILD_CUDA12_PINS": str(bad), "WHEELBUILD_CUDA_REDIST_URL": server.url,
           "WHEELBUILD_CACHE_DIR": str(cache)}  # fmt: skip
    result = wheelbuild("image", "build", "--cuda12", "--base-image", base_image, env=env)
    assert result.returncode == 24, result.stdout[-2000:] + result.stderr
    assert f"but its pin says {'0' * 64}" in result.stderr and "remedy:" in result.stderr
    assert [p for p in cache.rglob("*") if p.is_file()] == []  # no partial, no poisoned cache entry


def test_cu128_build_fails_fast_when_the_redist_server_is_unreachable(
    cuda_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/redist"
    started = time.monotonic()
    result = wheelbuild("build", "--torch", "cu128", "--output-dir", str(tmp_path / "out"), env={
        "WHEELBUILD_CUDA_REDIST_URL": url, "WHEELBUILD_CACHE_DIR": str(tmp_path / "cache")})  # fmt: skip
    assert result.returncode == 23, result.stdout[-2000:] + result.stderr
    assert time.monotonic() - started < 60
    error = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert f"{url}/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-12.8.93-archive.tar.xz" in error
    assert "WHEELBUILD_CUDA_REDIST_URL" in result.stderr and "--cuda12-image" in result.stderr
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []
    assert containers_of_run(docker_client, result.run_id) == []


def _paths(pins: Path) -> list[str]:
    return [a.path for a in load_layer(pins).archives]
