"""What the provenance tests share: the facts of a build (through statements.build_facts, the
code a build runs, with this checkout's image inputs), a run folder with a real wheel and its
statement, and Ed25519 keys made by ssh-keygen and openssl, the tools a user makes them with."""

from __future__ import annotations

import functools
import subprocess
import tempfile
from pathlib import Path

from wheelbuild.attempt.outcome import AttemptResult
from wheelbuild.image.inputs import ImageInputs
from wheelbuild.pipeline.statements import build_facts, write_statements
from wheelbuild.plan.memory_model import GIB, wbdemo_model
from wheelbuild.plan.planner import Plan
from wheelbuild.provenance.statement import BuildFacts
from wheelbuild.recipes import Recipe, resolve_recipe
from wheelbuild.secrets import Redactor
from wheelbuild.spec.build_spec import BuildSpec
from wheelbuild.spec.sources import SourceDate
from wheelbuild.variants import parse_variant
from wheelbuild.wheel.contents import inspect_wheel

from tests import toolchain
from tests.indexkit import make_wheel

TORCH_FILE, TORCH_SHA256 = "torch-2.11.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl", "5" * 64
KEY = "ab" * 32  # an inputs key


def facts(recipe: Recipe, *, index_url: str | None = None, run_dir: Path = Path("/nowhere")) -> BuildFacts:
    """A build's facts as build.py gathers them: this checkout's images/, a local base image,
    the torch file the last attempt's log named, MAX_JOBS 4 and NVCC_THREADS 2."""
    spec = BuildSpec(
        recipe=recipe, variant=parse_variant("2.11.0+cu130", index_url), archs=(120,), pythons=("cp311",)
    )
    inputs = ImageInputs.load(base_image="wheelbuild-base:test", base_id="sha256:" + "1" * 64, ca_bundle=None)
    model = wbdemo_model()
    plan = Plan(
        memory=8 * GIB, cpus=2.0, max_jobs=4, nvcc_threads=2, reasons=(),
        predicted_peak=model.peak_of_jobs(4, 2, 1), archs=1, model=model,
    )  # fmt: skip
    result = AttemptResult(
        attempt=1, returncode=0, duration_s=1.0, wheels=(), memory_limit_seen=None, log_path=run_dir / "build.log",
        locked_files=((f"{spec.variant.cache_key}-cp311", TORCH_SHA256, TORCH_FILE),),
    )  # fmt: skip
    return build_facts(
        spec, inputs, KEY, ("cp311",), SourceDate(1767225600, "a test's date"), (plan, result), "run-1"
    )


def project(folder: Path) -> Path:
    """A project folder (what `wheelbuild build PATH` takes) the statement names as its source."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "setup.py").write_text("from setuptools import setup\nsetup(name='wbtiny')\n")
    return folder


KERNEL = '__global__ void k(float* x) { x[threadIdx.x] *= 2.0f; }\nextern "C" void l(float* x) { k<<<1, 32>>>(x); }\n'
SO = "{module}/_C.cpython-311-x86_64-linux-gnu.so"
# What publish checks the wheels against: the facts' torch and archs.
PUBLISH_CHECKS = ("--torch", "2.11.0+cu130", "--archs", "120")


@functools.cache
def cuda_extension(archs: tuple[int, ...] = (120,)) -> bytes:
    """A real extension module with SASS for *archs*, linking the shared CUDA runtime (host
    nvcc); compiled once per test process and archs, in a folder of its own (suites of two
    clones run side by side)."""
    with tempfile.TemporaryDirectory(prefix="wheelbuild-provenance-so-") as folder:
        scratch = Path(folder)
        (scratch / "k.cu").write_text(KERNEL)
        subprocess.run(
            [toolchain.require("nvcc"), "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", str(scratch / "k.cu"),
             "-o", str(scratch / "k.so"), *toolchain.cuda_link_flags(scratch / "lib"),
             *(f"-gencode=arch=compute_{arch},code=sm_{arch}" for arch in archs)],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        return (scratch / "k.so").read_bytes()


def cuda_wheel(
    folder: Path,
    name: str = "wbtiny",
    payload: str = "",
    *,
    version: str = "0.1.0+cu130torch2.11",
    requires: tuple[str, ...] = ("torch==2.11.*",),
) -> Path:
    """A wheel publish accepts as built for the facts' variant and archs: labelled, torch
    pinned, one extension module with sm_120 SASS (*version* and *requires* change the label
    and the pin)."""
    so = cuda_extension()
    return make_wheel(
        folder, name, version, tag="cp311-cp311-manylinux_2_34_x86_64", payload=payload,
        requires_dist=requires, extra_files={SO.format(module=name.replace("-", "_")): so},
    )  # fmt: skip


def run_folder(tmp_path: Path, *, payload: str = "", name: str = "wbtiny") -> Path:
    """A run folder as `wheelbuild build` leaves it: a wheel and its statement beside it."""
    source = project(tmp_path / f"src-{name}")
    wheel = cuda_wheel(tmp_path / "run" / name, name, payload=payload)
    write_statements((inspect_wheel(wheel),), facts(resolve_recipe(str(source))), Redactor(()))
    return wheel


def ssh_key(folder: Path, name: str, passphrase: str = "") -> Path:
    """An OpenSSH Ed25519 key pair, as `ssh-keygen -t ed25519` makes it; the private key's path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", name, "-f", str(path)],
        check=True,
        timeout=30,
    )
    return path


def pem_key(folder: Path, name: str) -> tuple[Path, Path]:
    """An Ed25519 key pair as PEM files, as openssl makes them: (private, public)."""
    folder.mkdir(parents=True, exist_ok=True)
    private, public = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    subprocess.run(
        ["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(private)], check=True, timeout=30
    )
    subprocess.run(
        ["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)], check=True, timeout=30
    )
    return private, public
