"""The CUDA 12 compiler layer from pinned redist archives, end to end against a real HTTP mirror on
127.0.0.1 and the real Docker engine: download, verify, a wrong hash refused, unpack, the layer
image and its labels, the build image that copies it, and the cache reused.

NVIDIA's servers cannot be reached here, so the mirror serves stand-in archives this test makes
in NVIDIA's layout (`<name>-linux-x86_64-<version>-archive/{bin,include,lib}` inside a .tar.xz
under `<name>/linux-x86_64/`), and the pins are swapped for theirs through WHEELBUILD_CUDA12_PINS,
for this test only. The real pins (images/cuda-12.8-redist.toml) are checked for shape.

A second layer, made the same way, holds a real compiler (NVIDIA's CUDA 13.1 wheels repacked in
the redist layout, see cuda12_standins.py), and a plain nvcc compile, a CMake CUDA project and a
setup.py with `libraries=["cublas"]` build with it inside the built image."""

from __future__ import annotations

import contextlib
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
from wheelbuild.image.cuda_redist import load_layer

from tests.integration.conftest import wheelbuild, wheelbuild_watched
from tests.integration.cuda12_standins import CMAKE_WHEEL, cached_wheel, compiler_archives, cublas_archive

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
        "/usr/local/cuda-12.8/bin/nvcc --version; cd /usr/local/cuda-12.8; find . | sort; readlink include lib64"],
        remove=True).decode()  # fmt: skip
    assert "release 12.8, V12.8.93" in out
    # NVIDIA's installer layout: headers and libraries in targets/x86_64-linux, linked from the top.
    target = "./targets/x86_64-linux"
    assert (
        f"{target}/include/cublas_v2.h" in out and f"{target}/lib/libcublas.so.12" not in out
    )  # headers only
    assert f"{target}/lib/libstandin.so" in out
    assert f"{target}/lib/libcudart_static.a" in out  # nvcc links it by default
    assert "targets/x86_64-linux/include\n" in out
    assert out.strip().endswith("lib")  # lib64 -> targets/x86_64-linux/lib, where torch's link line looks
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


def test_cu128_build_fails_before_any_container_when_the_redist_server_is_unreachable(
    cuda_image: str, base_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/redist"
    watched = wheelbuild_watched(
        docker_client, base_image, "build", "wbdemo", "--torch", "cu128", "--output-dir", str(tmp_path / "out"),
        env={"WHEELBUILD_CUDA_REDIST_URL": url, "WHEELBUILD_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    result = watched.result
    assert result.returncode == 23, result.stdout[-2000:] + result.stderr
    error = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert f"{url}/cuda_nvcc/linux-x86_64/cuda_nvcc-linux-x86_64-12.8.93-archive.tar.xz" in error
    assert "WHEELBUILD_CUDA_REDIST_URL" in result.stderr and "--cuda12-image" in result.stderr
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []
    assert watched.created == ()  # no image probe, no attempt: it stopped at the download


def _paths(pins: Path) -> list[str]:
    return [a.path for a in load_layer(pins).archives]


# The compiles below run a real compiler from a layer made the same way: see compiler_image.

SAXPY_CU = r"""
#include <cstdio>
#include <cuda_runtime.h>

__global__ void saxpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

int main() {
  int count = -1;
  cudaError_t status = cudaGetDeviceCount(&count);
  std::printf("cudaGetDeviceCount: %s\n", cudaGetErrorName(status));
  saxpy<<<1, 32>>>(32, 2.0f, nullptr, nullptr);
  std::printf("launch: %s\n", cudaGetErrorName(cudaGetLastError()));
  return 0;
}
"""

CMAKELISTS = """cmake_minimum_required(VERSION 3.24)
project(saxpy LANGUAGES CXX CUDA)
find_package(CUDAToolkit REQUIRED)
add_executable(saxpy saxpy.cu)
set_target_properties(saxpy PROPERTIES CUDA_ARCHITECTURES 120)
"""

# The pattern of public setup.py files: a .cu compiled by nvcc, the module linked by the host
# compiler with -L$CUDA_HOME/lib64 and `libraries=[...]`, which is what torch's CUDAExtension
# and BuildExtension do with it (without torch: see the test's docstring).
SETUP_PY = """import os
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CUDA_HOME = os.environ["CUDA_HOME"]


class BuildCuda(build_ext):
    def build_extension(self, ext):
        os.makedirs(self.build_temp, exist_ok=True)
        ext.extra_objects = []
        for source in [s for s in ext.sources if s.endswith(".cu")]:
            obj = os.path.join(self.build_temp, os.path.basename(source) + ".o")
            subprocess.run([f"{CUDA_HOME}/bin/nvcc", "-c", source, "-o", obj, "-Xcompiler", "-fPIC",
                            "-gencode", "arch=compute_120,code=sm_120", f"-I{CUDA_HOME}/include"], check=True)
            ext.extra_objects.append(obj)
        ext.sources = [s for s in ext.sources if not s.endswith(".cu")]
        super().build_extension(ext)


setup(
    name="cublas_ext",
    version="0.1",
    ext_modules=[Extension("cublas_ext", sources=["module.cpp", "kernel.cu"], language="c++",
                           include_dirs=[f"{CUDA_HOME}/include"], library_dirs=[f"{CUDA_HOME}/lib64"],
                           libraries=["cudart", "cublas"])],
    cmdclass={"build_ext": BuildCuda},
)
"""

KERNEL_CU = r"""
#include <cublas_v2.h>
#include <cuda_runtime.h>

__global__ void scale(float *x, float a) { x[threadIdx.x] *= a; }

extern "C" int cublas_ext_status(void) {
  cublasHandle_t handle;
  int status = cublasCreate(&handle);
  if (status == CUBLAS_STATUS_SUCCESS) cublasDestroy(handle);
  scale<<<1, 1>>>(nullptr, 2.0f);
  return status;
}
"""

MODULE_CPP = r"""
#include <Python.h>
extern "C" int cublas_ext_status(void);
static PyObject *status(PyObject *, PyObject *) { return PyLong_FromLong(cublas_ext_status()); }
static PyMethodDef methods[] = {{"status", status, METH_NOARGS, nullptr}, {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cublas_ext", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_cublas_ext(void) { return PyModule_Create(&module); }
"""

CUDA12 = "/usr/local/cuda-12.8"


def _files(files: dict[str, str]) -> str:
    """Shell lines writing each file (quoted heredocs: nothing in them is expanded)."""
    return "".join(f"cat > {name} <<'WB_EOF'\n{text}\nWB_EOF\n" for name, text in files.items())


def _in_container(client: docker.DockerClient, image: str, script: str,
                  volumes: dict[str, dict[str, str]] | None = None) -> tuple[int, str]:  # fmt: skip
    container = client.containers.run(image, ["bash", "-euo", "pipefail", "-c", script], detach=True,
                                      volumes=volumes or {}, network_disabled=True)  # fmt: skip
    try:
        code = int(container.wait(timeout=900)["StatusCode"])
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


@pytest.fixture(scope="module")
def compiler_image(
    base_image: str, docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The build image with a CUDA 12 layer whose archives hold a real compiler: NVIDIA's CUDA
    13.1 nvcc, cicc, ptxas, runtime and CCCL from their pinned wheels, repacked in the 12.8 redist
    layout (tests/integration/cuda12_standins.py says how and why), and a small cuBLAS archive
    with a real ELF stub. Made by the real `wheelbuild image build --cuda12` from the mirror, as
    a user's would be. The salt makes this run's layer new to the engine; both images go at the end."""
    root = tmp_path_factory.mktemp("compiler-mirror")
    salt = f"{time.time_ns()}".encode()
    entries = compiler_archives(root / "redist")
    entries.append(cublas_archive(root / "redist", docker_client, base_image, salt))
    pins = tmp_path_factory.mktemp("compiler-pins") / "pins.toml"
    pins.write_text(_pins(entries, headers_only={"libcublas"}))
    server = Mirror(root)
    env = {"WHEELBUILD_CUDA12_PINS": str(pins), "WHEELBUILD_CUDA_REDIST_URL": server.url,
           "WHEELBUILD_CACHE_DIR": str(tmp_path_factory.mktemp("compiler-cache"))}  # fmt: skip
    made = [load_layer(pins).tag]
    try:
        result = wheelbuild("image", "build", "--cuda12", "--base-image", base_image, env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr
        made.insert(0, result.stdout.strip().splitlines()[-1])
        yield made[0]
    finally:
        server.server.shutdown()
        for image in made:
            with contextlib.suppress(docker.errors.ImageNotFound, docker.errors.APIError):
                docker_client.images.remove(image)


def test_a_plain_nvcc_compile_uses_nvidias_layout_and_links_the_static_runtime(
    compiler_image: str, docker_client: docker.DockerClient
) -> None:
    """`nvcc saxpy.cu -o saxpy`, no flags: nvcc.profile's includes and link path, then nvcc's
    default `--cudart static` link, against the layer alone.

    Without the static runtime kept, the link fails (`cannot find -lcudart_static`): checked by
    reverting that fix once. Without the targets/x86_64-linux folder, this nvcc (13.1) falls
    back to $(TOP)/include and $(TOP)/lib64 (it prints `_TARGET_DIR_=` and `_TARGET_SIZE_=64`),
    so the compile itself would pass; what fails then, also checked by reverting, is the
    assertion that nvcc took NVIDIA's layout, the one its profile and CMake's FindCUDAToolkit
    prefer. No GPU here: the binary runs, and the static runtime it carries reports no driver."""
    script = f"cd /tmp\n{_files({'saxpy.cu': SAXPY_CU})}{CUDA12}/bin/nvcc -v saxpy.cu -o saxpy 2> nvcc.log || {{ cat nvcc.log; exit 1; }}\n"  # fmt: skip
    script += "grep -E '^#[$] (_TARGET_DIR_|INCLUDES|LIBRARIES)=' nvcc.log; grep -E '^#[$] g[+][+] .*-o \"saxpy\"' nvcc.log\n"  # fmt: skip
    script += "readelf -d saxpy | grep NEEDED; ./saxpy\n"
    code, out = _in_container(docker_client, compiler_image, script)
    assert code == 0, out
    assert "#$ _TARGET_DIR_=targets/x86_64-linux" in out
    assert f'#$ INCLUDES="-I{CUDA12}/bin/../targets/x86_64-linux/include"' in out
    assert f'"-L{CUDA12}/bin/../targets/x86_64-linux/lib"' in out and "-lcudart_static" in out
    assert "libcudart" not in "".join(line for line in out.splitlines() if "NEEDED" in line)  # static
    assert "cudaGetDeviceCount: cudaErrorInsufficientDriver" in out


def test_a_cmake_cuda_project_configures_builds_and_records_the_static_runtime(
    compiler_image: str, docker_client: docker.DockerClient
) -> None:
    """`project(... LANGUAGES CXX CUDA)` plus find_package(CUDAToolkit): CMake (from PyPI, pinned
    by hash, installed in the container from the cached wheel) identifies nvcc by compiling and
    linking with it, and links the executable with cudart_static, its default runtime.

    Without the static runtime kept, configuring fails at CMake's compiler identification
    (CMakeCUDACompilerId.cu: `cannot find -lcudart_static`): checked by reverting that fix once.
    Without the targets folder, CMake too falls back to include/ and lib64/ and the build
    passes, so what fails then (also checked by reverting) is the assertion that CMake found
    cudart_static and the headers in targets/x86_64-linux, where NVIDIA's installer has them."""
    name, version, sha256 = CMAKE_WHEEL
    wheel = cached_wheel(name, version, sha256)
    script = f"/opt/python/cp311-cp311/bin/pip install --no-index --quiet /wheels/{wheel.name}\n"
    script += "export PATH=/opt/python/cp311-cp311/bin:$PATH\nmkdir -p /tmp/p && cd /tmp/p\n"
    script += _files({"CMakeLists.txt": CMAKELISTS, "saxpy.cu": SAXPY_CU})
    script += f"cmake -S . -B build -DCMAKE_CUDA_COMPILER={CUDA12}/bin/nvcc > configure.log 2>&1 || {{ cat configure.log; exit 1; }}\n"  # fmt: skip
    script += "cmake --build build > build.log 2>&1 || { cat build.log; exit 1; }\n"
    script += "cat configure.log; grep -E '^CUDA_cudart_static_LIBRARY:' build/CMakeCache.txt\n"
    script += "readelf -d build/saxpy | grep NEEDED; ./build/saxpy\n"
    code, out = _in_container(docker_client, compiler_image, script, {str(wheel.parent): {"bind": "/wheels", "mode": "ro"}})  # fmt: skip
    assert code == 0, out
    assert "The CUDA compiler identification is NVIDIA" in out
    assert f"CUDA_cudart_static_LIBRARY:FILEPATH={CUDA12}/targets/x86_64-linux/lib/libcudart_static.a" in out
    assert f"-- Found CUDAToolkit: {CUDA12}/targets/x86_64-linux/include;" in out
    assert "libcudart" not in "".join(line for line in out.splitlines() if "NEEDED" in line)  # static
    assert "cudaGetDeviceCount: cudaErrorInsufficientDriver" in out


def test_a_setup_py_with_libraries_cublas_links_the_stub_and_needs_the_real_soname(
    compiler_image: str, docker_client: docker.DockerClient
) -> None:
    """`Extension(..., library_dirs=[CUDA_HOME/lib64], libraries=["cudart", "cublas"])` with a .cu
    compiled by nvcc: the link line torch's CUDAExtension writes. It links against cuBLAS's stub
    (reached through lib64/libcublas.so), and the module needs libcublas.so.12, the soname, never
    the stub's path: at run time that name is torch's own cuBLAS, and with only the layer on the
    loader's path the import fails for want of it, so the stub can never be what loads.

    Without the stubs kept and linked under their name, the link fails (`cannot find -lcublas`):
    checked by reverting that fix once. torch itself is not used: the stand-in compiler is CUDA
    13.1, which torch cu128 refuses (a CUDA major differs), and torch's cu128 wheels are GBs to
    download. So setup.py does what torch's BuildExtension does with the same flags (nvcc -c for
    the .cu, the host compiler links with torch's -L and -l), and cuBLAS's header is a stand-in
    declaring the two calls used."""
    script = f"mkdir -p /tmp/ext && cd /tmp/ext\n{_files({'setup.py': SETUP_PY, 'kernel.cu': KERNEL_CU, 'module.cpp': MODULE_CPP})}"  # fmt: skip
    script += f"CUDA_HOME={CUDA12} /opt/python/cp311-cp311/bin/python setup.py build_ext --inplace 2>&1\n"
    script += (
        'so=$(ls cublas_ext*.so); echo "built $so"; readelf -d "$so" | grep -E \'NEEDED|RPATH|RUNPATH\'\n'
    )
    script += f"ls {CUDA12}/lib64/ | grep cublas\n"
    script += f"LD_LIBRARY_PATH={CUDA12}/lib64 /opt/python/cp311-cp311/bin/python -c 'import cublas_ext' 2>&1 || true\n"  # fmt: skip
    code, out = _in_container(docker_client, compiler_image, script)
    assert code == 0, out
    link = next(line for line in out.splitlines() if "-lcublas" in line and " -o " in line)
    assert f"-L{CUDA12}/lib64" in link
    dynamic = [line for line in out.splitlines() if "NEEDED" in line or "PATH" in line]
    assert any("[libcublas.so.12]" in line for line in dynamic), dynamic
    assert any("[libcudart.so.13]" in line for line in dynamic), dynamic  # the stand-in runtime's soname
    assert not any("stubs" in line or "RPATH" in line or "RUNPATH" in line for line in dynamic), dynamic
    assert "libcublas.so.12: cannot open shared object file" in out
