"""flash-attn: the sdist pinned by sha256, built from source for the requested archs."""

from __future__ import annotations

from types import MappingProxyType

from packaging.version import Version

from ..errors import BadVersion
from ..plan.memory_model import flash_attn_model
from .base import IndexLookup, Recipe, RemoteSdist, Source, UnitRecipe

# Said for the newest release: a bare `flash-attn` (or --version latest) is looked up on the index
# when the build starts; NEWEST_PINNED is what it builds when the index cannot be read.
LATEST = ("latest", "newest")
# Known releases on PyPI, each pinned by its sdist's sha256 (read from the simple index). The
# 2.8.3 post releases have the same 73 units (post2: index-type fixes in the bwd kernels, CUDA 13
# handling in setup.py), so they plan with 2.8.3's profile.
SDISTS: dict[str, RemoteSdist] = {
    "2.8.3": RemoteSdist(
        url="https://files.pythonhosted.org/packages/3b/b2/"
        "8d76c41ad7974ee264754709c22963447f7f8134613fd9ce80984ed0dab7/flash_attn-2.8.3.tar.gz",
        sha256="1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d",
    ),
    "2.8.3.post2": RemoteSdist(
        url="https://files.pythonhosted.org/packages/6c/b1/"
        "b77625e3d11260d2bd6a4fc249a4be9a3da97ff848e2222e810c4f0e0211/flash_attn-2.8.3.post2.tar.gz",
        sha256="d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b",
    ),
    "2.8.3.post1": RemoteSdist(
        url="https://files.pythonhosted.org/packages/01/7a/"
        "92a46e7cd6bbb4d7b2855a457c3b855df54a97af5656d98fc92e58e61065/flash_attn-2.8.3.post1.tar.gz",
        sha256="55d5103ed846da8b56e0797acf4bde07dee4b1c7e8907fcfc6699c203030c348",
    ),
    "2.8.2": RemoteSdist(
        url="https://files.pythonhosted.org/packages/63/91/"
        "91bcbd7424877fa8da4e7cc04b8a777247a33037b9c1fd976a5ad426c047/flash_attn-2.8.2.tar.gz",
        sha256="740a5370f406cbe16155cc6d078ec543a97a137501f32cba89198295e6b80e54",
    ),
}
NEWEST_PINNED = max(SDISTS, key=Version)


# What flash-attn's setup.py (2.8.x) passes nvcc for its kernels, with what torch's
# cpp_extension adds; include dirs relative to the sdist's root. For `wheelbuild calibrate`.
UNITS = UnitRecipe(
    nvcc_flags=(
        "-O3", "-std=c++17",
        "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
        "-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=flash_attn_2_cuda", "-D_GLIBCXX_USE_CXX11_ABI=1",
    ),
    include_dirs=("csrc/flash_attn", "csrc/flash_attn/src", "csrc/cutlass/include"),
    families=MappingProxyType(
        {"fwd": r"^flash_fwd_hdim", "bwd": r"^flash_bwd_", "fwd_split": r"^flash_fwd_split_"}
    ),
)  # fmt: skip


def flash_attn_recipe(version: str | None) -> Recipe:
    """The recipe at `version`; None (or `latest`) for the newest release on the index, pinned and
    modelled when the build starts (recipes.at_release)."""
    if version is None or version.strip().lower() in LATEST:
        return _recipe(NEWEST_PINNED, IndexLookup("flash-attn", ""))
    try:
        parsed = Version(version)
    except ValueError:  # InvalidVersion, or a number past Python's 4,300-digit limit
        raise BadVersion(
            f"flash-attn version {version!r} is not a version",
            f"use one of {', '.join(sorted(SDISTS))}, or another release on PyPI (e.g. 2.8.1)",
        ) from None
    # Versions compare as PEP 440 says: 2.8.3post2 is the table's 2.8.3.post2.
    version = next((known for known in SDISTS if Version(known) == parsed), str(parsed))
    # A release not in the table is looked up on the index when the build starts, and pinned
    # by the sha256 the index lists (the build report records it).
    return _recipe(version, SDISTS.get(version) or IndexLookup("flash-attn", version))


def _recipe(version: str, source: Source) -> Recipe:
    return Recipe(
        name="flash-attn",
        version=version,
        source=source,
        arch_env="FLASH_ATTN_CUDA_ARCHS",
        # Never download a prebuilt wheel from GitHub: we are here to build it.
        extra_env=MappingProxyType({"FLASH_ATTENTION_FORCE_BUILD": "TRUE"}),
        # Its setup.py appends this to the version: 2.8.3+cu130torch2.11.
        local_version_env="FLASH_ATTN_LOCAL_VERSION",
        units=UNITS,
        import_packages=("flash_attn",),
        smoke_test="flash_attn.py",
        # Fitted to measured units (builder/plan/profiles/flash-attn-2.8.3.tsv).
        memory_model=flash_attn_model(version),
    )
