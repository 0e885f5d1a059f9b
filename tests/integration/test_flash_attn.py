"""flash-attn for real: cu128 here, where NVIDIA's servers cannot be reached, stops in seconds
naming the URL and both remedies (a mirror, or --cuda12-image); cu130
starts a real build (sdist pinned by sha256, image, plan, torch, nvcc on flash-attn's units),
which this test interrupts once flash-attn's compiles run (a whole build takes hours on 2 cores;
the slow variant waits for ninja's first finished unit), then checks that nothing is left behind."""

from __future__ import annotations

import queue
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import docker
import pytest
from wheelbuild.recipes.flash_attn import SDISTS

from tests.integration.conftest import (
    REPO,
    TORCH_INDEX,
    WHEELBUILD,
    compiler_processes,
    containers_of_run,
    default_sigint,
    poll_until,
    wheelbuild_watched,
)

NINJA = re.compile(r"^\s*\[(\d+)/(\d+)\]")


def test_flash_attn_cu128_fails_before_any_container_naming_nvidias_url_and_both_remedies(
    cuda_image: str, base_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    try:
        socket.getaddrinfo("developer.download.nvidia.com", 443)
        pytest.skip("NVIDIA's servers resolve here: this test proves the offline failure")
    except OSError:
        pass
    watched = wheelbuild_watched(
        docker_client,
        base_image,
        "flash-attn",
        "--torch",
        "cu128",
        env={"WHEELBUILD_CACHE_DIR": str(tmp_path)},
    )
    done = watched.result
    assert done.returncode == 23, done.stdout + done.stderr
    # Found by build's checks before a container (plan runs the same): the layer's server does not answer.
    error = next(line for line in done.stderr.splitlines() if line.startswith("error: "))
    assert "compiler layer torch" in error and "https://developer.download.nvidia.com/" in error, error
    assert "does not answer" in error, error
    assert "WHEELBUILD_CUDA_REDIST_URL" in done.stderr and "--cuda12-image" in done.stderr
    assert watched.created == ()  # no image probe, no attempt
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # no sdist download, nothing left behind


class _Build:
    """`wheelbuild flash-attn` for cu130 running in the background, its output read line by line."""

    def __init__(self, tmp_path: Path) -> None:
        assert compiler_processes() == [], "another build is running on this machine"
        self.proc = subprocess.Popen(
            [WHEELBUILD, "flash-attn", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--python", "3.11",
             "--output-dir", str(tmp_path), "-v"],  # -v: cibuildwheel's log, ninja's lines among it
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=default_sigint,
        )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def until(self, pattern: re.Pattern[str], timeout_s: float) -> re.Match[str] | None:
        """The first line (from now on) that matches, or None when the build ended or time ran out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=5)
            except queue.Empty:
                continue
            if line is None:
                return None
            self.output.append(line)
            if match := pattern.match(line):
                return match
        return None

    def text(self) -> str:
        return "".join(self.output)

    def __enter__(self) -> _Build:
        return self

    def __exit__(self, *_exc: object) -> None:
        """Whatever failed, the build is stopped as a user would stop it (never left compiling
        for the tests after this one: they start by asking that no build runs here)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=180)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def interrupt(self, docker_client: docker.DockerClient) -> None:
        """Ctrl-C: exit 130, no container of the run and no compiler left."""
        text = self.text()
        # The recipe builds flash-attn's newest release on PyPI, pinned by wheelbuild's table.
        newest = re.search(r"flash-attn (\S+) \(the newest on the index\)", text)
        assert newest is not None, text[-4000:]
        pin = SDISTS[newest[1]].sha256
        assert f"source flash_attn-{newest[1]}.tar.gz, sha256 {pin[:16]}... verified" in text
        assert re.search(r"MAX_JOBS=\d+", text) and "plan:" in text, text[-4000:]
        self.proc.send_signal(signal.SIGINT)
        rest, _ = self.proc.communicate(timeout=180)
        text += rest
        run_id = text.split("(run ", 1)[1].split(")", 1)[0]
        assert self.proc.returncode == 130, text[-3000:]
        assert containers_of_run(docker_client, run_id) == []
        # The compilers die with their container; the kernel may take a moment to reap them.
        assert poll_until(lambda: compiler_processes() == [], timeout_s=30), compiler_processes()


# before-build's ninja launcher says how many compiles of the real build file it put in order
ORDERED = re.compile(r".*wheelbuild-ninja: (\d+) compiles of \S*build\.ninja launch")
DEVICE_COMPILERS = {"cicc", "ptxas", "cc1plus", "cudafe++"}


def test_flash_attn_cu130_starts_a_real_build_that_stops_cleanly(
    cuda_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """Interrupted as soon as flash-attn's own compiles run, not when the first (minutes long)
    finishes: that one is the slow test below."""
    with _Build(tmp_path) as build:
        ordered = build.until(ORDERED, timeout_s=1800)
        assert ordered is not None, build.text()[-4000:]
        assert int(ordered[1]) >= 70, ordered[0]  # flash-attn 2.8.3's 72 kernels and its binding
        # ninja starts them at once: a compiler of flash-attn's units is running
        assert poll_until(
            lambda: any(p.split()[-1] in DEVICE_COMPILERS for p in compiler_processes()), timeout_s=120
        ), build.text()[-4000:]
        build.interrupt(docker_client)


@pytest.mark.slow  # the test above, waiting until ninja has finished one unit (5-10 minutes here)
def test_flash_attn_cu130_builds_a_first_unit_and_stops_cleanly(
    cuda_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    with _Build(tmp_path) as build:
        finished = build.until(NINJA, timeout_s=1800)
        assert finished is not None, build.text()[-4000:]
        assert int(finished[2]) >= 70, finished[0]  # flash-attn 2.8.3's 73 units (fewer once some are cached)
        build.interrupt(docker_client)
