"""How an attempt's end is classified (wheelbuild.attempt.outcome.classify) on log tails shaped like
real cibuildwheel logs, with the error a build raises for it, and the ownership tokens that let a
later run sweep an orphaned container.

A build raises a failed attempt's error as it is, and retries an OOM kill at half the jobs: what
it says of an OOM kill (the retry line naming the evidence, the final error) is tested through
attempts_until_built in tests/unit/test_build_flow.py."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from cibuildwheel.util.cmd import format_command_for_display
from wheelbuild.attempt.buildlog import is_kill_line
from wheelbuild.attempt.config import AttemptConfig, cibuildwheel_env
from wheelbuild.attempt.outcome import (
    AttemptResult,
    Failed,
    OomEvidence,
    OOMKilled,
    Outcome,
    Succeeded,
    classify,
)
from wheelbuild.attempt.ownership import owner_alive as _owner_alive
from wheelbuild.attempt.ownership import owner_token
from wheelbuild.errors import BuildFailed, CompileFailed, MemoryLimitNotApplied, OutOfMemory, WheelbuildError

MakeResult = Callable[..., AttemptResult]

NVCC_ERROR = '/project/csrc/saxpy.cu(5): error: identifier "x" is undefined'
GCC_ERROR = '/project/csrc/saxpy.cu:5:2: error: #error "boom"'
GCC_FATAL = "/project/csrc/binding.cpp:1:10: fatal error: missing.h: No such file or directory"

PREAMBLE = """\
Building cp311-manylinux_x86_64 wheel
CPython 3.11 manylinux x86_64

Running before_build...

wheelbuild: torch 2.11.0+cu130 CUDA 13.0
Building wheel...

    + python -m pip wheel /project --wheel-dir=/tmp/cibuildwheel/built_wheel --no-deps --no-build-isolation -v
Processing /project
  /opt/python/cp311-cp311/lib/python3.11/site-packages/torch/_subclasses/functional_tensor.py:307: UserWarning: Failed to initialize NumPy
  running build_ext
"""

NINJA_FAILED = (
    "[1/5] /usr/local/cuda-13.1/nvidia/cu13/bin/nvcc -MD -MF /project/build/temp.linux-x86_64-cpython-311/csrc/saxpy.o.d "
    "-c /project/csrc/saxpy.cu -o /project/build/temp.linux-x86_64-cpython-311/csrc/saxpy.o "
    "-gencode=arch=compute_100,code=sm_100 -gencode=arch=compute_120,code=sm_120 --threads 2\n"
    "FAILED: /project/build/temp.linux-x86_64-cpython-311/csrc/saxpy.o\n"
)

TRACEBACK_END = """\
ninja: build stopped: subcommand failed.
Traceback (most recent call last):
  File "/opt/python/cp311-cp311/lib/python3.11/site-packages/torch/utils/cpp_extension.py", line 2595, in _run_ninja_build
subprocess.CalledProcessError: Command '['ninja', '-v', '-j', '4']' returned non-zero exit status 1.
RuntimeError: Error compiling objects for extension
  error: subprocess-exited-with-error
ERROR: Failed building wheel for wbdemo
cibuildwheel: error: Command python -m pip wheel /project failed with code 1.
"""


def _log(*middle: str) -> str:
    return PREAMBLE + NINJA_FAILED + "".join(m + "\n" for m in middle) + TRACEBACK_END


def _raise_as_the_build_does(result: AttemptResult) -> Outcome:
    """What attempts_until_built does with an attempt's end: a failed one's error is raised as it is;
    a success or an OOM kill (retried) is returned."""
    outcome = classify(result)
    if isinstance(outcome, Failed):
        raise outcome.error
    return outcome


# ---------------------------------------------------------------------------------------------
# Success


def test_returncode_zero_with_a_wheel_does_not_raise(make_result: MakeResult, tmp_path: Path) -> None:
    wheel = tmp_path / "wbdemo-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    ended = _raise_as_the_build_does(make_result("all good", returncode=0, wheels=(wheel,)))
    assert isinstance(ended, Succeeded)


def test_returncode_zero_without_a_wheel_is_build_failed(make_result: MakeResult, tmp_path: Path) -> None:
    with pytest.raises(BuildFailed) as caught:
        _raise_as_the_build_does(make_result("nothing to build", returncode=0))
    assert type(caught.value) is BuildFailed
    assert caught.value.exit_code == 42
    assert caught.value.cause == "cibuildwheel exited with code 0 without a wheel"
    assert str(tmp_path / "build.log") in caught.value.remedy


def test_nonzero_returncode_with_a_stale_wheel_still_fails(make_result: MakeResult, tmp_path: Path) -> None:
    wheel = tmp_path / "old.whl"
    with pytest.raises(BuildFailed):
        _raise_as_the_build_does(
            make_result("auditwheel: error: cannot repair", returncode=1, wheels=(wheel,))
        )


# ---------------------------------------------------------------------------------------------
# Compile errors


@pytest.mark.parametrize("line", [NVCC_ERROR, GCC_ERROR, GCC_FATAL])
def test_compiler_diagnostic_is_compile_failed_naming_that_line(make_result: MakeResult, line: str) -> None:
    log = _log("/usr/local/cuda-13.1/nvidia/cu13/bin/nvcc --generate-dependencies-with-compile ...", line)
    with pytest.raises(CompileFailed) as caught:
        _raise_as_the_build_does(make_result(log))
    assert caught.value.exit_code == 40
    assert caught.value.cause == f"compile failed: {line}"
    assert "not an out-of-memory kill" in caught.value.remedy
    assert line in caught.value.details


def test_first_compiler_diagnostic_is_the_one_reported(make_result: MakeResult) -> None:
    log = _log(NVCC_ERROR, '/project/csrc/saxpy.cu(9): error: expected a ";"')
    with pytest.raises(CompileFailed) as caught:
        _raise_as_the_build_does(make_result(log))
    assert caught.value.cause == f"compile failed: {NVCC_ERROR}"


def test_details_are_the_last_25_lines_of_the_tail(make_result: MakeResult) -> None:
    log = _log(NVCC_ERROR)
    with pytest.raises(CompileFailed) as caught:
        _raise_as_the_build_does(make_result(log))
    assert caught.value.details == "\n".join(log.splitlines()[-25:])


def test_pip_and_python_error_lines_alone_are_not_compile_errors(make_result: MakeResult) -> None:
    with pytest.raises(BuildFailed) as caught:
        _raise_as_the_build_does(make_result(_log(), returncode=1))
    assert type(caught.value) is BuildFailed
    assert caught.value.cause == "cibuildwheel exited with code 1 without a wheel"


# pip -v indents everything the build backend prints by two spaces (see a real build.log:
# "  [1/5] /usr/local/cuda-13.1/nvidia/cu13/bin/nvcc ..."), so ninja's FAILED and the compiler's
# diagnostics arrive indented too.
@pytest.mark.parametrize("line", [NVCC_ERROR, GCC_ERROR])
def test_compiler_diagnostic_indented_by_pip_is_compile_failed(make_result: MakeResult, line: str) -> None:
    log = _log("  FAILED: /project/build/temp.linux-x86_64-cpython-311/csrc/saxpy.o", "  " + line)
    with pytest.raises(CompileFailed) as caught:
        _raise_as_the_build_does(make_result(log))
    assert caught.value.cause == f"compile failed: {line}"


# ---------------------------------------------------------------------------------------------
# Out of memory


KILL_LINES = [
    "Killed",
    "nvcc error   : 'cicc' died due to signal 9 (Kill signal)",
    "nvcc error   : 'ptxas' died due to signal 9 (Kill signal)",
    "g++: fatal error: Killed signal terminated program cc1plus",
    "  Killed",
]


@pytest.mark.parametrize("line", KILL_LINES)
def test_compiler_kill_lines_are_recognised(line: str) -> None:
    assert is_kill_line(line)


@pytest.mark.parametrize(
    "line",
    [
        "    + sh -c 'echo Killed'",  # cibuildwheel echoing a command is no evidence
        NVCC_ERROR,
        "Skilled workers compiled this",
    ],
)
def test_other_lines_are_not_kill_lines(line: str) -> None:
    assert not is_kill_line(line)


@pytest.mark.parametrize("line", KILL_LINES)
def test_killed_compiler_is_out_of_memory_not_compile_failed(make_result: MakeResult, line: str) -> None:
    evidence = OomEvidence(cgroup_oom_kills=1, killed_lines=(line.strip(),))
    outcome = _raise_as_the_build_does(make_result(_log(line), oom=evidence))
    assert isinstance(outcome, OOMKilled)  # retried at half the jobs, not reported as a compile error
    # The evidence as the build's retry line names it (test_build_flow.py), the kill line agreed with.
    assert outcome.result.oom.fired == ("cgroup oom_kill +1", f"log: {line.strip()}")


@pytest.mark.parametrize("line", KILL_LINES)
def test_a_kill_line_alone_is_not_an_oom(make_result: MakeResult, line: str) -> None:
    # Any SIGKILL prints it (a timeout, a person's pkill); without the kernel's or Docker's word
    # it is not retried as an OOM.
    evidence = OomEvidence(killed_lines=(line.strip(),))
    assert evidence.fired == ()
    with pytest.raises(WheelbuildError) as caught:
        _raise_as_the_build_does(make_result(_log(line), oom=evidence))
    assert not isinstance(caught.value, OutOfMemory)


@pytest.mark.parametrize(
    ("evidence", "named"),
    [
        (OomEvidence(docker_oom_events=3), "docker oom event x3"),
        (OomEvidence(state_oom_killed=True), "State.OOMKilled"),
        (OomEvidence(cgroup_oom_kills=2), "cgroup oom_kill +2"),
    ],
)
def test_each_kind_of_evidence_alone_is_out_of_memory(
    make_result: MakeResult, evidence: OomEvidence, named: str
) -> None:
    # The exit code says nothing (cibuildwheel exits 1, the container's PID 1 exits 0).
    outcome = _raise_as_the_build_does(make_result(_log(), oom=evidence))
    assert isinstance(outcome, OOMKilled)
    assert outcome.result.oom.fired == (named,)


def test_kill_wins_over_a_compiler_diagnostic_in_the_same_tail(make_result: MakeResult) -> None:
    evidence = OomEvidence(docker_oom_events=1, killed_lines=("Killed",))
    assert isinstance(
        _raise_as_the_build_does(make_result(_log(NVCC_ERROR, "Killed"), oom=evidence)), OOMKilled
    )


def test_kill_text_without_evidence_is_not_an_oom(make_result: MakeResult) -> None:
    with pytest.raises(CompileFailed):
        _raise_as_the_build_does(make_result(_log(NVCC_ERROR)))


# ---------------------------------------------------------------------------------------------
# In-container checks


def test_memory_not_applied_mark_is_memory_limit_not_applied(make_result: MakeResult) -> None:
    log = (
        "Running before_all...\n"
        "wheelbuild: container memory limit: max (asked 6442450944)\n"
        "wheelbuild: memory limit not applied: the container runs without the requested limit\n"
        "cibuildwheel: error: Command sh -c ... failed with code 86.\n"
    )
    with pytest.raises(MemoryLimitNotApplied) as caught:
        _raise_as_the_build_does(make_result(log, returncode=1, memory_seen=None))
    assert caught.value.exit_code == 41
    assert caught.value.cause == (
        "the build container runs without the memory limit it was given (it read no limit); Docker ignored --memory"
    )


def test_memory_not_applied_reports_the_limit_it_read(make_result: MakeResult) -> None:
    log = "wheelbuild: memory limit not applied: the container runs without the requested limit\n"
    with pytest.raises(MemoryLimitNotApplied) as caught:
        _raise_as_the_build_does(make_result(log, memory_seen=9223372036854771712))
    assert "(it read 9223372036854771712)" in caught.value.cause


def test_torch_mismatch_mark_is_build_failed_naming_what_was_installed(make_result: MakeResult) -> None:
    line = (
        "wheelbuild: torch mismatch: 2.10.0+cu128 with CUDA 12.8 was installed; "
        "the variant needs torch 2.11.* with CUDA 13.x"
    )
    log = f"Running before_build...\nSuccessfully installed torch-2.10.0+cu128\n{line}\n"
    with pytest.raises(BuildFailed) as caught:
        _raise_as_the_build_does(make_result(log))
    assert type(caught.value) is BuildFailed
    assert caught.value.cause == (
        "torch mismatch: 2.10.0+cu128 with CUDA 12.8 was installed; the variant needs torch 2.11.* with CUDA 13.x"
    )
    assert "--torch-index-url" in caught.value.remedy


def _options_summary(config: AttemptConfig) -> str:
    """The lines of cibuildwheel's options summary that show wheelbuild's commands."""
    env = cibuildwheel_env(config)
    return f"  before_all: {env['CIBW_BEFORE_ALL_LINUX']}\n  before_build: {env['CIBW_BEFORE_BUILD_LINUX']}\n"


def _echoed_before_all(config: AttemptConfig) -> str:
    """What cibuildwheel 4.x logs when it runs before_all: `    + sh -c '...'`, then its output."""
    command = cibuildwheel_env(config)["CIBW_BEFORE_ALL_LINUX"]
    return (
        "Running before_all...\n\n"
        f"    + {format_command_for_display(['sh', '-c', command])}\n"
        "wheelbuild: container memory limit: 6442450944 (asked 6442450944)\n"
    )


def _echoed_before_build(config: AttemptConfig) -> str:
    command = cibuildwheel_env(config)["CIBW_BEFORE_BUILD_LINUX"]
    return (
        "Running before_build...\n\n"
        f"    + {format_command_for_display(['sh', '-c', command])}\n"
        "Successfully installed torch-2.11.0+cu130\n"
    )


def test_echoed_torch_check_command_is_not_a_torch_mismatch(
    make_result: MakeResult, make_config: Callable[..., AttemptConfig]
) -> None:
    # Only a line the check printed counts. The command is a script call now, so its echo
    # cannot hold the mark's text; a log that echoes it still classifies by the real error.
    echoed = _echoed_before_build(make_config())
    assert "wheelbuild: torch mismatch:" not in echoed
    with pytest.raises(CompileFailed):
        _raise_as_the_build_does(make_result(echoed + _log(NVCC_ERROR)))


# cibuildwheel logs its options summary and `    + sh -c '<before_all>'`, both holding the
# memory-missing mark's text: a whole wbdemo log is ~350 lines, so they sit inside the 400-line tail.
def _echoed_log(config: AttemptConfig, line: str) -> str:
    return _options_summary(config) + _echoed_before_all(config) + _echoed_before_build(config) + _log(line)


def test_echoed_memory_check_command_is_not_a_missing_memory_limit(
    make_result: MakeResult, make_config: Callable[..., AttemptConfig]
) -> None:
    log = _echoed_log(make_config(), NVCC_ERROR)
    with pytest.raises(CompileFailed) as caught:
        _raise_as_the_build_does(make_result(log, memory_seen=6442450944))
    assert type(caught.value) is CompileFailed


def test_echoed_memory_check_command_does_not_hide_an_oom_kill(
    make_result: MakeResult, make_config: Callable[..., AttemptConfig]
) -> None:
    log = _echoed_log(make_config(), "Killed")
    evidence = OomEvidence(docker_oom_events=1, killed_lines=("Killed",))
    assert isinstance(
        _raise_as_the_build_does(make_result(log, memory_seen=6442450944, oom=evidence)), OOMKilled
    )


# ---------------------------------------------------------------------------------------------
# Ownership tokens


def test_own_token_names_host_boot_pid_namespace_pid_and_start_time() -> None:
    namespace, pid, start = owner_token().split(":")
    host, boot, pidns = namespace.split("/")
    assert host == socket.gethostname()
    assert boot == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert pidns == os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    assert pid == str(os.getpid())
    assert start.isdigit()
    assert owner_token(os.getpid()) == owner_token()


def test_own_token_is_alive() -> None:
    assert _owner_alive(owner_token()) is True


def test_token_of_an_exited_process_is_not_alive() -> None:
    proc = subprocess.Popen(["true"])
    token_while_it_ran = owner_token(proc.pid)
    proc.wait()
    assert _owner_alive(token_while_it_ran) is False
    assert _owner_alive(owner_token(proc.pid)) is False  # start time unreadable once gone


def test_token_with_a_reused_pid_is_not_alive() -> None:
    # Same host and pid as this process, but another start time: the pid was reused.
    host, pid, start = owner_token().split(":")
    assert _owner_alive(f"{host}:{pid}:{int(start) + 1}") is False


def test_token_from_another_host_counts_as_alive() -> None:
    assert _owner_alive(f"not-{socket.gethostname()}/b/1:1:12345") is True


def test_token_from_another_pid_namespace_with_the_same_hostname_counts_as_alive() -> None:
    # CI runners sharing a hostname in separate PID namespaces: pid 1 there is not our pid 1.
    namespace, pid, start = owner_token().split(":")
    host, boot, _pidns = namespace.split("/")
    assert _owner_alive(f"{host}/{boot}/4026500000:{pid}:{int(start) + 1}") is True


def test_malformed_token_counts_as_alive() -> None:
    assert _owner_alive(f"{owner_token().split(':')[0]}:notapid:1") is True
