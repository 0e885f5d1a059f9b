"""wheelbuild.wheel.abi: the static import gate, on real shared objects compiled here with gcc/g++ and
zipped into real wheels. objdump, where present, is the independent reader the ELF parsing is
checked against."""

from __future__ import annotations

from pathlib import Path

import pytest
from wheelbuild.wheel.abi import (
    ElfAbi,
    Excess,
    SymbolVersion,
    check_wheel_abi,
    demangle,
    symbol_versions,
    tag_limits,
)

# -- reading one shared object ------------------------------------------------------------------


def test_symbol_versions_order_by_number() -> None:
    parse = SymbolVersion.parse
    assert parse("GLIBCXX_3.4.9") < parse("GLIBCXX_3.4.21") < parse("GLIBCXX_3.4.32")  # type: ignore[operator]
    assert parse("CXXABI_1.3") < parse("CXXABI_1.3.1")  # type: ignore[operator]
    assert parse("GLIBCXX_3.4.30") == SymbolVersion("GLIBCXX", (3, 4, 30))
    assert parse("GLIBC_PRIVATE") is None and parse("CXXABI_TM_1") is None and parse("GCC_3.0") is None


def test_what_is_not_elf_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a readable ELF file"):
        symbol_versions(b"INPUT(libfoo.so.1)\n")  # a linker script named .so
    with pytest.raises(ValueError, match="not a readable ELF file"):
        symbol_versions(b"\x7fELF" + b"\x02\x01\x01" + b"\xff" * 9)  # a truncated header


# -- what a platform tag allows -------------------------------------------------------------------


def test_manylinux_limits_come_from_auditwheels_policy() -> None:
    limits = tag_limits("manylinux_2_28_x86_64")
    assert (limits.label, limits.policy) == ("manylinux_2_28", "manylinux_2_28")
    assert [str(v) for v in limits.highest] == ["GLIBC_2.28", "GLIBCXX_3.4.24", "CXXABI_1.3.11"]
    assert "CXXABI_TM_1" in limits.allowed and "GLIBC_PRIVATE" not in limits.allowed
    legacy = tag_limits("manylinux2014_x86_64")
    assert (legacy.label, legacy.policy) == ("manylinux2014", "manylinux_2_17")
    assert [str(v) for v in legacy.highest] == ["GLIBC_2.17", "GLIBCXX_3.4.19", "CXXABI_1.3.7"]
    assert str(tag_limits("manylinux_2_34_x86_64").limit("GLIBCXX")) == "GLIBCXX_3.4.29"


def test_a_manylinux_tag_the_policy_file_lacks_takes_its_glibc_and_the_older_libstdcxx() -> None:
    limits = tag_limits("manylinux_2_30_x86_64")
    assert limits.policy == "manylinux_2_28"
    assert [str(v) for v in limits.highest] == ["GLIBC_2.30", "GLIBCXX_3.4.24", "CXXABI_1.3.11"]


def test_linux_and_non_linux_tags_have_no_limit() -> None:
    for tag in ("linux_x86_64", "any", "win_amd64"):
        limits = tag_limits(tag)
        assert not limits.limited and limits.highest == ()
        assert limits.excess(ElfAbi((), frozenset({"GLIBC_2.99", "GLIBC_PRIVATE"}), (), frozenset())) == ()


def test_a_manylinux_tag_auditwheel_has_no_policy_for_is_an_error() -> None:
    with pytest.raises(ValueError, match="no manylinux_2_5 policy for riscv64"):
        tag_limits("manylinux_2_5_riscv64")
    with pytest.raises(ValueError, match=r"no manylinux policy for glibc <= 2\.3 on x86_64"):
        tag_limits("manylinux_2_3_x86_64")


def test_named_versions_fit_only_when_the_policy_lists_them() -> None:
    abi = ElfAbi(
        needed=("libc.so.6", "libstdc++.so.6"),
        versions=frozenset({"GLIBC_2.17", "GLIBC_PRIVATE", "CXXABI_TM_1", "GCC_7.0.0"}),
        undefined=(),
        defined=frozenset(),
    )
    assert tag_limits("manylinux_2_28_x86_64").excess(abi) == (Excess("GLIBC_PRIVATE", None),)


# -- whole wheels -------------------------------------------------------------------------------------


# -- a wheel is untrusted input ----------------------------------------------------------------------


def test_not_a_wheel_is_refused(tmp_path: Path) -> None:
    bad_name = tmp_path / "demo.zip"
    bad_name.write_bytes(b"")
    with pytest.raises(ValueError, match="not a wheel filename"):
        check_wheel_abi(bad_name)
    not_zip = tmp_path / "demo-0.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    not_zip.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a zip archive"):
        check_wheel_abi(not_zip)


# -- C++ names ----------------------------------------------------------------------------------------


def test_demangle() -> None:
    assert demangle("_ZN2wb7missingEi") == "wb::missing(int)"
    assert demangle("_ZNSt13runtime_errorD1Ev") == "std::runtime_error::~runtime_error()"
    assert demangle("wb_missing_function") == "wb_missing_function"
    assert demangle("i") == "i"  # __cxa_demangle alone would say "int"
    assert demangle("_Zgarbage") == "_Zgarbage"
    assert demangle("") == ""


# -- a shared object is untrusted input ---------------------------------------------------------------


# -- the stable ABI of an abi3 wheel ---------------------------------------------------------------
