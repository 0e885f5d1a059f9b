"""Finished builds, kept by the hash of everything that went into them: the source's content,
the image's inputs, the torch variant, archs, Pythons and the build's env. An unchanged nightly
rebuild finds its wheel here and starts no container at all (`--rebuild` forces a build).

MAX_JOBS and NVCC_THREADS are left out of the key: they change how fast a wheel is built, not
what is in it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import assert_never

from ..attempt.config import ATTEMPT_SCRIPTS
from ..bounded import FileRefused, regular_file_sha256
from ..errors import SourceUnavailable
from ..image.inputs import IMAGES_DIR, ImageInputs
from ..provenance.statement import STATEMENT_SUFFIX
from ..recipes import IndexLookup, LocalProject, LocalSdist, RemoteSdist, Source
from ..secrets import without_credentials
from ..spec.build_spec import BuildSpec, PinMode

# Bump when a change to the build procedure changes what a wheel contains.
PROCEDURE = "1"
# Bumped whenever what happens to a wheel after cibuildwheel changes (build.py's stamp, check
# and gate), so that results stored by an earlier wheelbuild are not reused as if they had been
# through it.
POSTPROCESS = "stamp+check+gate-1"
_PACKAGE_DIR = Path(__file__).resolve().parent.parent
_SCRIPTS = tuple(IMAGES_DIR / name for name in ATTEMPT_SCRIPTS)
_SKIP_DIRS = {".git", "build", "dist", "__pycache__", ".eggs", ".tox", ".venv"}


def source_digest(path: Path) -> str:
    """sha256 of an sdist file, or of a project tree (relative paths, modes and contents),
    leaving out build output and VCS metadata."""
    if not path.is_dir():
        return regular_file_sha256(path)
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(files):
            file = Path(root) / name
            relative = file.relative_to(path).as_posix()
            # A link is keyed by where it points, and anything but a regular file by its kind:
            # neither is followed or read (a link to /dev/zero, a FIFO, would never end).
            mode = file.lstat().st_mode
            if stat.S_ISLNK(mode):
                digest.update(f"{relative}\0link\0{os.readlink(file)}\0".encode())
            elif not stat.S_ISREG(mode):
                digest.update(f"{relative}\0special {stat.S_IFMT(mode):o}\0".encode())
            else:
                digest.update(f"{relative}\0{mode & 0o111:o}\0".encode())
                digest.update(bytes.fromhex(regular_file_sha256(file)))
    return digest.hexdigest()


def source_key(source: Source) -> str:
    """What a source contributes to the key: a local tree's or file's content, a download's pin."""
    match source:
        case LocalProject(path) | LocalSdist(path):
            try:
                return source_digest(path)
            except FileRefused:
                raise SourceUnavailable(
                    f"{path} is not a regular file (a FIFO, a device, or a link to one)",
                    "give the sdist file itself, or the project's folder",
                ) from None
        case RemoteSdist(_, sha256):
            return sha256
        case IndexLookup(project, version):
            raise AssertionError(f"{project}=={version} is looked up (resolve_lookup) before it is keyed")
        case _:
            assert_never(source)


@cache
def code_digest(package_dir: Path, scripts: tuple[Path, ...] = ()) -> str:
    """sha256 of wheelbuild's own Python code (relative path and content of every .py) and of
    the images/ scripts the build container runs, so a change to the build logic is a new key
    even where the version string stays "0.1.0". The rest of images/ and the example are keyed
    already, as image inputs and as a source."""
    digest = hashlib.sha256()
    for script in scripts:
        digest.update(f"{script.name}\0".encode())
        digest.update(hashlib.sha256(script.read_bytes()).digest())
    for file in sorted(package_dir.rglob("*.py")):
        relative = file.relative_to(package_dir)
        if relative.parts[0] in {"_images", "_example"} or "__pycache__" in relative.parts:
            continue
        digest.update(f"{relative.as_posix()}\0".encode())
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def result_key(
    *,
    source: str,
    image_inputs: str,
    variant: str,
    index_url: str,
    archs: Iterable[int],
    pythons: Iterable[str],
    env: Mapping[str, str],
    tools: Mapping[str, str],
    contract: Mapping[str, bool] | None = None,
) -> str:
    payload = {
        "procedure": PROCEDURE,
        "source": source,
        "image": image_inputs,
        "variant": variant,
        # The index, not who reads it: credentials are no input (a rotated token reuses).
        "index_url": without_credentials(index_url)[0],
        "archs": sorted(archs),
        "pythons": sorted(pythons),
        "env": {k: v for k, v in sorted(env.items()) if k not in {"MAX_JOBS", "NVCC_THREADS"}},
        "tools": dict(sorted(tools.items())),
        # What the build may do beyond its inputs: compile the package's own archs, use the network.
        "contract": dict(sorted((contract or {}).items())),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def inputs_key(spec: BuildSpec, inputs: ImageInputs, pythons: tuple[str, ...]) -> str:
    """The content hash of everything that decides what a build's wheels hold: source, image
    inputs, torch variant and index, archs, Pythons, the build's env, the tools (not MAX_JOBS or
    NVCC_THREADS, which change how fast, not what)."""
    return result_key(
        source=source_key(spec.recipe.source),
        image_inputs=inputs.sha256,
        variant=str(spec.variant),
        index_url=spec.variant.index_url,
        archs=spec.archs,
        pythons=pythons,
        env=spec.recipe.build_env(spec.archs, 1, 1, spec.variant.label, ptx=spec.ptx),
        contract={
            "keep_package_archs": spec.keep_package_archs,
            "keep_package_std": spec.keep_package_std,
            "build_network": spec.build_network,
            # --pin proven writes the torch range into METADATA: other bytes than --pin built's
            "pin_proven": spec.pin is PinMode.PROVEN,
        },
        tools={
            "wheelbuild": f"{_version()}+{code_digest(_PACKAGE_DIR, _SCRIPTS)[:16]}",
            "cibuildwheel": _version("cibuildwheel"),
            "postprocess": POSTPROCESS,
        },
    )


def builder_versions() -> dict[str, str]:
    """What built a wheel, as its provenance statement names it: wheelbuild's version, the
    digest of its code (code_digest) and cibuildwheel's version."""
    return {
        "wheelbuild": _version(),
        "wheelbuild-code": code_digest(_PACKAGE_DIR, _SCRIPTS),
        "cibuildwheel": _version("cibuildwheel"),
    }


def _version(package: str = "wheelbuild") -> str:
    return importlib.metadata.version(package)


def lookup(store: Path, key: str) -> list[Path] | None:
    """The wheels of a finished build with this key, or None."""
    entry = store / key
    wheels = sorted(entry.glob("*.whl")) if (entry / "build-report.json").is_file() else []
    return wheels or None


def save(store: Path, key: str, wheels: Iterable[Path], report: Path) -> None:
    """Keep a finished build: its wheels, each with the provenance statement beside it, and its
    report; the newest of a key wins (a --rebuild replaces the entry). Written beside, then
    renamed: a reader never sees half an entry."""
    store.mkdir(parents=True, exist_ok=True)
    entry = store / key
    staging = Path(tempfile.mkdtemp(dir=store, prefix=f".{key[:12]}-"))
    for wheel in wheels:
        shutil.copy2(wheel, staging / wheel.name)
        statement = wheel.with_name(wheel.name + STATEMENT_SUFFIX)
        if statement.is_file():
            shutil.copy2(statement, staging / statement.name)
    shutil.copy2(report, staging / "build-report.json")
    retired = None
    if entry.exists():
        retired = Path(tempfile.mkdtemp(dir=store, prefix=f".{key[:12]}-old-"))
        os.rename(entry, retired / "entry")
    try:
        os.rename(staging, entry)
    except OSError:  # another build saved the same key just now: theirs is as good as ours
        shutil.rmtree(staging, ignore_errors=True)
    if retired is not None:
        shutil.rmtree(retired, ignore_errors=True)
