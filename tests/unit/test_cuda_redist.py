"""The CUDA 12 layer's pins and unpacking, on real .tar.xz files made here. Hostile archives
(a member outside its folder, a symlink out of the tree) are refused before anything lands."""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument, CompilerUnavailable, CudaRedistMismatch, CudaRedistUnreachable
from wheelbuild.image.cuda_redist import CudaLayer, RedistArchive, load_layer, prepare_tree, unpack
from wheelbuild.image.inputs import NO_CUDA12, ImageInputs
from wheelbuild.pipeline.preflight import compiler_in_image
from wheelbuild.variants import parse_variant


def _archive(
    path: Path, top: str, members: list[tarfile.TarInfo], data: dict[str, bytes],
    name: str = "cuda_nvcc", headers_only: bool = False,
) -> RedistArchive:  # fmt: skip
    with tarfile.open(path, "w:xz") as tar:
        for info in members:
            tar.addfile(info, io.BytesIO(data.get(info.name, b"")) if info.isfile() else None)
    blob = path.read_bytes()
    return RedistArchive(
        name, "12.8.93", f"x/{path.name}", hashlib.sha256(blob).hexdigest(), len(blob), headers_only
    )


def _file(name: str, data: bytes, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info


def _layer(*archives: RedistArchive) -> CudaLayer:
    return CudaLayer(version="12.8", release="12.8.1", manifest="redistrib_12.8.1.json", archives=archives)


def _link(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


def _nvidia_like(tmp_path: Path) -> tuple[CudaLayer, dict[str, Path]]:
    """Three archives shaped as NVIDIA's: the compiler, the runtime (its static library, the
    driver stub) and a headers-only library (its real library, its static one, its stubs)."""
    files = {
        "cuda_nvcc": ["bin/nvcc", "bin/nvcc.profile", "nvvm/bin/cicc", "include/crt/host_config.h",
                      "lib/libnvptxcompiler_static.a"],
        "cuda_cudart": ["include/cuda_runtime.h", "lib/libcudart.so.12.8.90", "lib/libcudart_static.a",
                        "lib/libcudadevrt.a", "lib/libculibos.a", "lib/stubs/libcuda.so", "pkg-config/cudart-12.8.pc"],
        "libcublas": ["include/cublas_v2.h", "lib/libcublas.so.12.8.4.1", "lib/libcublas_static.a",
                      "lib/stubs/libcublas.so", "lib/stubs/libcublasLt.so", "src/fortran.c", "LICENSE"],
    }  # fmt: skip
    links = {"cuda_cudart": {"lib/libcudart.so.12": "libcudart.so.12.8.90", "lib/libcudart.so": "libcudart.so.12"},
             "libcublas": {"lib/libcublas.so.12": "libcublas.so.12.8.4.1", "lib/libcublas.so": "libcublas.so.12"}}  # fmt: skip
    archives, paths = [], {}
    for name, members in files.items():
        top = f"{name}-linux-x86_64-12.8.93-archive"
        infos = [
            _file(f"{top}/{m}", m.encode(), 0o755 if m.startswith(("bin", "nvvm")) else 0o644)
            for m in members
        ]
        infos += [_link(f"{top}/{m}", t) for m, t in links.get(name, {}).items()]
        path = tmp_path / f"{top}.tar.xz"
        archives.append(_archive(path, top, infos, {i.name: i.name.split("/", 1)[1].encode() for i in infos},
                                 name=name, headers_only=name == "libcublas"))  # fmt: skip
        paths[name] = path
    return _layer(*archives), paths


def test_unpack_strips_the_folder_keeps_modes_and_links_lib64(tmp_path: Path) -> None:
    top = "cuda_nvcc-linux-x86_64-12.8.93-archive"
    nvcc = _file(f"{top}/bin/nvcc", b"#!/bin/sh\n", 0o755)
    archive = _archive(tmp_path / f"{top}.tar.xz", top, [nvcc, _file(f"{top}/lib/libx.so.12", b"elf"),
                       _link(f"{top}/lib/libx.so", "libx.so.12"), _file(f"{top}/lib/libx_static.a", b"ar")],
                       {nvcc.name: b"#!/bin/sh\n", f"{top}/lib/libx.so.12": b"elf", f"{top}/lib/libx_static.a": b"ar"})  # fmt: skip
    dest = tmp_path / "tree"
    unpack(_layer(archive), {"cuda_nvcc": tmp_path / f"{top}.tar.xz"}, dest)
    assert (dest / "bin" / "nvcc").stat().st_mode & 0o777 == 0o755
    lib = dest / "targets" / "x86_64-linux" / "lib"
    assert (lib / "libx.so").readlink() == Path("libx.so.12")
    assert not (lib / "libx_static.a").exists()  # only cuda_cudart's libcudart_static.a is kept
    assert (dest / "lib64").readlink() == Path("targets/x86_64-linux/lib")
    assert (dest / "lib64" / "libx.so").read_bytes() == b"elf"
    assert not (dest / "lib").exists()  # NVIDIA's installer has lib64 only


def test_the_tree_is_laid_out_as_nvidias_installer_does(tmp_path: Path) -> None:
    """nvcc.profile looks in $(TOP)/targets/x86_64-linux/{include,lib}; include and lib64 (torch's
    -I and -L) link there."""
    layer, paths = _nvidia_like(tmp_path)
    dest = tmp_path / "tree"
    unpack(layer, paths, dest)
    target = dest / "targets" / "x86_64-linux"
    assert (dest / "include").readlink() == Path("targets/x86_64-linux/include")
    assert (dest / "lib64").readlink() == Path("targets/x86_64-linux/lib")
    for header in ("cuda_runtime.h", "crt/host_config.h", "cublas_v2.h"):
        assert (target / "include" / header).is_file() and (dest / "include" / header).is_file()
    assert (dest / "bin" / "nvcc.profile").is_file() and (dest / "nvvm" / "bin" / "cicc").is_file()
    assert (dest / "lib64" / "libcudart.so").resolve() == (target / "lib" / "libcudart.so.12.8.90").resolve()
    assert (dest / "pkg-config" / "cudart-12.8.pc").is_file()  # what is not include/ or lib/ stays at the top


def test_the_static_runtime_is_kept_and_the_other_static_libraries_are_not(tmp_path: Path) -> None:
    """nvcc links -lcudart_static by default; the rest nvcc never links unasked."""
    layer, paths = _nvidia_like(tmp_path)
    unpack(layer, paths, tmp_path / "tree")
    lib = tmp_path / "tree" / "lib64"
    assert (lib / "libcudart_static.a").read_bytes() == b"lib/libcudart_static.a"
    assert (lib / "libcudadevrt.a").is_file() and (
        lib / "libculibos.a"
    ).is_file()  # nvcc's link needs cudadevrt
    assert not (lib / "libnvptxcompiler_static.a").exists() and not (lib / "libcublas_static.a").exists()


def test_a_headers_only_library_keeps_its_stubs_linked_under_the_link_name(tmp_path: Path) -> None:
    """`g++ -L$CUDA_HOME/lib64 -lcublas` (torch's link line) finds lib/libcublas.so, a link to the
    stub; the real library and its versioned names stay out, so nothing here loads at run time."""
    layer, paths = _nvidia_like(tmp_path)
    unpack(layer, paths, tmp_path / "tree")
    lib = tmp_path / "tree" / "targets" / "x86_64-linux" / "lib"
    assert (lib / "stubs" / "libcublas.so").read_bytes() == b"lib/stubs/libcublas.so"
    assert (lib / "libcublas.so").readlink() == Path("stubs/libcublas.so")
    assert (lib / "libcublasLt.so").readlink() == Path("stubs/libcublasLt.so")
    assert not list(lib.glob("libcublas.so.*")) and not (lib / "libcublas_static.a").exists()
    assert not (tmp_path / "tree" / "src").exists() and not (tmp_path / "tree" / "LICENSE").exists()
    # The driver stub comes with cuda_cudart, which is kept whole: it stays in stubs/, as NVIDIA has it.
    assert (lib / "stubs" / "libcuda.so").is_file() and not (lib / "libcuda.so").exists()


def test_the_layout_is_part_of_the_layers_name() -> None:
    """A tree or layer image unpacked the old way (same pins) is never reused."""
    archive = RedistArchive("cuda_nvcc", "12.8.93", "cuda_nvcc/x/a.tar.xz", "a" * 64, 10, False)
    old = hashlib.sha256(f"12.8 {_layer(archive).pins}".encode()).hexdigest()
    assert _layer(archive).sha256 != old and _layer(archive).tag.endswith(_layer(archive).sha256[:16])


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


def test_a_symlink_out_of_its_archives_folder_is_refused_even_where_targets_would_hold_it(
    tmp_path: Path,
) -> None:
    """lib/ lands two folders deeper (targets/x86_64-linux/lib): a link climbing out of its
    archive is still refused, not kept because the deeper folder keeps it in the tree."""
    top = "cuda_nvcc-linux-x86_64-12.8.93-archive"
    archive = _archive(tmp_path / f"{top}.tar.xz", top, [_link(f"{top}/lib/evil", "../../x")], {})
    with pytest.raises(CudaRedistMismatch, match="points outside"):
        unpack(_layer(archive), {"cuda_nvcc": tmp_path / f"{top}.tar.xz"}, tmp_path / "tree")


def test_a_member_written_through_an_earlier_symlink_is_refused(tmp_path: Path) -> None:
    """Each link stays inside, but a chain of them would walk a later member out of the tree."""
    top = "cuda_nvcc-linux-x86_64-12.8.93-archive"
    members = [
        _link(f"{top}/bin/up", ".."),
        _link(f"{top}/bin/up/up2", ".."),
        _file(f"{top}/bin/up/up2/pwned", b"x"),
    ]
    archive = _archive(tmp_path / f"{top}.tar.xz", top, members, {f"{top}/bin/up/up2/pwned": b"x"})
    with pytest.raises(CudaRedistMismatch, match="written through the symlink bin/up"):
        unpack(_layer(archive), {"cuda_nvcc": tmp_path / f"{top}.tar.xz"}, tmp_path / "tree")
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "tree" / "pwned").exists()


def test_a_link_that_resolves_outside_through_another_link_is_refused(tmp_path: Path) -> None:
    """bin/a -> .. and bin/b -> a/../.. each look inside on their own; b, followed, is not."""
    top = "cuda_nvcc-linux-x86_64-12.8.93-archive"
    nvcc = _file(f"{top}/bin/nvcc", b"#!/bin/sh\n", 0o755)
    members = [nvcc, _link(f"{top}/bin/a", ".."), _link(f"{top}/bin/b", "a/../..")]
    archive = _archive(tmp_path / f"{top}.tar.xz", top, members, {nvcc.name: b"#!/bin/sh\n"})
    with pytest.raises(CudaRedistMismatch, match="bin/b resolves outside it"):
        unpack(_layer(archive), {"cuda_nvcc": tmp_path / f"{top}.tar.xz"}, tmp_path / "tree")


def test_an_archive_with_its_own_top_level_lib64_is_refused(tmp_path: Path) -> None:
    top = "cuda_nvcc-linux-x86_64-12.8.93-archive"
    nvcc = _file(f"{top}/bin/nvcc", b"#!/bin/sh\n", 0o755)
    members = [nvcc, _file(f"{top}/lib64/libx.so", b"elf")]
    archive = _archive(
        tmp_path / f"{top}.tar.xz", top, members, {nvcc.name: b"#!/bin/sh\n", f"{top}/lib64/libx.so": b"elf"}
    )
    with pytest.raises(CudaRedistMismatch, match="holds lib64/ at its top"):
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


def test_a_torch_of_a_newer_cuda_minor_than_the_images_nvcc_fails_before_any_download() -> None:
    """PyPI's torch 2.15.0 is CUDA 13.2 (cuda-toolkit==13.2.2): the image's nvcc 13.1 must not
    compile against its CUDA library headers; said with the rule, before anything is fetched."""
    inputs = ImageInputs(
        dockerfile=b"", tool_requirements=b"", cuda_requirements=b"", ca_bundle=b"", admit_script=b"",
        base_image="base", base_id="", cuda12_image=NO_CUDA12, cuda12_version="12.8", cuda12_layer=None,
    )  # fmt: skip
    with pytest.raises(CompilerUnavailable) as caught:
        compiler_in_image(parse_variant("2.15.0+cu132"), (120,), inputs)
    assert caught.value.cause.startswith(
        "torch 2.15.0+cu132 is built with CUDA 13.2, newer than the image's nvcc (13.1)"
    )
    assert "build for a torch of CUDA 13.1 or older" in caught.value.remedy
    # The 13.2 toolkit's image compiles it.
    assert (
        compiler_in_image(parse_variant("2.15.0+cu132"), (120,), replace(inputs, toolkit="13.2")).version
        == "13.2"
    )
    assert caught.value.exit_code == CompilerUnavailable.exit_code
