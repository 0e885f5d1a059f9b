"""A wheel's torch range without Docker: which releases are tried around the build's, the
contiguous range a set of trials proves and the pin it writes, the line a person reads, and the
static check on real shared objects: stand-in "torch" wheels whose libtorch_cpu.so and libc10.so
are compiled here with g++, one of them lacking a function the extension module calls (the way
torch 2.14 changed c10_cuda_check_implementation's arguments). The import gate under each torch
is tests/integration/test_torch_range.py's."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest
from wheelbuild.wheel.abi import check_wheel_abi
from wheelbuild.wheel.torch_symbols import first_missing, needed_from_torch, torch_exports

from tests.indexkit import make_wheel
from tests.toolchain import require

TORCH_CPU = """
namespace c10 { namespace cuda {
void c10_cuda_check_implementation(int, const char*, const char*, unsigned, bool) {}
} }
namespace at { int add_one(int x) { return x + 1; } }
"""


TORCH_CPU_LATER = """
namespace c10 { namespace cuda { struct CUDAErrorLogCapture;
void c10_cuda_check_implementation(int, const char*, const char*, unsigned, bool, CUDAErrorLogCapture*) {}
} }
namespace at { int add_one(int x) { return x + 1; } }
"""


EXTENSION = """
namespace c10 { namespace cuda {
void c10_cuda_check_implementation(int, const char*, const char*, unsigned, bool);
} }
namespace at { int add_one(int); }
extern "C" int PyInit__C() { c10::cuda::c10_cuda_check_implementation(0, "f", "g", 1, true); return at::add_one(1); }
extern "C" void *malloc(unsigned long);
extern "C" void *uses_libc(void) { return malloc(1); }
"""


def _compile(tmp_path: Path, name: str, source: str, *links: Path) -> Path:
    src = tmp_path / f"{name}.cpp"
    src.write_text(source)
    out = tmp_path / name
    libs = [arg for lib in links for arg in (f"-L{lib.parent}", f"-l:{lib.name}")]
    subprocess.run([require("g++"), "-shared", "-fPIC", "-o", str(out), str(src), *libs], check=True)
    return out


def _torch_wheel(tmp_path: Path, version: str, source: str) -> Path:
    libs = tmp_path / f"libs-{version}"
    libs.mkdir()
    cpu = _compile(libs, "libtorch_cpu.so", source)
    c10 = _compile(libs, "libc10.so", "namespace c10 { int version() { return 1; } }")
    return make_wheel(
        tmp_path / f"torch-{version}",
        "torch",
        version,
        tag="cp311-cp311-manylinux_2_28_x86_64",
        extra_files={"torch/lib/libtorch_cpu.so": cpu.read_bytes(), "torch/lib/libc10.so": c10.read_bytes()},
    )


def test_a_torch_lacking_a_symbol_the_extension_calls_is_named_demangled(tmp_path: Path) -> None:
    built = _torch_wheel(tmp_path, "2.13.0", TORCH_CPU)
    later = _torch_wheel(tmp_path, "2.14.1", TORCH_CPU_LATER)
    (tmp_path / "link").mkdir()
    libtorch = _compile(tmp_path / "link", "libtorch_cpu.so", TORCH_CPU)
    module = _compile(tmp_path, "_C.cpython-311-x86_64-linux-gnu.so", EXTENSION, libtorch)
    wheel = make_wheel(
        tmp_path / "ext",
        "wbx",
        "0.1.0",
        tag="cp311-cp311-manylinux_2_28_x86_64",
        extra_files={"wbx/_C.cpython-311-x86_64-linux-gnu.so": module.read_bytes()},
    )
    exports = torch_exports(built)
    assert "_ZN2at7add_oneEi" in exports and "_ZN3c107versionEv" in exports
    needed = needed_from_torch(check_wheel_abi(wheel), exports)
    # Only what the build's torch exports counts: malloc is libc's.
    assert needed == {
        "wbx/_C.cpython-311-x86_64-linux-gnu.so": (
            "_ZN2at7add_oneEi",
            "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb",
        )
    }
    assert first_missing(needed, exports) is None
    missing = first_missing(needed, torch_exports(later))
    assert missing is not None
    assert str(missing) == (
        "undefined symbol c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, "
        "unsigned int, bool) (_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb)"
    )


def test_a_torch_wheel_whose_library_inflates_past_its_size_is_refused(tmp_path: Path) -> None:
    wheel = _torch_wheel(tmp_path, "2.13.0", TORCH_CPU)
    lying = tmp_path / "lying.whl"
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(lying, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info, source.read(info))
    # Rewrite the central directory's uncompressed size of libtorch_cpu.so down to 64 bytes.
    data = bytearray(lying.read_bytes())
    name = b"torch/lib/libtorch_cpu.so"
    at = data.rindex(b"PK\x01\x02", 0, data.rindex(name))
    data[at + 24 : at + 28] = (64).to_bytes(4, "little")
    lying.write_bytes(bytes(data))
    with pytest.raises(ValueError):
        torch_exports(lying)
