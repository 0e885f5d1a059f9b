"""Real builds of the bundled example: real Docker, real nvcc 13.1, real torch from PyPI."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import docker
import pytest
from wheelbuild.attempt.ownership import process_namespace
from wheelbuild.spec import held_torch
from wheelbuild.spec.sources import cache_dir
from wheelbuild.variants import parse_variant
from wheelbuild.wheel.contents import archs_in_wheel

from tests.integration.conftest import (
    FIXTURE_TORCH,
    REPO,
    TORCH_INDEX,
    UV_CACHE,
    WHEELBUILD,
    FixtureBuild,
    compiler_processes,
    containers_of_run,
    default_sigint,
    poll_until,
    wheelbuild,
    wheelbuild_watched,
)
from tests.serving import clean_env, run_ok, uv_binary


def test_fixture_wheel_holds_sm100_and_sm120_code(fixture_build: FixtureBuild) -> None:
    assert fixture_build.wheel.name.startswith(f"wbdemo-0.1.0+{FIXTURE_TORCH.label}-cp311-cp311-manylinux_")
    modules = archs_in_wheel(fixture_build.wheel)
    assert set(modules) == {"wbdemo/_C.cpython-311-x86_64-linux-gnu.so"}
    assert modules["wbdemo/_C.cpython-311-x86_64-linux-gnu.so"].sass == {100, 120}
    # The CLI prints where the wheel is and what it holds.
    assert str(fixture_build.wheel) in fixture_build.result.stdout
    assert "SASS sm_100, sm_120" in fixture_build.result.stdout


def test_built_like_a_venv_its_install_lines_install_there_and_keep_torch(
    fixture_build: FixtureBuild, like_venv: Path, tmp_path: Path
) -> None:
    """The fixture build was made --like a venv with torch 2.13.0 and CPython 3.11: one wheel, for
    cp311 and that torch, gated; its printed pip and uv lines, run as printed, install it there and
    leave torch where it was; --install does the same itself."""
    shown = fixture_build.result.stdout
    python = like_venv / "bin" / "python"
    assert f"install into --like {python} (its torch {FIXTURE_TORCH.version} stays):" in shown
    lines = [line.strip() for line in shown.splitlines() if line.strip().endswith(str(fixture_build.wheel))]
    pip_line = next(line for line in lines if line.startswith(f"{python} -m pip install "))
    uv_line = next(line for line in lines if line.startswith("uv pip install --python "))
    assert f"uv pip install --index <index>/cu130-torch{FIXTURE_TORCH.minor}/simple/ wbdemo" in shown
    env = clean_env(tmp_path, uv_cache=UV_CACHE)
    check = (
        "import importlib.metadata as m, wbdemo, wbdemo._C; print(m.version('torch'), m.version('wbdemo'))"
    )
    uninstall = [str(python), "-m", "pip", "uninstall", "-y", "wbdemo"]
    for line in (pip_line, uv_line):
        args = line.split()
        run_ok([uv_binary(), *args[1:]] if args[0] == "uv" else args, env, tmp_path, timeout=600)
        torch, wbdemo = run_ok([str(python), "-c", check], env, tmp_path).stdout.split()
        assert (torch, wbdemo) == (FIXTURE_TORCH.version, f"0.1.0+{FIXTURE_TORCH.label}")
        run_ok(uninstall, env, tmp_path)
    # --install: the same inputs reuse the fixture's gated wheel, then install it there.
    done = wheelbuild(
        "build", "wbdemo", "--like", str(like_venv), "--install",
        "--torch-index-url", TORCH_INDEX, "--memory", "4g", "--no-torch-range",
        "--output-dir", str(fixture_build.run_dir.parent.parent),
        timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"installed {fixture_build.wheel.name} into --like {python} with pip" in done.stdout + done.stderr
    torch, wbdemo = run_ok([str(python), "-c", check], env, tmp_path).stdout.split()
    assert (torch, wbdemo) == (FIXTURE_TORCH.version, f"0.1.0+{FIXTURE_TORCH.label}")


def test_fixture_wheel_archs_agree_with_cuobjdump(fixture_build: FixtureBuild, tmp_path: Path) -> None:
    # An independent reader: NVIDIA's cuobjdump from the nvidia-cuda-cuobjdump wheel (test extra).
    import nvidia.cu13  # type: ignore[import-untyped]

    cuobjdump = Path(next(iter(nvidia.cu13.__path__))) / "bin" / "cuobjdump"
    shutil.unpack_archive(fixture_build.wheel, tmp_path, format="zip")
    so = next(tmp_path.glob("wbdemo/_C*.so"))
    listed = subprocess.run(
        [str(cuobjdump), "--list-elf", str(so)], capture_output=True, text=True, check=True
    )
    # Lines read "ELF file    1: _C.cpython-311-x86_64-linux-gnu.1.sm_100.cubin".
    archs = sorted(set(re.findall(r"\.(sm_\d+)\.cubin", listed.stdout)))
    assert archs == ["sm_100", "sm_120"], listed.stdout


def test_container_enforced_the_memory_limit_it_was_given(fixture_build: FixtureBuild) -> None:
    # Read back from inside the container by the before-all check (cgroup memory limit file).
    attempt = fixture_build.report["attempts"][0]
    assert attempt["memory_limit_seen"] == 4 * 1024**3
    assert fixture_build.report["plan"]["memory"] == 4 * 1024**3
    log = (fixture_build.run_dir / "build.log").read_text()
    assert "wheelbuild: container memory limit: 4294967296 (asked 4294967296)" in log
    assert f"wheelbuild: torch {FIXTURE_TORCH.version}" in log and "CUDA 13.0" in log
    # Memory was watched: a working set during the compile step, under the limit.
    assert 0 < attempt["peak_memory_compile"] <= attempt["peak_memory"] <= 4 * 1024**3


def test_build_leaves_no_container_behind(
    fixture_build: FixtureBuild, docker_client: docker.DockerClient
) -> None:
    assert containers_of_run(docker_client, fixture_build.result.run_id) == []


def test_build_report_records_the_wheel(fixture_build: FixtureBuild) -> None:
    import hashlib

    (entry,) = fixture_build.report["wheels"]
    assert entry["file"] == fixture_build.wheel.name
    assert entry["sha256"] == hashlib.sha256(fixture_build.wheel.read_bytes()).hexdigest()
    module = entry["extension_modules"]["wbdemo/_C.cpython-311-x86_64-linux-gnu.so"]
    assert module["sass"] == [100, 120] and module["cudart"] == ["libcudart.so.13"]
    assert fixture_build.report["torch"]["variant"] == f"{FIXTURE_TORCH.version}+cu130"
    # Stamped with the variant it was built against, inside METADATA and RECORD, and checked.
    assert entry["version"] == entry["metadata"]["version"] == f"0.1.0+{FIXTURE_TORCH.label}"
    assert entry["torch_requirement"] == [f"torch=={FIXTURE_TORCH.minor}.*"]
    assert fixture_build.report["checks"] == []


def test_unchanged_inputs_reuse_the_finished_wheel_with_no_container_of_the_run_and_none_left(
    fixture_build: FixtureBuild, docker_client: docker.DockerClient, base_image: str, tmp_path: Path
) -> None:
    watched = wheelbuild_watched(
        docker_client,
        base_image,
        "build",
        "wbdemo",
        "--torch",
        f"{FIXTURE_TORCH.version}+cu130",
        "--torch-index-url",
        TORCH_INDEX,
        "--archs",
        "100,120",
        "--python",
        "3.11",
        "--memory",
        "8g",
        "--max-jobs",
        "1",
        "--output-dir",
        str(tmp_path),
    )  # fmt: skip  (the fixture's options, named, not --like; other MAX_JOBS and memory: they do not change what the wheel holds)
    again = watched.result
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr
    assert f"reusing the wheel(s) of run {fixture_build.result.run_id}" in again.stdout
    reused = next((tmp_path / "runs" / again.run_id).glob("*.whl"))
    assert reused.read_bytes() == fixture_build.wheel.read_bytes()
    assert "attempt 1" not in again.stdout
    # What the engine saw it create: no container of the run (no attempt, no gate), and none left
    # (the image's Python probe, the run's only container, removes itself).
    assert watched.of_a_run() == [] and watched.left(docker_client) == [], watched.created


def test_a_build_whose_torch_index_cannot_be_read_goes_ahead_for_the_torch_the_machine_holds(
    fixture_build: FixtureBuild, docker_client: docker.DockerClient, base_image: str, tmp_path: Path
) -> None:
    """The fixture build locked torch FIXTURE_TORCH for cp311 in the machine's wheel cache, and
    recorded so. With the torch index unreadable from wheelbuild's process (a dead proxy: the
    index is real, the way to it is cut), a build of a torch the cache does not hold is refused
    before any container, naming the one it holds; a build of the held torch goes ahead, and its
    container installs torch from the wheel cache."""
    variant = parse_variant(f"{FIXTURE_TORCH.version}+cu130", TORCH_INDEX)
    record = {h.python: h for h in held_torch.held(cache_dir(), variant)}
    assert "cp311" in record, record
    assert record["cp311"].file.startswith(f"torch-{FIXTURE_TORCH.version}")
    # A cache of its own, holding the record alone: no page of the index kept from earlier reads.
    cache = tmp_path / "cache"
    shutil.copytree(cache_dir() / held_torch.FOLDER, cache / held_torch.FOLDER)
    cut = {
        "WHEELBUILD_CACHE_DIR": str(cache),
        "https_proxy": "http://127.0.0.1:1",
        "HTTPS_PROXY": "http://127.0.0.1:1",
    }
    refused = wheelbuild_watched(
        docker_client, base_image,
        "build", "wbdemo", "--torch", "2.12.1+cu130", "--torch-index-url", TORCH_INDEX, "--python", "3.11",
        "--output-dir", str(tmp_path / "refused"),
        env=cut,
    )  # fmt: skip
    assert refused.result.returncode == 25, refused.result.stdout[-2000:] + refused.result.stderr
    assert "this machine's wheel cache has no torch 2.12.1 from it for cp311" in refused.result.stderr
    # Other builds on this machine may hold other releases from the same index: it is among them.
    holds = re.search(r"; it holds ([0-9., ]+) from it \(--torch ", refused.result.stderr)
    assert holds and FIXTURE_TORCH.version in holds[1].split(", "), refused.result.stderr
    assert refused.created == (), refused.created
    built = wheelbuild(
        "build", "wbdemo", "--torch", f"{FIXTURE_TORCH.version}+cu130", "--torch-index-url", TORCH_INDEX,
        "--python", "3.11", "--archs", "120", "--memory", "4g", "--no-torch-range", "--rebuild",
        "--output-dir", str(tmp_path / "built"),
        env=cut,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr
    assert (
        f"building for torch {FIXTURE_TORCH.version} from this machine's wheel cache"
        in built.stdout + built.stderr
    )
    run_dir = tmp_path / "built" / "runs" / built.run_id
    log = (run_dir / "build.log").read_text()
    assert re.search(
        rf"wheel cache: locked {variant.cache_key}-cp311 [0-9a-f]{{64}} torch-{FIXTURE_TORCH.version}", log
    )
    report = json.loads((run_dir / "build-report.json").read_text())
    assert report["torch"]["variant"] == f"{FIXTURE_TORCH.version}+cu130"
    assert [g["passed"] for g in report["gate"]] == [True], report["gate"]


def test_second_python_reuses_the_first_pythons_kernels(cuda_image: str, tmp_path: Path) -> None:
    # A salt no cache has seen, so the first Python compiles everything; the blob is tiny.
    result = wheelbuild(
        "build", "wbdemo", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--archs", "100,120",
        "--python", "3.11", "--python", "3.13", "--memory", "4g", "--output-dir", str(tmp_path),
        "--env", "WBDEMO_BLOB_ELEMENTS=1000", "--env", f"WBDEMO_BLOB_SALT={uuid.uuid4().hex}",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    report = json.loads((tmp_path / "runs" / result.run_id / "build-report.json").read_text())
    (attempt,) = report["attempts"]
    # 4 kernels (.cu, torch headers included) + 1 binding (.cpp) per Python. The salted kernels
    # are new to the cache, so the first Python compiles them; the second reuses all four. The
    # binding is not salted (an earlier run may have cached it for either Python).
    first, second = (attempt["cache_by_python"][f"cp3{m}-manylinux_x86_64"] for m in (11, 13))
    assert first["misses"] >= 4 and first["hits"] + first["misses"] == 5, first
    assert second["hits"] >= 4 and second["hits"] + second["misses"] == 5, second
    cuda = {entry["file"].split("-")[2]: entry["extension_modules"] for entry in report["wheels"]}
    assert cuda["cp313"]["wbdemo/_C.cpython-313-x86_64-linux-gnu.so"]["sass"] == [100, 120]
    assert cuda["cp311"]["wbdemo/_C.cpython-311-x86_64-linux-gnu.so"]["sass"] == [100, 120]
    # Each Python's wheel loaded in a fresh base container with that Python (3.13 is compiled
    # into the base at /opt/cpython).
    assert [(g["python"], g["passed"]) for g in report["gate"]] == [("cp311", True), ("cp313", True)]


def _build_until_a_compiler_runs(tmp_path: Path) -> subprocess.Popen[str]:
    """A real build of salted, slightly heavy units (a fresh compile the cache cannot answer, a
    few seconds each), returned once a compiler runs: the moment to interrupt or kill it."""
    assert compiler_processes() == [], "another build is running on this machine"
    proc = subprocess.Popen(
        [WHEELBUILD, "build", "wbdemo", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--python", "3.11",
         "--memory", "4g", "--max-jobs", "1", "--output-dir", str(tmp_path), "--no-gate",
         "--env", "WBDEMO_BLOB_ELEMENTS=500000", "--env", f"WBDEMO_BLOB_SALT={uuid.uuid4().hex}"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=default_sigint,  # its Ctrl-C must arrive however this suite was started
    )  # fmt: skip
    deadline = time.monotonic() + 900
    seen: list[str] = []
    while time.monotonic() < deadline and proc.poll() is None and not seen:
        seen = compiler_processes()
        time.sleep(0.1)
    assert seen, "the build ended before any compiler ran"
    return proc


def test_sigint_mid_compile_leaves_nothing_behind(
    cuda_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    proc = _build_until_a_compiler_runs(tmp_path)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    run_id = output.split("(run ", 1)[1].split(")", 1)[0]
    assert proc.returncode == 130, output[-3000:]
    assert "error: interrupted" in output and "remedy:" in output
    assert containers_of_run(docker_client, run_id) == []
    # The compilers die with their container; the kernel may take a moment to reap them.
    assert poll_until(lambda: compiler_processes() == [], timeout_s=30), compiler_processes()


def test_kill_9_of_wheelbuild_leaves_no_container_and_no_compiler_within_30_s(
    cuda_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """A SIGKILLed wheelbuild cannot clean up; its reaper (a process in a session of its own)
    removes the run's containers, and the compilers with them, with no further command."""
    proc = _build_until_a_compiler_runs(tmp_path)
    proc.kill()
    output, _ = proc.communicate(timeout=60)
    run_id = output.split("(run ", 1)[1].split(")", 1)[0]
    killed_at = time.monotonic()
    while time.monotonic() - killed_at < 30 and (
        containers_of_run(docker_client, run_id) or compiler_processes()
    ):
        time.sleep(0.5)
    assert containers_of_run(docker_client, run_id) == []
    assert compiler_processes() == []


def test_oom_kill_is_detected_and_retried_at_half_the_jobs_without_recompiling(
    cuda_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    # Each .cu unit includes a generated 3M-element array: measured here, one unit compiled for two
    # archs at NVCC_THREADS=2 peaks near 2.2 GiB, so two at once cannot fit in 3 GiB but one can.
    # The salt makes the source new to the shared compiler cache, so attempt 1 really compiles.
    result = wheelbuild(
        "build", "wbdemo", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--python", "3.11",
        "--memory", "3g", "--max-jobs", "2", "--nvcc-threads", "2", "--no-gate",
        "--env", "WBDEMO_BLOB_ELEMENTS=3000000", "--env", f"WBDEMO_BLOB_SALT={uuid.uuid4().hex}",
        "--output-dir", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    report = json.loads((tmp_path / "runs" / result.run_id / "build-report.json").read_text())
    first, *retries = report["attempts"]
    # Attempt 1 was OOM-killed, and the exit code did not say so: cibuildwheel exits 1, not 137.
    assert first["returncode"] == 1
    assert first["oom_evidence"], first
    assert any(
        e.startswith(("docker oom event", "State.OOMKilled", "cgroup oom_kill"))
        for e in first["oom_evidence"]
    )
    # Retried at half the jobs (and, had that been killed too, fewer threads), then it succeeded.
    assert retries and retries[0]["max_jobs"] == 1 and retries[0]["nvcc_threads"] == 2
    last = report["attempts"][-1]
    assert last["returncode"] == 0 and last["oom_evidence"] == []
    # Resume, not restart: every unit that finished before was a cache hit.
    assert last["units_finished_before"] >= 1  # at least the light binding finished in attempt 1
    assert last["cache_hits"] >= last["units_finished_before"]
    assert last["units_recompiled"] == 0
    assert "was OOM-killed" in result.stdout and "retrying at MAX_JOBS=1" in result.stdout
    assert containers_of_run(docker_client, result.run_id) == []


def test_admission_runs_every_compile_through_the_wrapper_in_the_image(
    cuda_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    # The admission rule itself is proven with real processes in tests/unit/test_admit.py; here,
    # that the image's wrapper runs (its shebang rewritten to the tools venv) and gets its env.
    result = wheelbuild(
        "build", "wbdemo", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--python", "3.11",
        "--memory", "3g", "--cpus", "2", "--admission", "--no-gate", "--output-dir", str(tmp_path),
        "--env", "WBDEMO_BLOB_ELEMENTS=200000", "--env", f"WBDEMO_BLOB_SALT={uuid.uuid4().hex}",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
    run_dir = tmp_path / "runs" / result.run_id
    report = json.loads((run_dir / "build-report.json").read_text())
    assert report["plan"]["admission_budget"] == 3 * 1024**3 - 768 * 1024**2  # limit less wbdemo's reserve
    # At most 2 compiles at once (--cpus 2), and ninja launches twice that (5 units) as lookahead.
    assert report["plan"]["admission_slots"] == 2 and report["plan"]["max_jobs"] == 4
    log = (run_dir / "build.log").read_text()
    compiles = [line for line in log.splitlines() if re.match(r"\s*\[\d+/5\]", line)]
    assert len(compiles) == 5
    # ninja runs PYTORCH_NVCC: the wrapper, then $CUDA_HOME/bin/nvcc (wheelbuild-nvcc, which runs
    # the real one through sccache: the compiler cache saw all 5 units, the 4 salted kernels new to it).
    assert (
        sum("wheelbuild-admit /usr/local/cuda-13.1/nvidia/cu13/bin/nvcc " in line for line in compiles) == 4
    )
    attempt = report["attempts"][-1]
    assert attempt["cache_hits"] + attempt["cache_misses"] == 5 and attempt["cache_misses"] >= 4
    assert "wheelbuild-admit: " not in log  # the wrapper is silent unless a unit waits over 60 s
    # ninja ran through before-build's launcher, which put the planned launch order in place
    assert re.search(r"wheelbuild-ninja: 5 compiles of \S*build\.ninja launch longest predicted first", log)
    assert containers_of_run(docker_client, result.run_id) == []


def test_gpus_all_fails_at_preflight_without_nvidia_runtime_and_sweeps_orphans(
    cuda_image: str, base_image: str, docker_client: docker.DockerClient
) -> None:
    if "nvidia" in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("this Docker engine has an NVIDIA runtime: --gpus all is no error here")
    # A container left by a wheelbuild whose process is gone (pid of an exited process).
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = docker_client.containers.run(
        cuda_image,
        ["sleep", "600"],
        detach=True,
        labels={"wheelbuild.run": "orphan-test", "wheelbuild.owner": f"{process_namespace()}:{dead.pid}:1"},
    )
    try:
        watched = wheelbuild_watched(
            docker_client, base_image, "build", "wbdemo", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--gpus", "all",
        )  # fmt: skip
        result = watched.result
        # The daemon has no NVIDIA runtime (read above): a real error path, not a mock.
        assert result.returncode == 21, result.stdout + result.stderr
        assert "no NVIDIA runtime" in result.stderr and "remedy:" in result.stderr
        assert "removed 1 container(s) left by earlier runs" in result.stdout
        assert containers_of_run(docker_client, "orphan-test") == []
        assert watched.created == ()  # at preflight: before any container of its own
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            orphan.remove(force=True)


def test_every_command_that_touches_docker_sweeps_containers_whose_wheelbuild_is_gone(
    cuda_image: str, docker_client: docker.DockerClient
) -> None:
    # A probe container (no run label) left by a wheelbuild that died: `image ls` removes it.
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = docker_client.containers.run(
        cuda_image, ["sleep", "600"], detach=True,
        labels={"wheelbuild.owner": f"{process_namespace()}:{dead.pid}:1"},
    )  # fmt: skip
    try:
        assert wheelbuild("image", "ls").returncode == 0
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(orphan.id)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            orphan.remove(force=True)


def test_compile_error_is_reported_with_first_compiler_error(
    cuda_image: str, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    project = tmp_path / "broken"
    shutil.copytree(REPO / "tests" / "fixtures" / "wbdemo", project)
    source = project / "csrc" / "scale.cu"
    source.write_text(source.read_text().replace("x[base + k] *= a;", "x[base + k] *= undefined_name;"))
    result = wheelbuild(
        "build", str(project), "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--python", "3.11",
        "--memory", "4g", "--output-dir", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.returncode == 40, result.stdout[-3000:] + result.stderr
    error_line = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert "scale.cu" in error_line and "undefined_name" in error_line and "error" in error_line
    assert "remedy:" in result.stderr and "build.log" in result.stderr
    # A compile error is not an OOM: reported once, never retried.
    assert [line for line in result.stderr.splitlines() if line.startswith("error: ")] == [error_line]
    assert "attempt 2" not in result.stdout and "OOM-killed" not in result.stdout
    assert containers_of_run(docker_client, result.run_id) == []


def test_an_arch_the_variants_cuda_cannot_compile_fails_before_any_work(
    cuda_image: str, base_image: str, docker_client: docker.DockerClient
) -> None:
    watched = wheelbuild_watched(
        docker_client, base_image, "build", "wbdemo", "--torch", "cu130", "--archs", "70,90"
    )
    result = watched.result
    assert result.returncode == 22, result.stdout + result.stderr
    assert "CUDA 13.1, which cannot compile sm_70 (needs CUDA 9.0 to 12.9)" in result.stderr
    assert "image wheelbuild-cuda131" not in result.stdout  # failed before the image step
    assert watched.created == ()  # and before any container
