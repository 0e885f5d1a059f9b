"""Which variables a package's build reads its CUDA arch list and its parallelism from, and in
which form it reads the arch list, told from its setup.py and CMakeLists.txt as text (never
run): a literal default gives the form ("9.0;10.0" is dotted); else what the file does with the
value (`float(arch) * 10` or `.replace(".", "")` reads dotted archs; a `"sm_"` prefix taken off,
sm; `.split(";")` the separator; `int()` on split words, plain). A form the files do not tell
stays unknown: the plan says so and names `--arch-env NAME:FORM`, rather than guess. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .build_vars import ArchForm, arch_form_of_list, is_arch_name, is_jobs_name
from .survey_setup import SetupFindings

__all__ = ["FoundArchVar", "FoundJobsVar", "build_vars"]


@dataclass(frozen=True)
class FoundArchVar:
    name: str  # NATTEN_CUDA_ARCH
    form: ArchForm | None  # None: the files do not tell it
    why: str  # how the form was told, for the plan ("its default is 8.0;9.0")


@dataclass(frozen=True)
class FoundJobsVar:
    name: str  # NATTEN_N_WORKERS
    why: str


_FLOAT = re.compile(r"\bfloat\(")
_TIMES_TEN = re.compile(r"\*\s*10\b")
_DOTTED_USE = (
    (re.compile(r"""\.replace\(\s*(['"])\.\1\s*,\s*(['"])\2\s*\)"""), '.replace(".", "")'),
    (re.compile(r"""\+PTX"""), "+PTX"),
)
_SM_USE = re.compile(r"""(?:removeprefix|replace|startswith|lstrip)\(\s*(['"])sm_\1""")
_SPLIT = re.compile(r"""\.split\(\s*(?:(['"])([;, ])\1)?\s*\)""")
_INT_USE = re.compile(r"\bint\(")
_CMAKE_ENV = re.compile(r"\$ENV\{([A-Za-z_]\w*)\}")
_CMAKE_DOTTED = re.compile(r"""string\s*\(\s*REPLACE\s+"\\?\."\s+""\s""", re.IGNORECASE)


def _code(text: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def _told_form(code: str) -> tuple[ArchForm | None, str]:
    """The form the code's handling of an arch list tells, and how; (None, "") where it tells none."""
    splits = [m[2] or " " for m in _SPLIT.finditer(code) if m[2] or m.group(0).endswith("()")]
    separator = splits[0] if splits else ";"
    said = f", split on {separator!r}" if splits else ""
    if _FLOAT.search(code) and _TIMES_TEN.search(code):
        return ArchForm("dotted", separator), f"it reads each arch with float() and * 10{said}"
    for pattern, how in _DOTTED_USE:
        if pattern.search(code):
            return ArchForm("dotted", separator), f"it reads each arch with {how}{said}"
    if _SM_USE.search(code):
        return ArchForm("sm", separator), f'it takes "sm_" off each arch{said}'
    if splits and _INT_USE.search(code):
        return ArchForm("plain", separator), f"it reads each arch with int(){said}"
    return None, ""


def _setup_arch_var(name: str, default: str | None, code: str) -> FoundArchVar:
    if default and (form := arch_form_of_list(default)) is not None:
        return FoundArchVar(name, form, f"its default is {default!r}")
    form, how = _told_form(code)
    return FoundArchVar(name, form, how or "the file does not tell its form")


def build_vars(
    setup_text: str | None, setup: SetupFindings | None, cmake_text: str | None, uses_cmake: bool
) -> tuple[tuple[FoundArchVar, ...], tuple[FoundJobsVar, ...]]:
    """The arch and parallelism variables the build files read, each once, setup.py's first."""
    archs: dict[str, FoundArchVar] = {}
    jobs: dict[str, FoundJobsVar] = {}
    if setup is not None and setup_text is not None:
        code = _code(setup_text)
        defaults = dict(setup.env_defaults)
        for read in setup.env_reads:
            if is_arch_name(read.name):
                archs[read.name] = _setup_arch_var(read.name, defaults.get(read.name), code)
            elif is_jobs_name(read.name):
                jobs[read.name] = FoundJobsVar(read.name, "setup.py runs that many compiles at once")
    if cmake_text is not None and uses_cmake:
        code = _code(cmake_text)
        dotted = _CMAKE_DOTTED.search(code) is not None
        for name in dict.fromkeys(_CMAKE_ENV.findall(code)):
            if is_arch_name(name) and name not in archs:
                form = ArchForm("dotted") if dotted else ArchForm() if "CUDA_ARCHITECTURES" in code else None
                how = (
                    'CMakeLists.txt takes the "." out of each arch'
                    if dotted
                    else "CMakeLists.txt gives it to CUDA_ARCHITECTURES"
                    if form
                    else "CMakeLists.txt does not tell its form"
                )
                archs[name] = FoundArchVar(name, form, how)
            elif is_jobs_name(name) and name not in jobs:
                jobs[name] = FoundJobsVar(name, "CMakeLists.txt runs that many compiles at once")
    if uses_cmake and "CMAKE_BUILD_PARALLEL_LEVEL" not in jobs:
        jobs["CMAKE_BUILD_PARALLEL_LEVEL"] = FoundJobsVar(
            "CMAKE_BUILD_PARALLEL_LEVEL", "the package builds with CMake, whose `cmake --build` reads it"
        )
    return tuple(archs.values()), tuple(jobs.values())
