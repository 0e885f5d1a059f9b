"""flash-attn for real: cu128 here, where NVIDIA's servers cannot be reached, stops in seconds
naming the URL and both remedies (a mirror, or --cuda12-image); cu130
starts a real build (sdist pinned by sha256, image, plan, torch, nvcc on flash-attn's units),
which this test interrupts once ninja reports a finished unit (a whole build takes hours on
2 cores), then checks that nothing is left behind."""

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


def test_flash_attn_cu130_starts_a_real_build_that_stops_cleanly(
    cuda_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    assert compiler_processes() == [], "another build is running on this machine"
    proc = subprocess.Popen(
        [WHEELBUILD, "flash-attn", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--python", "3.11",
         "--output-dir", str(tmp_path), "-v"],  # -v: ninja's [n/N] lines are cibuildwheel's log
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=default_sigint,
    )  # fmt: skip
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    output: list[str] = []
    finished: tuple[int, int] | None = None
    deadline = time.monotonic() + 1800
    while finished is None and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=5)
        except queue.Empty:
            continue
        if line is None:
            break
        output.append(line)
        if match := NINJA.match(line):
            finished = int(match[1]), int(match[2])
    text = "".join(output)
    assert finished is not None, text[-4000:]
    assert finished[1] >= 70, finished  # flash-attn 2.8.3's 73 units (fewer once some are cached)
    assert "source flash_attn-2.8.3.tar.gz, sha256 1e71dd64a9e0280e... verified" in text
    assert re.search(r"MAX_JOBS=\d+", text) and "plan:" in text, text[-4000:]
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=180)
    text += rest
    run_id = text.split("(run ", 1)[1].split(")", 1)[0]
    assert proc.returncode == 130, text[-3000:]
    assert containers_of_run(docker_client, run_id) == []
    # The compilers die with their container; the kernel may take a moment to reap them.
    assert poll_until(lambda: compiler_processes() == [], timeout_s=30), compiler_processes()
