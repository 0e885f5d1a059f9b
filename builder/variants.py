"""Torch variants: `cu130` or `2.11.0+cu130` -> torch version, its CUDA, where to get it, and
which CUDA compiler must build against it. Pure: no Docker, no network.

torch refuses an nvcc whose CUDA *major* differs from torch.version.cuda (a minor difference
only warns), so cu13x variants compile with a CUDA 13 toolkit no older than torch's minor (13.1
for cu130 and cu131, 13.2 for cu132: one image per toolkit, from images/Dockerfile.cuda131) and
cu12x variants need the image's optional CUDA 12.x compiler layer.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from packaging.version import Version

from .errors import BadVariant
from .secrets import without_credentials

PYTORCH_INDEX = "https://download.pytorch.org/whl/{tag}"
# The SASS archs built when none are asked for (and checked when no build report says).
DEFAULT_ARCHS = (100, 120)

# A bare CUDA tag (`--torch cu130`) means the newest release the variant's index has for it
# (spec/torch_choice.newest_release). This table is only the fallback when the index cannot be read:
# the newest release for each tag that we knew of on DEFAULT_TORCH_AS_OF (PyTorch's index and
# PyPI; PyPI's 2.15.0 is a CUDA 13.2 build, so cu132's).
DEFAULT_TORCH_AS_OF = "2026-12-02"
NEWEST = "newest"  # --torch newest
DEFAULT_TORCH: dict[str, str] = {
    "cu126": "2.10.0",
    "cu128": "2.10.0",
    "cu129": "2.8.0",
    "cu130": "2.14.1",
    "cu132": "2.15.0",
}

# The CUDA 13 toolkits an image can carry (images/requirements-cuda<digits>.txt, NVIDIA's PyPI
# wheels pinned by hash), oldest first: a build takes the oldest that compiles its torch, so every
# torch of CUDA 13.0 and 13.1 shares the default image.
CUDA13_TOOLKITS = ("13.1", "13.2")
DEFAULT_TOOLKIT = CUDA13_TOOLKITS[0]

# ASCII digits, a few per part: no torch version part has more, and Python refuses to read
# an int of over 4,300 digits (packaging's Version raises ValueError, not InvalidVersion).
_VARIANT_RE = re.compile(r"^(?:(?P<version>\d{1,6}\.\d{1,6}(?:\.\d{1,6})?)\+)?(?P<tag>cu\d{3})$", re.ASCII)


@dataclass(frozen=True)
class CudaCompiler:
    """An nvcc inside the image: its CUDA version and its CUDA_HOME there."""

    version: str
    home: str

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def headers_from_torch(self) -> bool:
        """Whether its compiles take the CUDA libraries' headers (cuBLAS, cuSPARSE, cuSOLVER) from
        torch's own wheels: the image's CUDA 13 is NVIDIA's compiler and runtime wheels only,
        while a CUDA 12 layer or image carries its own."""
        return self.major >= 13

    @property
    def minor(self) -> int:
        return int(self.version.split(".")[1])

    @classmethod
    def cuda13(cls, version: str = DEFAULT_TOOLKIT) -> CudaCompiler:
        """A CUDA 13 toolkit's nvcc in its image: NVIDIA's wheels under /usr/local/cuda-<version>."""
        return cls(version=version, home=f"/usr/local/cuda-{version}/nvidia/cu13")

    @classmethod
    def cuda12(cls, version: str) -> CudaCompiler:
        """The image's optional CUDA 12.x compiler (its layer or --cuda12-image): /usr/local/cuda-<version>."""
        return cls(version=version, home=f"/usr/local/cuda-{version}")


@dataclass(frozen=True)
class TorchVariant:
    tag: str  # "cu130"
    torch_version: str  # "2.11.0"
    index_url: str
    # Only the tag was given: the index's newest release for it replaces torch_version before
    # the build (the table's fallback until then).
    newest: bool = False
    # `--torch newest`: the newest release of any CUDA 13 minor a toolkit compiles; the tag is
    # the newest such minor's until resolve compares them (torch_choice.newest_of_any_minor).
    any_minor: bool = False

    @property
    def cuda_version(self) -> str:
        digits = self.tag[2:]
        return f"{digits[:-1]}.{digits[-1]}"

    @property
    def cuda_major(self) -> int:
        return int(self.tag[2:-1])

    @property
    def cuda_minor(self) -> int:
        return int(self.tag[-1])

    @property
    def torch_minor(self) -> str:
        """ "2.11" for torch 2.11.0: the ABI a built wheel is tied to."""
        return ".".join(self.torch_version.split(".")[:2])

    @property
    def requirement(self) -> str:
        # `torch==2.11.0` also matches the index's local versions (2.11.0+cu130), per PEP 440.
        return f"torch=={self.torch_version}"

    @property
    def cache_key(self) -> str:
        """Names this torch and its index in the machine's wheel cache (credentials left out:
        a rotated token keeps the cache)."""
        index = without_credentials(self.index_url)[0]
        return hashlib.sha256(f"{index} {self.requirement}".encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        """Local version label a wheel built against this variant carries: cu130torch2.11."""
        return f"{self.tag}torch{self.torch_minor}"

    def __str__(self) -> str:
        return f"{self.torch_version}+{self.tag}"


@dataclass(frozen=True)
class TorchCeiling:
    """The first torch minor a package cannot compile against, and why: that release and every
    later one are passed over for it."""

    first: str  # "2.14": 2.14.0 and later
    why: str  # a clause a person reads: "its setup.py compiles with -std=c++17 and ..."
    last_good: str  # the newest release known to compile, used offline instead of the table's

    def excludes(self, version: str) -> bool:
        return Version(version).release[:2] >= Version(self.first).release[:2]

    def refusal(self, package: str, variant: TorchVariant) -> BadVariant:
        return BadVariant(
            f"{package} cannot be built for torch {variant.torch_version}: {self.why}",
            f"build for a torch older than {self.first} (--torch {variant.tag} picks the newest it "
            "compiles with), or patch the package's flags and build it as a local project",
        )


@dataclass(frozen=True)
class TorchRule:
    """Torch releases named by rule in a nightly matrix: ``cu130:newest-3..newest`` is the newest
    patch of each of the newest four minors built with CUDA 13.0, read from the index at plan
    time; ``cu130`` alone and ``cu130:newest`` are the newest one."""

    tag: str
    oldest: int  # minors below the newest: 3 in newest-3
    newest: int  # 0 in ..newest

    def __str__(self) -> str:
        def end(minors: int) -> str:
            return f"newest-{minors}" if minors else "newest"

        span = "" if self.oldest == self.newest else f"..{end(self.newest)}"
        return f"{self.tag}:{end(self.oldest)}{span}"


_RULE_RE = re.compile(
    r"^(?P<tag>cu\d{3})(?::newest(?:-(?P<oldest>\d{1,2}))?(?:\.\.newest(?:-(?P<newest>\d{1,2}))?)?)?$"
)


def cuda_tag(cuda_version: str) -> str | None:
    """The tag of a CUDA version as torch reports it (torch.version.cuda): "13.0" -> cu130,
    "12.8" -> cu128 (TorchVariant.cuda_version the other way); None for anything else."""
    major, _, minor = cuda_version.partition(".")
    if not (major.isdigit() and minor[:1].isdigit()):
        return None
    return f"cu{int(major)}{minor[:1]}"


def parse_torch_rule(text: str) -> TorchRule | None:
    """``cu130:newest-3..newest`` -> TorchRule; None for a full variant (``2.11.0+cu130``).
    Raises BadVariant for a rule that is not understood or names an unknown CUDA tag."""
    text = text.strip()
    if "+" in text:
        return None
    match = _RULE_RE.match(text)
    if match is None:
        raise BadVariant(
            f"torch entry {text!r} is not understood",
            "write a CUDA tag (cu130), a rule (cu130:newest-3..newest) or a full version (2.14.1+cu130)",
        )
    parse_variant(match["tag"])  # an unknown tag fails as a variant does
    oldest = int(match["oldest"] or 0)
    # newest-2 alone is one minor; newest-3..newest-1 a span
    newest = int(match["newest"] or 0) if ".." in text else oldest
    if newest > oldest:
        raise BadVariant(
            f"torch rule {text!r} runs from a newer minor to an older one",
            f"write the older end first: {match['tag']}:newest-{newest}..newest-{oldest}",
        )
    return TorchRule(match["tag"], oldest, newest)


def any_minor_tags() -> tuple[str, ...]:
    """The CUDA 13 tags a toolkit compiles, newest CUDA first: what `--torch newest` compares."""
    tags = [t for t in DEFAULT_TORCH if t.startswith("cu13")]
    fitting = [t for t in tags if compiler_for(parse_variant(t), (), None) is not None]
    return tuple(sorted(fitting, reverse=True))


def _did_you_mean_tag(text: str) -> str:
    """`did you mean cu130? ` for a mistyped CUDA tag (cu1300, cu13, 2.11.0+cu13): the tags it
    begins, else the closest spellings; '' when none is near."""
    typed = re.search(r"cu\d+", text.lower())
    if typed is None:
        return ""
    tags = sorted(DEFAULT_TORCH)
    near = [t for t in tags if t.startswith(typed[0])] or difflib.get_close_matches(
        typed[0], tags, n=2, cutoff=0.7
    )
    return f"did you mean {' or '.join(near)}? " if near else ""


def parse_variant(text: str, index_url: str | None = None) -> TorchVariant:
    """`cu130` -> default torch for cu130; `2.11.0+cu130` -> that torch; `newest` -> the newest
    torch of any CUDA 13 minor (compared on the index later). Raises BadVariant."""
    if text.strip().lower() == NEWEST:
        tag = any_minor_tags()[0]
        return replace(parse_variant(tag, index_url), any_minor=True)
    match = _VARIANT_RE.match(text.strip())
    known = ", ".join(sorted(DEFAULT_TORCH))
    if match is None:
        raise BadVariant(
            f"torch variant {text!r} is not understood",
            f"{_did_you_mean_tag(text)}use a CUDA tag ({known}), {NEWEST} (the newest torch of any "
            "CUDA 13 minor), or a full version such as 2.11.0+cu130",
        )
    tag = match["tag"]
    if tag not in DEFAULT_TORCH:
        raise BadVariant(
            f"torch variant {text!r} names CUDA tag {tag!r}, which wheelbuild does not support",
            f"{_did_you_mean_tag(text)}use one of {known}",
        )
    version = match["version"] or DEFAULT_TORCH[tag]
    if version.count(".") == 1:
        version += ".0"
    return TorchVariant(
        tag=tag,
        torch_version=version,
        index_url=index_url or PYTORCH_INDEX.format(tag=tag),
        newest=match["version"] is None,
    )


# The CUDA releases whose nvcc emits SASS for each arch: (first, last), last None while current.
# CUDA 13.0 dropped Maxwell, Pascal and Volta, and renamed sm_101 to sm_110.
ARCH_SUPPORT: dict[int, tuple[tuple[int, int], tuple[int, int] | None]] = {
    50: ((6, 0), (12, 9)),
    52: ((7, 0), (12, 9)),
    53: ((7, 0), (12, 9)),
    60: ((8, 0), (12, 9)),
    61: ((8, 0), (12, 9)),
    62: ((8, 0), (12, 9)),
    70: ((9, 0), (12, 9)),
    72: ((10, 0), (12, 9)),
    75: ((10, 0), None),
    80: ((11, 0), None),
    86: ((11, 1), None),
    87: ((11, 4), None),
    89: ((11, 8), None),
    90: ((11, 8), None),
    100: ((12, 8), None),
    101: ((12, 8), (12, 9)),
    103: ((12, 9), None),
    110: ((13, 0), None),
    120: ((12, 8), None),
    121: ((12, 9), None),
}


def _version_tuple(version: str) -> tuple[int, int]:
    major, minor = (int(p) for p in version.split(".")[:2])
    return major, minor


def supports_arch(compiler: CudaCompiler, arch: int) -> bool:
    span = ARCH_SUPPORT.get(arch)
    if span is None:
        return False
    first, last = span
    version = _version_tuple(compiler.version)
    return first <= version and (last is None or version <= last)


def arch_range(arch: int) -> str:
    """ "CUDA 12.8 or later" for an arch, as an error message says it."""
    span = ARCH_SUPPORT.get(arch)
    if span is None:
        return "no CUDA release wheelbuild knows"
    first, last = span
    return f"CUDA {first[0]}.{first[1]}" + (f" to {last[0]}.{last[1]}" if last else " or later")


def builds_for(compiler: CudaCompiler, variant: TorchVariant) -> bool:
    """The rule for a compiler and a torch: the same CUDA major (torch's cpp_extension refuses
    another); and where the compile takes the CUDA libraries' headers from torch's wheels, a minor
    no older than torch's: a newer torch's cuBLAS or cuSPARSE headers use types and enums that an
    older nvcc's runtime headers lack. An older torch runs on its own runtime, which CUDA's
    minor-version compatibility covers."""
    if compiler.major != variant.cuda_major:
        return False
    return not compiler.headers_from_torch or _version_tuple(compiler.version) >= (
        variant.cuda_major,
        variant.cuda_minor,
    )


def toolkit_for(variant: TorchVariant) -> str:
    """The CUDA 13 toolkit whose image builds for `variant`: the oldest that builds_for it (the
    default for a CUDA 12 torch, whose layer goes beside it; the newest when none does, for
    compiler_for to refuse)."""
    fits = [
        v for v in CUDA13_TOOLKITS if variant.cuda_major != 13 or builds_for(CudaCompiler.cuda13(v), variant)
    ]
    return fits[0] if fits else CUDA13_TOOLKITS[-1]


def compiler_for(
    variant: TorchVariant,
    archs: Sequence[int],
    cuda12: CudaCompiler | None,
    toolkits: Sequence[str] = CUDA13_TOOLKITS,
) -> CudaCompiler | None:
    """The compiler, of the CUDA 13 `toolkits` and the CUDA 12 one, that can build against
    `variant` for every arch asked, or None. builds_for says which compilers can build for a
    torch; the arch table decides the rest."""
    candidates = [CudaCompiler.cuda13(version) for version in toolkits]
    if cuda12 is not None:
        candidates.append(cuda12)
    for compiler in candidates:
        if builds_for(compiler, variant) and all(supports_arch(compiler, a) for a in archs):
            return compiler
    return None
