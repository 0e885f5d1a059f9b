"""The C++ standard follows torch (images/wheelbuild-cxx, and wheelbuild-nvcc through it): the
standard torch requires read from its ATen.h guard, and a package's older -std raised to it,
never lowered, in every spelling gcc and nvcc take. Pure functions of the scripts the build
mounts; tests/local/test_cxx_standard.py runs them on real compilers."""

from __future__ import annotations

import pytest
from wheelbuild.image.inputs import IMAGES_DIR

from tests.scriptkit import script_module

CXX = script_module(IMAGES_DIR / "wheelbuild-cxx")
NVCC = script_module(IMAGES_DIR / "wheelbuild-nvcc")

# ATen.h's first lines in torch 2.13.0 and 2.14.1 (read from the wheels on PyPI).
ATEN_2_13 = (
    "#pragma once\n\n#if !defined(_MSC_VER) && __cplusplus < 201703L\n"
    "#error C++17 or later compatible compiler is required to use ATen.\n#endif\n"
)
ATEN_2_14 = (
    "#pragma once\n\n#if !defined(_MSC_VER) && __cplusplus < 202002L\n"
    "#error C++20 or later compatible compiler is required to use ATen.\n#endif\n"
)


def test_the_standard_torch_requires_is_read_from_its_aten_guard() -> None:
    assert CXX.required_standard(ATEN_2_13) == 17
    assert CXX.required_standard(ATEN_2_14) == 20
    assert CXX.required_standard("#pragma once\n") is None


@pytest.mark.parametrize(
    ("flag", "raised"),
    [
        ("-std=c++17", "-std=c++20"),
        ("-std=gnu++17", "-std=gnu++20"),  # the dialect kept
        ("-std=c++1z", "-std=c++20"),  # a draft name
        ("--std=c++14", "--std=c++20"),
        ("-std=c++20", "-std=c++20"),
        ("-std=c++23", "-std=c++23"),  # never lowered
        ("-std=gnu++2b", "-std=gnu++2b"),
        ("-std=c11", "-std=c11"),  # a C standard is no C++ standard
        ("-std=c++latest", "-std=c++latest"),  # not one this can compare: left as written
        ("-O3", "-O3"),
    ],
)
def test_only_an_older_cxx_standard_is_raised(flag: str, raised: str) -> None:
    assert CXX.raise_flag(flag, 20) == raised


def test_every_raise_is_said_and_the_other_args_are_kept_in_order() -> None:
    args = ["-O3", "-std=c++17", "-c", "a.cpp", "-std=gnu++14", "-o", "a.o"]
    raised, changes = CXX.raise_standards(args, 20)
    assert raised == ["-O3", "-std=c++20", "-c", "a.cpp", "-std=gnu++20", "-o", "a.o"]
    assert changes == ["-std=c++17 to -std=c++20", "-std=gnu++14 to -std=gnu++20"]
    assert CXX.raise_standards(args, 14) == (args, [])


@pytest.mark.parametrize(
    ("args", "raised"),
    [
        (["-std", "c++17", "-c", "k.cu"], ["-std=c++20", "-c", "k.cu"]),
        (["--std=c++17", "-c", "k.cu"], ["--std=c++20", "-c", "k.cu"]),
        (["-Xcompiler", "-std=c++17,-fPIC"], ["-Xcompiler", "-std=c++20,-fPIC"]),
        (["--compiler-options", "-O3 -std=gnu++17"], ["--compiler-options", "-O3 -std=gnu++20"]),
        (["-Xcompiler=-fPIC,-std=c++14"], ["-Xcompiler=-fPIC,-std=c++20"]),
        (["-std=c++20", "-Xcompiler", "-fPIC"], ["-std=c++20", "-Xcompiler", "-fPIC"]),
        (["-std", "c++20"], ["-std", "c++20"]),  # unchanged: as written
    ],
)
def test_nvcc_raises_its_own_standard_and_the_one_it_hands_the_host_compiler(
    args: list[str], raised: list[str]
) -> None:
    assert NVCC.raise_standard(args, 20)[0] == raised
