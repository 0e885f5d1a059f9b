"""The scripts one attempt's container runs (images/wheelbuild-check-memory, -before-build,
-check-torch, -site-packages), each run alone on this host with a stub environment: a cgroup
fixture tree, a stub pip and sccache that record what they were given, a stand-in torch
module. The marks they print are the ones the engine reads back (run.buildlog)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from wheelbuild.attempt.buildlog import (
    MEMORY_MARK,
    MEMORY_MISSING_MARK,
    TORCH_MISMATCH_MARK,
    BuildLog,
    network_request,
)
from wheelbuild.attempt.config import ATTEMPT_SCRIPTS, AttemptConfig, cibuildwheel_env
from wheelbuild.image.inputs import IMAGES_DIR

SECRET_INDEX = "https://user:secret@example.invalid/simple"


def _run(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=60, check=False)


def _script(name: str) -> str:
    return str(IMAGES_DIR / name)


# ---------------------------------------------------------------------------------------------
# wheelbuild-check-memory (before_all)


@pytest.mark.parametrize("layout", ["v2", "v1"])
def test_check_memory_passes_and_prints_the_limit_the_cgroup_enforces(tmp_path: Path, layout: str) -> None:
    limit_file = tmp_path / ("memory.max" if layout == "v2" else "memory/memory.limit_in_bytes")
    limit_file.parent.mkdir(parents=True, exist_ok=True)
    limit_file.write_text("6442450944\n")
    env = {
        "PATH": os.environ["PATH"],
        "WHEELBUILD_CGROUP_ROOT": str(tmp_path),
        "WHEELBUILD_MEMORY_LIMIT": "6442450944",
    }
    done = _run("sh", _script("wheelbuild-check-memory"), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{MEMORY_MARK} 6442450944 (asked 6442450944)\n"


@pytest.mark.parametrize("enforced", ["max", None], ids=["unlimited", "no-memory-cgroup"])
def test_check_memory_exits_86_with_the_mark_when_the_limit_is_not_applied(
    tmp_path: Path, enforced: str | None
) -> None:
    if enforced is not None:
        (tmp_path / "memory.max").write_text(enforced + "\n")
    env = {
        "PATH": os.environ["PATH"],
        "WHEELBUILD_CGROUP_ROOT": str(tmp_path),
        "WHEELBUILD_MEMORY_LIMIT": "6442450944",
    }
    done = _run("sh", _script("wheelbuild-check-memory"), env=env)
    assert done.returncode == 86
    assert done.stdout.startswith(f"{MEMORY_MARK} {enforced or 'none'} (asked 6442450944)")
    assert done.stderr.startswith(MEMORY_MISSING_MARK)


# ---------------------------------------------------------------------------------------------
# wheelbuild-check-torch


def _fake_torch(root: Path, version: str, cuda: str | None) -> Path:
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(
        f"import types\n__version__ = {version!r}\nversion = types.SimpleNamespace(cuda={cuda!r})\n"
    )
    return root


@pytest.mark.parametrize(
    ("version", "cuda", "ok"),
    [
        ("2.11.0+cu130", "13.0", True),
        ("2.11.1", "13.1", True),
        ("2.10.0+cu130", "13.0", False),  # wrong minor
        ("2.110.0", "13.0", False),  # 2.11 is not a prefix of 2.110
        ("2.11.0+cu128", "12.8", False),  # wrong CUDA
        ("2.11.0+cpu", None, False),  # a CPU torch
    ],
)
def test_check_torch_accepts_only_the_variants_minor_and_cuda_major(
    tmp_path: Path, version: str, cuda: str | None, ok: bool
) -> None:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(_fake_torch(tmp_path, version, cuda))}
    done = _run(sys.executable, _script("wheelbuild-check-torch"), "2.11", "13", env=env)
    if ok:
        assert (done.returncode, done.stdout) == (0, f"wheelbuild: torch {version} CUDA {cuda}\n")
    else:
        assert done.returncode == 87
        assert done.stdout.startswith(
            f"{TORCH_MISMATCH_MARK}: {version} with CUDA {cuda or 'none'} was installed"
        )
        assert "the variant needs torch 2.11.* with CUDA 13.x" in done.stdout


@pytest.mark.parametrize(
    ("version", "cuda", "ok"), [("2.11.0+cu130", "13.0", True), ("2.11.0+cpu", None, False)]
)
def test_check_torch_reads_version_py_without_importing_torch(
    tmp_path: Path, version: str, cuda: str | None, ok: bool
) -> None:
    """A real torch has torch/version.py: the check reads it and never imports torch (1.5 s
    per Python). The stand-in's __init__ fails, so an import would show."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('the check imported torch')\n")
    (tmp_path / "torch" / "version.py").write_text(
        f"from typing import Optional\n__version__ = {version!r}\ncuda: Optional[str] = {cuda!r}\n"
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path)}
    done = _run(sys.executable, _script("wheelbuild-check-torch"), "2.11", "13", env=env)
    assert done.returncode == (0 if ok else 87), done.stderr
    assert done.stdout.startswith(
        f"wheelbuild: torch {version} CUDA {cuda}"
        if ok
        else f"{TORCH_MISMATCH_MARK}: {version} with CUDA none"
    )


# ---------------------------------------------------------------------------------------------
# wheelbuild-before-build


def _before_build_env(
    tmp_path: Path, torch_version: str = "2.11.0+cu130"
) -> tuple[dict[str, str], Path, str]:
    """before-build beside the real check-torch and toolchain and a stand-in wheelbuild-wheel-cache
    (tested on its own against a real index below) that records its argv and whether an index URL
    was in its env; an `sccache` on PATH that records the same; a stand-in torch; a secrets
    folder; a CUDA_HOME and a linker of stand-ins for the toolchain to wrap (tests/unit/
    test_toolchain.py runs it on real ones)."""
    record = tmp_path / "record"
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name in (
        "wheelbuild-before-build",
        "wheelbuild-check-torch",
        "wheelbuild-cuda-libraries",
        "wheelbuild-toolchain",
        "wheelbuild-cxx",
    ):
        shutil.copy(IMAGES_DIR / name, scripts / name)
    (scripts / "wheelbuild-wheel-cache").write_text(
        "import os, sys\n"
        f"with open({str(record)!r}, 'a') as out:\n"
        "    print('cache', os.environ.get('PIP_INDEX_URL', ''), *sys.argv[1:], sep='|', file=out)\n"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    sccache = bin_dir / "sccache"
    sccache.write_text(
        f'#!/bin/sh\necho "sccache|${{SCCACHE_BUCKET:-}}|${{SCCACHE_LOG:-}}|${{SCCACHE_ERROR_LOG:-}}|$*'
        f'${{SCCACHE_CONF:+|conf=$SCCACHE_CONF}}" >> {record}\n'
    )
    sccache.chmod(0o755)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "torch-index-url").write_text(SECRET_INDEX)
    (secrets / "sccache.env").write_text("SCCACHE_BUCKET='ci-cache'\n")
    for stand_in in ("cuda/bin/nvcc", "ld/ld"):
        (tmp_path / stand_in).parent.mkdir(parents=True)
        (tmp_path / stand_in).write_text("#!/bin/sh\n")
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "CUDA_HOME": str(tmp_path / "cuda"),
        "WHEELBUILD_LINKERS": str(tmp_path / "ld" / "ld"),
        "WHEELBUILD_LINKS": str(tmp_path / "links" / "ledger"),
        "WHEELBUILD_CXX_SHIM": str(tmp_path / "bin" / "wheelbuild-c++"),
        "WHEELBUILD_CUDA_LIBRARIES": str(tmp_path / "cuda-libraries"),
        "PYTHONPATH": str(_fake_torch(tmp_path / "site", torch_version, "13.0")),
        "WHEELBUILD_SECRETS": str(secrets),
        "WHEELBUILD_WHEEL_CACHE": str(tmp_path / "wheels"),
        "WHEELBUILD_SCCACHE_LOG": str(tmp_path / "sccache.log"),
    }
    return env, record, str(scripts / "wheelbuild-before-build")


def test_before_build_installs_torch_through_the_wheel_cache_and_checks_it(tmp_path: Path) -> None:
    env, record, script = _before_build_env(tmp_path)
    done = _run("sh", script, "torch==2.11.0", "2.11", "13", "0123abcd", env=env)
    assert done.returncode == 0, done.stderr
    wheels, secrets = tmp_path / "wheels", tmp_path / "secrets"
    tools_key = hashlib.sha256(b"setuptools>=70 wheel build").hexdigest()[:12]
    assert record.read_text().splitlines() == [
        f"cache||{wheels}|build-tools-{tools_key}|setuptools>=70|wheel|build",
        # The index travels as the secret file's path; the cache reads it into pip's env.
        f"cache||{wheels}|0123abcd|--index-file|{secrets}/torch-index-url|--tree|torch==2.11.0",
    ]
    assert SECRET_INDEX not in record.read_text()
    torch_line, libraries_line, toolchain_line = done.stdout.splitlines()[-3:]
    assert torch_line == "wheelbuild: torch 2.11.0+cu130 CUDA 13.0"
    # Then torch's CUDA libraries are linked for the compiles and the stand-ins go in (their own
    # tests: test_cuda_libraries.py, test_toolchain.py); the stand-in torch brings none.
    assert libraries_line.startswith("wheelbuild: CUDA libraries of torch: 0 header entries and 0 link names")
    assert toolchain_line.startswith(f"wheelbuild-toolchain: {tmp_path}/cuda/bin/nvcc compiles ")


def test_before_build_installs_the_packages_own_build_requirements_with_the_tools(tmp_path: Path) -> None:
    """Each requirement one word, markers and all; the lock is named by the whole list."""
    env, record, script = _before_build_env(tmp_path)
    env["WHEELBUILD_BUILD_REQUIRES"] = 'setuptools<81.0.0|ninja; python_version < "3.20"'
    done = _run("sh", script, "torch==2.11.0", "2.11", "13", "0123abcd", env=env)
    assert done.returncode == 0, done.stderr
    key = hashlib.sha256(
        b'setuptools>=70 wheel build|setuptools<81.0.0|ninja; python_version < "3.20"'
    ).hexdigest()[:12]
    first = record.read_text().splitlines()[0]
    assert first.split("|") == [
        "cache", "", str(tmp_path / "wheels"), f"build-tools-{key}", "setuptools>=70", "wheel", "build",
        "setuptools<81.0.0", 'ninja; python_version < "3.20"',
    ]  # fmt: skip


def test_before_build_stops_at_a_torch_mismatch_with_the_checks_exit(tmp_path: Path) -> None:
    env, record, script = _before_build_env(tmp_path, torch_version="2.10.0+cu130")
    env["SCCACHE_DIR"] = str(tmp_path / "cache")
    done = _run("sh", script, "torch==2.11.0", "2.11", "13", "0123abcd", env=env)
    assert done.returncode == 87
    assert TORCH_MISMATCH_MARK in done.stdout
    assert "sccache" not in record.read_text()  # nothing after the failed check ran


def test_before_build_writes_admission_costs_and_starts_a_fresh_sccache_with_the_shared_env(
    tmp_path: Path,
) -> None:
    env, record, script = _before_build_env(tmp_path)
    costs = tmp_path / "costs.json"
    env |= {
        "WHEELBUILD_ADMIT_COSTS_JSON": '{"default":100}',
        "WHEELBUILD_ADMIT_COSTS": str(costs),
        "SCCACHE_DIR": str(tmp_path / "cache"),
    }
    done = _run("sh", script, "torch==2.11.0", "2.11", "13", "0123abcd", env=env)
    assert done.returncode == 0, done.stderr
    assert costs.read_text() == '{"default":100}'
    sccache = [line for line in record.read_text().splitlines() if line.startswith("sccache|")]
    # Only the server's start sees the shared storage's settings, and it alone logs each compile,
    # into a log emptied for this Python (wheelbuild-cache-log reads it).
    log = tmp_path / "sccache.log"
    assert sccache == [
        "sccache||||--stop-server",
        f"sccache|ci-cache|sccache::compiler::compiler=debug|{log}|--start-server",
        "sccache||||--zero-stats",
    ]
    assert log.read_text() == ""


def test_with_dist_the_server_alone_starts_with_the_client_config_of_the_secrets_mount(
    tmp_path: Path,
) -> None:
    env, record, script = _before_build_env(tmp_path)
    env["SCCACHE_DIR"] = str(tmp_path / "cache")
    (tmp_path / "secrets" / "sccache-dist.conf").write_text("[dist]\n")
    done = _run("sh", script, "torch==2.11.0", "2.11", "13", "0123abcd", env=env)
    assert done.returncode == 0, done.stderr
    sccache = [line for line in record.read_text().splitlines() if line.startswith("sccache|")]
    conf = f"|conf={tmp_path}/secrets/sccache-dist.conf"
    assert [line.endswith(conf) for line in sccache] == [False, True, False]
    assert sccache[1].split("|")[4] == "--start-server"


# wheelbuild-site-packages is evaluated by cibuildwheel's own parser in test_engine_env.


# ---------------------------------------------------------------------------------------------
# wheelbuild-cache-log

# Lines of sccache 0.16's server log at sccache::compiler::compiler=debug, from the build image:
# relu.cu compiled (its device steps ran), scale.cu a hit, saxpy.cu a top-level miss whose
# steps all hit (a comment changed nothing the compiler sees), binding.cpp compiled.
SCCACHE_LOG = """\
[2026-11-30T16:37:27Z DEBUG sccache::compiler::compiler] [relu.o]: get_cached_or_compile: ["-c", "relu.cu"]
[2026-11-30T16:37:27Z DEBUG sccache::compiler::compiler] [relu.o]: Cache miss in 0.000 s
[2026-11-30T16:37:28Z DEBUG sccache::compiler::compiler] [relu.module_id]: get_cached_or_compile: ["--c++17"]
[2026-11-30T16:37:28Z DEBUG sccache::compiler::compiler] [relu.module_id]: Compiled in 0.148 s, storing in cache
[2026-11-30T16:37:28Z DEBUG sccache::compiler::compiler] [scale.o]: get_cached_or_compile: ["-c", "scale.cu"]
[2026-11-30T16:37:28Z DEBUG sccache::compiler::compiler] [relu.compute_120.ptx]: get_cached_or_compile: ["-arch"]
[2026-11-30T16:37:28Z DEBUG sccache::compiler::compiler] [relu.compute_120.ptx]: Compiled in 0.162 s, storing in cache
[2026-11-30T16:37:28Z DEBUG sccache::compiler::compiler] [scale.o]: Cache hit in 0.000 s
[2026-11-30T16:37:28Z DEBUG sccache::compiler::compiler] [relu.compute_120.cubin]: Compiled in 0.015 s, storing in cache
[2026-11-30T16:37:28Z DEBUG sccache::compiler::compiler] [relu.o]: Compiled in 0.147 s, storing in cache
[2026-11-30T16:37:29Z DEBUG sccache::compiler::compiler] [saxpy.o]: get_cached_or_compile: ["-c", "saxpy.cu"]
[2026-11-30T16:37:29Z DEBUG sccache::compiler::compiler] [saxpy.o]: Cache miss in 0.000 s
[2026-11-30T16:37:29Z DEBUG sccache::compiler::compiler] [saxpy.compute_120.ptx]: get_cached_or_compile: ["-arch"]
[2026-11-30T16:37:29Z DEBUG sccache::compiler::compiler] [saxpy.compute_120.ptx]: Cache hit in 0.000 s
[2026-11-30T16:37:29Z DEBUG sccache::compiler::compiler] [saxpy.o]: Compiled in 0.249 s, but not cacheable
[2026-11-30T16:37:30Z DEBUG sccache::compiler::compiler] [binding.o]: get_cached_or_compile: ["-c", "binding.cpp"]
[2026-11-30T16:37:30Z DEBUG sccache::compiler::compiler] [binding.o]: Compiled in 2.040 s, storing in cache
"""


def test_cache_log_names_each_unit_compiled_or_from_cache(tmp_path: Path) -> None:
    log = tmp_path / "sccache.log"
    log.write_text(SCCACHE_LOG)
    done = _run(sys.executable, _script("wheelbuild-cache-log"), str(log), env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "wheelbuild: unit compiled: relu.o",
        "wheelbuild: unit from cache: scale.o",
        "wheelbuild: unit from cache: saxpy.o",  # its device code came from the cache
        "wheelbuild: unit compiled: binding.o",
    ]
    # The engine's reader takes exactly these lines.
    progress = BuildLog()
    for line in ["Building cp311-manylinux_x86_64 wheel", *done.stdout.splitlines()]:
        progress.feed(line)
    assert progress.unit_cache == {
        "cp311-manylinux_x86_64": {"relu.o": True, "scale.o": False, "saxpy.o": False, "binding.o": True}
    }


def test_cache_log_without_a_log_says_so_and_does_not_fail_the_build(tmp_path: Path) -> None:
    done = _run(sys.executable, _script("wheelbuild-cache-log"), str(tmp_path / "absent.log"), env={})
    assert done.returncode == 0
    assert done.stdout.startswith("wheelbuild: no compile log to read")


# ---------------------------------------------------------------------------------------------
# Where the attempt's container gets them


def test_every_attempt_script_is_bind_mounted_read_only_by_cibuildwheels_create_args(
    make_config: Callable[..., AttemptConfig],
) -> None:
    env = cibuildwheel_env(make_config())
    for name in ATTEMPT_SCRIPTS:
        assert (
            f"--volume={(IMAGES_DIR / name).resolve()}:/usr/local/bin/{name}:ro"
            in env["CIBW_CONTAINER_ENGINE"]
        )
    assert env["CIBW_BEFORE_ALL_LINUX"] == "sh /usr/local/bin/wheelbuild-check-memory"


# ---------------------------------------------------------------------------------------------
# wheelbuild-network


def _net(tmp_path: Path, *interfaces: str) -> Path:
    net = tmp_path / "net"
    net.mkdir(exist_ok=True)
    for name in interfaces:
        (net / name).mkdir()
    return net


def test_network_asks_then_waits_until_the_engine_took_the_container_off(tmp_path: Path) -> None:
    """The request is a mark on stdout; the wait ends when no interface but loopback is left
    (here: when the test, as the engine, removes eth0 on reading the mark)."""
    net = _net(tmp_path, "lo", "eth0")
    env = {"PATH": os.environ["PATH"], "WHEELBUILD_NET_DIR": str(net)}
    proc = subprocess.Popen(
        ["sh", _script("wheelbuild-network"), "off"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert network_request(first.rstrip("\n")) is False
    (net / "eth0").rmdir()
    rest = proc.stdout.read()
    assert proc.wait(timeout=30) == 0
    assert (first + rest).splitlines() == ["wheelbuild: network: off please", "wheelbuild: network: off"]


def test_network_on_when_already_on_asks_nothing(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "WHEELBUILD_NET_DIR": str(_net(tmp_path, "lo", "eth0"))}
    done = _run("sh", _script("wheelbuild-network"), "on", env=env)
    assert (done.returncode, done.stdout) == (0, "")


def test_network_that_never_changes_fails_with_its_mark(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "WHEELBUILD_NET_DIR": str(_net(tmp_path, "lo")),
        "WHEELBUILD_NETWORK_WAIT_S": "1",
    }
    done = _run("sh", _script("wheelbuild-network"), "on", env=env)
    assert done.returncode == 89
    assert done.stdout.splitlines() == [
        "wheelbuild: network: on please",
        "wheelbuild: network: still off after 1 s",
    ]
    assert network_request(done.stdout.splitlines()[1]) is None  # a verdict, not a request


def test_a_network_request_is_only_the_marks_own_line() -> None:
    assert network_request("wheelbuild: network: on please") is True
    assert network_request("wheelbuild: network: off please") is False
    assert network_request("    + sh /usr/local/bin/wheelbuild-network off") is None
    assert network_request("echo wheelbuild: network: on please") is None
