"""What a failed attempt's log says went wrong besides memory: the contract broken (a shared
object this build did not link, a prebuilt binary fetched instead of built), and a compile that
failed for a reason that is not the source's: a CUDA library header the toolkit lacks, sources
missing from the sdist, an arch or a host compiler nvcc does not support. Pure: what the engine
saw of an attempt in, the typed error that explains it out (None: nothing recognised)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

from ..errors import CompileFailed, CompilerUnavailable, NotBuiltHere, SourceUnavailable, WheelbuildError
from .buildlog import COMPILER_ERROR, NOT_LINKED_MARK


class AttemptLog(Protocol):
    """What this module reads of an attempt (attempt/outcome.py's AttemptResult, whose classify calls it)."""

    @property
    def log_path(self) -> Path: ...
    @property
    def log_tail(self) -> tuple[str, ...]: ...
    @property
    def link_checks(self) -> tuple[str, ...]: ...
    @property
    def prebuilt_urls(self) -> tuple[str, ...]: ...
    @property
    def error_lines(self) -> tuple[str, ...]: ...


# What urllib, requests and pip print when a download finds no network.
_NETWORK_ERROR = re.compile(
    r"URLError|HTTPError|urlopen error|Name or service not known|Temporary failure in name resolution"
    r"|Network is unreachable|Connection refused|No route to host|ConnectionError|getaddrinfo failed"
)


def contract_failure(result: AttemptLog) -> WheelbuildError | None:
    """A shared object the link ledger does not know, or a failed fetch of a prebuilt binary."""
    tail = "\n".join(result.log_tail[-25:])
    fetched = f"; the package's build fetched {result.prebuilt_urls[0]}" if result.prebuilt_urls else ""
    not_linked = NOT_LINKED_MARK.removeprefix("wheelbuild: ")
    refused = next((check for check in result.link_checks if not_linked in check), None)
    if refused is not None:
        python, _, what = refused.partition(": not linked here: ")
        return NotBuiltHere(
            f"the wheel built for {python} holds shared objects this build did not link: {what}{fetched}",
            "build it from source: set the package's switch for that (e.g. --env <NAME>_FORCE_BUILD=TRUE; "
            "wheelbuild sets the ones it finds in setup.py), and remove any prebuilt .so or build/ folder "
            f"from the source; full log: {result.log_path}",
            details=tail,
        )
    if result.prebuilt_urls and _NETWORK_ERROR.search("\n".join(result.log_tail)):
        return NotBuiltHere(
            f"the package's build tried to download a prebuilt binary instead of building it "
            f"({result.prebuilt_urls[0]}), and the download failed",
            "make it build from source: set its switch (e.g. --env <NAME>_FORCE_BUILD=TRUE, read its "
            f"setup.py for the name); wheelbuild sets the ones it recognises; full log: {result.log_path}",
            details=tail,
        )
    return None


# gcc's and nvcc's "fatal error: cusparse.h: No such file or directory" for a header.
_MISSING_HEADER = re.compile(r"fatal error: ([\w./+-]+\.(?:h|hpp|cuh)): No such file or directory")
# Headers of NVIDIA's CUDA libraries (not the toolkit's compiler and runtime).
_CUDA_LIBRARY_HEADER = re.compile(
    r"^(?:cublas\w*|cusparse\w*|cusolver\w*|curand\w*|cufft\w*|cudnn\w*|nccl\w*|nvrtc\w*|nvJitLink\w*"
    r"|cupti\w*|cutensor\w*|nvshmem\w*|cufile\w*|npp\w*|nvjpeg\w*|nvToolsExt\w*|nvtx3/.*)\.h$"
)
# A source the build names that is not there: gcc's "cc1plus: fatal error: csrc/x.cpp: No such
# file or directory", nvcc's "Could not open input file csrc/x.cu", ninja's "'csrc/x.cu', needed
# by '...', missing and no known rule to make it".
_MISSING_SOURCE = re.compile(
    r"(?:fatal error: |Could not open input file |error: ')"
    r"(\S+?\.(?:cu|cpp|cc|cxx|c))(?:: No such file or directory|'?, needed by .* missing and no known rule|\s*$)",
    re.MULTILINE,
)
# torch's own headers failing on a C++20 feature (torch 2.14's c10 uses operator<=>), or saying so
# (ATen.h: "#error C++20 or later compatible compiler is required to use ATen."): the package
# passes an older -std, which wins over the -std=c++20 cpp_extension adds only when none is given.
_TORCH_NEEDS_CXX20 = re.compile(
    r"^\s*\S*torch/include/\S+?(?::\d+(?::\d+)?:|\(\d+\):)\s*error\b[^\n]*(?:strong_ordering|<=>|C\+\+20)[^\n]*$",
    re.MULTILINE,
)
_UNSUPPORTED_ARCH = re.compile(r"Unsupported gpu architecture '(compute_\w+|sm_\w+)'")
_UNSUPPORTED_HOST = re.compile(
    r"unsupported GNU version|unsupported (?:clang|Microsoft Visual Studio) version"
)
# What nvcc refuses to do, what that is and what to do about it ({} is what the log names).
_COMPILER_REFUSALS = (
    (
        _UNSUPPORTED_ARCH,
        "nvcc cannot compile {}, which the package's own arch list names",
        "drop --keep-package-archs (wheelbuild then compiles exactly --archs)",
    ),
    (
        _UNSUPPORTED_HOST,
        "nvcc refuses the image's host compiler ({})",
        "build with an image whose gcc this CUDA release supports",
    ),
)


def compile_failure(result: AttemptLog) -> WheelbuildError | None:
    """The first compiler error, and what it means when the fault is not the source's: read from
    the log's first error lines, then its tail."""
    text = "\n".join((*result.error_lines, *result.log_tail))
    tail = "\n".join(result.log_tail[-25:])
    where = f"full log: {result.log_path}"
    if (header := _MISSING_HEADER.search(text)) and _CUDA_LIBRARY_HEADER.match(header[1]):
        return CompileFailed(
            f"compile failed: {header[1]} is not in the build's CUDA toolkit, nor among the CUDA libraries "
            "torch brings (their headers are on the compile's include path)",
            "this is the toolkit's gap, not the source's: the library is not one torch ships; report it to "
            f"wheelbuild, or point --env CPATH at a folder holding that library's headers; {where}",
            details=tail,
        )
    # cibuildwheel builds the project copied to /project: the paths as the source names them.
    if missing := sorted({path.removeprefix("/project/") for path in _MISSING_SOURCE.findall(text)}):
        return SourceUnavailable(
            f"the source lacks {', '.join(missing)}, which its build compiles",
            "its sdist was published without those sources: build from the project's repository (a git "
            f"checkout or the release's source archive) instead; {where}",
            details=tail,
        )
    if in_torch := _TORCH_NEEDS_CXX20.search(text):
        return CompileFailed(
            f"compile failed in torch's own headers, which need C++20: {in_torch.group(0).strip()}",
            "the package compiles with an older -std (e.g. -std=c++17 in its setup.py) that reached the "
            "compiler unraised: drop --keep-package-std, or build for a torch before 2.14 (e.g. --torch "
            f"2.13.0+cu130); this is not an out-of-memory kill, so it is not retried; {where}",
            details=tail,
        )
    for pattern, cause, remedy in _COMPILER_REFUSALS:
        if found := pattern.search(text):
            named = found[found.lastindex or 0]
            return CompilerUnavailable(cause.format(named), f"{remedy}; {where}", details=tail)
    if first_error := COMPILER_ERROR.search(text):
        return CompileFailed(
            f"compile failed: {first_error.group(0).strip()}",
            f"fix the source (this is not an out-of-memory kill, so it is not retried); {where}",
            details=tail,
        )
    return None
