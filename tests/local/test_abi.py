"""wheelbuild.wheel.abi: the static import gate, on real shared objects compiled here with gcc/g++ and
zipped into real wheels. objdump, where present, is the independent reader the ELF parsing is
checked against."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest
from wheelbuild.errors import AbiMismatch, StableAbiBroken
from wheelbuild.wheel.abi import (
    SymbolVersion,
    UndefinedSymbol,
    UnsafeMember,
    check_wheel_abi,
    demangle,
    symbol_versions,
)

from tests import toolchain
from tests.indexkit import make_wheel

GCC, GXX, OBJDUMP = toolchain.require("gcc"), toolchain.require("g++"), toolchain.require("objdump")


def _glibc() -> tuple[int, ...]:
    name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")  # "glibc 2.36"
    return tuple(map(int, version.split("."))) if name == "glibc" else ()


# pthread_create moved into libc in glibc 2.34: linked here, it binds to GLIBC_2.34 (objdump -T).
needs_glibc_234 = pytest.mark.skipif(
    _glibc() < (2, 34), reason="pthread_create@GLIBC_2.34 needs glibc >= 2.34"
)


SOURCES = {
    # strlen@GLIBC_2.2.5 only: fits every manylinux tag
    "plain.c": "#include <string.h>\nint wb_plain(const char *s) { return (int)strlen(s); }\n",
    # memcpy@GLIBC_2.14 and, with -fstack-protector-all, __stack_chk_fail@GLIBC_2.4: as text "2.4" > "2.14"
    "numbers.c": (
        "#include <string.h>\n"
        "void wb_copy(char *out, const char *in, unsigned long n) {\n"
        "  char buf[64]; memcpy(buf, in, n < 64 ? n : 64); memcpy(out, buf, n < 64 ? n : 64);\n}\n"
    ),
    # pthread_create@GLIBC_2.34 beside __cxa_finalize@GLIBC_2.2.5: over manylinux_2_28
    "thread.c": (
        "#include <pthread.h>\n"
        "static void *run(void *arg) { return arg; }\n"
        "int wb_thread(void) { pthread_t t; if (pthread_create(&t, 0, run, 0)) return -1;"
        " return pthread_join(t, 0); }\n"
    ),
    # std::string (GLIBCXX_3.4.21, the C++11 ABI) and a throw (CXXABI_1.3): fits manylinux_2_28
    "cxx.cpp": (
        "#include <stdexcept>\n#include <string>\n"
        'extern "C" int wb_cxx(const char *s) {\n'
        '  std::string text(s); text += "!";\n'
        "  if (text.size() > 100) throw std::runtime_error(text);\n"
        "  return (int)text.size();\n}\n"
    ),
    # std::to_chars(double) is GLIBCXX_3.4.29 (GCC 11): over manylinux_2_28, fits manylinux_2_34
    "tochars.cpp": (
        "#include <charconv>\n"
        'extern "C" int wb_format(char *out, int size, double x) {\n'
        "  auto r = std::to_chars(out, out + size, x);\n"
        "  return r.ec == std::errc() ? (int)(r.ptr - out) : -1;\n}\n"
    ),
    "missing.c": "int wb_missing_function(int);\nint wb_calls_missing(int x) { return wb_missing_function(x) + 1; }\n",
    "missingcxx.cpp": (
        "namespace wb { int missing(int); }\n"
        'extern "C" int wb_calls_missing_cxx(int x) { return wb::missing(x) + 1; }\n'
    ),
    "provider.c": "int wb_missing_function(int x) { return 2 * x; }\n",
}


FLAGS = {"numbers": ("-fstack-protector-all",)}


@pytest.fixture(scope="module")
def so_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each source compiled to a shared object: {"plain": .../plain.so, ...}."""
    assert GCC is not None and GXX is not None
    d = tmp_path_factory.mktemp("so")
    built = {}
    for source, text in SOURCES.items():
        stem, _, lang = source.partition(".")
        (d / source).write_text(text)
        compiler = [GXX, "-std=c++17"] if lang == "cpp" else [GCC, *FLAGS.get(stem, ())]
        out = d / f"{stem}.so"
        subprocess.run(
            [*compiler, "-shared", "-fPIC", "-o", str(out), str(d / source)], check=True, timeout=120
        )
        built[stem] = out
    return built


@pytest.fixture(scope="module")
def so(so_paths: dict[str, Path]) -> dict[str, bytes]:
    return {stem: path.read_bytes() for stem, path in so_paths.items()}


def _wheel(directory: Path, platform: str, members: dict[str, bytes]) -> Path:
    """A real wheel demo-0.1-cp311-cp311-<platform>.whl (deflated) holding *members*."""
    return make_wheel(directory, "demo", "0.1", tag=f"cp311-cp311-{platform}", extra_files=members)


def _modules(so: dict[str, bytes], *stems: str) -> dict[str, bytes]:
    return {f"demo/{stem}.so": so[stem] for stem in stems}


def test_plain_c_needs_only_old_glibc_and_exports_its_function(so: dict[str, bytes]) -> None:
    abi = symbol_versions(so["plain"])
    assert abi.needed == ("libc.so.6",)
    assert abi.glibc == SymbolVersion("GLIBC", (2, 2, 5))
    assert abi.glibcxx is None and abi.cxxabi is None
    assert UndefinedSymbol("strlen", "GLIBC_2.2.5", weak=False) in abi.undefined
    assert "wb_plain" in abi.defined
    assert "strlen" not in abi.defined


def test_highest_glibc_is_compared_numerically_not_as_text(so: dict[str, bytes]) -> None:
    abi = symbol_versions(so["numbers"])
    assert abi.versions == {"GLIBC_2.2.5", "GLIBC_2.4", "GLIBC_2.14"}
    assert max(abi.versions) == "GLIBC_2.4"  # what a comparison of the text would call the highest
    assert abi.glibc == SymbolVersion("GLIBC", (2, 14))
    assert UndefinedSymbol("__stack_chk_fail", "GLIBC_2.4", weak=False) in abi.undefined


@needs_glibc_234
def test_glibc_2_34_symbols_are_read_with_their_version(so: dict[str, bytes]) -> None:
    abi = symbol_versions(so["thread"])
    assert {"GLIBC_2.2.5", "GLIBC_2.34"} <= abi.versions
    assert abi.glibc == SymbolVersion("GLIBC", (2, 34))
    assert str(abi.glibc) == "GLIBC_2.34"
    assert UndefinedSymbol("pthread_create", "GLIBC_2.34", weak=False) in abi.undefined
    assert UndefinedSymbol("__cxa_finalize", "GLIBC_2.2.5", weak=True) in abi.undefined


def test_cxx_module_needs_glibcxx_and_cxxabi(so: dict[str, bytes]) -> None:
    abi = symbol_versions(so["cxx"])
    assert {"libstdc++.so.6", "libc.so.6"} <= set(abi.needed)
    assert abi.glibcxx == SymbolVersion("GLIBCXX", (3, 4, 21))
    assert abi.cxxabi == SymbolVersion("CXXABI", (1, 3))
    assert UndefinedSymbol("__cxa_throw", "CXXABI_1.3", weak=False) in abi.undefined
    assert UndefinedSymbol("_ZNSt13runtime_errorD1Ev", "GLIBCXX_3.4", weak=False) in abi.undefined
    assert "wb_cxx" in abi.defined
    assert symbol_versions(so["tochars"]).glibcxx == SymbolVersion("GLIBCXX", (3, 4, 29))


def test_unversioned_undefined_functions_are_listed(so: dict[str, bytes]) -> None:
    assert (
        UndefinedSymbol("wb_missing_function", None, weak=False) in symbol_versions(so["missing"]).undefined
    )
    assert (
        UndefinedSymbol("_ZN2wb7missingEi", None, weak=False) in symbol_versions(so["missingcxx"]).undefined
    )


def test_path_and_bytes_read_the_same(so_paths: dict[str, Path]) -> None:
    for path in so_paths.values():
        assert symbol_versions(path) == symbol_versions(path.read_bytes())
        assert symbol_versions(str(path)) == symbol_versions(path)


def _objdump_undefined(path: Path) -> set[tuple[str, str | None]]:
    """(name, version) of every undefined dynamic symbol, as binutils' objdump -T prints them."""
    assert OBJDUMP is not None
    out = subprocess.run([OBJDUMP, "-T", str(path)], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in out.splitlines():
        if "*UND*" not in line:
            continue
        fields = line.split()
        name, before = fields[-1], fields[-2]
        version = re.fullmatch(r"\(?([A-Za-z_][\w.]*)\)?", before)
        found.add((name, version[1] if version and version[1] != "Base" else None))
    return found


def test_undefined_symbols_and_versions_agree_with_objdump(so_paths: dict[str, Path]) -> None:
    for stem, path in so_paths.items():
        abi = symbol_versions(path)
        assert {(s.name, s.version) for s in abi.undefined} == _objdump_undefined(path), stem
        versions = {v for _, v in _objdump_undefined(path) if v}
        assert versions == abi.versions, stem


def test_a_wheel_within_its_tag_fits(so: dict[str, bytes], tmp_path: Path) -> None:
    report = check_wheel_abi(_wheel(tmp_path, "manylinux_2_28_x86_64", _modules(so, "plain", "cxx")))
    assert report.wheel == "demo-0.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert report.fits and report.problems == () and report.errors() == []
    assert {m.member for m in report.modules} == {"demo/plain.so", "demo/cxx.so"}
    cxx = next(m for m in report.modules if m.member == "demo/cxx.so")
    assert (str(cxx.abi.glibcxx), str(cxx.abi.cxxabi)) == ("GLIBCXX_3.4.21", "CXXABI_1.3")


@needs_glibc_234
def test_newer_glibc_and_glibcxx_than_the_tag_are_problems(so: dict[str, bytes], tmp_path: Path) -> None:
    members = _modules(so, "plain", "thread", "tochars")
    report = check_wheel_abi(_wheel(tmp_path, "manylinux_2_28_x86_64", members))
    assert not report.fits
    assert report.problems == (
        "demo/thread.so needs GLIBC_2.34 but manylinux_2_28 allows up to GLIBC_2.28",
        "demo/tochars.so needs GLIBCXX_3.4.29 but manylinux_2_28 allows up to GLIBCXX_3.4.24",
    )
    errors = report.errors()
    assert [type(e) for e in errors] == [AbiMismatch, AbiMismatch] and errors[0].exit_code == 47
    assert errors[0].cause.startswith("demo-0.1-cp311-cp311-manylinux_2_28_x86_64.whl: demo/thread.so needs")
    # The same modules under the tag of the glibc/GCC they were built with fit.
    assert check_wheel_abi(_wheel(tmp_path / "2_34", "manylinux_2_34_x86_64", members)).fits
    # And linux_x86_64 promises nothing.
    assert check_wheel_abi(_wheel(tmp_path / "linux", "linux_x86_64", members)).fits


def test_legacy_tag_is_judged_by_its_policy(so: dict[str, bytes], tmp_path: Path) -> None:
    report = check_wheel_abi(_wheel(tmp_path, "manylinux2014_x86_64", _modules(so, "plain", "cxx")))
    assert report.problems == (
        "demo/cxx.so needs GLIBCXX_3.4.21 but manylinux2014 allows up to GLIBCXX_3.4.19",
    )


@needs_glibc_234
def test_a_wheel_with_several_platform_tags_is_judged_by_the_oldest(
    so: dict[str, bytes], tmp_path: Path
) -> None:
    path = _wheel(tmp_path, "manylinux_2_34_x86_64.manylinux_2_28_x86_64", _modules(so, "thread"))
    report = check_wheel_abi(path)
    assert report.limits.tag == "manylinux_2_28_x86_64"
    assert report.problems == ("demo/thread.so needs GLIBC_2.34 but manylinux_2_28 allows up to GLIBC_2.28",)


def test_unresolved_symbols_are_those_no_library_in_the_wheel_defines(
    so: dict[str, bytes], tmp_path: Path
) -> None:
    report = check_wheel_abi(
        _wheel(tmp_path, "manylinux_2_28_x86_64", _modules(so, "plain", "missing", "missingcxx"))
    )
    unresolved = {str(s) for s in report.unresolved}
    assert {"wb_missing_function", "_ZN2wb7missingEi", "strlen@GLIBC_2.2.5"} <= unresolved
    assert "__gmon_start__" not in unresolved  # weak: the loader leaves it null, import does not fail
    cxx = next(m for m in report.modules if m.member == "demo/missingcxx.so")
    assert [demangle(s.name) for s in cxx.unresolved] == ["wb::missing(int)"]
    # A library bundled in the wheel (auditwheel's demo.libs/, a versioned soname) that defines
    # the symbol resolves it.
    members = {**_modules(so, "missing"), "demo.libs/libprovider-1a2b3c4d.so.1": so["provider"]}
    bundled = check_wheel_abi(_wheel(tmp_path / "bundled", "manylinux_2_28_x86_64", members))
    assert len(bundled.modules) == 2
    assert "wb_missing_function" not in {s.name for s in bundled.unresolved}


@needs_glibc_234
def test_report_json(so: dict[str, bytes], tmp_path: Path) -> None:
    report = check_wheel_abi(_wheel(tmp_path, "manylinux_2_28_x86_64", _modules(so, "thread", "missing")))
    data = json.loads(json.dumps(report.to_json()))
    assert data["platform_tag"] == "manylinux_2_28_x86_64" and data["policy"] == "manylinux_2_28"
    assert data["limits"] == {"GLIBC": "GLIBC_2.28", "GLIBCXX": "GLIBCXX_3.4.24", "CXXABI": "CXXABI_1.3.11"}
    assert data["fits"] is False and data["problems"] == list(report.problems)
    thread = data["modules"]["demo/thread.so"]
    assert thread["highest"] == {"GLIBC": "GLIBC_2.34"} and thread["needed"] == ["libc.so.6"]
    assert thread["excess"] == [{"needed": "GLIBC_2.34", "allowed": "GLIBC_2.28"}]
    assert "pthread_create@GLIBC_2.34" in thread["unresolved"]
    assert data["modules"]["demo/missing.so"]["unresolved"] == ["wb_missing_function"]


def _declare_size(path: Path, member: str, size: int) -> None:
    """Rewrite the uncompressed size the zip's central directory declares for *member*."""
    data = bytearray(path.read_bytes())
    at = data.find(b"PK\x01\x02")
    while at != -1:
        name_length = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46 : at + 46 + name_length] == member.encode():
            struct.pack_into("<I", data, at + 24, size)
            path.write_bytes(bytes(data))
            return
        at = data.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"{member} not in {path}")


def test_a_member_declaring_a_huge_size_is_refused_unread(so: dict[str, bytes], tmp_path: Path) -> None:
    path = _wheel(tmp_path, "manylinux_2_28_x86_64", _modules(so, "plain"))
    _declare_size(path, "demo/plain.so", 3 * 1024**3)
    with pytest.raises(UnsafeMember, match=r"demo/plain.so: 3221225472 bytes uncompressed, over the cap"):
        check_wheel_abi(path)


def test_a_member_declaring_less_than_it_holds_fails_its_crc(so: dict[str, bytes], tmp_path: Path) -> None:
    path = _wheel(tmp_path, "manylinux_2_28_x86_64", _modules(so, "plain"))
    _declare_size(path, "demo/plain.so", 1000)
    with pytest.raises(ValueError, match="not a zip archive"):
        check_wheel_abi(path)


def test_a_member_that_compresses_too_well_is_refused(so: dict[str, bytes], tmp_path: Path) -> None:
    path = _wheel(tmp_path, "manylinux_2_28_x86_64", _modules(so, "plain"))
    with zipfile.ZipFile(path, "a") as wheel:  # 4 MiB of zeros deflate to about 4 KiB
        wheel.writestr("demo/zeros.so", bytes(4 * 1024**2), compress_type=zipfile.ZIP_DEFLATED)
    with pytest.raises(UnsafeMember, match="compression ratio over the cap of 100"):
        check_wheel_abi(path)


def test_the_size_cap_is_a_parameter(so: dict[str, bytes], tmp_path: Path) -> None:
    path = _wheel(tmp_path, "manylinux_2_28_x86_64", _modules(so, "plain"))
    assert check_wheel_abi(path).fits
    with pytest.raises(UnsafeMember, match="over the cap of 4096"):
        check_wheel_abi(path, max_member_size=4096)


SHT_DYNSYM, SHT_GNU_VERNEED = 11, 0x6FFFFFFE


def _patch_section(elf: bytes, sh_type: int, field_offset: int, fmt: str, value: int) -> bytes:
    """Overwrite one field of the first ELF64 section header of *sh_type* (little-endian)."""
    data = bytearray(elf)
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    for i in range(shnum):
        header = shoff + i * shentsize
        if struct.unpack_from("<I", data, header + 4)[0] == sh_type:
            struct.pack_into(fmt, data, header + field_offset, value)
            return bytes(data)
    raise AssertionError(f"no section of type {sh_type:#x}")


def test_a_version_table_claiming_billions_of_entries_is_read_by_its_size(so: dict[str, bytes]) -> None:
    # sh_info is .gnu.version_r's entry count; pyelftools alone would loop over it 4 billion times.
    patched = _patch_section(so["cxx"], SHT_GNU_VERNEED, 44, "<I", 0xFFFFFFFF)
    assert symbol_versions(patched) == symbol_versions(so["cxx"])


def test_sections_and_headers_past_the_end_of_the_file_are_refused(so: dict[str, bytes]) -> None:
    with pytest.raises(ValueError, match=r"section \.dynsym extends past the end of the file"):
        symbol_versions(_patch_section(so["plain"], SHT_DYNSYM, 32, "<Q", 24 << 36))
    with pytest.raises(ValueError, match="has entries of 1 bytes"):
        symbol_versions(_patch_section(so["plain"], SHT_DYNSYM, 56, "<Q", 1))
    # e_shnum 0 means "the count is in section 0's sh_size": claim 2**40 section headers.
    data = bytearray(so["plain"])
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    struct.pack_into("<H", data, 0x3C, 0)
    struct.pack_into("<Q", data, shoff + 32, 1 << 40)
    with pytest.raises(ValueError, match="section headers do not fit"):
        symbol_versions(bytes(data))


# Python C API calls declared by hand (no Python headers needed): a shared object may leave them
# undefined, as an extension module does until the interpreter loads it.
PYTHON_SOURCES = {
    # all in the stable ABI: PyArg_ParseTuple, PyModule_Create2 (3.2), _Py_NoneStruct (data, ABI
    # only, under Py_None), PyUnicode_AsUTF8AndSize (added in 3.10)
    "limited.c": (
        "extern int PyArg_ParseTuple(void *, const char *, ...);\n"
        "extern void *PyModule_Create2(void *, int);\n"
        "extern const char *PyUnicode_AsUTF8AndSize(void *, long *);\n"
        "extern char _Py_NoneStruct;\n"
        "void *wb_limited(void *args, void *def) {\n"
        '  long n; if (!PyArg_ParseTuple(args, "") || !PyUnicode_AsUTF8AndSize(args, &n)) return 0;\n'
        "  return n ? PyModule_Create2(def, 3) : (void *)&_Py_NoneStruct;\n}\n"
    ),
    # CPython's internals and a function the stable ABI gained in 3.11
    "unlimited.c": (
        "extern void **_PyObject_GetDictPtr(void *);\n"
        "extern void *PyType_GetName(void *);\n"
        "void *wb_unlimited(void *o) { return _PyObject_GetDictPtr(o) ? PyType_GetName(o) : 0; }\n"
    ),
}


@pytest.fixture(scope="module")
def python_so(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    assert GCC is not None
    d = tmp_path_factory.mktemp("pyso")
    built = {}
    for source, text in PYTHON_SOURCES.items():
        (d / source).write_text(text)
        out = d / f"{source.removesuffix('.c')}.so"
        subprocess.run([GCC, "-shared", "-fPIC", "-o", str(out), str(d / source)], check=True, timeout=120)
        built[out.stem] = out.read_bytes()
    return built


def _abi3_wheel(directory: Path, python: str, members: dict[str, bytes]) -> Path:
    return make_wheel(
        directory, "demo", "0.1", tag=f"{python}-abi3-manylinux_2_28_x86_64", extra_files=members
    )


def test_an_abi3_module_within_the_stable_abi_of_its_tag_fits(
    python_so: dict[str, bytes], tmp_path: Path
) -> None:
    report = check_wheel_abi(_abi3_wheel(tmp_path, "cp310", {"demo/_C.abi3.so": python_so["limited"]}))
    assert report.fits and report.errors() == [], report.problems
    # One Python older, PyUnicode_AsUTF8AndSize is not in its stable ABI yet.
    older = check_wheel_abi(_abi3_wheel(tmp_path / "39", "cp39", {"demo/_C.abi3.so": python_so["limited"]}))
    assert older.problems == (
        "demo/_C.abi3.so is in a cp39-abi3 wheel (one file for CPython 3.9 and later) but uses "
        "PyUnicode_AsUTF8AndSize (in the stable ABI since 3.10)",
    )


def test_an_abi3_module_outside_the_stable_abi_is_a_typed_problem(
    python_so: dict[str, bytes], tmp_path: Path
) -> None:
    members = {"demo/_C.abi3.so": python_so["unlimited"], "demo/ok.abi3.so": python_so["limited"]}
    report = check_wheel_abi(_abi3_wheel(tmp_path, "cp310", members))
    assert not report.fits
    errors = report.errors()
    assert [(type(e), e.exit_code) for e in errors] == [(StableAbiBroken, 61)]
    assert errors[0].cause == (
        "demo-0.1-cp310-abi3-manylinux_2_28_x86_64.whl: demo/_C.abi3.so is in a cp310-abi3 wheel (one "
        "file for CPython 3.10 and later) but uses PyType_GetName (in the stable ABI since 3.11), "
        "_PyObject_GetDictPtr (not in the stable ABI)"
    )
    assert "Py_LIMITED_API" in errors[0].remedy
    module = report.to_json()["modules"]["demo/_C.abi3.so"]  # type: ignore[index]
    assert module["outside_stable_abi"] == list(next(m for m in report.modules if not m.fits).unstable)
    # A wheel of one Python promises nothing of the kind: the same module fits it.
    assert check_wheel_abi(_wheel(tmp_path / "cp311", "manylinux_2_28_x86_64", members)).fits
