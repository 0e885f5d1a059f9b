"""The variables a package's build reads for its CUDA archs and its parallelism, and the forms
an arch list takes in them: `90;100` (plain), `9.0;10.0` (dotted, as TORCH_CUDA_ARCH_LIST and
natten's NATTEN_CUDA_ARCH take it), `sm_90;sm_100` (sm), `90-real;100-real` (cmake, as
CMAKE_CUDA_ARCHITECTURES takes it), each with `;`, `,` or a space between the archs. An arch
asked with PTX is `9.0+PTX` dotted, `sm_90;compute_90` sm, `90-real;90-virtual` cmake (plain
has no way to say it: the number alone). Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import BadArgument

__all__ = [
    "FORMS",
    "TORCH_ARCH_FORM",
    "ArchForm",
    "ArchVar",
    "arch_form_of_list",
    "is_arch_name",
    "is_jobs_name",
    "parse_arch_env",
]

STYLES = ("plain", "dotted", "sm", "cmake")
SEPARATORS = {"": ";", "comma": ",", "space": " "}
FORMS = tuple(f"{style}{f'-{sep}' if sep else ''}" for style in STYLES for sep in SEPARATORS)


@dataclass(frozen=True)
class ArchForm:
    """How one variable spells an arch list."""

    style: str = "plain"  # one of STYLES
    separator: str = ";"

    @property
    def name(self) -> str:
        sep = next(key for key, value in SEPARATORS.items() if value == self.separator)
        return f"{self.style}-{sep}" if sep else self.style

    def spell(self, archs: Sequence[int], ptx: Sequence[int] = ()) -> str:
        """*archs* in this form: (100, 120) -> "10.0;12.0" dotted."""
        words: list[str] = []
        for arch in archs:
            if self.style == "dotted":
                words.append(f"{arch // 10}.{arch % 10}{'+PTX' if arch in ptx else ''}")
            elif self.style == "sm":
                words += [f"sm_{arch}", *([f"compute_{arch}"] if arch in ptx else [])]
            elif self.style == "cmake":
                words += [f"{arch}-real", *([f"{arch}-virtual"] if arch in ptx else [])]
            else:
                words.append(str(arch))
        return self.separator.join(words)


# How torch's own TORCH_CUDA_ARCH_LIST spells an arch list: "10.0;12.0+PTX".
TORCH_ARCH_FORM = ArchForm("dotted")


@dataclass(frozen=True)
class ArchVar:
    """A variable the build reads its arch list from, and its form."""

    name: str
    form: ArchForm


def parse_form(text: str) -> ArchForm:
    """`dotted`, `plain-comma`, `sm-space` ...; raises BadArgument naming the forms."""
    style, _, sep = text.strip().lower().partition("-")
    if style not in STYLES or sep not in SEPARATORS:
        raise BadArgument(
            f"--arch-env form {text!r} is not one wheelbuild writes",
            f"give one of {', '.join(FORMS)} (e.g. --arch-env NATTEN_CUDA_ARCH:dotted for 9.0;10.0)",
        )
    return ArchForm(style, SEPARATORS[sep])


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_arch_env(text: str) -> ArchVar:
    """--arch-env NAME or NAME:FORM. Without a form, plain (`90;100`), except for
    TORCH_CUDA_ARCH_LIST, which torch reads dotted."""
    name, colon, form = text.strip().partition(":")
    if not _NAME.fullmatch(name):
        raise BadArgument(
            f"--arch-env {text!r} does not name a variable",
            "give NAME or NAME:FORM (e.g. --arch-env NATTEN_CUDA_ARCH:dotted)",
        )
    if colon:
        return ArchVar(name, parse_form(form))
    return ArchVar(name, TORCH_ARCH_FORM if name == "TORCH_CUDA_ARCH_LIST" else ArchForm())


# --- telling a variable's role and form from how a build file reads it ----------------------

# TORCH_CUDA_ARCH_LIST and MAX_JOBS: wheelbuild sets them for every build, in torch's form.
_SET_ALWAYS = frozenset({"TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "NVCC_THREADS"})
# CUDA's, not ROCm's: GPU_ARCHS and PYTORCH_ROCM_ARCH name gfx targets.
_ARCH_NAME = re.compile(r"(?:[A-Z0-9]+_)*(?:CUDA_ARCH(?:S|_LIST|ITECTURES)?|CUDAARCHS)")
_JOBS_NAME = re.compile(
    r"CMAKE_BUILD_PARALLEL_LEVEL|(?:[A-Z0-9]+_)*(?:N_WORKERS|NUM_WORKERS|BUILD_JOBS|NUM_JOBS|N_JOBS|"
    r"PARALLEL_JOBS|MAX_JOBS|COMPILE_JOBS|BUILD_PARALLELISM|PARALLEL_LEVEL)"
)


def is_arch_name(name: str) -> bool:
    """A variable named as an arch list is (NATTEN_CUDA_ARCH, FOO_CUDA_ARCHS), not torch's own."""
    return name not in _SET_ALWAYS and bool(_ARCH_NAME.fullmatch(name))


def is_jobs_name(name: str) -> bool:
    """A variable named as a build's parallelism is (NATTEN_N_WORKERS), not MAX_JOBS itself."""
    return name not in _SET_ALWAYS and bool(_JOBS_NAME.fullmatch(name))


_DOTTED = re.compile(r"\d{1,2}\.\d[a-z]?(?:\+PTX)?")
_PLAIN = re.compile(r"\d{2,3}[a-z]?")
_SM = re.compile(r"(?:sm|compute)_\d{2,3}[a-z]?")
_CMAKE = re.compile(r"\d{2,3}[a-z]?-(?:real|virtual)")


def arch_form_of_list(text: str) -> ArchForm | None:
    """The form of an arch list written out ("9.0;10.0", "sm_80,sm_90", "80-real"); None when
    it is not one (empty, or words of mixed or unknown shape)."""
    text = text.strip()
    separator = ";" if ";" in text else "," if "," in text else " " if " " in text else ";"
    words = [w.strip() for w in re.split(r"[;, ]+", text) if w.strip()]
    if not words:
        return None
    for style, shape in (("dotted", _DOTTED), ("sm", _SM), ("cmake", _CMAKE), ("plain", _PLAIN)):
        if all(shape.fullmatch(word) for word in words):
            return ArchForm(style, separator)
    return None
