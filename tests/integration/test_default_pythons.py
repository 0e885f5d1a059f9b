"""The default Pythons through the real CLI and the real image (cp311 and cp313), against a
served torch for cp311 only (the same without Docker: tests/local/test_default_pythons.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from wheelbuild.index.publish import publish

from tests.indexkit import make_wheel
from tests.serving import running_server

CUDA_13_0 = ('cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"',)  # as torch 2.14.1 says
LINUX = "manylinux_2_28_x86_64"


# Each test reads and writes a cache dir of its own (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("own_cache")


# ---------------------------------------------------------------------------------------------
# Through the real CLI, with the real image (cp311 and cp313) and a served torch for cp311 only.


def _cp311_only_torch(tmp_path: Path) -> Path:
    made = tmp_path / "made-cli"
    root = tmp_path / "tree-cli"
    publish([make_wheel(made, "torch", "2.11.0", tag=f"cp311-cp311-{LINUX}", requires_dist=CUDA_13_0)], root)
    return root


@pytest.mark.docker
def test_a_named_python_torch_has_no_wheel_for_fails_before_any_container(
    cuda_image: str, tmp_path: Path, docker_client: object
) -> None:
    from tests.integration.conftest import wheelbuild

    with running_server(_cp311_only_torch(tmp_path)) as url:
        result = wheelbuild(
            "build", "wbdemo", "--torch", "2.11.0+cu130", "--torch-index-url", url, "--python", "3.13",
            "--output-dir", str(tmp_path / "out"), env={"WHEELBUILD_CACHE_DIR": str(tmp_path / "c")},
        )  # fmt: skip
    assert result.returncode == 36, result.stdout[-2000:] + result.stderr
    assert "cp313: torch 2.11.0 has no cp313 wheel" in result.stderr
    assert "pick --python from cp311" in result.stderr
    assert "step image" not in result.stdout.lower() and "attempt 1" not in result.stdout


@pytest.mark.docker
def test_default_pythons_leave_out_what_torch_lacks_and_say_why(cuda_image: str, tmp_path: Path) -> None:
    """The build is stopped (SIGINT) once it has chosen: the choice, not the build, is under test."""
    import signal
    import subprocess

    from tests.integration.conftest import REPO, WHEELBUILD, containers_of_run, default_sigint

    with running_server(_cp311_only_torch(tmp_path)) as url:
        proc = subprocess.Popen(
            [WHEELBUILD, "build", "wbdemo", "--torch", "2.11.0+cu130", "--torch-index-url", url,
             "--output-dir", str(tmp_path / "out")],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**__import__("os").environ, "WHEELBUILD_CACHE_DIR": str(tmp_path / "c")},
            preexec_fn=default_sigint,
        )  # fmt: skip
        assert proc.stdout is not None
        seen: list[str] = []
        for line in proc.stdout:
            seen.append(line)
            if "attempt 1:" in line:
                proc.send_signal(signal.SIGINT)
                break
        rest, _ = proc.communicate(timeout=120)
    output = "".join(seen) + rest
    assert "not building for cp313: torch 2.11.0 has no cp313 wheel" in output, output[-3000:]
    run_id = next(line for line in seen if "(run " in line).split("(run ")[1].split(")")[0]
    import docker

    assert containers_of_run(docker.from_env(), run_id) == []


# ---------------------------------------------------------------------------------------------
# Which release a bare tag means: the CUDA of each release from its METADATA, over HTTP.
