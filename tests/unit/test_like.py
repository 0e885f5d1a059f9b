"""`--like PATH`: the environment a user has, read by running its real interpreter (venvs made
here), turned into build's torch, Python and archs, and the CLI's plan and refusals through the
real console script.

No GPU can exist on this machine: the GPU cases stand one in, as a stand-in torch whose
``torch.cuda`` answers, or an ``nvidia-smi`` script on PATH; each test says which."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from wheelbuild.errors import EnvironmentUnbuildable, EnvironmentUnreadable, EnvironmentWithoutTorch
from wheelbuild.host.python_env import Gpu, PythonEnvironment, read_environment
from wheelbuild.spec.environment import environment_choice

RunCli = Callable[..., subprocess.CompletedProcess[str]]
HOST_PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"

STANDIN_CUDA = """
def is_available():
    return True

def device_count():
    return 2

def get_device_name(i):
    return ["NVIDIA H200", "NVIDIA RTX PRO 6000"][i]

def get_device_capability(i):
    return [(9, 0), (12, 0)][i]
"""


def make_venv(
    where: Path, torch: str | None = None, cuda: str | None = "13.0", *, with_gpus: bool = False
) -> Path:
    """A real venv (no pip: fast); with *torch*, a stand-in torch distribution installed in it:
    its metadata, and torch/version.py as torch writes it. *with_gpus*: its torch.cuda sees two
    stand-in GPUs (sm_90, sm_120)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    if torch is None:
        return where
    purelib = subprocess.run(
        [str(where / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    package = Path(purelib) / "torch"
    package.mkdir(parents=True)
    (package / "version.py").write_text(f"__version__ = {torch!r}\ncuda: str | None = {cuda!r}\n")
    (package / "__init__.py").write_text("from . import cuda\n" if with_gpus else "")
    if with_gpus:
        (package / "cuda.py").write_text(STANDIN_CUDA)
    info = Path(purelib) / f"torch-{torch}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n")
    (info / "RECORD").write_text("")
    return where


def _env(**changes: object) -> PythonEnvironment:
    values: dict[str, object] = {
        "interpreter": Path("/venv/bin/python"),
        "python": "3.11",
        "implementation": "cpython",
        "platform": "linux-x86_64",
        "free_threaded": False,
        "torch": "2.13.0",
        "torch_cuda": "13.0",
        "gpus": (),
        "gpus_from": "",
        "gpu_note": "torch.cuda.is_available() is False; nvidia-smi is not on PATH",
    }
    values.update(changes)
    return PythonEnvironment(**values)  # type: ignore[arg-type]


# --- what an environment means for build (pure) -------------------------------------------------


def test_an_environment_without_a_gpu_gets_its_torch_and_python_and_the_default_archs_said_so() -> None:
    choice = environment_choice(_env())
    assert (choice.torch_variant, choice.python, choice.archs) == ("2.13.0+cu130", "3.11", "100,120")
    assert (
        "wheelbuild's default: no GPU is visible to it (torch.cuda.is_available() is False"
        in choice.archs_said
    )
    assert choice.torch_said == "torch 2.13.0 built with CUDA 13.0, installed there"


def test_the_gpus_an_environment_sees_are_the_archs() -> None:
    gpus = (Gpu("NVIDIA H200", (9, 0)), Gpu("NVIDIA H200", (9, 0)), Gpu("NVIDIA B200", (10, 0)))
    choice = environment_choice(_env(gpus=gpus, gpus_from="nvidia-smi", torch="2.14.1+cu130"))
    assert (choice.torch_variant, choice.archs) == ("2.14.1+cu130", "90,100")
    assert choice.archs_said.startswith("the GPUs nvidia-smi sees: NVIDIA H200 (sm_90)")


@pytest.mark.parametrize(
    ("changes", "error", "said"),
    [
        ({"torch": None, "torch_cuda": None}, EnvironmentWithoutTorch, "has no torch installed"),
        ({"torch": "2.14.1+cpu", "torch_cuda": None}, EnvironmentUnbuildable, "is a CPU or ROCm build"),
        ({"platform": "macosx-14.0-arm64"}, EnvironmentUnbuildable, "runs on macosx-14.0-arm64"),
        ({"free_threaded": True, "python": "3.14"}, EnvironmentUnbuildable, "free-threaded CPython 3.14"),
        ({"implementation": "pypy"}, EnvironmentUnbuildable, "is pypy 3.11"),
    ],
)
def test_an_environment_wheelbuild_cannot_build_for_is_refused_in_one_line(
    changes: dict[str, object], error: type[Exception], said: str
) -> None:
    with pytest.raises(error) as raised:
        environment_choice(_env(**changes))
    assert said in str(raised.value)
    assert (
        EnvironmentWithoutTorch.exit_code
        != EnvironmentUnbuildable.exit_code
        != EnvironmentUnreadable.exit_code
    )


# --- reading a real interpreter ------------------------------------------------------------------


def test_a_venvs_interpreter_says_its_python_and_torch_without_importing_torchs_libraries(
    tmp_path: Path,
) -> None:
    venv = make_venv(tmp_path / "venv", "2.13.0")
    found = read_environment(venv)
    assert found.interpreter == venv / "bin" / "python"
    assert (found.python, found.implementation, found.platform) == (HOST_PYTHON, "cpython", "linux-x86_64")
    assert (found.torch, found.torch_cuda, found.gpus) == ("2.13.0", "13.0", ())
    # The stand-in has no torch.cuda: said, not raised.
    assert "torch" in found.gpu_note and found.gpus_from == ""
    # The interpreter itself, not only its venv folder, is taken too.
    assert read_environment(venv / "bin" / "python").torch == "2.13.0"


def test_the_gpus_torch_cuda_sees_are_read_through_it(tmp_path: Path) -> None:
    """Stand-in GPUs: a torch whose torch.cuda answers (no GPU exists here)."""
    found = read_environment(make_venv(tmp_path / "venv", "2.14.1", with_gpus=True))
    assert [(g.name, g.arch) for g in found.gpus] == [("NVIDIA H200", 90), ("NVIDIA RTX PRO 6000", 120)]
    assert found.gpus_from == "torch.cuda"
    assert environment_choice(found).archs == "90,120"


def test_nvidia_smi_is_asked_when_torch_sees_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in nvidia-smi: a script on PATH answering as the real one does (no GPU exists here)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\n[ "$1" = "--query-gpu=name,compute_cap" ] || exit 9\necho "NVIDIA B200, 10.0"\n'
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    found = read_environment(make_venv(tmp_path / "venv", "2.14.1"))
    assert [(g.name, g.arch) for g in found.gpus] == [
        ("NVIDIA B200", 100)
    ] and found.gpus_from == "nvidia-smi"


def test_what_is_not_an_interpreter_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    script = tmp_path / "not-python"
    script.write_text("#!/bin/sh\necho hello\n")
    script.chmod(0o755)
    for path, said in (
        (tmp_path / "missing", "does not exist"),
        (tmp_path / "empty", "without bin/python"),
        (script, "its answer to the probe is not understood"),
        (Path("/bin/false"), "exited 1 on a short probe"),
    ):
        with pytest.raises(EnvironmentUnreadable) as raised:
            read_environment(path)
        assert said in raised.value.cause, (path, raised.value.cause)


# --- through the console script -----------------------------------------------------------------


def test_plan_like_a_venv_plans_its_torch_python_and_says_where_each_came_from(
    run_cli: RunCli, tmp_path: Path
) -> None:
    venv = make_venv(tmp_path / "venv", "2.13.0")
    planned = run_cli("plan", "wbdemo", "--like", str(venv), "-v")  # -v: the sources and notes
    assert planned.returncode == 0, planned.stderr
    assert (
        f"  wbdemo 0.1.0+cu130torch2.13  cp{HOST_PYTHON.replace('.', '')}  torch 2.13.0+cu130  sm_100 sm_120"
        in (planned.stdout.splitlines())
    )
    sources = {
        line.split()[0]: line.split()[-1] for line in planned.stdout.splitlines() if line.startswith("  ")
    }
    assert (sources["torch"], sources["python"], sources["archs"]) == ("--like", "--like", "--like")
    assert (
        "--like: --torch 2.13.0+cu130: torch 2.13.0 built with CUDA 13.0, installed there" in planned.stderr
    )


def test_the_command_line_wins_over_like_and_says_so(run_cli: RunCli, tmp_path: Path) -> None:
    venv = make_venv(tmp_path / "venv", "2.13.0")
    planned = run_cli("plan", "wbdemo", "--like", str(venv), "--archs", "90")
    assert planned.returncode == 0, planned.stderr
    assert "--archs on the command line wins over --like's 100,120" in planned.stderr
    assert any(line.endswith("torch 2.13.0+cu130  sm_90") for line in planned.stdout.splitlines())


def test_like_an_environment_without_torch_is_one_line_and_its_own_exit_code(
    run_cli: RunCli, tmp_path: Path
) -> None:
    venv = make_venv(tmp_path / "venv")
    for command in ("plan", "build"):
        done = run_cli(command, "wbdemo", "--like", str(venv))
        assert done.returncode == EnvironmentWithoutTorch.exit_code, done.stderr
        assert (
            done.stderr.splitlines()[-2].startswith("error: --like ") and "no torch installed" in done.stderr
        )
        assert done.stderr.splitlines()[-1].startswith("remedy: install the torch you run")


def test_install_without_like_is_refused(run_cli: RunCli) -> None:
    done = run_cli("build", "wbdemo", "--install")
    assert (
        done.returncode == 13 and "error: --install installs into the environment --like names" in done.stderr
    )
