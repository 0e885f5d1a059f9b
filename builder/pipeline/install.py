"""`build --like PATH --install`: the gated wheel installed into the user's environment, and the
lines that would do it by hand. The torch installed there is held where it is by a constraint:
an install that would change it fails instead."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.utils import parse_wheel_filename

from ..errors import InstallFailed
from ..host.python_env import PythonEnvironment

__all__ = ["install_lines", "install_wheel", "wheels_for"]

INSTALL_TIMEOUT_S = 900.0


def wheels_for(env: PythonEnvironment, wheels: tuple[Path, ...]) -> tuple[Path, ...]:
    """The wheels that install into *env*: its CPython's, or an abi3 one."""
    tag = "cp" + env.python.replace(".", "")
    return tuple(
        w
        for w in wheels
        if any(t.interpreter == tag or t.abi == "abi3" for t in parse_wheel_filename(w.name)[3])
    )


def install_lines(env: PythonEnvironment, wheel: Path) -> tuple[str, str]:
    """(pip, uv) lines that install *wheel* into *env*; the wheel requires the torch minor it was
    built with, which is installed there, so neither changes torch."""
    python = str(env.interpreter)
    return f"{python} -m pip install {wheel}", f"uv pip install --python {python} {wheel}"


def _uv() -> str | None:
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.is_file() else shutil.which("uv")


def _has_pip(env: PythonEnvironment) -> bool:
    probe = [str(env.interpreter), "-I", "-m", "pip", "--version"]
    return subprocess.run(probe, capture_output=True, timeout=120, check=False).returncode == 0


def install_wheel(env: PythonEnvironment, wheel: Path) -> str:
    """Install *wheel* into *env* with its pip (else uv), torch held at the installed release;
    returns which installer did it."""
    if env.torch is None:  # environment_choice refused such an environment before the build
        raise InstallFailed(f"--like {env.interpreter} has no torch", "install torch there first")
    with tempfile.TemporaryDirectory(prefix="wheelbuild-install-") as folder:
        constraints = Path(folder) / "constraints.txt"
        constraints.write_text(f"torch=={env.torch}\n")
        if _has_pip(env):
            installer = "pip"
            command = [str(env.interpreter), "-m", "pip", "install", "-c", str(constraints), str(wheel)]
        elif (uv := _uv()) is not None:
            installer = "uv"
            command = [
                uv,
                "pip",
                "install",
                "--python",
                str(env.interpreter),
                "-c",
                str(constraints),
                str(wheel),
            ]
        else:
            raise InstallFailed(
                f"--like {env.interpreter} has no pip, and uv is not on PATH",
                f"install pip there ({env.interpreter} -m ensurepip), or uv; or install the wheel by hand",
            )
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise InstallFailed(
                f"installing {wheel.name} into --like {env.interpreter} failed: {error}",
                "run the printed install line by hand to see why",
            ) from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise InstallFailed(
            f"installing {wheel.name} into --like {env.interpreter} failed (exit {done.returncode}); "
            f"torch was held at {env.torch}",
            "read the installer's lines above; the wheel is kept where build printed it",
            details=tail,
        )
    return installer
