"""The Python environment a user already has (`--like PATH`): its interpreter, run once with a
short probe, says its CPython version, its platform, the torch installed in it and the CUDA that
torch was built with, and the compute capability of each GPU visible to it.

Only the user's own interpreter and torch run here, never a package's code: the probe reads
torch's version from its installed metadata and its CUDA from ``torch/version.py`` parsed as text
(so a torch whose CUDA libraries cannot load still answers), and imports torch only to ask
``torch.cuda`` for devices. Where torch sees none, ``nvidia-smi`` (when on PATH) is asked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import EnvironmentUnreadable

__all__ = ["Gpu", "PythonEnvironment", "interpreter_of", "nvidia_smi_gpus", "parse_probe", "read_environment"]

PROBE_TIMEOUT_S = 180.0  # importing a CUDA torch the first time reads a few GB of libraries

# Runs in the user's interpreter with -I (no user site, no PYTHON* variables, no cwd on sys.path):
# prints one JSON object. Any failure to import torch is reported, never raised.
_PROBE = r"""
import ast, importlib.metadata, importlib.util, json, sys, sysconfig
out = {
    "python": "%d.%d" % sys.version_info[:2],
    "implementation": sys.implementation.name,
    "platform": sysconfig.get_platform(),
    "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    "torch": None, "torch_cuda": None, "gpus": [], "gpu_note": "",
}
try:
    out["torch"] = importlib.metadata.version("torch")
except importlib.metadata.PackageNotFoundError:
    pass
spec = importlib.util.find_spec("torch") if out["torch"] else None
for folder in (spec.submodule_search_locations or []) if spec else []:
    try:
        with open(folder + "/version.py", encoding="utf-8") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, ValueError):
        continue
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "cuda" for t in targets):
                out["torch_cuda"] = node.value.value
    break
if out["torch"]:
    try:
        import torch
        if torch.cuda.is_available():
            out["gpus"] = [
                [torch.cuda.get_device_name(i), *torch.cuda.get_device_capability(i)]
                for i in range(torch.cuda.device_count())
            ]
        else:
            out["gpu_note"] = "torch.cuda.is_available() is False"
    except Exception as error:
        out["gpu_note"] = ("importing torch failed: %s: %s" % (type(error).__name__, error))[:300]
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Gpu:
    name: str
    capability: tuple[int, int]  # (9, 0)

    @property
    def arch(self) -> int:
        """The SM arch wheelbuild compiles for: (9, 0) -> 90, (12, 0) -> 120."""
        return self.capability[0] * 10 + self.capability[1]


@dataclass(frozen=True)
class PythonEnvironment:
    """What a user's interpreter said of itself."""

    interpreter: Path  # as given (a venv's bin/python), never resolved through its links
    python: str  # "3.11"
    implementation: str  # "cpython"
    platform: str  # sysconfig's: "linux-x86_64"
    free_threaded: bool
    torch: str | None  # the installed distribution's version: "2.13.0", "2.14.1+cu130", "2.14.1+cpu"
    torch_cuda: str | None  # torch.version.cuda: "13.0"; None for a CPU or ROCm build
    gpus: tuple[Gpu, ...]
    gpus_from: str  # "torch.cuda", "nvidia-smi", or "" when none was seen
    gpu_note: str  # why no GPU was seen, when none was


def interpreter_of(path: Path) -> Path:
    """The interpreter *path* names: itself, or a venv folder's ``bin/python``."""
    if path.is_dir():
        candidate = path / "bin" / "python"
        if not candidate.exists():
            raise EnvironmentUnreadable(
                f"--like {path} is a folder without bin/python: not a virtual environment",
                "give a venv's folder (the one holding pyvenv.cfg) or a Python interpreter, e.g. --like .venv",
            )
        return candidate
    if not path.exists():
        raise EnvironmentUnreadable(
            f"--like {path} does not exist", "give a venv's folder or a Python interpreter, e.g. --like .venv"
        )
    return path


def parse_probe(interpreter: Path, text: str) -> PythonEnvironment:
    """The probe's JSON line as a PythonEnvironment; a refusal when it is not the probe's."""
    try:
        data = json.loads(text.strip().splitlines()[-1])
        gpus = tuple(Gpu(str(name), (int(major), int(minor))) for name, major, minor in data["gpus"])
        return PythonEnvironment(
            interpreter=interpreter,
            python=str(data["python"]),
            implementation=str(data["implementation"]),
            platform=str(data["platform"]),
            free_threaded=bool(data["free_threaded"]),
            torch=None if data["torch"] is None else str(data["torch"]),
            torch_cuda=None if data["torch_cuda"] is None else str(data["torch_cuda"]),
            gpus=gpus,
            gpus_from="torch.cuda" if gpus else "",
            gpu_note=str(data["gpu_note"]),
        )
    except (ValueError, KeyError, TypeError, IndexError) as error:
        raise EnvironmentUnreadable(
            f"--like {interpreter}: its answer to the probe is not understood ({type(error).__name__})",
            "check that it is a CPython 3 interpreter: run it with --version",
        ) from None


def nvidia_smi_gpus() -> tuple[tuple[Gpu, ...], str]:
    """The GPUs nvidia-smi lists, and why none when it lists none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return (), "nvidia-smi is not on PATH"
    try:
        done = subprocess.run(
            [smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return (), f"nvidia-smi failed: {error}"
    gpus: list[Gpu] = []
    for line in done.stdout.splitlines():
        name, _, capability = line.rpartition(",")
        major, _, minor = capability.strip().partition(".")
        if major.isdigit() and minor.isdigit():
            gpus.append(Gpu(name.strip(), (int(major), int(minor))))
    if done.returncode != 0 or not gpus:
        return (), f"nvidia-smi found no GPU (exit {done.returncode})"
    return tuple(gpus), ""


def read_environment(path: Path) -> PythonEnvironment:
    """Run *path*'s interpreter once with the probe; ask nvidia-smi when torch saw no GPU."""
    interpreter = interpreter_of(path)
    # Its own environment, less what would point it elsewhere: a venv of ours active in this
    # shell, or PYTHONPATH (-I ignores the PYTHON* ones), must not change what it reports.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "__PYVENV_LAUNCHER__")}
    try:
        done = subprocess.run(
            [str(interpreter), "-I", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise EnvironmentUnreadable(
            f"--like {path}: {interpreter} could not be run ({error})",
            "give a Python interpreter you can run, or a venv's folder",
        ) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise EnvironmentUnreadable(
            f"--like {path}: {interpreter} exited {done.returncode} on a short probe ({last})",
            "check that it is a CPython 3.8 or newer interpreter: run it with --version",
        )
    found = parse_probe(interpreter, done.stdout)
    if found.gpus or found.torch is None:
        return found
    gpus, note = nvidia_smi_gpus()
    if gpus:
        return replace(found, gpus=gpus, gpus_from="nvidia-smi")
    return replace(found, gpu_note="; ".join(n for n in (found.gpu_note, note) if n))
