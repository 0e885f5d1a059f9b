"""Stand-ins for NVIDIA's CUDA 12.8 redist archives that hold a real compiler.

NVIDIA's servers cannot be reached here and no CUDA 12 nvcc is on PyPI, so the compiler,
runtime and CCCL archives are NVIDIA's CUDA 13.1 wheels (pinned by hash in
images/requirements-cuda131.txt) repacked in the redist layout: one
`<name>-linux-x86_64-<version>-archive/` folder with bin/, nvvm/, include/ and lib/, as the 12.8
archives have them. bin/nvcc.profile is the wheel's own, which is NVIDIA's redist text
(`INCLUDES += "-I$(TOP)/$(_TARGET_DIR_)/include"`, `LIBRARIES =+ ... "-L$(TOP)/$(_TARGET_DIR_)/lib"`).
The runtime wheel brings the real libcudart_static.a and libcudadevrt.a that nvcc links.

cuBLAS is made here, small: its real archive is 940 MB and its stubs are on no index reachable
from here. The stand-in stub is what NVIDIA's is, an ELF shared object exporting the entry points
(each returns an error) under the real library's soname, libcublas.so.12, built with gcc in a
container of the base image; the header declares only what the tests call.

Wheels are downloaded once into ~/.cache/wheelbuild-tests/sha256/<sha256>/ and the repacked
archives are kept by a hash of the wheels' hashes and the repacking recipe, so CI pays once.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import docker
from wheelbuild.index.tree import hash_file

from tests.integration.conftest import REPO

CACHE = Path.home() / ".cache" / "wheelbuild-tests"
CMAKE_WHEEL = ("cmake", "4.2.3", "8e91b381aaea3c47110583dccc52f4562333d1accdbb806939f953c16e74ec0a")

# archive name -> (version its pin names, [(wheel, folder in the wheel, folder in the archive)],
# links the archive carries). libnvvm.so (63 MB, for NVRTC and -dlto) is left out: nvcc's own
# compiles run cicc, which does not load it.
REPACK: dict[str, tuple[str, list[tuple[str, str, str]], dict[str, str]]] = {
    "cuda_nvcc": ("12.8.93", [
        ("nvidia-cuda-nvcc", "nvidia/cu13/bin/", "bin/"),
        ("nvidia-cuda-nvcc", "nvidia/cu13/include/", "include/"),
        ("nvidia-nvvm", "nvidia/cu13/nvvm/", "nvvm/"),
        ("nvidia-cuda-crt", "nvidia/cu13/include/crt/", "include/crt/"),  # cuda_nvcc's in 12.8
    ], {}),
    "cuda_cudart": ("12.8.90", [
        ("nvidia-cuda-runtime", "nvidia/cu13/include/", "include/"),
        ("nvidia-cuda-runtime", "nvidia/cu13/lib/", "lib/"),
    ], {"lib/libcudart.so": "libcudart.so.13"}),  # the archive's own development link
    "cuda_cccl": ("12.8.90", [
        ("nvidia-cuda-cccl", "nvidia/cu13/include/", "include/"),
        ("nvidia-cuda-cccl", "nvidia/cu13/lib/", "lib/"),
    ], {}),
}  # fmt: skip

CUBLAS_H = """/* Stand-in for cuBLAS's header: only what the tests' extension calls. */
#pragma once
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1 } cublasStatus_t;
typedef struct cublasContext *cublasHandle_t;
#ifdef __cplusplus
extern "C" {
#endif
cublasStatus_t cublasCreate_v2(cublasHandle_t *handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
#ifdef __cplusplus
}
#endif
#define cublasCreate cublasCreate_v2
#define cublasDestroy cublasDestroy_v2
"""

CUBLAS_STUB_C = """/* As NVIDIA's lib/stubs/libcublas.so: the entry points, for the linker, each failing. */
int cublasCreate_v2(void **handle) { (void)handle; return 1; }
int cublasDestroy_v2(void *handle) { (void)handle; return 1; }
"""


def cached_wheel(name: str, version: str, sha256: str) -> Path:
    """One wheel from PyPI, by pin and hash, downloaded once per machine."""
    folder = CACHE / "sha256" / sha256
    found = sorted(folder.glob("*.whl"))
    if found and hash_file(found[0]) == sha256:
        return found[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        requirement = Path(tmp) / "requirement.txt"
        requirement.write_text(f"{name}=={version} --hash=sha256:{sha256}\n")
        # The host's pip configuration (local indexes, constraints) is no part of the pin.
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
             "--only-binary=:all:", "-d", f"{tmp}/d", "-r", str(requirement)],
            check=True, capture_output=True, env=env, timeout=600,
        )  # fmt: skip
        (wheel,) = Path(tmp, "d").glob("*.whl")
        assert hash_file(wheel) == sha256, wheel
        folder.mkdir(parents=True, exist_ok=True)
        os.replace(wheel, folder / wheel.name)
    return folder / wheel.name


def cuda131_wheels() -> dict[str, Path]:
    """images/requirements-cuda131.txt's wheels, by project name."""
    pins = re.findall(r"^([\w-]+)==(\S+) --hash=sha256:([0-9a-f]{64})", (REPO / "images" / "requirements-cuda131.txt").read_text(), re.M)  # fmt: skip
    return {name: cached_wheel(name, version, sha) for name, version, sha in pins}


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _add_link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    tar.addfile(info)


def _repack(name: str, wheels: dict[str, Path], dest: Path) -> None:
    version, sources, links = REPACK[name]
    top = f"{name}-linux-x86_64-{version}-archive"
    part = dest.with_suffix(".part")
    with tarfile.open(part, "w:xz", preset=0) as tar:  # preset 0: seconds, not minutes
        for wheel, inside, into in sources:
            with zipfile.ZipFile(wheels[wheel]) as zf:
                for info in zf.infolist():
                    if info.is_dir() or not info.filename.startswith(inside):
                        continue
                    mode = 0o755 if (info.external_attr >> 16) & 0o111 else 0o644
                    _add(tar, f"{top}/{into}{info.filename[len(inside) :]}", zf.read(info), mode)
        for link, target in links.items():
            _add_link(tar, f"{top}/{link}", target)
    os.replace(part, dest)


def compiler_archives(root: Path) -> list[dict[str, object]]:
    """cuda_nvcc, cuda_cudart and cuda_cccl stand-ins under `root` (a mirror's redist/), as pin
    entries; made once per machine and linked into the mirror."""
    wheels = cuda131_wheels()
    key = hashlib.sha256(repr((REPACK, sorted((n, p.name) for n, p in wheels.items()))).encode()).hexdigest()[
        :16
    ]
    entries = []
    for name, (version, _, _) in REPACK.items():
        relative = f"{name}/linux-x86_64/{name}-linux-x86_64-{version}-archive.tar.xz"
        kept = CACHE / "cuda12-standins" / key / relative
        if not kept.is_file():
            kept.parent.mkdir(parents=True, exist_ok=True)
            _repack(name, wheels, kept)
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).symlink_to(kept)
        entries.append({"name": name, "version": version, "path": relative,
                        "sha256": hash_file(kept), "size": kept.stat().st_size})  # fmt: skip
    return entries


def cublas_archive(
    root: Path, client: docker.DockerClient, base_image: str, salt: bytes
) -> dict[str, object]:
    """A libcublas archive in NVIDIA's layout: headers, a real ELF stub with the real soname, and
    what the layer must drop (the library itself, its development link, its static library)."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "stub.c").write_text(CUBLAS_STUB_C)
        client.containers.run(
            base_image, ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcublas.so.12", "-o", "/w/libcublas.so", "/w/stub.c"],
            volumes={tmp: {"bind": "/w", "mode": "rw"}}, remove=True,
        )  # fmt: skip
        stub = Path(tmp, "libcublas.so").read_bytes()
    top = "libcublas-linux-x86_64-12.8.4.1-archive"
    relative = f"libcublas/linux-x86_64/{top}.tar.xz"
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:xz") as tar:
        _add(tar, f"{top}/include/cublas_v2.h", CUBLAS_H.encode() + b"/* " + salt + b" */\n", 0o644)
        _add(tar, f"{top}/lib/stubs/libcublas.so", stub, 0o755)
        _add(tar, f"{top}/lib/libcublas.so.12.8.4.1", b"the real library: never in the layer\n", 0o755)
        _add_link(tar, f"{top}/lib/libcublas.so.12", "libcublas.so.12.8.4.1")
        _add_link(tar, f"{top}/lib/libcublas.so", "libcublas.so.12")
        _add(tar, f"{top}/lib/libcublas_static.a", b"!<arch>\n", 0o644)
    return {"name": "libcublas", "version": "12.8.4.1", "path": relative,
            "sha256": hash_file(path), "size": path.stat().st_size}  # fmt: skip
