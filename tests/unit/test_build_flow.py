"""The build's flow above the engine, with a fake engine (ports.Engine) in Docker's place: the OOM
retry at half the parallelism, the stop at the smallest plan (exit 43), a final failure that is
not retried, the reuse of an earlier result (no attempt at all). With a real CUDA wheel checked
for real, the report and what the build prints: tests/local/test_build_flow_checked.py.
And DockerEngine as a context manager: an exception removes its runs' containers."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from wheelbuild.attempt.config import AttemptConfig
from wheelbuild.attempt.outcome import AttemptResult, Failed, OomEvidence, OOMKilled, Succeeded, classify
from wheelbuild.attempt.ownership import RUN_LABEL
from wheelbuild.engine.docker_engine import DockerEngine
from wheelbuild.engine.ports import UnitCompile
from wheelbuild.errors import BadArgument, CompileFailed, OutOfMemory
from wheelbuild.image import options as image_options
from wheelbuild.image.options import ImageOptions
from wheelbuild.pipeline import build, results
from wheelbuild.pipeline.attempts import attempts_until_built
from wheelbuild.plan.memory_model import GIB, wbdemo_model
from wheelbuild.plan.planner import Plan
from wheelbuild.spec import sources
from wheelbuild.spec.build_spec import BuildSpec, PinMode

from tests.flowkit import COMPILE_ERROR, OOM, fake_engine, quiet_console
from tests.indexkit import make_wheel


def _plan(max_jobs: int, nvcc_threads: int) -> Plan:
    model = wbdemo_model()
    return Plan(
        memory=4 * GIB, cpus=2.0, max_jobs=max_jobs, nvcc_threads=nvcc_threads, reasons=(),
        predicted_peak=model.peak_of_jobs(max_jobs, nvcc_threads, 2), archs=2, model=model,
    )  # fmt: skip


def _configure(make_config: Callable[..., AttemptConfig]) -> Callable[[int, Plan], AttemptConfig]:
    def configure(number: int, plan: Plan) -> AttemptConfig:
        env = {"MAX_JOBS": str(plan.max_jobs), "NVCC_THREADS": str(plan.nvcc_threads)}
        return make_config(attempt=number, build_env=env, memory=plan.memory)

    return configure


def test_an_oom_kill_retries_at_half_the_jobs_and_then_succeeds(
    make_config: Callable[..., AttemptConfig],
) -> None:
    fake = fake_engine("oom", "ok")
    console, out = quiet_console()
    attempts = attempts_until_built(fake, _plan(4, 2), _configure(make_config), console)
    assert [c.build_env["MAX_JOBS"] for c in fake.configs] == ["4", "2"]
    assert [c.attempt for c in fake.configs] == [1, 2]
    assert [plan.max_jobs for plan, _ in attempts] == [4, 2]
    assert attempts[-1][1].returncode == 0
    assert (
        "attempt 1 was OOM-killed (docker oom event x1; cgroup oom_kill +1); "
        "retrying at MAX_JOBS=2, NVCC_THREADS=2, keeping every unit that finished"
    ) in out.getvalue()


def test_at_one_job_the_nvcc_threads_are_halved_next(make_config: Callable[..., AttemptConfig]) -> None:
    fake = fake_engine("oom", "ok")
    attempts_until_built(fake, _plan(1, 2), _configure(make_config), quiet_console()[0])
    assert [(c.build_env["MAX_JOBS"], c.build_env["NVCC_THREADS"]) for c in fake.configs] == [
        ("1", "2"),
        ("1", "1"),
    ]


def test_an_oom_kill_of_the_smallest_plan_is_final_with_exit_43(
    make_config: Callable[..., AttemptConfig],
) -> None:
    fake = fake_engine("oom", "oom", "oom", "ok")
    with pytest.raises(OutOfMemory) as caught:
        attempts_until_built(fake, _plan(2, 1), _configure(make_config), quiet_console()[0])
    assert caught.value.exit_code == 43
    assert [c.build_env["MAX_JOBS"] for c in fake.configs] == ["2", "1"]  # nothing smaller to try
    assert caught.value.cause == (
        "even the smallest plan (MAX_JOBS=1, NVCC_THREADS=1) was OOM-killed in 4.0 GiB after 2 attempt(s)"
    )
    assert caught.value.details == "Killed"  # the last attempt's log tail


CICC_KILLED = "nvcc error   : 'cicc' died due to signal 9 (Kill signal)"


@pytest.mark.parametrize(
    ("evidence", "named"),
    [
        (OomEvidence(docker_oom_events=3), "docker oom event x3"),
        (OomEvidence(state_oom_killed=True), "State.OOMKilled"),
        (OomEvidence(cgroup_oom_kills=2), "cgroup oom_kill +2"),
        (
            OomEvidence(cgroup_oom_kills=1, killed_lines=(CICC_KILLED,)),
            f"cgroup oom_kill +1; log: {CICC_KILLED}",
        ),
    ],
)
def test_what_a_build_says_of_an_oom_kill_names_its_evidence(
    make_config: Callable[..., AttemptConfig],
    make_result: Callable[..., AttemptResult],
    evidence: OomEvidence,
    named: str,
) -> None:
    """The messages a user sees: the retry line names the evidence; once the smallest plan is
    killed too, the error (exit 43) says so, its details the last attempt's log."""
    killed = make_result(f"[3/5] nvcc -c /project/csrc/scale.cu\n{CICC_KILLED}", oom=evidence)
    console, out = quiet_console()
    with pytest.raises(OutOfMemory) as caught:
        attempts_until_built(fake_engine(killed, killed), _plan(2, 1), _configure(make_config), console)
    assert (
        f"attempt 1 was OOM-killed ({named}); retrying at MAX_JOBS=1, NVCC_THREADS=1, "
        "keeping every unit that finished"
    ) in out.getvalue()
    assert caught.value.exit_code == 43
    assert caught.value.cause == (
        "even the smallest plan (MAX_JOBS=1, NVCC_THREADS=1) was OOM-killed in 4.0 GiB after 2 attempt(s)"
    )
    assert "--memory" in caught.value.remedy
    assert caught.value.details == f"[3/5] nvcc -c /project/csrc/scale.cu\n{CICC_KILLED}"


def test_a_compile_error_is_final_and_not_retried(make_config: Callable[..., AttemptConfig]) -> None:
    fake = fake_engine("error", "ok")
    with pytest.raises(CompileFailed, match="identifier"):
        attempts_until_built(fake, _plan(4, 2), _configure(make_config), quiet_console()[0])
    assert len(fake.configs) == 1


def test_an_attempts_end_is_one_of_three(make_result: Callable[..., AttemptResult], tmp_path: Path) -> None:
    wheel = tmp_path / "wbdemo-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert isinstance(classify(make_result("done", returncode=0, wheels=(wheel,))), Succeeded)
    killed = classify(make_result("Killed", oom=OOM))
    assert isinstance(killed, OOMKilled) and killed.error.exit_code == 43
    failed = classify(make_result(COMPILE_ERROR))
    assert isinstance(failed, Failed) and isinstance(failed.error, CompileFailed)


# ---------------------------------------------------------------------------------------------
# run_build over the fake: reuse, and the report


def test_unchanged_inputs_reuse_the_stored_result_and_start_no_attempt(
    flow: tuple[BuildSpec, ImageOptions, list[Path]], tmp_path: Path
) -> None:
    spec, options, written = flow
    fake = fake_engine()  # any attempt would fail: the script is empty
    inputs = image_options.image_inputs(fake, options.for_variant(spec.variant))
    key = results.inputs_key(spec, inputs, ("cp311",))
    earlier = tmp_path / "earlier"
    wheel = make_wheel(earlier, "wbdemo", "0.1.0+cu130torch2.11", tag="cp311-cp311-manylinux_2_28_x86_64")
    report = earlier / "build-report.json"
    report.write_text(json.dumps({"run_id": "earlier-run", "gate": [{"wheel": wheel.name, "passed": True}]}))
    results.save(sources.cache_dir() / "results", key, (wheel,), report)

    result = build.run_build(spec, options, quiet_console()[0], fake)

    assert fake.configs == []
    assert result.plan is None
    assert [w.path.name for w in result.wheels] == [wheel.name]
    assert written == [result.report]  # once
    stored = json.loads(result.report.read_text())
    assert stored["reused"] == {"key": key, "from_run": "earlier-run"}
    assert result.gate == {wheel.name: "passed in run earlier-run"}


# ---------------------------------------------------------------------------------------------
# DockerEngine as a context manager: it notes each run it starts a container for, and an exception
# removes those runs' containers. A fake client stands in for the Docker daemon, which unit tests
# do not have; the engine's own code starts the containers and notes the runs.


class _Container:
    def __init__(self, removed: list[str], name: str) -> None:
        self.removed, self.name = removed, name

    def wait(self) -> dict[str, int]:
        return {"StatusCode": 0}

    def logs(self) -> bytes:
        return b""

    def remove(self, force: bool) -> None:
        self.removed.append(self.name)


class _Containers:
    def __init__(self) -> None:
        self.removed: list[str] = []
        self.asked: list[dict[str, Any]] = []
        self.started: list[dict[str, str]] = []  # the labels of each container run

    def run(self, image: str, command: list[str], labels: dict[str, str], **kwargs: Any) -> Any:
        """As docker's: a detached container, or else the output of one that ran and was removed."""
        self.started.append(labels)
        return _Container(self.removed, f"started {len(self.started)}") if kwargs.get("detach") else b""

    def list(self, all: bool, filters: dict[str, Any], ignore_removed: bool = False) -> list[_Container]:
        self.asked.append(filters)
        return [_Container(self.removed, f"of {filters['label']}")]


class _Client:
    def __init__(self) -> None:
        self.containers = _Containers()

    def events(self, **kwargs: Any) -> Any:
        raise docker.errors.APIError("the daemon went away")


def _unit_compile(run_id: str, tmp_path: Path) -> UnitCompile:
    return UnitCompile(
        run_id=run_id, image="wheelbuild-cuda131:test", source_dir=tmp_path, torch_volume="torch",
        unit="csrc/a.cu", flags=(), include_dirs=(), archs=(120,), threads=1, memory=GIB, cpus=1.0,
        cuda_home="/usr/local/cuda",
    )  # fmt: skip


def test_a_container_the_engine_starts_for_a_run_carries_its_label_and_is_removed_on_an_exception(
    tmp_path: Path,
) -> None:
    client = _Client()
    with pytest.raises(RuntimeError), DockerEngine(client) as engine:
        engine.compile_unit_alone(_unit_compile("run-1", tmp_path))  # as calibrate and the gate start theirs
        raise RuntimeError("a bug above the engine")
    assert [labels[RUN_LABEL] for labels in client.containers.started] == ["run-1"]
    assert client.containers.removed == ["started 1", "of wheelbuild.run=run-1"]


def test_an_attempt_that_fails_before_its_container_still_has_its_run_cleaned_up(
    make_config: Callable[..., AttemptConfig],
) -> None:
    """cibuildwheel creates the attempt's container, so the engine notes the run before it
    starts anything: here the daemon refuses the watcher's events first."""
    client = _Client()
    with pytest.raises(docker.errors.APIError), DockerEngine(client) as engine:
        engine.run_attempt(make_config(run_id="run-2"), lambda line, log: None)
    assert client.containers.removed == ["of wheelbuild.run=run-2"]


def test_a_normal_end_leaves_the_engine_nothing_to_clean(tmp_path: Path) -> None:
    client = _Client()
    with DockerEngine(client) as engine:
        engine.compile_unit_alone(_unit_compile("run-1", tmp_path))
    assert client.containers.removed == ["started 1"]  # the compile removed its own container
    assert client.containers.asked == []


def test_a_container_of_no_run_leaves_the_engine_no_run_to_clean() -> None:
    client = _Client()
    with pytest.raises(RuntimeError), DockerEngine(client) as engine:
        engine.image_pythons("wheelbuild-cuda131:test")  # a probe: the owner's label, no run's
        raise RuntimeError("a bug above the engine")
    assert RUN_LABEL not in client.containers.started[0]
    assert client.containers.asked == []


def test_an_engine_never_used_never_connects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    with pytest.raises(RuntimeError), DockerEngine():
        raise RuntimeError("before any Docker call")


def test_pin_proven_is_an_input_of_the_result_store_key(
    flow: tuple[BuildSpec, ImageOptions, list[Path]],
) -> None:
    """--pin proven writes other METADATA than --pin built: a stored result of one is never the other's."""
    spec, options, _written = flow
    inputs = image_options.image_inputs(fake_engine(), options.for_variant(spec.variant))
    proven = replace(spec, pin=PinMode.PROVEN)
    assert results.inputs_key(proven, inputs, ("cp311",)) != results.inputs_key(spec, inputs, ("cp311",))
    with pytest.raises(BadArgument, match="--pin proven writes the torch range"):
        replace(spec, pin=PinMode.PROVEN, torch_range=False)


def test_reused_wheels_come_with_the_statement_of_the_build_that_made_them(
    flow: tuple[BuildSpec, ImageOptions, list[Path]], tmp_path: Path
) -> None:
    spec, options, _written = flow
    fake = fake_engine()
    key = results.inputs_key(
        spec, image_options.image_inputs(fake, options.for_variant(spec.variant)), ("cp311",)
    )
    earlier = tmp_path / "earlier"
    wheel = make_wheel(earlier, "wbdemo", "0.1.0+cu130torch2.11", tag="cp311-cp311-manylinux_2_28_x86_64")
    wheel.with_name(wheel.name + ".intoto.json").write_text('{"made by": "the earlier run"}')
    report = earlier / "build-report.json"
    report.write_text(json.dumps({"run_id": "earlier-run"}))
    results.save(sources.cache_dir() / "results", key, (wheel,), report)

    result = build.run_build(spec, options, quiet_console()[0], fake)

    assert fake.configs == []
    copied = result.run_dir / (wheel.name + ".intoto.json")
    assert copied.read_text() == '{"made by": "the earlier run"}'
