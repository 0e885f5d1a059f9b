"""BuildSpec: everything that says what to build, parsed and validated. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ..errors import BadArchs, BadArgument, BadEnv, BadPython, OutOfRange
from ..host.gpu import GpuMode
from ..plan.dist import DistTarget
from ..recipes import Recipe
from ..secrets import BY_NAME_ONLY, SECRET_NAME, SECRET_VALUE
from ..variants import DEFAULT_ARCHS, TorchVariant

DEFAULT_OUTPUT_DIR = Path("wheelhouse")
# Docker's --cpus runs from 0.01; Linux builds for at most 8192 CPUs (CONFIG_NR_CPUS with MAXSMP).
MIN_CPUS, MAX_CPUS = 0.01, 8192
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what a shell (and docker -e) takes as a name


class PinMode(StrEnum):
    """What a wheel's METADATA requires of torch: the minor it was built with (torch==2.14.*), or
    the contiguous range its torch range proved (torch>=2.12,<2.15)."""

    BUILT = "built"
    PROVEN = "proven"


# The torch range: releases older than the build's by up to this many minors are tried.
TORCH_RANGE_OLDER = 3


def check_cpus(cpus: float | None) -> float | None:
    """--cpus as docker takes it: a finite count of CPUs, fractions allowed (7.5). None: not given."""
    if cpus is not None and not MIN_CPUS <= cpus <= MAX_CPUS:  # nan compares false: refused too
        raise OutOfRange(
            f"--cpus {cpus:g} is not a number of CPUs",
            f"give one from {MIN_CPUS:g} to {MAX_CPUS}, e.g. --cpus 16 or --cpus 7.5; leave it out for all of this machine's",
        )
    return cpus


def _short(text: str, keep: int = 40) -> str:
    """*text* quoted for a message, cut to *keep* characters (a value may be thousands long)."""
    return repr(text) if len(text) <= keep else f"{text[:keep]!r}... ({len(text)} characters)"


def _arch_parts(text: str) -> list[tuple[int, bool]]:
    """'100,120+PTX' -> [(100, False), (120, True)]: each SM number, and whether its PTX is asked too.
    Separated by one comma or semicolon (spaces around it allowed) or by spaces alone."""
    entries = re.split(r"\s*[,;]\s*|\s+", text.strip())
    if "" in entries and text.strip():  # 100,,120, ,100 or 100,: a value cut or a variable unset
        raise BadArchs(
            f"CUDA arch list {_short(text)} has an empty entry",
            "separate SM numbers by single commas, e.g. --archs 100,120",
        )
    parts = [p.lower().removeprefix("sm_").removeprefix("sm") for p in entries]
    found = [(p.removesuffix("+ptx"), p.endswith("+ptx")) for p in parts if p]
    # ASCII digits, three at most: str.isdigit() takes '²', and int() refuses over 4,300 digits.
    if not found or not all(re.fullmatch(r"[0-9]{2,3}", n) and 50 <= int(n) <= 200 for n, _ in found):
        raise BadArchs(f"CUDA arch list {_short(text)} is not understood", _arch_remedy(found))
    return [(int(n), ptx) for n, ptx in found]


def _arch_remedy(found: list[tuple[str, bool]]) -> str:
    """How to write the list; for an arch-specific or family variant (90a, 100f), what to ask instead."""
    variant = next((n for n, _ in found if re.fullmatch(r"[0-9]{2,3}[af]", n)), None)
    if variant is None:
        return "give SM numbers separated by commas, e.g. --archs 100,120 (120+PTX: its PTX too)"
    return (
        f"ask for {variant[:-1]}: --archs takes plain SM numbers, and where the package's own nvcc "
        f"flags name compute_{variant} (kernels that need its instructions), wheelbuild-nvcc "
        f"keeps that variant for sm_{variant[:-1]}"
    )


def parse_archs(text: str) -> tuple[int, ...]:
    """'100,120' or '100;120' or 'sm_100' or '100,120+PTX' -> (100, 120): the SASS asked for."""
    return tuple(sorted({arch for arch, _ in _arch_parts(text)}))


def parse_ptx(text: str) -> tuple[int, ...]:
    """The archs whose PTX is asked for besides their SASS: '100,120+PTX' -> (120,)."""
    return tuple(sorted({arch for arch, ptx in _arch_parts(text) if ptx}))


def format_archs(archs: tuple[int, ...], ptx: tuple[int, ...] = ()) -> str:
    """(100, 120), (120,) -> '100,120+PTX': what parse_archs and parse_ptx read back."""
    return ",".join(f"{a}{'+PTX' if a in ptx else ''}" for a in archs)


def parse_python(text: str) -> str:
    """'3.11' or 'cp311' -> 'cp311'."""
    match = re.fullmatch(r"(?:cp)?3\.?(\d{1,2})", text.strip())
    if match is None:
        raise BadPython(f"Python version {text!r} is not understood", "write it as 3.11 or cp311")
    return f"cp3{match[1]}"


def parse_pythons(values: Iterable[str]) -> tuple[str, ...]:
    """--python given once or more, each '3.11' or a list ('3.11,3.12', '3.11 3.12'), as --archs
    takes lists: the cibuildwheel tags, in order, each once. An empty entry is refused."""
    tags: list[str] = []
    for value in values:
        entries = re.split(r"\s*[,;]\s*|\s+", value.strip())
        if "" in entries:
            raise BadPython(
                f"--python {_short(value)} has an empty entry",
                "separate versions by single commas, e.g. --python 3.11,3.12",
            )
        tags += [parse_python(entry) for entry in entries]
    return tuple(dict.fromkeys(tags))


def parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    """`--env KEY=VALUE` pairs for the build's environment. Their values are shown (build.log,
    the report), so a name or value that looks like a credential is refused, its value unsaid."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not ENV_NAME.fullmatch(key):
            raise BadEnv(f"--env {pair!r} is not KEY=VALUE", "write it as --env NAME=value")
        if SECRET_NAME.search(key) or SECRET_VALUE.search(value):
            raise BadEnv(
                f"--env {key}=... gives what looks like a credential by value, and --env values are "
                "shown in build.log and the report",
                f"never pass a secret with --env; credentials reach wheelbuild {BY_NAME_ONLY}, "
                "read by name and never shown",
            )
        env[key] = value
    return env


@dataclass(frozen=True)
class Resources:
    """What a build may use, as given; None: the planner derives it from this machine."""

    memory: int | None = None  # container limit in bytes
    cpus: float | None = None
    max_jobs: int | None = None
    nvcc_threads: int | None = None


@dataclass(frozen=True)
class BuildSpec:
    recipe: Recipe
    variant: TorchVariant
    archs: tuple[int, ...] = DEFAULT_ARCHS
    ptx: tuple[int, ...] = ()  # archs whose PTX goes in too (--archs 120+PTX): it JITs on later GPUs
    pythons: tuple[str, ...] = ()  # cibuildwheel tags, cp311...; empty = every one the image has
    gpus: GpuMode = GpuMode.AUTO
    resources: Resources = Resources()  # what is not given, the planner derives from the host
    output_dir: Path = DEFAULT_OUTPUT_DIR
    rebuild: bool = False  # build even when a finished build has the same inputs
    # Compile the archs the package's build files name instead of exactly `archs` (which must
    # still be among them): for kernels that build only for an arch list of their own.
    keep_package_archs: bool = False
    # Keep the package's own C++ standard: else an older -std is raised to what torch requires.
    keep_package_std: bool = False
    build_network: bool = False  # keep the network on while the package builds
    # Compile through the machine's sccache (a retry, a second Python, tonight's rebuild resume
    # from it); off: every unit compiles for real, as a rebuild that proves a wheel must.
    compiler_cache: bool = True
    # Admit compiles by memory (images/wheelbuild-admit): on by default since it cut a real
    # flash-attn subset build's compile step to 0.76 of the static plan's, with no OOM kill.
    admission: bool = True
    # With admission, each cicc admitted on its own too (plan/admission.py says why it is the default).
    cicc_admission: bool = True
    gate: bool = True  # install and import each wheel in a fresh base container before it is done
    # After the gate, each wheel loaded under the torch releases around its own (same CUDA major:
    # the newest patch of each minor, up to torch_range_older minors older, every newer one).
    torch_range: bool = True
    torch_range_older: int = TORCH_RANGE_OLDER
    pin: PinMode = PinMode.BUILT
    dist: DistTarget | None = None  # --dist: device compiles on sccache-dist build servers

    def __post_init__(self) -> None:
        if self.pin is PinMode.PROVEN and not (self.gate and self.torch_range):
            raise BadArgument(
                "--pin proven writes the torch range each wheel loaded with, and this build tries none "
                f"({'--no-gate' if not self.gate else '--no-torch-range'})",
                "drop --pin proven, or let the gate and the torch range run",
            )
