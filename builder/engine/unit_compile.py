"""Calibration's compiles, one unit alone in a container of its own (its own cgroup, so its peak
is the unit's): torch's headers unpacked once into a volume, nvcc's command line, and the mark
images/wheelbuild-calibrate-unit ends with, read back as a UnitResult."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types

from .. import secrets
from ..errors import TorchIndexUnreachable
from ..image.names import TORCH_VOLUME_PREFIX
from ..image.ports import OnLine
from .containers import StartContainer, remove_all, script_volume, transient_retry
from .ports import UnitCompile, UnitResult

CALIBRATE_MARK = "wheelbuild-calibrate:"  # the line images/wheelbuild-calibrate-unit ends with
TORCH_HEADERS_DIR = "/opt/wheelbuild-torch"


@transient_retry
def ensure_torch_headers(
    client: Any, start: StartContainer, image: str, requirement: str, index_url: str, on_line: OnLine
) -> str:
    """A volume with torch unpacked (no dependencies: only its headers are needed), made once
    per torch requirement and index. The index URL travels in a mounted file, never in a
    command or the container's env (docker inspect shows those)."""
    name = TORCH_VOLUME_PREFIX + hashlib.sha256(f"{requirement} {index_url}".encode()).hexdigest()[:16]
    try:
        client.volumes.get(name)
        start(
            image, ["test", "-f", f"{TORCH_HEADERS_DIR}/.complete"], remove=True, network_disabled=True,
            volumes={name: {"bind": TORCH_HEADERS_DIR, "mode": "ro"}},
        )  # fmt: skip
        return name
    except (docker.errors.NotFound, docker.errors.ContainerError):
        pass
    on_line(f"unpacking {requirement} into volume {name} (its headers, for compiling units alone)")
    script, mount = script_volume("wheelbuild-torch-headers")
    with tempfile.TemporaryDirectory(prefix="wheelbuild-secrets-") as work:
        index_file = Path(work) / secrets.TORCH_INDEX_FILE
        index_file.touch(mode=0o600)
        index_file.write_text(index_url)
        try:
            start(
                image,
                ["sh", script, f"{secrets.MOUNT}/{secrets.TORCH_INDEX_FILE}", TORCH_HEADERS_DIR],
                environment={"TORCH_REQUIREMENT": requirement},
                volumes={
                    name: {"bind": TORCH_HEADERS_DIR, "mode": "rw"},
                    work: {"bind": secrets.MOUNT, "mode": "ro"},
                    **mount,
                },
                remove=True,
            )
        except docker.errors.ContainerError as error:
            raise _torch_not_installed(requirement, error) from None
    return name


def _torch_not_installed(requirement: str, error: docker.errors.ContainerError) -> TorchIndexUnreachable:
    """pip's last word on why, not the index URL (it may hold credentials; pip redacts them)."""
    output = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else ""
    said = [line for line in output.splitlines() if line.startswith("ERROR:")]
    return TorchIndexUnreachable(
        f"pip could not install {requirement} from the torch index in the build image"
        + (f": {said[-1].removeprefix('ERROR: ')}" if said else f" (exit {error.exit_status})"),
        "pass --torch-index-url with an index this machine reaches (https://pypi.org/simple has the "
        "cu130 builds), or set WHEELBUILD_TORCH_INDEX_URL",
        details="\n".join(output.splitlines()[-10:]),
    )


def compile_unit_alone(start: StartContainer, job: UnitCompile) -> UnitResult:
    """Run one unit's compile in a container of its own and read back what it cost."""
    script, mount = script_volume("wheelbuild-calibrate-unit")
    # It raises the unit's -std to what torch's headers require, as a build's compilers do.
    cxx, cxx_mount = script_volume("wheelbuild-cxx")
    container = start(
        job.image,
        ["sh", script, *unit_compile_command(job)],
        run_id=job.run_id,
        detach=True,
        environment={"WHEELBUILD_TORCH_HEADERS": TORCH_HEADERS_DIR, "WHEELBUILD_CXX_SCRIPT": cxx},
        mem_limit=job.memory,
        memswap_limit=job.memory,
        nano_cpus=int(job.cpus * 1e9),
        network_disabled=True,
        volumes={
            str(job.source_dir): {"bind": "/src", "mode": "ro"},
            job.torch_volume: {"bind": TORCH_HEADERS_DIR, "mode": "ro"},
            **mount,
            **cxx_mount,
        },
    )
    try:
        status = container.wait()
        lines = container.logs().decode(errors="replace").splitlines()
    finally:
        remove_all([container])
    return parse_unit_report(lines, int(status.get("StatusCode", 1)))


def unit_compile_command(job: UnitCompile) -> list[str]:
    """nvcc on the unit, as images/wheelbuild-calibrate-unit runs it (it adds Python's include
    directory, then reports the cgroup's peak and the time)."""
    torch_include = f"{TORCH_HEADERS_DIR}/torch/include"
    includes = [f"/src/{d}" for d in job.include_dirs] + [
        torch_include,
        f"{torch_include}/torch/csrc/api/include",
    ]
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in job.archs]
    return [
        f"{job.cuda_home}/bin/nvcc", *(f"-I{d}" for d in includes), *job.flags, *gencode,
        "--threads", str(job.threads), "--compiler-options", "-fPIC", "-c", f"/src/{job.unit}", "-o", "/tmp/unit.o",
    ]  # fmt: skip


def parse_unit_report(lines: Sequence[str], returncode: int) -> UnitResult:
    marks = [line for line in lines if line.startswith(CALIBRATE_MARK)]
    if not marks:
        return UnitResult(
            returncode=returncode or 1, peak=0, wall_s=0.0, oom=False, log_tail=tuple(lines[-30:])
        )
    fields = dict(pair.split("=", 1) for pair in marks[-1][len(CALIBRATE_MARK) :].split())
    rc = int(fields["rc"])
    return UnitResult(
        returncode=rc,
        peak=int(fields["peak"]),
        wall_s=float(fields["end"]) - float(fields["start"]),
        oom=rc != 0 and int(fields.get("ooms", "0") or 0) > 0,
        log_tail=tuple(lines[-30:]),
    )
