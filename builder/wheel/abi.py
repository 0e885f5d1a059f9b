"""The static half of the import gate: what the extension modules in a built wheel need from the
system they are loaded on, and whether that fits the platform tag the wheel claims.

A ``manylinux_2_28_x86_64`` wheel promises to load on any x86_64 Linux with glibc 2.28 and the
libstdc++ of that era. An extension compiled with a newer toolchain breaks that promise silently:
it installs, then fails at import with ``version `GLIBCXX_3.4.32' not found``. The promise is
checked here from the ELF files alone:

- ``.gnu.version_r`` (version needed) lists every symbol version a shared object requires, e.g.
  ``GLIBC_2.34`` from libc.so.6 or ``GLIBCXX_3.4.29`` from libstdc++.so.6; the highest of each
  family is compared (numerically: ``GLIBC_2.34`` is newer than ``GLIBC_2.2.5``) with the highest
  the tag allows.
- The limits per tag are auditwheel's policy file (``auditwheel/policy/manylinux-policy.json``:
  per policy and architecture, every allowed version of each family), the reference that
  ``auditwheel repair`` itself enforces. ``linux_*`` (not manylinux) and non-Linux tags promise
  nothing, so they have no limit.
- The undefined dynamic symbols that no shared object inside the wheel defines are listed, for
  the gate's container check to narrow down against torch, Python and the base system.
- An abi3 wheel (``cp310-abi3``) promises one file for every CPython from 3.10 on, so its modules
  may use only the stable ABI of 3.10: every Python C API symbol they need (``Py*``, ``_Py*``)
  must be in CPython's stable ABI manifest (``Misc/stable_abi.toml``, as the abi3info package
  tables it) and added by 3.10. The import gate loads the wheel under the build's Pythons only,
  where a symbol outside the stable ABI still resolves; it fails in a later Python, which
  cibuildwheel's abi3audit would have caught (wheelbuild turns that audit off: it downloads its
  own virtualenv from GitHub first).

A wheel is read as untrusted input: no member is read whose declared size or compression ratio
is over a cap, and a member is never read past its declared size.

Reads bytes and files, returns values; no Docker, no subprocess. The ELF reading is elf_abi.py's.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from ..errors import AbiMismatch, StableAbiBroken
from .abi3 import stable_abi
from .contents import MAX_COMPRESSION_RATIO, MAX_MEMBER_SIZE, UnsafeMember, read_member
from .elf_abi import (
    FAMILIES,
    ElfAbi,
    SymbolVersion,
    UndefinedSymbol,
    demangle,
    family_of,
    symbol_versions,
)

__all__ = [
    "FAMILIES",
    "AbiFindings",
    "ElfAbi",
    "Excess",
    "ModuleAbi",
    "SymbolVersion",
    "TagLimits",
    "UndefinedSymbol",
    "UnsafeMember",
    "check_wheel_abi",
    "demangle",
    "outside_stable_abi",
    "symbol_versions",
    "tag_limits",
]

_SHARED_OBJECT = re.compile(r"\.so(?:\.\d+)*\Z")  # _C.cpython-311-x86_64-linux-gnu.so, libfoo-1a2b.so.12
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(\w+)")
_POLICY_NAME = re.compile(r"manylinux_(\d+)_(\d+)")
_LEGACY_MANYLINUX = re.compile(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)")
_PYTHON_C_API = re.compile(r"_?Py[A-Z_]")  # PyArg_ParseTuple, Py_IncRef, _Py_NoneStruct; not pybind11


# -- platform tags -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Policy:
    name: str  # manylinux_2_28
    aliases: tuple[str, ...]  # manylinux2014
    glibc: tuple[int, int]
    symbol_versions: dict[str, dict[str, tuple[str, ...]]]  # arch -> family -> allowed versions


@functools.cache
def _policies() -> tuple[_Policy, ...]:
    """auditwheel's manylinux policies, oldest glibc first (the ``linux`` entry left out)."""
    source = importlib.resources.files("auditwheel") / "policy" / "manylinux-policy.json"
    policies = []
    for entry in json.loads(source.read_text(encoding="utf-8")):
        match = _POLICY_NAME.fullmatch(str(entry["name"]))
        if match is None:
            continue
        policies.append(
            _Policy(
                name=str(entry["name"]),
                aliases=tuple(str(a) for a in entry.get("aliases", ())),
                glibc=(int(match[1]), int(match[2])),
                symbol_versions={
                    str(arch): {str(family): tuple(map(str, names)) for family, names in families.items()}
                    for arch, families in entry["symbol_versions"].items()
                },
            )
        )
    return tuple(sorted(policies, key=lambda p: p.glibc))


@dataclass(frozen=True)
class Excess:
    """One version a shared object needs beyond what its tag allows."""

    needed: str  # GLIBCXX_3.4.32, or a named version such as GLIBC_PRIVATE
    allowed: str | None  # the tag's highest of that family, GLIBCXX_3.4.24; None: the tag allows no such name


@dataclass(frozen=True)
class TagLimits:
    """What one platform tag allows a shared object to require."""

    tag: str  # manylinux_2_28_x86_64, manylinux2014_x86_64, linux_x86_64
    label: str  # the tag without its architecture, as messages name it: manylinux_2_28, manylinux2014
    policy: str | None  # auditwheel's policy, manylinux_2_17 for manylinux2014; None: no limit
    highest: tuple[SymbolVersion, ...]  # the highest allowed of each family in FAMILIES
    allowed: frozenset[str]  # every allowed version name of those families, named ones included

    @property
    def limited(self) -> bool:
        return self.policy is not None

    def limit(self, family: str) -> SymbolVersion | None:
        """The highest version of *family* allowed; None when unlimited (or, for a limited tag,
        when the family is not in FAMILIES)."""
        return next((v for v in self.highest if v.family == family), None)

    def excess(self, abi: ElfAbi) -> tuple[Excess, ...]:
        """The versions *abi* needs beyond this tag: per family the highest numbered one if it is
        newer than the limit, and every named version (GLIBC_PRIVATE, ...) the tag does not list."""
        if not self.limited:
            return ()
        found = []
        for family in FAMILIES:
            need, limit = abi.highest(family), self.limit(family)
            if need is not None and (limit is None or need > limit):
                found.append(Excess(needed=str(need), allowed=str(limit) if limit else None))
        for name in sorted(abi.versions):
            if family_of(name) in FAMILIES and SymbolVersion.parse(name) is None and name not in self.allowed:
                found.append(Excess(needed=name, allowed=None))
        return tuple(found)


def _unlimited(tag: str) -> TagLimits:
    return TagLimits(tag=tag, label=tag, policy=None, highest=(), allowed=frozenset())


def _limits(tag: str, label: str, policy: _Policy, arch: str, glibc: tuple[int, int]) -> TagLimits:
    families = policy.symbol_versions[arch]
    highest: list[SymbolVersion] = []
    allowed: set[str] = set()
    for family in FAMILIES:
        names = families.get(family, ())
        allowed.update(f"{family}_{n}" for n in names)
        numbered = [v for v in (SymbolVersion.parse(f"{family}_{n}") for n in names) if v is not None]
        if family == "GLIBC":
            # PEP 600: manylinux_x_y means glibc x.y, also for a y the policy file has no entry for.
            numbered.append(SymbolVersion("GLIBC", glibc))
        if numbered:
            highest.append(max(numbered))
    return TagLimits(
        tag=tag, label=label, policy=policy.name, highest=tuple(highest), allowed=frozenset(allowed)
    )


def tag_limits(platform_tag: str) -> TagLimits:
    """The limits of one platform tag, from auditwheel's policy file.

    ``manylinux_x_y_<arch>`` and the legacy ``manylinux1/2010/2014_<arch>`` are limited; a
    ``manylinux_x_y`` the file does not list (manylinux_2_30) takes glibc x.y and the libstdc++
    limits of the newest listed policy with an older glibc. Other tags (``linux_x86_64``,
    ``any``, ``macosx_*``, ``musllinux_*``) are unlimited here. Raises ``ValueError`` for a
    manylinux tag whose architecture or glibc auditwheel has no policy for.
    """
    policies = _policies()
    if match := _LEGACY_MANYLINUX.fullmatch(platform_tag):
        alias, arch = match[1], match[2]
        policy = next((p for p in policies if alias in p.aliases), None)
        if policy is None:
            raise ValueError(f"{platform_tag}: auditwheel's policy file names no {alias}")
        if arch not in policy.symbol_versions:
            raise ValueError(f"{platform_tag}: auditwheel has no {policy.name} policy for {arch}")
        return _limits(platform_tag, alias, policy, arch, policy.glibc)
    if match := _MANYLINUX.fullmatch(platform_tag):
        glibc, arch = (int(match[1]), int(match[2])), match[3]
        label = f"manylinux_{glibc[0]}_{glibc[1]}"
        exact = next((p for p in policies if p.glibc == glibc), None)
        if exact is not None and arch not in exact.symbol_versions:
            raise ValueError(f"{platform_tag}: auditwheel has no {exact.name} policy for {arch}")
        older = [p for p in policies if p.glibc <= glibc and arch in p.symbol_versions]
        if not older:
            raise ValueError(
                f"{platform_tag}: auditwheel has no manylinux policy for glibc <= {glibc[0]}.{glibc[1]} on {arch}"
            )
        return _limits(platform_tag, label, older[-1], arch, glibc)
    return _unlimited(platform_tag)


def _strictest(limits: list[TagLimits]) -> TagLimits:
    """A wheel with several platform tags must load wherever any of them matches: the oldest glibc wins."""
    limited = [lim for lim in limits if lim.limited]
    if not limited:
        return min(limits, key=lambda lim: lim.tag)
    return min(limited, key=lambda lim: (lim.limit("GLIBC") or SymbolVersion("GLIBC", ())).number)


# -- wheels --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleAbi:
    """One shared object in a wheel, judged against the wheel's platform tag."""

    member: str  # flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so
    abi: ElfAbi
    excess: tuple[Excess, ...]  # empty when it fits the tag
    unresolved: tuple[UndefinedSymbol, ...]  # strong undefined symbols no shared object in the wheel defines
    # An abi3 wheel's module: the Python C API symbols it needs that its tag's stable ABI lacks.
    unstable: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return not self.excess and not self.unstable


@dataclass(frozen=True)
class AbiFindings:
    """The static ABI check of one wheel."""

    wheel: str  # file name
    limits: TagLimits  # of the wheel's strictest platform tag
    modules: tuple[ModuleAbi, ...]

    @property
    def fits(self) -> bool:
        return all(m.fits for m in self.modules)

    @property
    def problems(self) -> tuple[str, ...]:
        """One line per shared object that needs more than the tag allows: newer symbol
        versions than its platform tag, then Python C API outside its stable ABI."""
        return tuple(line for _, line in self._problems())

    def _problems(self) -> list[tuple[type[AbiMismatch | StableAbiBroken], str]]:
        versions = [(AbiMismatch, _problem(m, self.limits.label)) for m in self.modules if m.excess]
        abi3 = stable_abi(self.wheel)
        python = [
            (StableAbiBroken, _unstable_problem(m, abi3.tag, abi3.minimum))
            for m in self.modules
            if m.unstable and abi3 is not None
        ]
        return [*versions, *python]

    @property
    def unresolved(self) -> tuple[UndefinedSymbol, ...]:
        """Every module's unresolved symbols, once each, sorted by name."""
        every = {s for m in self.modules for s in m.unresolved}
        return tuple(sorted(every, key=lambda s: (s.name, s.version or "")))

    def errors(self) -> list[AbiMismatch | StableAbiBroken]:
        """The problems as typed errors, one per shared object and kind (for check's problem list)."""
        return [kind(f"{self.wheel}: {line}", _REMEDY[kind]) for kind, line in self._problems()]

    def to_json(self) -> dict[str, object]:
        return {
            "wheel": self.wheel,
            "platform_tag": self.limits.tag,
            "policy": self.limits.policy,
            "limits": {v.family: str(v) for v in self.limits.highest} if self.limits.limited else None,
            "fits": self.fits,
            "problems": list(self.problems),
            "modules": {
                m.member: {
                    "fits": m.fits,
                    "highest": {f: str(v) for f in FAMILIES if (v := m.abi.highest(f)) is not None},
                    "versions": sorted(m.abi.versions),
                    "needed": list(m.abi.needed),
                    "excess": [{"needed": e.needed, "allowed": e.allowed} for e in m.excess],
                    "unresolved": [str(s) for s in m.unresolved],
                    "outside_stable_abi": list(m.unstable),
                }
                for m in self.modules
            },
        }


_REMEDY: dict[type[AbiMismatch | StableAbiBroken], str] = {
    AbiMismatch: "build with an older toolchain (the manylinux image's gcc-toolset, whose libstdc++ "
    "links the new symbols statically) or tag the wheel for a newer platform",
    StableAbiBroken: "build the extension with Py_LIMITED_API set to the tag's Python (0x030A0000 "
    "for cp310-abi3) and only the limited API, or build one wheel per Python (no py_limited_api)",
}


def _unstable_problem(module: ModuleAbi, tag: str, minimum: int) -> str:
    return (
        f"{module.member} is in a {tag} wheel (one file for CPython 3.{minimum} and later) but uses "
        f"{', '.join(module.unstable)}"
    )


@functools.cache
def _stable_abi_added() -> dict[str, tuple[int, int]]:
    """Each stable ABI symbol (functions and data) and the CPython version that added it."""
    import abi3info  # the manifest, ~250 kB of tables: loaded when an abi3 wheel is judged

    members = {**abi3info.FUNCTIONS, **abi3info.DATAS}
    return {symbol.name: (entry.added.major, entry.added.minor) for symbol, entry in members.items()}


def outside_stable_abi(abi: ElfAbi, minimum: int, defined: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The Python C API symbols a module needs (undefined, and not among *defined*, those the
    wheel's own libraries export) that the stable ABI of CPython 3.<minimum> lacks, each with
    why: outside it (CPython's internals, the full API) or added after 3.<minimum>."""
    added = _stable_abi_added()
    found = set()
    for symbol in abi.undefined:
        if not _PYTHON_C_API.match(symbol.name) or symbol.name in defined:
            continue
        since = added.get(symbol.name)
        if since is None:
            found.add(f"{symbol.name} (not in the stable ABI)")
        elif since > (3, minimum):
            found.add(f"{symbol.name} (in the stable ABI since {since[0]}.{since[1]})")
    return tuple(sorted(found))


def _problem(module: ModuleAbi, label: str) -> str:
    ceilings = [e.allowed for e in module.excess if e.allowed is not None]
    forbidden = [e.needed for e in module.excess if e.allowed is None]
    clauses = []
    if ceilings:
        clauses.append("up to " + ", ".join(ceilings))
    if forbidden:
        clauses.append("no " + ", ".join(forbidden))
    needs = ", ".join(e.needed for e in module.excess)
    return f"{module.member} needs {needs} but {label} allows {' and '.join(clauses)}"


def check_wheel_abi(
    wheel_path: Path,
    *,
    max_member_size: int = MAX_MEMBER_SIZE,
    max_ratio: float = MAX_COMPRESSION_RATIO,
) -> AbiFindings:
    """Judge every shared object (``*.so``, ``*.so.N``) in the wheel against its platform tag.

    Raises ``UnsafeMember`` (a ``ValueError``) for a member over the caps, and ``ValueError`` when
    the file name is not a wheel's, the zip is unreadable or a shared object is not ELF.
    """
    try:
        _name, _version, _build, tags = parse_wheel_filename(wheel_path.name)
    except InvalidWheelFilename as exc:
        raise ValueError(f"{wheel_path.name} is not a wheel filename: {exc}") from exc
    limits = _strictest([tag_limits(platform) for platform in sorted({t.platform for t in tags})])
    abis: list[tuple[str, ElfAbi]] = []
    try:
        with zipfile.ZipFile(wheel_path) as wheel:
            for info in wheel.infolist():
                if info.is_dir() or not _SHARED_OBJECT.search(info.filename.rpartition("/")[2]):
                    continue
                data = read_member(wheel, info, max_member_size, max_ratio)
                try:
                    abis.append((info.filename, symbol_versions(data)))
                except ValueError as exc:
                    raise ValueError(f"{info.filename}: {exc}") from exc
    except zipfile.BadZipFile as exc:
        raise ValueError(f"{wheel_path.name} is not a zip archive: {exc}") from exc
    # Resolution inside the wheel is by name: a bundled library (auditwheel's <pkg>.libs/) or a
    # sibling extension that exports the symbol. What remains is the container check's to resolve.
    defined = frozenset(name for _, abi in abis for name in abi.defined)
    abi3 = stable_abi(wheel_path.name)
    modules = tuple(
        ModuleAbi(
            member=member,
            abi=abi,
            excess=limits.excess(abi),
            unresolved=tuple(s for s in abi.undefined if not s.weak and s.name not in defined),
            unstable=outside_stable_abi(abi, abi3.minimum, defined) if abi3 is not None else (),
        )
        for member, abi in abis
    )
    return AbiFindings(wheel=wheel_path.name, limits=limits, modules=modules)


# -- C++ names -----------------------------------------------------------------------------------
