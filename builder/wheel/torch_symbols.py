"""Which torch a wheel's extension modules can load with, read statically: every torch symbol a
module needs must be exported by that torch's own libraries (``torch/lib/libtorch*.so`` and
``libc10*.so`` in its wheel). A module built against torch 2.11 that calls
``c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, unsigned int, bool)``
(what ``C10_CUDA_KERNEL_LAUNCH_CHECK()`` expands to there) finds it missing in 2.14, whose
function takes one more argument: the import fails with ``undefined symbol``, and this says so
before any install.

"A torch symbol" is one the build's torch exports: a module's other undefined symbols (libc,
libstdc++, CUDA's runtime, Python) are the import gate's to find. No Docker, no subprocess: zip and ELF files in,
sets and names out; the torch wheels come from torch_range.py.
"""

from __future__ import annotations

import re
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .abi import AbiFindings
from .elf_abi import demangle, symbol_versions

__all__ = ["MissingSymbol", "first_missing", "needed_from_torch", "torch_exports"]

# torch's own libraries: what an extension module links (libtorch, libtorch_cpu, libtorch_cuda,
# libtorch_python, libc10, libc10_cuda); the CUDA and NCCL libraries are other wheels.
TORCH_LIBRARY = re.compile(r"torch/lib/lib(?:torch|c10)[A-Za-z0-9_]*\.so")
MAX_LIBRARY = 4 << 30  # libtorch_cuda.so is ~0.5 GB; a member past 4 GiB is not torch's
MAX_MEMBERS = 100_000  # torch's wheel holds ~15,000 files


def torch_exports(torch_wheel: Path) -> frozenset[str]:
    """Every dynamic symbol torch's own libraries export, from its wheel. Each library is
    inflated to a temporary file (capped by MAX_LIBRARY, its declared and its real size) and
    its dynamic symbol table read. Raises ValueError for a file that is not such a wheel."""
    exports: set[str] = set()
    try:
        with zipfile.ZipFile(torch_wheel) as archive:
            members = archive.infolist()
            if len(members) > MAX_MEMBERS:
                raise ValueError(f"{torch_wheel.name} lists {len(members)} members")
            libraries = [m for m in members if TORCH_LIBRARY.fullmatch(m.filename)]
            if not libraries:
                raise ValueError(f"{torch_wheel.name} holds no torch/lib/libtorch*.so")
            for member in libraries:
                exports |= _exported_by(archive, member)
    except zipfile.BadZipFile as bad:
        raise ValueError(f"{torch_wheel.name} is not a zip file: {bad}") from None
    return frozenset(exports)


def _exported_by(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> frozenset[str]:
    if member.file_size > MAX_LIBRARY:
        raise ValueError(f"{member.filename} is {member.file_size} bytes, over {MAX_LIBRARY}")
    with tempfile.NamedTemporaryFile(prefix="wheelbuild-torch-lib-", suffix=".so") as scratch:
        with archive.open(member) as source:
            # Never more than it declares: a member that inflates past its size is refused.
            copied = _copy_at_most(source, scratch, member.file_size + 1)
        if copied != member.file_size:
            raise ValueError(f"{member.filename} inflates to other than its {member.file_size} bytes")
        scratch.flush()
        return symbol_versions(scratch.name).defined


def _copy_at_most(source: IO[bytes], dest: IO[bytes], limit: int) -> int:
    copied = 0
    while copied < limit:
        block = source.read(min(1 << 20, limit - copied))
        if not block:
            break
        dest.write(block)
        copied += len(block)
    return copied


def needed_from_torch(abi: AbiFindings, built_exports: frozenset[str]) -> dict[str, tuple[str, ...]]:
    """Per shared object in the wheel, the symbols it needs that the build's torch exports
    (strong undefined ones no library in the wheel defines), sorted."""
    return {
        module.member: tuple(sorted({s.name for s in module.unresolved} & built_exports))
        for module in abi.modules
    }


@dataclass(frozen=True)
class MissingSymbol:
    member: str  # the wheel's shared object that needs it
    symbol: str  # mangled, as the loader names it

    @property
    def demangled(self) -> str:
        return demangle(self.symbol)

    def __str__(self) -> str:
        shown = self.demangled
        return f"undefined symbol {shown}" + (f" ({self.symbol})" if shown != self.symbol else "")


def first_missing(needed: Mapping[str, Iterable[str]], exports: frozenset[str]) -> MissingSymbol | None:
    """The first symbol (by shared object, then name) that *exports* lacks; None when all are there."""
    for member in sorted(needed):
        for symbol in sorted(needed[member]):
            if symbol not in exports:
                return MissingSymbol(member, symbol)
    return None
