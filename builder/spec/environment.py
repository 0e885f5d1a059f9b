"""`--like PATH`: the build options that make a wheel for the environment a user already has,
from what its interpreter said of itself (host/python_env.py). Pure: an environment in, the
torch variant, Python and archs out, each with the words that say where it came from.

That torch, that Python and those archs, exactly: the torch release installed there and the CUDA
it was built with (``2.13.0`` and ``13.0`` -> ``--torch 2.13.0+cu130``), its CPython, and the
compute capability of each GPU it sees (wheelbuild's default archs, said so, where it sees none).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ..errors import EnvironmentUnbuildable, EnvironmentWithoutTorch
from ..host.python_env import PythonEnvironment
from ..variants import DEFAULT_ARCHS, cuda_tag

__all__ = ["EnvironmentChoice", "environment_choice"]

# The platform wheelbuild's image builds for, as sysconfig names it.
BUILT_PLATFORM = "linux-x86_64"


@dataclass(frozen=True)
class EnvironmentChoice:
    """build's options for one environment, as the command line would give them."""

    torch_variant: str  # "2.13.0+cu130"
    python: str  # "3.11"
    archs: str  # "90" or "100,120"
    torch_said: str  # "torch 2.13.0 with CUDA 13.0, installed there"
    python_said: str
    archs_said: str


def environment_choice(env: PythonEnvironment) -> EnvironmentChoice:
    """The options that build for *env*; a one-line refusal for one wheelbuild cannot build for."""
    where = f"--like {env.interpreter}"
    if env.implementation != "cpython" or env.free_threaded:
        kind = "free-threaded CPython" if env.free_threaded else env.implementation
        raise EnvironmentUnbuildable(
            f"{where} is {kind} {env.python}; wheelbuild builds for CPython with the GIL",
            "give a CPython interpreter or venv (e.g. one made by python3.12 -m venv), or name it with --python 3.12",
        )
    if env.platform != BUILT_PLATFORM:
        raise EnvironmentUnbuildable(
            f"{where} runs on {env.platform}; wheelbuild builds {BUILT_PLATFORM} wheels only",
            f"run the wheel's users' {BUILT_PLATFORM} interpreter, or name --torch and --python yourself",
        )
    if env.torch is None:
        raise EnvironmentWithoutTorch(
            f"{where}: Python {env.python} there has no torch installed, so there is no torch to build for",
            "install the torch you run into it first (pip install torch), or name it: --torch 2.14.1+cu130",
        )
    try:
        public = Version(env.torch).public
    except InvalidVersion:
        raise EnvironmentUnbuildable(
            f"{where}: its torch's version {env.torch!r} is not a PEP 440 version",
            "reinstall torch from PyPI or PyTorch's index, or name it: --torch 2.14.1+cu130",
        ) from None
    tag = cuda_tag(env.torch_cuda or "")
    if tag is None:
        raise EnvironmentUnbuildable(
            f"{where}: its torch {env.torch} is a CPU or ROCm build (torch.version.cuda is "
            f"{env.torch_cuda!r}); wheelbuild builds CUDA extensions",
            "install a CUDA build of torch there (PyPI's Linux torch is one), or name it: --torch 2.14.1+cu130",
        )
    if env.gpus:
        archs = sorted({gpu.arch for gpu in env.gpus})
        names = ", ".join(f"{gpu.name} (sm_{gpu.arch})" for gpu in env.gpus)
        archs_said = f"the GPUs {env.gpus_from} sees: {names}"
    else:
        archs = list(DEFAULT_ARCHS)
        archs_said = (
            f"wheelbuild's default: no GPU is visible to it ({env.gpu_note or 'none listed'}); "
            "give --archs for the GPUs it will run on"
        )
    return EnvironmentChoice(
        torch_variant=f"{public}+{tag}",
        python=env.python,
        archs=",".join(map(str, archs)),
        torch_said=f"torch {env.torch} built with CUDA {env.torch_cuda}, installed there",
        python_said=f"its interpreter, CPython {env.python} ({env.platform})",
        archs_said=archs_said,
    )
