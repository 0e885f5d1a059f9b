"""wheelbuild.attempt.config.cibuildwheel_env: the CIBW_* settings of one attempt (pure, no Docker)."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cibuildwheel.environment import parse_environment
from wheelbuild.attempt.config import (
    ATTEMPT_SCRIPTS,
    SITE_PACKAGES_BASEDIRS,
    WHEEL_CACHE_DIR,
    AttemptConfig,
    cibuildwheel_env,
    network_while_building,
    redactor_for,
    shared_cache_env,
)
from wheelbuild.attempt.ownership import owner_token
from wheelbuild.engine.attempt_run import write_secrets
from wheelbuild.image.inputs import IMAGES_DIR
from wheelbuild.plan.dist import DistTarget
from wheelbuild.variants import parse_variant

SECRET_INDEX = "https://user:secret@example.invalid/simple"
GIB = 1024**3


def _create_args(env: dict[str, str]) -> list[str]:
    engine, _, args = env["CIBW_CONTAINER_ENGINE"].partition("; create_args: ")
    assert engine == "docker"
    return shlex.split(args)


def test_container_memory_and_swap_are_equal_so_there_is_no_swap(
    make_config: Callable[..., AttemptConfig],
) -> None:
    args = _create_args(cibuildwheel_env(make_config(memory=6 * GIB)))
    assert "--memory=6442450944" in args
    assert "--memory-swap=6442450944" in args


def test_create_args_are_exactly_limits_labels_and_pip_cache(
    make_config: Callable[..., AttemptConfig],
) -> None:
    config = make_config(run_id="run-1", attempt=3, cpus=7.5, memory=6 * GIB, gpus=False)
    assert _create_args(cibuildwheel_env(config)) == [
        "--memory=6442450944",
        "--memory-swap=6442450944",
        "--cpus=7.5",
        "--label=wheelbuild.run=run-1",
        "--label=wheelbuild.attempt=run-1.3",
        f"--label=wheelbuild.owner={owner_token()}",
        "--volume=wheelbuild-pip-cache:/root/.cache/pip",
        "--volume=wheelbuild-torch-wheels:/root/.cache/wheelbuild-wheels",
        "--volume=wheelbuild-sccache:/root/.cache/sccache",
        *(f"--volume={(IMAGES_DIR / name).resolve()}:/usr/local/bin/{name}:ro" for name in ATTEMPT_SCRIPTS),
    ]


def test_without_compiler_cache_no_sccache_volume_or_wrappers(
    make_config: Callable[..., AttemptConfig],
) -> None:
    env = cibuildwheel_env(make_config(compiler_cache=False))
    assert not any("sccache" in arg for arg in _create_args(env))
    assert "sccache" not in env["CIBW_ENVIRONMENT_LINUX"]
    assert "sccache" not in env["CIBW_REPAIR_WHEEL_COMMAND_LINUX"]
    assert "sccache" not in env["CIBW_BEFORE_BUILD_LINUX"]


def test_the_builds_cxx_raises_the_standard_then_runs_what_it_would_have_run(
    make_config: Callable[..., AttemptConfig],
) -> None:
    def evaluated(config: AttemptConfig) -> dict[str, str]:
        raw = cibuildwheel_env(config)["CIBW_ENVIRONMENT_LINUX"].replace(SITE_PACKAGES_BASEDIRS + " ", "")
        return parse_environment(raw).as_dictionary({"PATH": "/usr/bin"})

    plain = evaluated(make_config(compiler_cache=False))
    assert (plain["CXX"], plain["WHEELBUILD_CXX"]) == ("/usr/local/bin/wheelbuild-c++", "c++")
    assert "WHEELBUILD_KEEP_PACKAGE_STD" not in plain
    own = evaluated(make_config(build_env={"CXX": "clang++"}, compiler_cache=False, keep_package_std=True))
    assert (own["CXX"], own["WHEELBUILD_CXX"], own["WHEELBUILD_KEEP_PACKAGE_STD"]) == (
        "/usr/local/bin/wheelbuild-c++", "clang++", "1",
    )  # fmt: skip
    cached = evaluated(make_config(build_env={"CXX": "clang++"}))
    assert cached["WHEELBUILD_CXX"] == "/usr/local/bin/sccache-c++"  # through the cache, as before
    mounted = _create_args(cibuildwheel_env(make_config()))
    assert any(arg.endswith("/wheelbuild-cxx:/usr/local/bin/wheelbuild-cxx:ro") for arg in mounted)


def test_owner_label_names_this_host_and_process(make_config: Callable[..., AttemptConfig]) -> None:
    args = _create_args(cibuildwheel_env(make_config()))
    owner = next(a for a in args if a.startswith("--label=wheelbuild.owner="))
    namespace, pid, start = owner.removeprefix("--label=wheelbuild.owner=").split(":")
    assert namespace.split("/")[0] == socket.gethostname()
    assert pid == str(os.getpid())
    assert start.isdigit()


def test_whole_cpus_are_written_without_a_fraction(make_config: Callable[..., AttemptConfig]) -> None:
    assert "--cpus=8" in _create_args(cibuildwheel_env(make_config(cpus=8.0)))


def test_gpus_are_passed_only_when_asked(make_config: Callable[..., AttemptConfig]) -> None:
    assert "--gpus=all" in _create_args(cibuildwheel_env(make_config(gpus=True)))
    without = cibuildwheel_env(make_config(gpus=False))
    assert "--gpus=all" not in _create_args(without)
    assert all("--gpus" not in value for value in without.values())


def test_build_frontend_is_pip_without_build_isolation(make_config: Callable[..., AttemptConfig]) -> None:
    assert (
        cibuildwheel_env(make_config())["CIBW_BUILD_FRONTEND"]
        == "build; args: --no-isolation --skip-dependency-check"
    )


def test_platform_image_and_identifiers(make_config: Callable[..., AttemptConfig]) -> None:
    env = cibuildwheel_env(make_config(image="wheelbuild-cuda131:0123456789abcdef"))
    assert env["CIBW_PLATFORM"] == "linux"
    assert env["CIBW_ARCHS_LINUX"] == "x86_64"
    assert env["CIBW_BUILD"] == "cp311-manylinux_x86_64 cp312-manylinux_x86_64"
    assert env["CIBW_MANYLINUX_X86_64_IMAGE"] == "wheelbuild-cuda131:0123456789abcdef"
    assert env["CIBW_TEST_COMMAND"] == ""


def test_the_torch_index_url_is_in_no_cibuildwheel_setting_only_in_a_mounted_file(
    make_config: Callable[..., AttemptConfig], tmp_path: Path
) -> None:
    # cibuildwheel prints its options and runs every command as `env K=V ...`: a secret given to
    # it by value or by name (environment-pass) reaches its log and the process list.
    config = make_config(torch=parse_variant("2.11.0+cu130", SECRET_INDEX))
    env = cibuildwheel_env(config, tmp_path)
    assert [k for k, v in env.items() if "user:secret" in v or "example.invalid" in v] == []
    assert env["CIBW_ENVIRONMENT_PASS_LINUX"] == ""
    assert f"--volume={tmp_path}:/run/wheelbuild-secrets:ro" in env["CIBW_CONTAINER_ENGINE"]
    # pip reads the index from the file, into its own environment, by name: the script does
    # (test_attempt_scripts runs it); the file is what write_secrets puts in the mounted folder.
    assert env["CIBW_BEFORE_BUILD_LINUX"].startswith("sh /usr/local/bin/wheelbuild-before-build ")
    write_secrets(config, {}, tmp_path)
    assert (tmp_path / "torch-index-url").read_text() == SECRET_INDEX
    assert (tmp_path / "torch-index-url").stat().st_mode & 0o077 == 0


def test_before_build_installs_the_variants_torch_and_checks_it(
    make_config: Callable[..., AttemptConfig],
) -> None:
    variant = parse_variant("2.11.0+cu130", SECRET_INDEX)
    before = cibuildwheel_env(make_config(torch=variant))["CIBW_BEFORE_BUILD_LINUX"]
    # The script installs the requirement (from the machine's wheel cache, under the variant's
    # key) and checks the minor and CUDA major (test_attempt_scripts).
    assert before == f"sh /usr/local/bin/wheelbuild-before-build torch==2.11.0 2.11 13 {variant.cache_key}"
    # The key names the index without its credentials: a rotated token keeps the cache.
    assert variant.cache_key == parse_variant("2.11.0+cu130", "https://example.invalid/simple").cache_key
    assert variant.cache_key != parse_variant("2.10.0+cu130", SECRET_INDEX).cache_key
    assert variant.cache_key != parse_variant("2.11.0+cu130", "https://mirror.invalid/simple").cache_key


def test_before_all_checks_the_memory_limit_the_container_got(
    make_config: Callable[..., AttemptConfig],
) -> None:
    # The script compares the cgroup's limit with WHEELBUILD_MEMORY_LIMIT (test_attempt_scripts),
    # which the container's environment carries.
    config = make_config(memory=6 * GIB)
    env = cibuildwheel_env(config)
    assert env["CIBW_BEFORE_ALL_LINUX"] == "sh /usr/local/bin/wheelbuild-check-memory"
    raw = env["CIBW_ENVIRONMENT_LINUX"].replace(SITE_PACKAGES_BASEDIRS + " ", "")
    assert parse_environment(raw).as_dictionary({"PATH": "/usr/bin"})["WHEELBUILD_MEMORY_LIMIT"] == str(
        6 * GIB
    )


def test_container_environment_as_cibuildwheel_reads_it(make_config: Callable[..., AttemptConfig]) -> None:
    config = make_config(
        memory=6 * GIB,
        build_env={
            "MAX_JOBS": "4",
            "NVCC_THREADS": "2",
            "TORCH_CUDA_ARCH_LIST": "10.0;12.0",
            "FLASH_ATTN_CUDA_ARCHS": "100;120",
        },
        cuda_home="/usr/local/cuda-13.1/nvidia/cu13",
        nvcc_archs=(100, 120),
        nvcc_threads=2,
    )
    raw = cibuildwheel_env(config)["CIBW_ENVIRONMENT_LINUX"]
    assert raw == (
        "MAX_JOBS=4 NVCC_THREADS=2 TORCH_CUDA_ARCH_LIST='10.0;12.0' FLASH_ATTN_CUDA_ARCHS='100;120' "
        "CUDA_HOME=/usr/local/cuda-13.1/nvidia/cu13 WHEELBUILD_MEMORY_LIMIT=6442450944 "
        "CPATH=/tmp/wheelbuild-cuda/include LIBRARY_PATH=/tmp/wheelbuild-cuda/lib "
        "WHEELBUILD_NVCC_ARCHS=100,120 WHEELBUILD_NVCC_THREADS=2 CUDACXX=/usr/local/cuda-13.1/nvidia/cu13/bin/nvcc "
        "TORCH_NO_COMPILER_WRAPPER=1 WHEELBUILD_NVCC_LAUNCHER=sccache "
        "CXX=/usr/local/bin/wheelbuild-c++ SCCACHE_DIR=/root/.cache/sccache SCCACHE_IDLE_TIMEOUT=0 "
        "WHEELBUILD_CXX=/usr/local/bin/sccache-c++ "
        f"{SITE_PACKAGES_BASEDIRS} "
        'PATH="$PATH:/usr/local/cuda-13.1/nvidia/cu13/bin"'
    )
    raw = raw.replace(SITE_PACKAGES_BASEDIRS + " ", "")  # evaluated by the next test
    evaluated = parse_environment(raw).as_dictionary({"PATH": "/opt/python/cp311-cp311/bin:/usr/bin"})
    assert evaluated == {
        "PATH": "/opt/python/cp311-cp311/bin:/usr/bin:/usr/local/cuda-13.1/nvidia/cu13/bin",
        "MAX_JOBS": "4",
        "NVCC_THREADS": "2",
        "TORCH_CUDA_ARCH_LIST": "10.0;12.0",
        "FLASH_ATTN_CUDA_ARCHS": "100;120",
        "CUDA_HOME": "/usr/local/cuda-13.1/nvidia/cu13",
        "WHEELBUILD_MEMORY_LIMIT": "6442450944",
        # torch's CUDA library headers and link names (cuBLAS, ...), after the compiler's own
        "CPATH": "/tmp/wheelbuild-cuda/include",
        "LIBRARY_PATH": "/tmp/wheelbuild-cuda/lib",
        # $CUDA_HOME/bin/nvcc is wheelbuild-nvcc: exactly these archs and threads, run through
        # sccache; torch's cpp_extension puts CXX in place of c++: wheelbuild-c++, which raises
        # an older C++ standard to torch's (wheelbuild-cxx), then runs sccache's c++.
        "WHEELBUILD_NVCC_ARCHS": "100,120",
        "WHEELBUILD_NVCC_THREADS": "2",
        "CUDACXX": "/usr/local/cuda-13.1/nvidia/cu13/bin/nvcc",  # CMake's, before PATH
        # torch >= 2.14 would put sccache in front of the wrappers, which run it already
        "TORCH_NO_COMPILER_WRAPPER": "1",
        "WHEELBUILD_NVCC_LAUNCHER": "sccache",
        "CXX": "/usr/local/bin/wheelbuild-c++",
        "SCCACHE_DIR": "/root/.cache/sccache",
        "SCCACHE_IDLE_TIMEOUT": "0",
        "WHEELBUILD_CXX": "/usr/local/bin/sccache-c++",
    }


def test_sccache_basedirs_are_the_build_pythons_site_packages_plain_and_resolved(
    make_config: Callable[..., AttemptConfig], tmp_path: Path
) -> None:
    # A Python reached through a directory link, as manylinux's /opt/python/<tag> is: the
    # assignment is evaluated by the build's own python (here: this venv's base interpreter).
    base_python = Path(sys.base_prefix) / "bin" / f"python3.{sys.version_info.minor}"
    expected = subprocess.run(
        [base_python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    linked_prefix = tmp_path / "opt-python-cp3x"
    linked_prefix.symlink_to(Path(sys.base_prefix).resolve(), target_is_directory=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(linked_prefix / "bin" / base_python.name)
    raw = cibuildwheel_env(make_config())["CIBW_ENVIRONMENT_LINUX"]
    # The script runs from where the container mounts it; here, from images/ itself.
    raw = raw.replace("/usr/local/bin/wheelbuild-site-packages", str(IMAGES_DIR / "wheelbuild-site-packages"))
    evaluated = parse_environment(raw).as_dictionary({"PATH": f"{bin_dir}:/usr/bin"})
    plain, resolved, trees = evaluated["SCCACHE_BASEDIRS"].split(":")
    assert Path(resolved) == Path(expected).resolve()
    assert Path(plain).resolve() == Path(resolved)
    # Where wheelbuild-wheel-cache --tree links this Python's torch (test_wheel_cache makes one).
    assert trees == f"{WHEEL_CACHE_DIR}/trees/cp3{sys.version_info.minor}"


def test_repair_excludes_torch_and_cuda_runtime_libraries(make_config: Callable[..., AttemptConfig]) -> None:
    command = cibuildwheel_env(make_config())["CIBW_REPAIR_WHEEL_COMMAND_LINUX"]
    assert command == (
        "sccache --show-stats; python /usr/local/bin/wheelbuild-cache-log; "
        # before auditwheel grafts any library in: every shared object was linked by this build
        "python /usr/local/bin/wheelbuild-check-linked {wheel} && auditwheel repair --exclude 'libtorch*.so' --exclude 'libc10*.so' --exclude 'libcudart.so*' "
        "--exclude 'libcuda.so*' --exclude libshm.so --exclude 'libcublas*.so*' --exclude 'libcusparse*.so*' "
        "--exclude 'libcusolver*.so*' --exclude 'libcurand.so*' --exclude 'libcufft*.so*' --exclude 'libnvrtc*.so*' "
        "--exclude 'libnvJitLink.so*' --exclude 'libcudnn*.so*' --exclude 'libnccl.so*' --exclude 'libnvshmem*.so*' "
        "--exclude 'libcupti.so*' --exclude 'libnvtx3interop.so*' -w {dest_dir} {wheel}"
    )
    words = shlex.split(command.rsplit(" && ", 1)[1])
    excluded = [words[i + 1] for i, w in enumerate(words) if w == "--exclude"]
    assert {"libtorch*.so", "libc10*.so", "libcudart.so*", "libcublas*.so*"} <= set(excluded)


def test_admission_routes_compiles_through_the_wrapper_with_budget_and_costs(
    make_config: Callable[..., AttemptConfig],
) -> None:
    costs = '{"default":100,"units":{"saxpy.cu":100}}'
    env = cibuildwheel_env(make_config(admission=(2 * GIB, costs)))
    raw = env["CIBW_ENVIRONMENT_LINUX"].replace(SITE_PACKAGES_BASEDIRS + " ", "")
    evaluated = parse_environment(raw).as_dictionary({"PATH": "/usr/bin"})
    # torch's ninja runs PYTORCH_NVCC: the wrapper, then $CUDA_HOME/bin/nvcc (wheelbuild-nvcc).
    assert evaluated["PYTORCH_NVCC"] == "wheelbuild-admit /usr/local/cuda-13.1/nvidia/cu13/bin/nvcc"
    assert evaluated["WHEELBUILD_ADMIT_BUDGET"] == str(2 * GIB)
    assert evaluated["WHEELBUILD_ADMIT_COSTS"] == "/tmp/wheelbuild-admit-costs.json"
    assert evaluated["WHEELBUILD_ADMIT_COSTS_JSON"] == costs
    # before_build writes the costs file from the env (never a command line): test_attempt_scripts.
    assert costs not in env["CIBW_BEFORE_BUILD_LINUX"]


def test_without_admission_no_wrapper_env(make_config: Callable[..., AttemptConfig]) -> None:
    env = cibuildwheel_env(make_config())
    assert "WHEELBUILD_ADMIT" not in env["CIBW_ENVIRONMENT_LINUX"]
    assert "wheelbuild-admit" not in env["CIBW_ENVIRONMENT_LINUX"]


def test_a_shared_compiler_cache_reaches_only_the_sccache_server_through_a_file(
    make_config: Callable[..., AttemptConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = {
        "SCCACHE_BUCKET": "ci-cache",
        "AWS_SECRET_ACCESS_KEY": "s3cret key'with quote",
        "HOME": "/root",
        "SCCACHE_REDIS": "",
    }
    # The values are really in this process's env, so a CIBW_* setting that read os.environ
    # (rather than passing names) would carry them and fail the check below.
    for name, value in host.items():
        monkeypatch.setenv(name, value)
    names = shared_cache_env(host)
    assert names == ("SCCACHE_BUCKET", "AWS_SECRET_ACCESS_KEY")  # set ones only, nothing else
    config = make_config(pass_env=names)
    env = cibuildwheel_env(config, tmp_path)
    assert all("s3cret" not in value and "ci-cache" not in value for value in env.values())
    # before_build starts the server with the mounted file sourced: test_attempt_scripts.
    assert f"--volume={tmp_path}:/run/wheelbuild-secrets:ro" in env["CIBW_CONTAINER_ENGINE"]
    write_secrets(config, host, tmp_path)
    sourced = subprocess.run(
        ["sh", "-c", f". {tmp_path}/sccache.env && printf '%s|%s' \"$SCCACHE_BUCKET\" \"$AWS_SECRET_ACCESS_KEY\""],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert sourced == "ci-cache|s3cret key'with quote"
    # Without a compiler cache there is nothing to share.
    write_secrets(make_config(pass_env=names, compiler_cache=False), host, tmp_path)
    assert (tmp_path / "sccache.env").read_text() == ""


def test_every_line_written_passes_a_redactor_that_knows_the_runs_secrets(
    make_config: Callable[..., AttemptConfig],
) -> None:
    config = make_config(
        torch=parse_variant("2.11.0+cu130", "https://ci:pa@ss/word@idx.example.invalid/simple?token=t0k3n-42")
    )
    redact = redactor_for(config, {"AWS_SECRET_ACCESS_KEY": "aws-canary-1234", "HOME": "/root"})
    line = "Looking in indexes: https://ci:pa@ss/word@idx.example.invalid/simple?token=t0k3n-42 aws-canary-1234 pa@ss/word"
    shown = redact(line)
    assert "pa@ss/word" not in shown and "t0k3n-42" not in shown and "aws-canary-1234" not in shown
    assert "idx.example.invalid/simple" in shown  # the rest stays readable
    assert redact("/root/.cache") == "/root/.cache"  # a variable that is no secret is left alone


def test_the_network_while_building_is_off_unless_asked_or_needed_and_says_why() -> None:
    dist = DistTarget("http://scheduler:10600")
    assert network_while_building(False, None, {}) == "off"
    assert network_while_building(False, None, {"SCCACHE_BUCKET": ""}) == "off"  # set but empty
    assert network_while_building(True, dist, {}) == "on: --build-network"
    assert network_while_building(False, dist, {}) == "on: --dist sends the compiles over it"
    assert network_while_building(False, None, {"SCCACHE_REDIS": "redis://cache"}) == (
        "on: the compiler cache's shared storage is reached over it"
    )
