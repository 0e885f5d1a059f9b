"""The build contract, end to end with the real engine, nvcc 13.1 and the gate, on a fixture that
builds the way real packages on PyPI do (tests/fixtures/wbcontract: its own -gencode list and
--threads 4 as causal-conv1d's, a CachedWheelsCommand that downloads a prebuilt wheel unless its
FORCE_BUILD switch is set, and a mode that copies a prebuilt .so into place):

- what --archs says is what is compiled, whatever the package writes; --keep-package-archs keeps
  its own list, and the check then allows it;
- the package's FORCE_BUILD switch is found in its setup.py (read as text) and set;
- a wheel whose .so this build did not link, and a build that fetched a prebuilt wheel, are
  refused with their own exit code.

One Python each (cp311) keeps them to a minute or two: torch comes from the machine's wheel cache."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from wheelbuild.errors import NotBuiltHere
from wheelbuild.wheel.contents import archs_in_elf

from tests.integration.conftest import REPO, TORCH_INDEX, Completed, wheelbuild

FIXTURE = REPO / "tests" / "fixtures" / "wbcontract"
MODULE = "wbcontract/_k.cpython-311-x86_64-linux-gnu.so"


def _build(source: Path, out: Path, *extra: str, memory: str = "4g") -> Completed:
    return wheelbuild(
        "build", str(source),
        "--torch", "cu130", "--torch-index-url", TORCH_INDEX,
        "--archs", "120", "--python", "3.11", "--memory", memory,
        "--output-dir", str(out), "--rebuild", *extra,
    )  # fmt: skip


def _report(out: Path, done: Completed) -> dict[str, object]:
    report: dict[str, object] = json.loads((out / "runs" / done.run_id / "build-report.json").read_text())
    return report


def _needed(elf: bytes) -> list[str]:
    dynamic = ELFFile(io.BytesIO(elf)).get_section_by_name(".dynamic")
    assert isinstance(dynamic, DynamicSection)
    return [str(getattr(tag, "needed")) for tag in dynamic.iter_tags("DT_NEEDED")]  # noqa: B009


def _sass(out: Path, done: Completed) -> set[int]:
    (wheel,) = sorted((out / "runs" / done.run_id).glob("*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        return set(archs_in_elf(archive.read(MODULE)).sass)


@pytest.mark.usefixtures("cuda_image")
def test_a_package_with_its_own_arch_list_and_a_prebuilt_download_is_built_here_for_exactly_the_asked_arch(
    tmp_path: Path,
) -> None:
    done = _build(FIXTURE, tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    assert _sass(tmp_path, done) == {120}
    contract = _report(tmp_path, done)["contract"]
    assert isinstance(contract, dict)
    # Found in setup.py, as text: without it the build would have tried the download.
    assert any(s.startswith("WBCONTRACT_FORCE_BUILD=TRUE") for s in contract["switches"])
    assert contract["nvcc_rewrites"] == [
        "rewrote archs sm_80 sm_90 sm_100 sm_120 -> sm_120; --threads 4 -> 1"
    ]
    assert contract["link_checks"] == [
        "cp311-manylinux_x86_64: linked here: 1 of 1 shared objects (_k.cpython-311-x86_64-linux-gnu.so)"
    ]
    assert "WBCONTRACT_FORCE_BUILD=TRUE" in done.stdout  # said, with why, before the build


@pytest.mark.usefixtures("cuda_image")
def test_kept_package_archs_are_compiled_and_allowed(tmp_path: Path) -> None:
    done = _build(FIXTURE, tmp_path, "--keep-package-archs", "--env", "WBCONTRACT_FORCE_BUILD=TRUE")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    assert _sass(tmp_path, done) == {80, 90, 100, 120}
    contract = _report(tmp_path, done)["contract"]
    assert isinstance(contract, dict)
    assert contract["keep_package_archs"] is True
    assert contract["nvcc_rewrites"] == ["rewrote --threads 4 -> 1"]


@pytest.mark.usefixtures("cuda_image")
def test_a_shared_object_copied_into_place_is_refused(tmp_path: Path) -> None:
    """The package's build_ext copies a shared object from the project into place instead of
    linking one: the file is a real ELF .so (linked on this host, with a build id), under the
    extension module's name, which the build's link step never wrote."""
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project)
    prebuilt = project / "prebuilt" / "_k.so"
    prebuilt.parent.mkdir()
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(prebuilt), "-x", "c", "-", "-Wl,--build-id=sha1"],
        input="int wbcontract_prebuilt(void) { return 1; }\n", text=True, check=True,
    )  # fmt: skip
    switches = ("--env", "WBCONTRACT_FORCE_BUILD=TRUE", "--env", "WBCONTRACT_PREBUILT_SO=prebuilt/_k.so")
    done = _build(project, tmp_path / "out", *switches)
    assert done.returncode == NotBuiltHere.exit_code, done.stdout[-3000:] + done.stderr
    assert f"holds shared objects this build did not link: {MODULE} (build id " in done.stderr
    assert not list((tmp_path / "out").glob("runs/*/*.whl"))  # no wheel left as if it were good


@pytest.mark.usefixtures("cuda_image")
def test_a_build_that_fetches_a_prebuilt_wheel_is_refused_naming_the_url(tmp_path: Path) -> None:
    # --env wins over the switch wheelbuild would set: the package's download branch runs.
    done = _build(FIXTURE, tmp_path, "--env", "WBCONTRACT_FORCE_BUILD=FALSE")
    assert done.returncode == NotBuiltHere.exit_code, done.stdout[-3000:] + done.stderr
    assert (
        "tried to download a prebuilt binary instead of building it "
        "(https://wheelbuild-prebuilt.invalid/releases/v0.1.0/wbcontract-0.1.0-cp311-cp311-linux_x86_64.whl)"
    ) in done.stderr


CUBLAS_FIXTURE = REPO / "tests" / "fixtures" / "wbcublas"
CUBLAS_MODULE = "wbcublas/_C.cpython-311-x86_64-linux-gnu.so"


# torch 2.14 changed c10::cuda::c10_cuda_check_implementation (C10_CUDA_KERNEL_LAUNCH_CHECK's
# call) to take one more argument: wbcublas built with 2.13 cannot load with 2.14 or later.
CUBLAS_TORCH = "2.13.0"


@pytest.fixture(scope="module")
def cublas_build(cuda_image: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Completed]:
    """wbcublas built for torch 2.13.0, its range tried against every newer release (statically:
    none has the symbol, so none is installed), its pin the range it proved."""
    out = tmp_path_factory.mktemp("cublas")
    done = _build(
        CUBLAS_FIXTURE, out, "--torch", f"{CUBLAS_TORCH}+cu130", "--torch-range", "--torch-range-older", "0",
        "--pin", "proven", memory="6g",  # its one unit holds torch's headers
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    return out, done


def test_an_extension_that_includes_cuda_context_and_links_cublas_builds_and_loads(
    cublas_build: tuple[Path, Completed],
) -> None:
    """ATen/cuda/CUDAContext.h includes cuBLAS's, cuSPARSE's and cuSOLVER's headers, which the
    image's toolkit lacks: they come from torch's own CUDA library wheels, as -lcublas does. The
    module needs cuBLAS by its soname, which torch loads, and auditwheel does not graft a copy."""
    tmp_path, done = cublas_build
    report = _report(tmp_path, done)
    gates = report["gate"]
    assert isinstance(gates, list) and len(gates) == 1
    assert gates[0]["passed"] is True
    assert [i["module"] for i in gates[0]["imports"]] == ["wbcublas._C", "wbcublas"]
    (wheel,) = sorted((tmp_path / "runs" / done.run_id).glob("*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        module = archive.read(CUBLAS_MODULE)
    assert "libcublas.so.13" in _needed(module)
    assert not [name for name in names if "libcublas" in name]  # nothing grafted
    assert archs_in_elf(module).sass == {120}


def test_a_wheel_calling_what_a_later_torch_changed_fails_there_with_the_symbol_named(
    cublas_build: tuple[Path, Completed], tmp_path: Path
) -> None:
    """Its torch range: every newer release lacks the 2.13 signature of c10_cuda_check_implementation,
    found in that torch's own exported symbols before any install; --pin proven then pins 2.13."""
    out, done = cublas_build
    ranges = _report(out, done)["torch_range"]
    assert isinstance(ranges, list)
    (found,) = ranges
    newer = [t for t in found["trials"] if t["torch"] != CUBLAS_TORCH]
    assert newer, found
    missing = (
        "undefined symbol c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, "
        "unsigned int, bool) (_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb)"
    )
    for trial in newer:  # 2.14.1, 2.15.0, ...: checked, never installed
        assert trial["static"] == missing and trial["imported"] is None, trial
    assert (
        f"torch range: imports with torch {CUBLAS_TORCH}; fails on {newer[0]['torch']}: {missing}"
        in done.stdout
    )
    (wheel,) = sorted((out / "runs" / done.run_id).glob("*.whl"))
    shown = wheelbuild("inspect", "--json", str(wheel))
    assert shown.returncode == 0, shown.stderr
    (info,) = json.loads(shown.stdout)
    assert info["torch_requirement"] == ["torch>=2.13,<2.14"]  # --pin proven: the range it loaded with
    assert info["torch_range"][0]["proven"] == [CUBLAS_TORCH]
    # publish reads the pin from the report beside it, and takes the wheel.
    published = wheelbuild("publish", str(wheel), "--to", str(tmp_path / "tree"))
    assert published.returncode == 0, published.stdout + published.stderr


STD_FIXTURE = REPO / "tests" / "fixtures" / "wbstd"


def test_a_package_passing_cxx17_builds_for_torch_2_14_with_the_standard_raised_and_loads(
    tmp_path: Path,
) -> None:
    """wbstd's setup.py passes -std=c++17 to g++ and nvcc, and torch 2.14.1's ATen.h wants C++20:
    the build reads that from the installed torch, raises both, says so once each in the report,
    and the wheel passes the gate. (Kept as written, both compiles stop at ATen.h's #error:
    tests/local/test_cxx_standard.py, on this machine's g++ and nvcc.)"""
    done = _build(STD_FIXTURE, tmp_path, "--torch", "2.14.1+cu130", "--no-torch-range", memory="6g")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    report = _report(tmp_path, done)
    assert isinstance(report["torch"], dict) and report["torch"]["variant"] == "2.14.1+cu130"
    contract = report["contract"]
    assert isinstance(contract, dict)
    # Said once for the package, whichever compiler met it first (g++ through the build's CXX,
    # or nvcc: torch's ninja file hands both the package's -std=c++17).
    assert contract["std_raised"] == ["raised -std=c++17 to -std=c++20 (torch's headers require C++20)"]
    gates = report["gate"]
    assert isinstance(gates, list) and [g["passed"] for g in gates] == [True]
    assert "the package's build files give -std=c++17: raised where torch 2.14.1's headers" in done.stdout


CMAKE_FIXTURE = REPO / "tests" / "fixtures" / "wbcmake"


@pytest.mark.usefixtures("cuda_image")
def test_a_cmake_package_gets_its_build_requirements_and_compiles_exactly_the_asked_arch(
    tmp_path: Path,
) -> None:
    """scikit-build-core and CMake come from its [build-system] requires (the build runs without
    isolation); CMake's CUDA language runs nvcc from CUDACXX, so its CUDA_ARCHITECTURES are
    rewritten too; the module it installs is stripped, and its build id still names the link."""
    done = _build(CMAKE_FIXTURE, tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    contract = _report(tmp_path, done)["contract"]
    assert isinstance(contract, dict)
    assert contract["link_checks"] == [
        "cp311-manylinux_x86_64: linked here: 1 of 1 shared objects (_add.cpython-311-x86_64-linux-gnu.so)"
    ]
    # CMake's "80" is SASS and PTX of 80; the CUDA language's own compiler checks pass here too.
    assert (
        "rewrote archs sm_80 compute_80 sm_90 compute_90 sm_100 compute_100 sm_120 compute_120 -> sm_120"
        in (contract["nvcc_rewrites"])
    )
    (wheel,) = sorted((tmp_path / "runs" / done.run_id).glob("*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        module = archive.read("wbcmake/_add.cpython-311-x86_64-linux-gnu.so")
    assert archs_in_elf(module).sass == {120}
    assert ELFFile(io.BytesIO(module)).get_section_by_name(".symtab") is None  # stripped


@pytest.mark.usefixtures("cuda_image")
@pytest.mark.parametrize(("flag", "reachable"), [((), "no (URLError)"), (("--build-network",), "yes")])
def test_the_package_builds_without_the_network_unless_asked(
    tmp_path: Path, flag: tuple[str, ...], reachable: str
) -> None:
    """setup.py tries PyPI while it builds: off the network by default, on it with --build-network;
    torch and the build requirements were installed before, on it, either way."""
    # -v: what setup.py prints is cibuildwheel's log, on the terminal only when asked for
    done = _build(FIXTURE, tmp_path, "--env", "WBCONTRACT_PROBE_NETWORK=1", "-v", *flag)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    assert f"wbcontract: network reachable while building: {reachable}" in done.stdout
    contract = _report(tmp_path, done)["contract"]
    assert isinstance(contract, dict)
    assert contract["network"] == ("on: --build-network" if flag else "off")
