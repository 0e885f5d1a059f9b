"""What a failed attempt's log means when the fault is not the source's (attempt/diagnosis.py, through
outcome.classify as the build calls it). The log lines are what the real tools print: gcc's and
nvcc 13.1's messages taken from runs on this machine, ninja's, causal-conv1d's download attempt
(its setup.py's print, urllib's error), and wheelbuild-check-linked's mark."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from wheelbuild.attempt.buildlog import MAX_ERROR_LINES, BuildLog
from wheelbuild.attempt.outcome import AttemptResult, Failed, classify
from wheelbuild.errors import BuildFailed, CompileFailed, CompilerUnavailable, NotBuiltHere, SourceUnavailable

MakeResult = Callable[..., AttemptResult]


def _error(result: AttemptResult) -> Exception:
    outcome = classify(result)
    assert isinstance(outcome, Failed)
    return outcome.error


def test_a_missing_cuda_library_header_is_the_toolkits_gap_not_the_sources(make_result: MakeResult) -> None:
    error = _error(
        make_result("csrc/grouped_gemm.cu:4:10: fatal error: cusparse.h: No such file or directory\n")
    )
    assert isinstance(error, CompileFailed)
    assert error.cause.startswith("compile failed: cusparse.h is not in the build's CUDA toolkit")
    assert error.remedy.startswith("this is the toolkit's gap, not the source's")
    assert "fix the source" not in error.remedy


def test_a_missing_header_of_the_package_is_the_sources(make_result: MakeResult) -> None:
    error = _error(
        make_result("csrc/ops.cu:2:10: fatal error: fill_arguments.cuh: No such file or directory\n")
    )
    assert isinstance(error, CompileFailed)
    assert error.remedy.startswith("fix the source")


def test_torch_headers_that_need_cxx20_under_an_older_std_are_named_not_the_source(
    make_result: MakeResult,
) -> None:
    # nvcc 13.1 on flash-attn 2.8.3's kernel (its setup.py passes -std=c++17) with torch 2.14.1's
    # headers; the errors that follow in the torch headers are what the tail holds.
    error = _error(
        make_result(
            '/opt/wheelbuild-torch/torch/include/c10/util/intrusive_ptr.h(775): error: namespace "std" has '
            'no member "strong_ordering"\n'
            "  [[nodiscard]] inline std::strong_ordering operator<=>(\n"
            "/opt/wheelbuild-torch/torch/include/torch/headeronly/core/DeviceType.h(80): error: name "
            'followed by "::" must be a class or namespace name\n'
        )
    )
    assert isinstance(error, CompileFailed)
    assert error.cause.startswith("compile failed in torch's own headers, which need C++20")
    assert "intrusive_ptr.h(775)" in error.cause
    assert "fix the source" not in error.remedy and "--keep-package-std" in error.remedy


# mamba-ssm 2.3.2.post1's build with torch 2.14.1 (its setup.py passes -std=c++17), as this
# machine's log has it: the host unit fails at once on ATen.h's #error, while nvcc's units go on
# and print ptxas -v for every kernel (the package asks for it), 640 lines, before ninja stops.
_GCC_ATEN = (
    "/root/.cache/wheelbuild-wheels/trees/cp311/428e222f699d097c/torch/include/ATen/ATen.h:5:2: "
    "error: #error C++20 or later compatible compiler is required to use ATen."
)
_PTXAS = (
    "ptxas info    : Compiling entry function '_Z25selective_scan_bwd_kernelI32Selective_Scan_bwd_kernel'\n"
    "ptxas info    : Used 240 registers, used 1 barriers\n"
)
_MAMBA_LOG = (
    "[1/10] /usr/local/bin/sccache-c++ -c /project/csrc/selective_scan/selective_scan.cpp -O3 -std=c++17\n"
    "In file included from /project/csrc/selective_scan/selective_scan.cpp:6:\n"
    f"{_GCC_ATEN}\n"
    "    5 | #error C++20 or later compatible compiler is required to use ATen.\n"
    + _PTXAS
    * 320
    + "subprocess.CalledProcessError: Command '['ninja', '-v', '-j', '2']' returned non-zero exit status 1.\n"
    "RuntimeError: Error compiling objects for extension\n"
    "cibuildwheel: error: Command ['python', '-m', 'build', PurePosixPath('/project'), '--wheel'] failed with code 1.\n"
)


def test_torch_saying_it_needs_cxx20_is_named_even_when_the_tail_lost_it(make_result: MakeResult) -> None:
    """The log's first compiler errors are kept apart from its 400-line tail (BuildLog, as the
    attempt feeds it), so the diagnosis reads the error that started the failure."""
    progress = BuildLog()
    for line in _MAMBA_LOG.splitlines():
        progress.feed(line)
    assert progress.error_lines == [_GCC_ATEN]
    tail_only = make_result("\n".join(_MAMBA_LOG.splitlines()[-400:]))
    assert _GCC_ATEN not in tail_only.log_tail
    generic = _error(tail_only)
    assert isinstance(generic, BuildFailed) and "without a wheel" in generic.cause  # the tail cannot say
    error = _error(replace(tail_only, error_lines=tuple(progress.error_lines)))
    assert isinstance(error, CompileFailed)
    assert error.cause.startswith("compile failed in torch's own headers, which need C++20")
    assert "ATen.h:5:2" in error.cause and "--keep-package-std" in error.remedy


def test_only_the_first_compiler_errors_are_kept_apart() -> None:
    progress = BuildLog()
    for i in range(MAX_ERROR_LINES + 10):
        progress.feed(f'csrc/k{i}.cu(12): error: identifier "x" is undefined')
        progress.feed("ptxas info    : Used 240 registers, used 1 barriers")
    assert len(progress.error_lines) == MAX_ERROR_LINES
    assert progress.error_lines[0].startswith("csrc/k0.cu(12): error")


def test_an_error_in_torch_headers_for_another_reason_is_a_plain_compile_failure(
    make_result: MakeResult,
) -> None:
    error = _error(
        make_result(
            '/usr/include/torch/include/c10/core/Device.h(51): error: identifier "Device" is undefined\n'
        )
    )
    assert isinstance(error, CompileFailed)
    assert error.remedy.startswith("fix the source")


@pytest.mark.parametrize(
    "line",
    [
        "cc1plus: fatal error: csrc/fast_hadamard_transform.cpp: No such file or directory",
        "ninja: error: '/project/csrc/fast_hadamard_transform.cpp', needed by '/project/build/x.o', missing and no known rule to make it",
    ],
)
def test_sources_missing_from_the_sdist_are_named_with_where_to_build_from(
    make_result: MakeResult, line: str
) -> None:
    error = _error(make_result(f"{line}\ncompilation terminated.\n"))
    assert isinstance(error, SourceUnavailable)
    assert error.cause == "the source lacks csrc/fast_hadamard_transform.cpp, which its build compiles"
    assert "build from the project's repository" in error.remedy


def test_an_arch_nvcc_does_not_support_is_the_compilers(make_result: MakeResult) -> None:
    error = _error(make_result("nvcc fatal   : Unsupported gpu architecture 'compute_70'\n"))
    assert isinstance(error, CompilerUnavailable)
    assert error.cause == "nvcc cannot compile compute_70, which the package's own arch list names"


def test_a_failed_prebuilt_download_is_not_built_here_naming_the_url(make_result: MakeResult) -> None:
    url = "https://github.com/Dao-AILab/causal-conv1d/releases/download/v1.7.0/causal_conv1d-1.7.0+cu13torch2.11cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"
    result = replace(
        make_result(
            f"Guessing wheel URL:  {url}\nurllib.error.URLError: <urlopen error [Errno -2] Name or service not known>\n"
        ),
        prebuilt_urls=(url,),
    )
    error = _error(result)
    assert isinstance(error, NotBuiltHere)
    assert error.cause == (
        f"the package's build tried to download a prebuilt binary instead of building it ({url}), and the download failed"
    )


def test_a_shared_object_the_ledger_does_not_know_is_not_built_here(make_result: MakeResult) -> None:
    check = (
        "cp311-manylinux_x86_64: not linked here: pkg/_k.so (build id 0123456789ab is no link of this build)"
    )
    result = replace(make_result("repair failed\n"), link_checks=(check,))
    error = _error(result)
    assert isinstance(error, NotBuiltHere)
    assert error.cause == (
        "the wheel built for cp311-manylinux_x86_64 holds shared objects this build did not link: "
        "pkg/_k.so (build id 0123456789ab is no link of this build)"
    )


def test_a_url_printed_by_a_build_that_failed_otherwise_is_no_download_failure(
    make_result: MakeResult,
) -> None:
    result = replace(
        make_result("csrc/a.cu(3): error: identifier x is undefined\n"), prebuilt_urls=("https://x/y.whl",)
    )
    assert isinstance(_error(result), CompileFailed)
