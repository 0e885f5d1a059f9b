"""A package's build files, read as text before anything runs, for what makes it build here:
the switches that keep it from downloading a prebuilt wheel or from building CPU-only on a
machine without a GPU, the CUDA archs it names for nvcc itself, and the sources it names that
its sdist does not hold.

The source is hostile: an sdist is read as one capped stream (bounded.tar_gz_members, the same
reader requires_python.py uses), at most SDIST_MEMBERS members and SDIST_LIMIT bytes
decompressed, each build file at most FILE_LIMIT bytes; nothing is extracted, imported or run.
What the survey refused or could not read is said in `refused`, never raised. Reads the source's files, never runs them: no Docker, no subprocess."""

from __future__ import annotations

import ast
import os
import posixpath
import re
import stat
import tarfile
import tomllib
import zipfile
import zlib
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..bounded import ArchiveRefused, FileRefused, read_bounded, tar_gz_members
from ..units import format_bytes
from .survey_setup import SetupFindings, archs_in_string, read_setup_py
from .survey_vars import FoundArchVar, FoundJobsVar, build_vars

__all__ = ["FoundArchVar", "FoundJobsVar", "Survey", "Switch", "survey_source"]

FILE_LIMIT = 1 << 20  # bytes of one build file: real setup.py files are under 100 KiB
SDIST_LIMIT = 1 << 30  # bytes decompressed from an sdist (flash-attn 2.8.3 with cutlass: 97 MB)
SDIST_MEMBERS = 100_000  # members of an sdist, or files of a project directory, looked at
BUILD_FILES = ("setup.py", "pyproject.toml", "setup.cfg", "CMakeLists.txt")


@dataclass(frozen=True)
class Switch:
    name: str  # CAUSAL_CONV1D_FORCE_BUILD
    value: str  # TRUE: what the build file compares it against to take the build-from-source branch
    why: str  # one short line for the user


@dataclass(frozen=True)
class Survey:
    switches: tuple[Switch, ...]  # to set in the build's env
    package_archs: tuple[int, ...]  # SM numbers the build files name for nvcc themselves, sorted, unique
    downloads_prebuilt: bool  # the build files download a prebuilt binary (a .whl, a .so)
    cuda_needs_gpu: bool  # the CUDA extension is gated on torch.cuda.is_available()
    missing_sources: tuple[str, ...]  # sources the build files name literally that the source lacks
    files_read: tuple[str, ...]  # the build files whose text the findings come from
    refused: tuple[str, ...] = field(default=())  # what was refused or could not be read, one line each
    # pyproject.toml's [build-system] requires, torch left out (the variant's is installed): the
    # build runs without isolation, so they are installed before it
    build_requires: tuple[str, ...] = field(default=())
    # The C++ standards the build files give the compilers (-std=c++17, CMAKE_CXX_STANDARD 17),
    # each once, as written: the build raises an older one to what torch's headers require.
    cxx_standards: tuple[str, ...] = field(default=())
    # Variables the build reads its CUDA arch list (in a form of its own) and its parallelism from.
    arch_vars: tuple[FoundArchVar, ...] = field(default=())
    jobs_vars: tuple[FoundJobsVar, ...] = field(default=())


# Names that decide "build CUDA from source here", with why each is set. The value always comes
# from the file's own comparison; a name that says skip, disable or no is never set.
_FORCE_BUILD = re.compile(r".*FORCE_BUILD.*")  # the CachedWheelsCommand family
_FORCE_CUDA = re.compile(r"(?:.*_)?FORCE_CUDA")  # pytorch3d, mmcv, xformers, torch-scatter, CUROPE_
_FORCE_ONLY_CUDA = re.compile(r"(?:.*_)?FORCE_ONLY_CUDA")  # torch-scatter & co: drops the CPU kernels
_WITH_CUDA = re.compile(r"(?:.*_)?WITH_CUDA|.*BUILD_CUDA_EXT.*|.*_CUDA_EXT|(?:.*_)?WITH_OPS")
_BUILD_OPS = re.compile(r"(?:.*_)?BUILD_OPS")  # deepspeed: else its ops compile at first use
_NEVER = re.compile(r"(?:^|_)(?:SKIP|NO|NOT|DISABLE|DISABLED)(?:_|$)")


def _why(name: str, value: str, setup: SetupFindings) -> str | None:
    if _NEVER.search(name):
        return None
    if _FORCE_BUILD.fullmatch(name):
        if setup.downloads_prebuilt:
            return f"setup.py downloads a prebuilt wheel unless it is {value}"
        return f"setup.py builds from source only when it is {value}"
    if _FORCE_CUDA.fullmatch(name) or _FORCE_ONLY_CUDA.fullmatch(name):
        if setup.cuda_needs_gpu:
            return f"setup.py builds its CUDA extension only on a machine with a GPU unless it is {value}"
        return f"setup.py builds its CUDA extension only when it is {value}"
    if _WITH_CUDA.fullmatch(name):
        return f"setup.py builds its CUDA extension only when it is {value}"
    if _BUILD_OPS.fullmatch(name):
        return f"setup.py compiles its CUDA ops into the wheel only when it is {value}"
    return None


def _switches(setup: SetupFindings) -> tuple[Switch, ...]:
    names = {read.name for read in setup.env_reads}
    found = []
    for read in setup.env_reads:
        # FORCE_ONLY_CUDA builds the CUDA kernels without the CPU ones, so the wheel fails on a
        # machine without a GPU; FORCE_CUDA, where the file reads it too, builds both.
        if _FORCE_ONLY_CUDA.fullmatch(read.name) and any(_FORCE_CUDA.fullmatch(n) for n in names):
            continue
        if why := _why(read.name, read.value, setup):
            found.append(Switch(read.name, read.value, why))
    return tuple(found)


@dataclass(frozen=True)
class _Tree:
    files: Mapping[str, bytes]  # the build files read, by name
    names: frozenset[str] | None  # every file the source holds, from its root; None: not all seen
    refused: tuple[str, ...]


def _member_path(name: str) -> tuple[str, str] | None:
    """(root, path below it) of an archive member; None for a name that is absolute or climbs
    out (..): no part of the tree, whatever extracting it would overwrite."""
    if name.startswith("/") or "\\" in name or ".." in name.split("/"):
        return None
    parts = [part for part in name.split("/") if part not in ("", ".")]
    return (parts[0], "/".join(parts[1:])) if parts else None


class _Collect:
    """The build files and the file names of an archive, member by member."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.names: set[str] = set()
        self.refused: list[str] = []
        self.root: str | None = None

    def add(self, name: str, regular: bool, held: bool, size: int, read: Callable[[], bytes]) -> None:
        """One member: *regular* a plain file, *held* a file the tree holds (a link too), *read*
        its first FILE_LIMIT + 1 bytes, called only for a build file."""
        where = _member_path(name)
        self.root = self.root or (where[0] if where else None)
        if where is None or where[0] != self.root or not where[1]:
            return
        rel = where[1]
        if held:
            self.names.add(rel)
        if rel not in BUILD_FILES:
            return
        self.files.pop(rel, None)  # a later member of the same name is the one that counts
        if not regular:
            self.refused.append(f"{rel} is not a regular file: not followed")
        elif size > FILE_LIMIT or len(data := read()) > FILE_LIMIT:
            self.refused.append(f"{rel} is over {format_bytes(FILE_LIMIT)}: not read")
        else:
            self.files[rel] = data

    def tree(self, cut_short: str | None = None) -> _Tree:
        if cut_short is not None:
            return _Tree(self.files, None, (*self.refused, cut_short))
        return _Tree(self.files, frozenset(self.names), tuple(self.refused))


def _tar_read(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    stream = archive.extractfile(member)
    return stream.read(FILE_LIMIT + 1) if stream else b""


def _tar_tree(path: Path) -> _Tree:
    collect = _Collect()
    try:
        with closing(tar_gz_members(path, SDIST_LIMIT, SDIST_MEMBERS)) as members:
            for member, archive in members:
                held = member.isfile() or member.issym() or member.islnk()
                read = partial(_tar_read, archive, member)
                collect.add(member.name, member.isfile(), held, member.size, read)
    except ArchiveRefused as exc:
        return collect.tree(f"the sdist has {exc}: read no further")
    except (OSError, EOFError, tarfile.TarError, zlib.error) as exc:
        return collect.tree(f"cannot read the sdist: {exc}")
    return collect.tree()


def _zip_read(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    with archive.open(info) as stream:
        return stream.read(FILE_LIMIT + 1)  # the size it declares may lie


def _zip_tree(path: Path) -> _Tree:
    collect = _Collect()
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            if len(infos) > SDIST_MEMBERS:
                return collect.tree(f"the sdist has more than {SDIST_MEMBERS} members: not read")
            for info in infos:
                regular = not info.is_dir() and not stat.S_ISLNK(info.external_attr >> 16)
                read = partial(_zip_read, archive, info)
                collect.add(info.filename, regular, not info.is_dir(), info.file_size, read)
    # zipfile raises RuntimeError for an encrypted member, NotImplementedError for an unknown method
    except (OSError, EOFError, zipfile.BadZipFile, zlib.error, RuntimeError, NotImplementedError) as exc:
        return collect.tree(f"cannot read the sdist: {exc}")
    return collect.tree()


def _dir_names(root: Path) -> frozenset[str] | None:
    """Every file under a project directory (hidden folders left out, links not followed),
    relative to it; None past SDIST_MEMBERS."""
    found: set[str] = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found |= {Path(folder, f).relative_to(root).as_posix() for f in files}
        if len(found) > SDIST_MEMBERS:
            return None
    return frozenset(found)


def _dir_tree(root: Path) -> _Tree:
    files: dict[str, bytes] = {}
    refused: list[str] = []
    for name in BUILD_FILES:
        try:
            files[name] = read_bounded(root / name, FILE_LIMIT)
        except FileNotFoundError:
            continue
        except FileRefused as exc:
            what = f"over {format_bytes(FILE_LIMIT)}" if exc.too_big else "not a regular file"
            refused.append(f"{name} is {what}: not read")
        except OSError as exc:
            refused.append(f"cannot read {name}: {exc.strerror or exc}")
    names = _dir_names(root)
    if names is None:
        refused.append(f"the project has more than {SDIST_MEMBERS} files: not all seen")
    return _Tree(files, names, tuple(refused))


def _tree(project_dir: Path, package: str) -> _Tree:
    path = project_dir if package == "." else project_dir / package
    if path.is_dir():
        return _dir_tree(path)
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        return _Tree({}, None, (f"cannot read {package}: {exc.strerror or exc}",))
    if size > SDIST_LIMIT:
        return _Tree({}, None, (f"{package} is over {format_bytes(SDIST_LIMIT)}: not read",))
    if package.endswith(".tar.gz"):
        return _tar_tree(path)
    if package.endswith(".zip"):
        return _zip_tree(path)
    return _Tree({}, None, (f"{package} is not an sdist the survey reads (.tar.gz, .zip)",))


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _code_lines(text: str) -> list[str]:
    """Lines of a CMake, TOML or cfg file with their comments cut off."""
    return [line.split("#", 1)[0] for line in text.splitlines() if not line.lstrip().startswith(";")]


_CMAKE_ARCHS = re.compile(r"CUDA_ARCHITECTURES\b[\s\"'=:]*((?:\d{2,3}[a-z]?(?:-real|-virtual)?[\s;,\"']*)+)")
_USES_CMAKE = re.compile(r"cmake|skbuild|scikit.build", re.IGNORECASE)


# -std=c++17, -std=gnu++14, "-std=c++1z" in a setup.py's flags; CMAKE_CXX_STANDARD 17 (and CUDA's).
_STD_FLAG = re.compile(r"(?<![\w-])--?std=(?:c|gnu)\+\+\w+")
_CMAKE_STANDARD = re.compile(r"CMAKE_(?:CXX|CUDA)_STANDARD\b[\s\"'=:]*(\d{2})")


def _setup_standards(text: str) -> list[str]:
    """The -std flags a setup.py gives: its string constants that are one (not its docstrings'
    prose); read with a regex where it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _STD_FLAG.findall("\n".join(_code_lines(text)))
    return [
        node.value.strip()
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and _STD_FLAG.fullmatch(node.value.strip())
    ]


def _cxx_standards(setup_py: str | None, texts: list[str]) -> tuple[str, ...]:
    found = _setup_standards(setup_py) if setup_py is not None else []
    for text in texts:
        lines = "\n".join(_code_lines(text))
        found += _STD_FLAG.findall(lines)
        found += [f"CMAKE_CXX_STANDARD {year}" for year in _CMAKE_STANDARD.findall(lines)]
    return tuple(dict.fromkeys(found))


def _text_archs(text: str) -> set[int]:
    """SM numbers named for nvcc in a CMake, TOML or cfg file: CUDA_ARCHITECTURES lists
    (``set(CMAKE_CUDA_ARCHITECTURES 80 90)``, ``-DCMAKE_CUDA_ARCHITECTURES=80;90``) and flags."""
    found: set[int] = set()
    for line in _code_lines(text):
        for match in _CMAKE_ARCHS.finditer(line):
            found |= {int(n) for n in re.findall(r"\d{2,3}", match[1])}
        found |= archs_in_string(line)
    return found


def _missing(sources: tuple[str, ...], names: frozenset[str] | None) -> tuple[str, ...]:
    """The named sources the tree lacks. Not one the build makes from a twin it holds (a .cu
    copied from its .cpp), nor a bare file name the tree holds in some folder (the build joins
    it to that folder); nothing when not every file was seen."""
    if names is None:
        return ()
    stems = {posixpath.splitext(n)[0] for n in names}
    bases = {posixpath.basename(n) for n in names}
    return tuple(
        s
        for s in sources
        if s not in names and posixpath.splitext(s)[0] not in stems and not ("/" not in s and s in bases)
    )


# Installed by the build itself, pinned by the variant: a package's own torch bound (grouped-gemm
# 0.3.0 asks for torch<2.8) would otherwise replace the torch the wheel is built for.
_NOT_BUILD_REQUIRES = frozenset({"torch"})


def build_requires(pyproject: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """([build-system] requires, normalised, torch left out; what was refused, one line each)."""
    try:
        table = tomllib.loads(pyproject).get("build-system", {})
    except (tomllib.TOMLDecodeError, RecursionError) as error:
        return (), (f"pyproject.toml does not parse: {error}",)
    requires = table.get("requires", []) if isinstance(table, dict) else []
    if not isinstance(requires, list):
        return (), ("pyproject.toml's build-system requires is not a list: not installed",)
    kept: list[str] = []
    refused: list[str] = []
    for text in requires:
        try:
            requirement = Requirement(str(text))
        except InvalidRequirement:
            refused.append(f"build requirement {str(text)[:80]!r} is not a requirement: not installed")
            continue
        if requirement.url:
            refused.append(f"build requirement {requirement.name} names a URL: not installed")
        elif canonicalize_name(requirement.name) not in _NOT_BUILD_REQUIRES:
            kept.append(str(requirement))
    return tuple(dict.fromkeys(kept)), tuple(refused)


def survey_source(project_dir: Path, package: str) -> Survey:
    """What the build files of a source say (see the module's docstring). *project_dir* and
    *package* as sources.PreparedSource holds them: a directory and "." (a project), or the
    directory of an sdist and its file name (.tar.gz or .zip)."""
    tree = _tree(project_dir, package)
    refused = list(tree.refused)
    setup = read_setup_py(_text(tree.files["setup.py"])) if "setup.py" in tree.files else None
    if setup is not None and not setup.parsed:
        refused.append("setup.py does not parse: read with regexes")
    read = ["setup.py"] if setup else []
    archs = set(setup.archs) if setup else set()
    texts = {name: _text(data) for name, data in tree.files.items() if name != "setup.py"}
    # CMakeLists.txt counts only where CMake builds the package (torch-scatter ships one for
    # its C++ library beside a setup.py that never runs it).
    drivers = "\n".join(
        "\n".join(_code_lines(t))
        for t in (texts.get("pyproject.toml", ""), _text(tree.files.get("setup.py", b"")))
    )
    uses_cmake = _USES_CMAKE.search(drivers) is not None
    for name in BUILD_FILES:  # in this order, whatever the archive's
        if name in texts and (name != "CMakeLists.txt" or uses_cmake):
            archs |= _text_archs(texts[name])
            read.append(name)
    requires, requires_refused = build_requires(texts.get("pyproject.toml", ""))
    setup_text = _text(tree.files["setup.py"]) if setup else None
    standards = _cxx_standards(setup_text, [texts[name] for name in read if name != "setup.py"])
    arch_vars, jobs_vars = build_vars(setup_text, setup, texts.get("CMakeLists.txt"), uses_cmake)
    return Survey(
        switches=_switches(setup) if setup else (),
        package_archs=tuple(sorted(archs)),
        downloads_prebuilt=bool(setup and setup.downloads_prebuilt),
        cuda_needs_gpu=bool(setup and setup.cuda_needs_gpu),
        missing_sources=_missing(setup.sources, tree.names) if setup else (),
        files_read=tuple(read),
        refused=(*refused, *requires_refused),
        build_requires=requires,
        cxx_standards=standards,
        arch_vars=arch_vars,
        jobs_vars=jobs_vars,
    )
