"""The CUDA 12 layer's pins and unpacking, on real .tar.xz files made here. Hostile archives
(a member outside its folder, a symlink out of the tree) are refused before anything lands."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument, CudaRedistMismatch, CudaRedistUnreachable
from wheelbuild.preflight import compiler_in_image
from wheelbuild.run.cuda_redist import CudaLayer, RedistArchive, load_layer, prepare_tree, unpack
from wheelbuild.run.image import ImageInputs
from wheelbuild.variants import parse_variant


def _archive(path: Path, top: str, members: list[tarfile.TarInfo], data: dict[str, bytes]) -> RedistArchive:
    with tarfile.open(path, "w:xz") as tar:
        for info in members:
            tar.addfile(info, io.BytesIO(data.get(info.name, b"")) if info.isfile() else None)
    blob = path.read_bytes()
    return RedistArchive(
        "cuda_nvcc", "12.8.93", f"x/{path.name}", hashlib.sha256(blob).hexdigest(), len(blob), False
    )


def _file(name: str, data: bytes, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info


def _layer(*archives: RedistArchive) -> CudaLayer:
    return CudaLayer(version="12.8", release="12.8.1", manifest="redistrib_12.8.1.json", archives=archives)


def test_unpack_strips_the_folder_keeps_modes_and_links_lib64(tmp_path: Path) -> None:
    top = "cuda_nvcc-linux-x86_64-12.8.93-archive"
    nvcc = _file(f"{top}/bin/nvcc", b"#!/bin/sh\n", 0o755)
    link = tarfile.TarInfo(f"{top}/lib/libx.so")
    link.type, link.linkname = tarfile.SYMTYPE, "libx.so.12"
    archive = _archive(tmp_path / f"{top}.tar.xz", top, [nvcc, _file(f"{top}/lib/libx.so.12", b"elf"), link,
                       _file(f"{top}/lib/libx_static.a", b"ar")], {nvcc.name: b"#!/bin/sh\n", f"{top}/lib/libx.so.12": b"elf", f"{top}/lib/libx_static.a": b"ar"})  # fmt: skip
    dest = tmp_path / "tree"
    unpack(_layer(archive), {"cuda_nvcc": tmp_path / f"{top}.tar.xz"}, dest)
    assert (dest / "bin" / "nvcc").stat().st_mode & 0o777 == 0o755
    assert (dest / "lib" / "libx.so").readlink() == Path("libx.so.12")
    assert not (dest / "lib" / "libx_static.a").exists()
    assert (dest / "lib64").readlink() == Path("lib")


@pytest.mark.parametrize(
    "name",
    ["other-folder/bin/nvcc", "cuda_nvcc-linux-x86_64-12.8.93-archive/../../etc/passwd", "/etc/passwd"],
)
def test_a_member_outside_the_archives_folder_is_refused(tmp_path: Path, name: str) -> None:
    top = "cuda_nvcc-linux-x86_64-12.8.93-archive"
    archive = _archive(tmp_path / f"{top}.tar.xz", top, [_file(name, b"x")], {name: b"x"})
    with pytest.raises(CudaRedistMismatch, match="outside its folder"):
        unpack(_layer(archive), {"cuda_nvcc": tmp_path / f"{top}.tar.xz"}, tmp_path / "tree")
    assert not (tmp_path / "etc").exists()


def test_a_symlink_pointing_out_of_the_tree_is_refused(tmp_path: Path) -> None:
    top = "cuda_nvcc-linux-x86_64-12.8.93-archive"
    link = tarfile.TarInfo(f"{top}/lib/evil")
    link.type, link.linkname = tarfile.SYMTYPE, "../../../etc/shadow"
    archive = _archive(tmp_path / f"{top}.tar.xz", top, [link], {})
    with pytest.raises(CudaRedistMismatch, match="points outside"):
        unpack(_layer(archive), {"cuda_nvcc": tmp_path / f"{top}.tar.xz"}, tmp_path / "tree")


def test_an_unreachable_server_leaves_no_file_in_the_cache(tmp_path: Path) -> None:
    archive = RedistArchive("cuda_nvcc", "12.8.93", "cuda_nvcc/x/a.tar.xz", "a" * 64, 10, False)
    with pytest.raises(CudaRedistUnreachable) as caught:
        prepare_tree(_layer(archive), "http://127.0.0.1:9/redist", tmp_path, lambda _line: None)
    assert "http://127.0.0.1:9/redist/cuda_nvcc/x/a.tar.xz" in caught.value.cause
    assert "WHEELBUILD_CUDA_REDIST_URL" in caught.value.remedy and "--cuda12-image" in caught.value.remedy
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_malformed_pins_file_is_a_bad_argument(tmp_path: Path) -> None:
    pins = tmp_path / "pins.toml"
    pins.write_text('version = "12.8"\nrelease = "12.8.1"\nmanifest = "m"\n[[archive]]\nname = "cuda_nvcc"\n')
    with pytest.raises(BadArgument, match="unreadable or incomplete"):
        load_layer(pins)


def test_a_cu12_variant_compiles_with_the_layers_cuda_home() -> None:
    archive = RedistArchive("cuda_nvcc", "12.8.93", "cuda_nvcc/x/a.tar.xz", "a" * 64, 10, False)
    layer = _layer(archive)
    inputs = ImageInputs(
        dockerfile=b"", tool_requirements=b"", cuda_requirements=b"", ca_bundle=b"", admit_script=b"",
        base_image="base", base_id="", cuda12_image=layer.tag, cuda12_version=layer.version, cuda12_layer=layer,
    )  # fmt: skip
    assert compiler_in_image(parse_variant("cu128"), (100, 120), inputs).home == "/usr/local/cuda-12.8"
    assert (
        compiler_in_image(parse_variant("cu130"), (100, 120), inputs).home
        == "/usr/local/cuda-13.1/nvidia/cu13"
    )
