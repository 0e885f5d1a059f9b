"""A wheel's torch range without Docker: which releases are tried around the build's, the
contiguous range a set of trials proves and the pin it writes, the line a person reads, and the
static check on real shared objects: stand-in "torch" wheels whose libtorch_cpu.so and libc10.so
are compiled here with g++, one of them lacking a function the extension module calls (the way
torch 2.14 changed c10_cuda_check_implementation's arguments). The import gate under each torch
is tests/integration/test_torch_range.py's."""

from __future__ import annotations

import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from wheelbuild.pipeline.range_gate import other_requirements
from wheelbuild.records import read_record
from wheelbuild.report.build_report import BuildReport, report_from_json
from wheelbuild.wheel.abi import check_wheel_abi
from wheelbuild.wheel.torch_range import TorchRange, TorchTrial, neighbours, written_pin
from wheelbuild.wheel.torch_symbols import first_missing, needed_from_torch, torch_exports

from tests.indexkit import make_wheel
from tests.toolchain import require

# PyPI's releases on 2026-12-02 and the CUDA each is built with.
PYPI = {
    "2.15.0": "13.2",
    "2.14.1": "13.0",
    "2.14.0": "13.0",
    "2.13.0": "13.0",
    "2.12.1": "13.0",
    "2.12.0": "13.0",
    "2.11.0": "13.0",
    "2.10.0": "12.8",
    "2.9.1": "12.8",
}


def _asked(table: dict[str, str]) -> tuple[list[str], Callable[[str], str]]:
    asked: list[str] = []

    def cuda_of(version: str) -> str:
        asked.append(version)
        return table[version]

    return asked, cuda_of


def test_the_neighbours_are_each_minors_newest_patch_of_the_same_cuda_major() -> None:
    cuda_of = _asked(PYPI)[1]
    assert neighbours(list(PYPI), "2.14.1", cuda_of, 3) == ("2.11.0", "2.12.1", "2.13.0", "2.15.0")
    # 2.10 is CUDA 12.8: another major, skipped, and nothing older than three minors asked about.
    assert neighbours(list(PYPI), "2.14.1", _asked(PYPI)[1], 1) == ("2.13.0", "2.15.0")
    assert neighbours(list(PYPI), "2.11.0", cuda_of, 3) == ("2.12.1", "2.13.0", "2.14.1", "2.15.0")
    # The build's own minor's newer patch is tried too.
    assert neighbours(list(PYPI), "2.14.0", cuda_of, 0) == ("2.14.1", "2.15.0")
    assert neighbours(list(PYPI), "2.10.0", cuda_of, 3) == ("2.9.1",)


def test_older_releases_past_the_limit_are_not_even_read() -> None:
    asked, cuda_of = _asked(PYPI)
    neighbours(list(PYPI), "2.14.1", cuda_of, 1)
    assert "2.12.1" not in asked and "2.11.0" not in asked and "2.10.0" not in asked


def _range(*trials: TorchTrial, built: str = "2.13.0") -> TorchRange:
    return TorchRange("w.whl", "cp311", built, (TorchTrial(built, imported=True), *trials))


MISSING = "undefined symbol c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, unsigned int, bool)"


def test_the_proven_range_is_the_run_of_loads_around_the_build() -> None:
    found = _range(
        TorchTrial("2.11.0", imported=False, detail="import wbx._C fails with undefined symbol foo"),
        TorchTrial("2.12.1", imported=True),
        TorchTrial("2.14.1", static=MISSING, detail="not installed: a symbol it needs is missing"),
        TorchTrial("2.15.0", imported=True),  # loads, but not contiguous with the build's
    )
    assert found.proven == ("2.12.1", "2.13.0")
    assert found.pin == ">=2.12,<2.14"
    assert found.summary == (
        "imports with torch 2.12.1-2.13.0; fails on 2.11.0: import wbx._C fails with undefined symbol foo; "
        f"fails on 2.14.1: {MISSING}; also imports with 2.15.0, apart from that range"
    )
    alone = _range(TorchTrial("2.14.1", detail="its symbols could not be read: HTTP 503"))
    assert alone.proven == ("2.13.0",) and alone.pin == ">=2.13,<2.14"
    assert (
        alone.summary
        == "imports with torch 2.13.0; not tried on 2.14.1: its symbols could not be read: HTTP 503"
    )


def test_a_release_of_one_number_pins_as_minor_zero_of_its_major() -> None:
    """A report read back may hold "2" (a damaged or hand-written one): the pin still says something."""
    found = TorchRange(
        "w.whl", "cp311", "2", (TorchTrial("2", imported=True), TorchTrial("2.1.0", imported=True))
    )
    assert found.proven == ("2", "2.1.0") and found.pin == ">=2.0,<2.2"


def test_an_abi3_wheel_pins_what_every_python_proved() -> None:
    cp311 = _range(TorchTrial("2.12.1", imported=True), TorchTrial("2.14.1", imported=True))
    cp313 = TorchRange(
        "w.whl", "cp313", "2.13.0", (TorchTrial("2.13.0", imported=True), TorchTrial("2.14.1", imported=True))
    )
    assert written_pin([cp311]) == ">=2.12,<2.15"
    assert written_pin([cp311, cp313]) == ">=2.13,<2.15"


def test_a_range_goes_through_the_report_and_back() -> None:
    found = _range(TorchTrial("2.14.1", static=MISSING, detail="not installed"))
    report = report_from_json(
        {"torch": {"variant": "2.13.0+cu130", "pin": "proven"}, "torch_range": [found.to_json()]}
    )
    assert report.ranges_of("w.whl") == (found,)
    assert report.torch is not None and report.torch.pin == "proven"
    assert read_record(TorchRange, found.to_json(), "") == found
    assert BuildReport().torch_range is None  # an older report has none


def test_the_gate_under_another_torch_installs_what_the_wheel_needs_but_torch() -> None:
    assert other_requirements(
        ("torch==2.13.*", "einops", 'ninja; platform_system == "Linux"', 'pytest; extra == "test"', "((")
    ) == ("einops", 'ninja; platform_system == "Linux"')


# ---------------------------------------------------------------------------------------------
# The symbol check, on shared objects compiled here

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
