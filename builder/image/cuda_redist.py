"""The CUDA 12 compiler layer from NVIDIA's redistributable archives, pinned by sha256.

torch cu12x variants refuse an nvcc of another CUDA major, so they need a CUDA 12 compiler
beside the image's CUDA 13.1. The archives NVIDIA lists in its redist manifest
(images/cuda-12.8-redist.toml, the one file with the pins) are downloaded once per host into a
content-addressed cache, verified, unpacked into a tree laid out as NVIDIA's installer lays
it out (headers and libraries in targets/x86_64-linux, include and lib64 linking there; the
libraries whose headers a torch extension includes keep their headers and link-time stubs
only) and become a small local image that the build image copies /usr/local/cuda-12.8 from.
No registry, no NVIDIA image.

Every archive is treated as hostile: its size is capped by the pin before the download ends,
its hash is checked before it is opened, no member may land outside its folder or be written
through a link, and every link in the tree must resolve inside it.

No Docker here: engine/ turns the tree into an image.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from ..errors import BadArgument, CudaRedistMismatch, CudaRedistUnreachable
from ..index import reader
from ..secrets import redact_url
from ..variants import CudaCompiler
from .names import LAYER_REPOSITORY

DEFAULT_REDIST_URL = "https://developer.download.nvidia.com/compute/cuda/redist"
REDIST_URL_ENV = "WHEELBUILD_CUDA_REDIST_URL"  # a mirror, or an air-gapped site's copy
PINS_ENV = "WHEELBUILD_CUDA12_PINS"  # another pins file (a site's own, or a test's stand-ins)
PINS_FILE = "cuda-12.8-redist.toml"
CONNECT_TIMEOUT_S = reader.ARCHIVE.timeout_s  # an unreachable server fails the build in seconds, not minutes
CHUNK = 1 << 20
# Caps for a member of an archive whose pin gives no size: nvcc's largest file is ~100 MB.
MAX_MEMBER = 2 * 1024**3
MAX_TREE = 16 * 1024**3
# Where NVIDIA's installer puts the headers and libraries; nvcc uses it when it is there.
TARGET_DIR = PurePosixPath("targets/x86_64-linux")
# Part of the layer's hash: a tree or layer image unpacked another way is never reused.
LAYOUT = "nvidia-targets-1"


@dataclass(frozen=True)
class RedistArchive:
    name: str  # cuda_nvcc
    version: str  # 12.8.93
    path: str  # relative to the redist base URL
    sha256: str
    size: int | None  # bytes, as the manifest lists it
    headers_only: bool  # keep include/ only: a torch extension compiles against its headers

    @property
    def file_name(self) -> str:
        return PurePosixPath(self.path).name

    @property
    def top(self) -> str:
        """The one folder every member of the archive sits in."""
        return self.file_name.removesuffix(".tar.xz")

    @property
    def pin(self) -> str:
        return f"{self.name}={self.version}@sha256:{self.sha256}"


@dataclass(frozen=True)
class CudaLayer:
    version: str  # 12.8: installed as /usr/local/cuda-12.8
    release: str  # 12.8.1
    manifest: str  # redistrib_12.8.1.json
    archives: tuple[RedistArchive, ...]

    @property
    def home(self) -> str:
        return CudaCompiler.cuda12(self.version).home

    @property
    def pins(self) -> str:
        """Every archive's pin, one string: the image labels carry it."""
        return " ".join(a.pin for a in self.archives)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(f"{LAYOUT} {self.version} {self.pins}".encode()).hexdigest()

    @property
    def tag(self) -> str:
        """The local image holding this layer: named by the hash of its pins."""
        return f"{LAYER_REPOSITORY}:{self.sha256[:16]}"

    @property
    def labels(self) -> dict[str, str]:
        return {
            "org.wheelbuild.cuda12.version": self.version,
            "org.wheelbuild.cuda12.release": self.release,
            "org.wheelbuild.cuda12.manifest": self.manifest,
            "org.wheelbuild.cuda12.pins": self.pins,
        }


def pins_path(images_dir: Path, env: Mapping[str, str]) -> Path:
    return Path(env[PINS_ENV]) if env.get(PINS_ENV) else images_dir / PINS_FILE


def load_layer(path: Path) -> CudaLayer:
    """The pins file, validated: a typo in it is an error now, not a wrong toolkit later."""
    try:
        data = tomllib.loads(path.read_text())
        archives = tuple(
            RedistArchive(
                name=str(entry["name"]),
                version=str(entry["version"]),
                path=str(entry["path"]),
                sha256=str(entry["sha256"]).lower(),
                size=int(entry["size"]) if "size" in entry else None,
                headers_only=bool(entry.get("headers_only", False)),
            )
            for entry in data["archive"]
        )
        layer = CudaLayer(
            version=str(data["version"]),
            release=str(data["release"]),
            manifest=str(data["manifest"]),
            archives=archives,
        )
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise BadArgument(
            f"the CUDA 12 pins file {path} is unreadable or incomplete ({exc})",
            f"restore images/{PINS_FILE}, or fix the file {PINS_ENV} names",
        ) from None
    for archive in archives:
        if len(archive.sha256) != 64 or not archive.path.endswith(".tar.xz"):
            raise BadArgument(
                f"pin of {archive.name} in {path} is malformed (sha256 of 64 hex digits and a .tar.xz path needed)",
                "copy name, version, relative_path and sha256 from NVIDIA's redistrib manifest",
            )
    if not any(a.name == "cuda_nvcc" for a in archives):
        raise BadArgument(f"{path} pins no cuda_nvcc archive", "add the cuda_nvcc entry of the manifest")
    return layer


def redist_url(env: Mapping[str, str]) -> str:
    return (env.get(REDIST_URL_ENV) or DEFAULT_REDIST_URL).rstrip("/")


def remedy(base_url: str) -> str:
    """What to do when the CUDA 12 layer's archives cannot be downloaded from `base_url`."""
    return (
        f"point {REDIST_URL_ENV} at a mirror of NVIDIA's redist tree (now {base_url}), "
        "or pass --cuda12-image with an NVIDIA CUDA 12.8+ devel image pinned by digest"
    )


def _progress(name: str, size: str, on_line: Callable[[str], None]) -> Callable[[int], None]:
    """A line every 64 MiB received."""
    next_report = 64 * CHUNK

    def heard(received: int) -> None:
        nonlocal next_report
        if received >= next_report:
            on_line(f"  {name}: {received / 1024**2:.0f} MiB{size}")
            next_report += 64 * CHUNK

    return heard


def _fetch_archive(
    url: str, part: reader.Sink, kind: reader.Kind, on_bytes: Callable[[int], None], base_url: str
) -> str:
    """The sha256 of *url*, streamed into *part*, no more than its pin's size."""
    try:
        return reader.download(url, part, kind, on_bytes=on_bytes)
    except reader.TooLarge:
        raise CudaRedistMismatch(
            f"{redact_url(url)} sent more than the {kind.cap} bytes its pin allows",
            "the mirror serves another file under that name: fix the mirror",
        ) from None
    except reader.HttpRefused as refused:
        raise CudaRedistUnreachable(
            f"could not download the CUDA 12 compiler from {redact_url(url)} ({refused.why})",
            remedy(redact_url(base_url)),
        ) from None


def _download(archive: RedistArchive, base_url: str, dest: Path, on_line: Callable[[str], None]) -> None:
    """Stream one archive into `dest`, hashing as it comes; anything wrong leaves nothing."""
    url = f"{base_url}/{archive.path}"
    size = f" ({archive.size / 1024**2:.0f} MiB)" if archive.size else ""
    on_line(f"downloading {archive.file_name}{size} from {base_url}")
    kind = replace(reader.ARCHIVE, cap=archive.size if archive.size is not None else MAX_MEMBER)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=dest.parent, prefix=".part-", delete=False) as part:
        try:
            found = _fetch_archive(url, part, kind, _progress(archive.file_name, size, on_line), base_url)
            if found != archive.sha256:
                raise CudaRedistMismatch(
                    f"{archive.file_name} from {base_url} has sha256 {found}, "
                    f"but its pin says {archive.sha256}",
                    "the download was altered or the mirror is stale; nothing was kept. "
                    "Fix the mirror; never edit a pin to match a download",
                )
        except BaseException:
            part.close()
            os.unlink(part.name)
            raise
    os.replace(part.name, dest)


def fetch_archives(
    layer: CudaLayer, base_url: str, cache: Path, on_line: Callable[[str], None]
) -> dict[str, Path]:
    """Every archive of the layer, verified, from the cache or downloaded into it once."""
    found: dict[str, Path] = {}
    for archive in layer.archives:
        path = cache / "cuda-redist" / "sha256" / archive.sha256 / archive.file_name
        if not path.is_file():
            _download(archive, base_url, path, on_line)
        found[archive.name] = path
    return found


def _kept(archive: RedistArchive, inside: PurePosixPath) -> bool:
    """Whether a member (relative to the archive's folder) belongs in the layer."""
    if archive.headers_only:
        # Headers, and the stubs a link needs (`libraries=["cublas"]`); the real libraries
        # (hundreds of MB) are torch's to bring.
        return inside.parts[0] == "include" or (
            inside.parent == PurePosixPath("lib/stubs") and inside.suffix == ".so"
        )
    if inside.name.endswith("_static.a"):
        # nvcc links libcudart_static.a by default (--cudart static) and CMake records it. The
        # other static libraries (libnvptxcompiler_static.a, ...) are large, nvcc never links
        # them unasked, and a torch extension links the shared libraries torch ships.
        return archive.name == "cuda_cudart" and inside.name == "libcudart_static.a"
    return True


def _member_target(archive: RedistArchive, member: tarfile.TarInfo) -> PurePosixPath | None:
    """Where a member lands in the layer, relative to CUDA_HOME; None for what is not kept."""
    parts = PurePosixPath(member.name).parts
    if (
        not parts
        or parts[0] != archive.top
        or any(p in ("..", "") for p in parts)
        or member.name.startswith("/")
    ):
        raise CudaRedistMismatch(
            f"{archive.file_name} holds {member.name!r}, outside its folder {archive.top}/",
            "the archive is not NVIDIA's: fix the mirror",
        )
    inside = PurePosixPath(*parts[1:]) if len(parts) > 1 else None
    if inside is None or not _kept(archive, inside):
        return None
    if inside.parts[0] in ("include", "lib"):
        return TARGET_DIR / inside  # where NVIDIA's installer puts them, and nvcc.profile looks
    return inside


def _refuse(archive: RedistArchive, what: str) -> CudaRedistMismatch:
    return CudaRedistMismatch(f"{archive.file_name}: {what}", "the archive is not NVIDIA's: fix the mirror")


def _check_parents(archive: RedistArchive, dest: Path, target: PurePosixPath) -> None:
    """No member is written through a symlink an earlier member made: a chain of links that
    each stay inside could otherwise walk a later one out of the tree."""
    here = dest
    for part in target.parent.parts:
        here = here / part
        if here.is_symlink():
            raise _refuse(archive, f"{target} would be written through the symlink {here.relative_to(dest)}")


def _unpack_archive(
    archive: RedistArchive, source: Path, dest: Path, written: int
) -> tuple[int, list[PurePosixPath]]:
    """One verified archive into `dest`: regular files, directories and symlinks that stay
    inside; nothing else. Returns the bytes written so far and the stubs it brought."""
    stubs: list[PurePosixPath] = []
    with tarfile.open(source, mode="r|xz") as tar:
        for member in tar:
            target = _member_target(archive, member)
            if target is None:
                continue
            _check_parents(archive, dest, target)
            path = dest / target
            if member.isdir():
                path.mkdir(parents=True, exist_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                path.unlink()  # never write through a link an earlier member left
            if member.issym():
                # Judged where it sits in its archive: a link that leaves the archive's folder
                # is refused even where the deeper targets/ folder would keep it in the tree.
                link = PurePosixPath(member.linkname)
                in_archive = PurePosixPath(*PurePosixPath(member.name).parts[1:])
                if link.is_absolute() or os.path.normpath(in_archive.parent / link).startswith(".."):
                    raise _refuse(archive, f"symlink {member.name} points outside ({member.linkname})")
                path.unlink(missing_ok=True)
                path.symlink_to(link)
                continue
            if not member.isfile():
                continue  # devices, fifos, hard links: not in NVIDIA's archives, never kept
            written += member.size
            if member.size > MAX_MEMBER or written > MAX_TREE:
                raise _refuse(archive, f"{member.name} would unpack past the size cap")
            extracted = tar.extractfile(member)
            assert extracted is not None
            with path.open("wb") as out:
                shutil.copyfileobj(extracted, out, CHUNK)
            path.chmod(0o755 if member.mode & 0o111 else 0o644)
            if archive.headers_only and target.parent == TARGET_DIR / "lib" / "stubs":
                stubs.append(target)
    return written, stubs


def _lay_out(dest: Path, stubs: list[PurePosixPath]) -> None:
    """The links of NVIDIA's own installer, and a link-time name for each stub."""
    for name, inside in (("include", TARGET_DIR / "include"), ("lib64", TARGET_DIR / "lib")):
        if os.path.lexists(dest / name):
            raise CudaRedistMismatch(
                f"an archive of the CUDA layer holds {name}/ at its top, where NVIDIA's hold none",
                "the archive is not NVIDIA's: fix the mirror",
            )
        # torch's cpp_extension uses -I$CUDA_HOME/include and -L$CUDA_HOME/lib64.
        (dest / name).symlink_to(inside)
    for stub in stubs:
        # g++ -L$CUDA_HOME/lib64 -lcublas (torch's link line) finds lib/libcublas.so, so it
        # points at the stub. The stub's soname (libcublas.so.12) becomes the extension's
        # NEEDED entry, and no file of that name is here: at run time the loader finds torch's
        # own cuBLAS, never the stub. nvcc alone would also find lib/stubs; g++ would not.
        named = dest / stub.parent.parent / stub.name
        if not os.path.lexists(named):
            named.symlink_to(PurePosixPath("stubs") / stub.name)


def _check_links(dest: Path) -> None:
    """Every symlink in the tree, followed all the way, stays inside it."""
    root = os.path.realpath(dest)
    for folder, dirs, files in os.walk(dest):
        for name in dirs + files:
            path = os.path.join(folder, name)
            if os.path.islink(path) and os.path.commonpath([root, os.path.realpath(path)]) != root:
                raise CudaRedistMismatch(
                    f"the CUDA layer's {os.path.relpath(path, dest)} resolves outside it "
                    f"({os.readlink(path)})",
                    "an archive is not NVIDIA's: fix the mirror",
                )


def unpack(layer: CudaLayer, archives: Mapping[str, Path], dest: Path) -> None:
    """Unpack the verified archives into `dest` (the future CUDA_HOME), laid out as NVIDIA's
    installer does: headers and libraries in targets/x86_64-linux, include and lib64 links."""
    written = 0
    stubs: list[PurePosixPath] = []
    for archive in layer.archives:
        written, brought = _unpack_archive(archive, archives[archive.name], dest, written)
        stubs += brought
    _lay_out(dest, stubs)
    _check_links(dest)
    if not (dest / "bin" / "nvcc").is_file():
        raise CudaRedistMismatch(
            f"the unpacked CUDA {layer.version} layer has no bin/nvcc", "check the cuda_nvcc pin and archive"
        )


def _tree(layer: CudaLayer, cache: Path) -> Path:
    return cache / "cuda-redist" / "trees" / layer.sha256[:16]


def unreachable_archive(layer: CudaLayer, base_url: str, cache: Path) -> str | None:
    """Why the layer's tree cannot be made here ("<url> does not answer (why)"), or None when it
    can: the tree or every archive is kept under `cache`, or the server answers a HEAD request
    for each archive that is not (nothing is downloaded)."""
    if (_tree(layer, cache) / ".complete").is_file():
        return None
    for archive in layer.archives:
        if (cache / "cuda-redist" / "sha256" / archive.sha256 / archive.file_name).is_file():
            continue
        url = f"{base_url}/{archive.path}"
        try:
            reader.probe(url, method="HEAD", timeout=CONNECT_TIMEOUT_S)
        except reader.HttpRefused as refused:
            return f"{redact_url(url)} does not answer ({refused.why})"
    return None


def prepare_tree(layer: CudaLayer, base_url: str, cache: Path, on_line: Callable[[str], None]) -> Path:
    """The unpacked layer (its CUDA_HOME), made once per set of pins and reused after."""
    tree = _tree(layer, cache)
    if (tree / ".complete").is_file():
        return tree
    archives = fetch_archives(layer, base_url, cache, on_line)
    on_line(f"unpacking CUDA {layer.release} ({len(archives)} archives) into {tree}")
    tree.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=tree.parent, prefix=".unpack-"))
    try:
        unpack(layer, archives, staging)
        (staging / ".complete").write_text(layer.pins + "\n")
        shutil.rmtree(tree, ignore_errors=True)
        os.replace(staging, tree)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return tree
