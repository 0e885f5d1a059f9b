"""The CUDA 12 compiler layer's real pins (images/cuda-12.8-redist.toml): every archive a torch
extension compiles against is named, with its hash and size."""

from __future__ import annotations

from wheelbuild.image.cuda_redist import PINS_FILE, load_layer
from wheelbuild.image.inputs import IMAGES_DIR


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
