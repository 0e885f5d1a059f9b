"""One attempt: cibuildwheel run once, as a subprocess in a session of its own, its log read
line by line (redacted, to build.log and the live view) while the engine's watcher looks for OOM
evidence. Whatever happens, the attempt's container is removed afterwards; what the run means is
outcome.classify's to say."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from .. import secrets
from ..attempt.buildlog import BEFORE_BUILD_STEP, COMPILE_STEP, BuildLog, StepTime, network_request
from ..attempt.config import SCCACHE_DIR, AttemptConfig, cibuildwheel_env, redactor_for
from ..attempt.outcome import AttemptResult
from ..attempt.ownership import ATTEMPT_LABEL
from ..plan.dist import CLIENT_CONFIG_FILE, client_config, read_token
from .watcher import AttemptWatcher


def run_attempt(
    config: AttemptConfig,
    on_line: Callable[[str, BuildLog], None],
    watch: Callable[[], AttemptWatcher],
    remove_containers: Callable[[str], int],
    set_network: Callable[[bool], int] = lambda _online: 0,
) -> AttemptResult:
    """Run cibuildwheel once, watched for OOM evidence. Whatever happens, the attempt's
    container is gone afterwards. What the run means is outcome.classify's to say.
    `set_network(online)` puts the attempt's container on its network or takes it off, when
    its before-build asks (images/wheelbuild-network)."""
    config.output_dir.mkdir(parents=True, exist_ok=True)
    secrets_dir = Path(tempfile.mkdtemp(prefix="wheelbuild-secrets-"))
    try:
        write_secrets(config, os.environ, secrets_dir)
        return _run_attempt(config, secrets_dir, on_line, watch, remove_containers, set_network)
    finally:
        shutil.rmtree(secrets_dir, ignore_errors=True)


def _run_attempt(
    config: AttemptConfig,
    secrets_dir: Path,
    on_line: Callable[[str, BuildLog], None],
    watch: Callable[[], AttemptWatcher],
    remove_containers: Callable[[str], int],
    set_network: Callable[[bool], int],
) -> AttemptResult:
    redact = redactor_for(config, os.environ)
    env = {key: value for key, value in os.environ.items() if not key.startswith("CIBW_")}
    env.update(cibuildwheel_env(config, secrets_dir))
    env["PYTHONUNBUFFERED"] = "1"
    command = [
        sys.executable,
        "-m",
        "cibuildwheel",
        "--output-dir",
        str(config.output_dir),
        config.package,
    ]
    tail: deque[str] = deque(maxlen=400)
    progress = BuildLog()
    started = time.monotonic()
    if config.admit_dir is not None:  # Docker would make it, root's, on a host not run as root
        config.admit_dir.mkdir(parents=True, exist_ok=True)
    watcher = watch()
    with config.log_path.open("a", encoding="utf-8") as log, watcher:
        log.write(f"=== attempt {config.attempt_id}: {shlex.join(command)}\n")
        # A session of its own: a terminal's Ctrl-C reaches only us, and we stop it in order.
        proc = subprocess.Popen(
            command, cwd=config.project_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, errors="replace", bufsize=1, start_new_session=True,
        )  # fmt: skip
        try:
            for raw in _lines(proc):
                line = redact(raw.rstrip("\n"))
                log.write(line + "\n")
                tail.append(line)
                progress.feed(line, time.monotonic())
                watcher.phase, watcher.identifier = progress.step, progress.identifier
                # Only before_build asks: the package's own output must not bring the network back.
                if (online := network_request(line)) is not None and progress.step == BEFORE_BUILD_STEP:
                    _answer(set_network, online, log)
                on_line(line, progress)
            returncode = proc.wait()
            progress.end_step(time.monotonic())  # a step cut short by the attempt's end ends with it
        finally:
            _terminate(proc)
            remove_containers(f"{ATTEMPT_LABEL}={config.attempt_id}")
    return _attempt_result(config, returncode, time.monotonic() - started, tuple(tail), progress, watcher)


def _answer(set_network: Callable[[bool], int], online: bool, log: TextIO) -> None:
    """Do what the container asked; a failure is logged, and the container's wait then says so."""
    try:
        set_network(online)
    except Exception as error:  # the Docker API's, of any kind: the build then fails, saying why
        log.write(f"wheelbuild: could not turn the network {'on' if online else 'off'}: {error}\n")


def write_secrets(config: AttemptConfig, environ: Mapping[str, str], directory: Path) -> None:
    """The attempt's secret files: the torch index URL, and the shared cache's settings for the
    sccache server (readable by this user only; removed with the attempt)."""
    directory.chmod(0o700)
    index = directory / secrets.TORCH_INDEX_FILE
    index.touch(mode=0o600)
    index.write_text(config.torch.index_url)
    shared = (
        {name: environ[name] for name in config.pass_env if environ.get(name)}
        if config.compiler_cache
        else {}
    )
    env_file = directory / secrets.SCCACHE_ENV_FILE
    env_file.touch(mode=0o600)
    env_file.write_text(secrets.sccache_env_file(shared))
    if config.dist is not None and config.compiler_cache:  # the build's sccache is the dist client
        client = directory / CLIENT_CONFIG_FILE
        client.touch(mode=0o600)
        toolchains = f"{SCCACHE_DIR}/dist-toolchains"  # packaged compilers, kept in the cache's volume
        client.write_text(
            client_config(config.dist.scheduler_url, read_token(config.dist, environ), toolchains)
        )


def _terminate(proc: subprocess.Popen[str]) -> None:
    """Stop cibuildwheel and everything it started (docker CLI children included)."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _lines(proc: subprocess.Popen[str]) -> Iterator[str]:
    assert proc.stdout is not None
    yield from proc.stdout


def _attempt_result(
    config: AttemptConfig,
    returncode: int,
    duration_s: float,
    tail: tuple[str, ...],
    progress: BuildLog,
    watcher: AttemptWatcher,
) -> AttemptResult:
    """What was seen of one attempt: its log's reading and the watcher's evidence, as values."""
    wheels = tuple(sorted(config.output_dir.glob("*.whl")))
    unit_memory, overhead = watcher.units.snapshot()
    return AttemptResult(
        attempt=config.attempt,
        returncode=returncode,
        duration_s=duration_s,
        wheels=wheels,
        memory_limit_seen=progress.memory_limit_seen,
        log_path=config.log_path,
        log_tail=tail,
        oom=watcher.evidence(progress.killed_lines),
        error_lines=tuple(progress.error_lines),
        peak_memory=watcher.peak_memory,
        peak_memory_compile=watcher.peaks.get(COMPILE_STEP),
        finished_units=tuple(
            f"{identifier}:{unit}" for identifier, units in progress.finished_units.items() for unit in units
        ),
        units_total=progress.units_total,
        cache_hits=progress.cache_hits,
        cache_misses=progress.cache_misses,
        build_seconds=progress.build_seconds,
        build_seconds_by_identifier=tuple(progress.build_seconds_by_identifier.items()),
        python_seconds_by_identifier=tuple(progress.python_seconds_by_identifier.items()),
        reused_wheels=tuple(progress.reused_wheels.items()),
        cache_by_identifier=tuple(
            (identifier, hits, misses) for identifier, (hits, misses) in progress.cache_by_identifier.items()
        ),
        unit_cache=tuple(
            (f"{identifier}:{unit}", compiled)
            for identifier, units in progress.unit_cache.items()
            for unit, compiled in units.items()
        ),
        dist_by_server=tuple(progress.dist_by_server.items()) if progress.dist_seen else None,
        dist_local=progress.dist_local,
        memory_series=tuple(watcher.series.points),
        memory_step_s=watcher.series.step_s,
        oom_at_s=tuple(watcher.oom_at),
        unit_finished_s=tuple(
            (unit, round(progress.finished_at[unit] - watcher.started, 1))
            for identifier, units in progress.finished_units.items()
            for unit in (f"{identifier}:{name}" for name in units)
            if unit in progress.finished_at
        ),
        steps=_steps_since(progress.steps, watcher.started),
        unit_memory=unit_memory,
        overhead_at_peak=overhead,
        nvcc_rewrites=tuple(progress.nvcc_rewrites),
        std_raises=tuple(progress.std_raises),
        link_checks=tuple(progress.link_checks),
        prebuilt_urls=tuple(progress.prebuilt_urls),
        locked_files=tuple(progress.locked_files),
    )


def _steps_since(steps: Sequence[StepTime], started: float) -> tuple[StepTime, ...]:
    """cibuildwheel's steps, timed on the monotonic clock, in seconds since *started* (the
    watcher's start: the memory series' zero, and so the chart's)."""
    return tuple(
        replace(
            step,
            start=round(step.start - started, 1),
            end=None if step.end is None else round(step.end - started, 1),
        )
        for step in steps
    )
