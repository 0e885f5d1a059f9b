"""wheelbuild.variants: torch variant strings and the compiler that can build against them."""

from __future__ import annotations

from dataclasses import replace

import pytest
from wheelbuild.errors import BadVariant
from wheelbuild.variants import (
    CUDA13_TOOLKITS,
    DEFAULT_TOOLKIT,
    DEFAULT_TORCH,
    CudaCompiler,
    TorchVariant,
    arch_range,
    builds_for,
    compiler_for,
    parse_variant,
    toolkit_for,
)


def test_cuda_tag_alone_asks_for_the_newest_release_with_the_table_as_fallback() -> None:
    variant = parse_variant("cu130")
    assert variant == TorchVariant(
        tag="cu130",
        torch_version=DEFAULT_TORCH["cu130"],
        index_url="https://download.pytorch.org/whl/cu130",
        newest=True,
    )
    assert variant.cuda_version == "13.0"
    assert variant.cuda_major == 13
    # What the resolved release gives (preflight.resolve_torch replaces the version).
    resolved = replace(variant, torch_version="2.11.0", newest=False)
    assert resolved == parse_variant("2.11.0+cu130")
    assert resolved.torch_minor == "2.11"
    assert resolved.label == "cu130torch2.11"
    assert resolved.requirement == "torch==2.11.0"
    assert str(resolved) == "2.11.0+cu130"


def test_full_version_plus_tag_uses_that_torch_version() -> None:
    variant = parse_variant("2.9.1+cu128")
    assert variant.tag == "cu128"
    assert variant.torch_version == "2.9.1"
    assert variant.cuda_version == "12.8"
    assert variant.cuda_major == 12
    assert variant.index_url == "https://download.pytorch.org/whl/cu128"
    assert variant.label == "cu128torch2.9"
    assert variant.requirement == "torch==2.9.1"


def test_two_part_torch_version_is_normalised_to_three_parts() -> None:
    variant = parse_variant("2.10+cu128")
    assert variant.torch_version == "2.10.0"
    assert variant.requirement == "torch==2.10.0"
    assert variant.label == "cu128torch2.10"


def test_surrounding_whitespace_is_ignored() -> None:
    assert parse_variant("  cu128 \n").torch_version == "2.10.0"


def test_index_url_override_replaces_the_pytorch_index() -> None:
    variant = parse_variant("cu130", "https://mirror.example.invalid/torch/cu130")
    assert variant.index_url == "https://mirror.example.invalid/torch/cu130"
    assert variant.torch_version == DEFAULT_TORCH["cu130"]


@pytest.mark.parametrize(
    "text", ["cu13", "2.11.0cu130", "cu999", "rocm6.2", "", "2.11.0+", "+cu130", "CU130x"]
)
def test_bad_variant_strings_raise_bad_variant_with_exit_code_11(text: str) -> None:
    with pytest.raises(BadVariant) as caught:
        parse_variant(text)
    assert caught.value.exit_code == 11
    assert repr(text) in caught.value.cause
    assert caught.value.remedy


def test_unsupported_cuda_tag_remedy_lists_the_supported_tags() -> None:
    with pytest.raises(BadVariant) as caught:
        parse_variant("cu999")
    assert caught.value.remedy == "use one of cu126, cu128, cu129, cu130, cu132"


def test_cu13_variant_compiles_with_the_image_cuda_13_1() -> None:
    assert compiler_for(parse_variant("cu130"), (100, 120), None) == CudaCompiler(
        version="13.1", home="/usr/local/cuda-13.1/nvidia/cu13"
    )


def test_cu13_variant_ignores_any_cuda12_layer() -> None:
    cuda12 = CudaCompiler(version="12.8", home="/usr/local/cuda-12.8")
    assert compiler_for(parse_variant("cu130"), (100, 120), cuda12) == CudaCompiler(
        version="13.1", home="/usr/local/cuda-13.1/nvidia/cu13"
    )


def test_cu12_variant_without_a_cuda12_compiler_has_none() -> None:
    assert compiler_for(parse_variant("cu128"), (100, 120), None) is None


@pytest.mark.parametrize("version", ["12.8", "12.9"])
def test_cu12_variant_uses_a_cuda12_compiler_of_12_8_or_newer(version: str) -> None:
    cuda12 = CudaCompiler(version=version, home=f"/usr/local/cuda-{version}")
    assert compiler_for(parse_variant("cu128"), (100, 120), cuda12) is cuda12


@pytest.mark.parametrize("version", ["12.6", "12.4", "12.0"])
def test_cu12_variant_rejects_a_cuda12_compiler_older_than_12_8_which_lacks_sm_100(version: str) -> None:
    cuda12 = CudaCompiler(version=version, home=f"/usr/local/cuda-{version}")
    assert compiler_for(parse_variant("cu126"), (100, 120), cuda12) is None


def test_compiler_major_is_read_from_its_version() -> None:
    assert CudaCompiler(version="12.8", home="/x").major == 12
    assert CudaCompiler(version="13.1", home="/x").major == 13


@pytest.mark.parametrize("version", ["12.4", "12.6", "12.8"])
def test_cu12_variant_for_sm_80_and_sm_90_takes_a_cuda12_compiler_older_than_12_8(version: str) -> None:
    cuda12 = CudaCompiler(version=version, home=f"/usr/local/cuda-{version}")
    assert compiler_for(parse_variant("cu126"), (80, 90), cuda12) is cuda12


def test_an_arch_cuda13_dropped_has_no_compiler_for_cu130() -> None:
    assert compiler_for(parse_variant("cu130"), (70, 90), None) is None
    cuda12 = CudaCompiler(version="12.8", home="/usr/local/cuda-12.8")
    assert compiler_for(parse_variant("cu128"), (70, 90), cuda12) is cuda12


def test_sm_110_needs_cuda13_and_sm_101_ended_with_12_9() -> None:
    assert compiler_for(parse_variant("cu130"), (110,), None) is not None
    cuda12 = CudaCompiler(version="12.8", home="/usr/local/cuda-12.8")
    assert compiler_for(parse_variant("cu128"), (110,), cuda12) is None
    assert compiler_for(parse_variant("cu130"), (101,), None) is None
    assert compiler_for(parse_variant("cu128"), (101,), cuda12) is cuda12


def test_arch_range_says_which_releases_compile_an_arch() -> None:
    assert arch_range(120) == "CUDA 12.8 or later"
    assert arch_range(70) == "CUDA 9.0 to 12.9"
    assert arch_range(99) == "no CUDA release wheelbuild knows"


def test_a_torch_of_a_newer_cuda_minor_than_the_image_nvcc_has_no_compiler_here() -> None:
    """The CUDA 13 compile takes cuBLAS and friends' headers from torch's wheels: torch 2.15.0 is
    CUDA 13.2, and its headers need 13.2's runtime headers; 13.1's nvcc builds only for 13.0/13.1.
    A CUDA 12 layer carries its own library headers: the major alone decides there."""
    cuda13 = compiler_for(parse_variant("cu130"), (120,), None)
    assert cuda13 is not None and cuda13.version == "13.1" and cuda13.headers_from_torch
    assert builds_for(cuda13, parse_variant("2.14.1+cu130"))
    assert not builds_for(cuda13, parse_variant("2.15.0+cu132"))
    assert compiler_for(parse_variant("2.15.0+cu132"), (120,), None, toolkits=("13.1",)) is None
    cuda12 = CudaCompiler(version="12.8", home="/usr/local/cuda-12.8")
    assert not cuda12.headers_from_torch
    assert builds_for(cuda12, parse_variant("2.8.0+cu129"))


def test_the_toolkit_follows_torch_cuda_minor_the_oldest_that_compiles_it() -> None:
    """Every CUDA 13.0 torch shares the default 13.1 image; torch 2.15.0 (CUDA 13.2) takes the 13.2
    toolkit; a newer toolkit within the major is fine (torch only warns). A CUDA 12 torch keeps
    the default toolkit, beside which its layer goes."""
    assert toolkit_for(parse_variant("2.14.1+cu130")) == "13.1" == DEFAULT_TOOLKIT
    assert toolkit_for(parse_variant("2.15.0+cu132")) == "13.2"
    assert toolkit_for(parse_variant("cu128")) == DEFAULT_TOOLKIT
    cu132 = compiler_for(parse_variant("2.15.0+cu132"), (120,), None)
    assert cu132 == CudaCompiler("13.2", "/usr/local/cuda-13.2/nvidia/cu13")
    assert builds_for(cu132, parse_variant("2.14.1+cu130"))  # newer minor, same major
    # A CUDA minor no toolkit reaches: the newest toolkit, which compiler_for then refuses.
    unknown = TorchVariant("cu139", "2.99.0", "https://example.invalid/cu139")
    assert toolkit_for(unknown) == CUDA13_TOOLKITS[-1]
    assert compiler_for(unknown, (120,), None) is None
