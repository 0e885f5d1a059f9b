"""The build's flow above the engine, with a fake engine (ports.Engine) in Docker's place: the OOM
retry at half the parallelism, the stop at the smallest plan (exit 43), a final failure that is
not retried, the reuse of an earlier result (no attempt at all) and the report written once.
And DockerEngine as a context manager: an exception removes its runs' containers."""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from wheelbuild.errors import BadArgument, CompileFailed, OutOfMemory
from wheelbuild.host.gpu import GpuMode
from wheelbuild.index.project_pages import IndexFile
from wheelbuild.pipeline import build, preflight, results
from wheelbuild.pipeline.attempts import attempts_until_built
from wheelbuild.plan.memory_model import GIB, wbdemo_model
from wheelbuild.plan.planner import Plan
from wheelbuild.recipes import EXAMPLE_DIR, resolve_recipe
from wheelbuild.report import page as report_html
from wheelbuild.report.build_report import GateSkipped, read_report
from wheelbuild.report.timings import phase_seconds
from wheelbuild.run import image_options
from wheelbuild.run.attempt import ATTEMPT_SCRIPTS, AttemptConfig
from wheelbuild.run.buildlog import BuildLog, MemorySample
from wheelbuild.run.cuda_redist import CudaLayer
from wheelbuild.run.engine import DockerEngine
from wheelbuild.run.image import IMAGES_DIR, Image, ImageInputs
from wheelbuild.run.image_options import ImageOptions
from wheelbuild.run.outcome import AttemptResult, Failed, OomEvidence, OOMKilled, Succeeded, classify
from wheelbuild.run.ownership import RUN_LABEL
from wheelbuild.run.ports import Engine, GateJob, UnitCompile
from wheelbuild.run.reporter import Reporter
from wheelbuild.spec import sources
from wheelbuild.spec.build_spec import BuildSpec, PinMode, Resources
from wheelbuild.spec.torch_releases import TorchIndex
from wheelbuild.variants import parse_variant
from wheelbuild.wheel.wheels import inspect_wheel

from tests.indexkit import make_wheel
from tests.reportkit import two_python_log

OOM = OomEvidence(docker_oom_events=1, cgroup_oom_kills=1)
COMPILE_ERROR = '/project/csrc/saxpy.cu(5): error: identifier "x" is undefined'

# What the fake's successful attempt installed from the wheel cache, as the log says it.
TORCH_FILE, TORCH_SHA256 = "torch-2.11.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl", "7" * 64

# What an attempt does in the fake: "oom", "ok" (a wheel appears), or "error" (a compile error).
Script = Iterator[str | AttemptResult]


class FakeEngine:
    """ports.Engine without Docker: each attempt ends as the script says (or is the result given);
    every call is noted."""

    def __init__(self, *ends: str | AttemptResult) -> None:
        self.ends: Script = iter(ends)
        self.configs: list[AttemptConfig] = []
        self.reapers: list[str] = []

    def local_image_id(self, reference: str) -> str:
        return f"sha256:{reference.replace(':', '-')}"

    def ensure_image(self, inputs: ImageInputs, on_line: Callable[[str], None]) -> Image:
        return Image(tag=inputs.tag, id="sha256:built", labels={}, reused=True)

    def ensure_cuda_layer_image(self, layer: CudaLayer, tree: Path, on_line: Callable[[str], None]) -> str:
        raise AssertionError("a cu130 build needs no CUDA 12 layer")

    def image_pythons(self, tag: str) -> list[str]:
        return ["cp311"]

    def start_reaper(self, run_id: str) -> None:
        self.reapers.append(run_id)

    def sweep_orphans(self) -> int:
        return 0

    def resolve_gpus(self, mode: GpuMode) -> bool:
        return False

    def run_attempt(
        self,
        config: AttemptConfig,
        on_line: Callable[[str, BuildLog], None],
        on_memory: Callable[[MemorySample], None] | None = None,
    ) -> AttemptResult:
        self.configs.append(config)
        end = next(self.ends)
        if isinstance(end, AttemptResult):
            return end
        wheels: tuple[Path, ...] = ()
        if end == "ok":
            wheels = (
                make_wheel(config.output_dir, "wbdemo", "0.1.0", tag="cp311-cp311-manylinux_2_28_x86_64"),
            )
        return AttemptResult(
            attempt=config.attempt,
            returncode=0 if end == "ok" else 1,
            duration_s=1.0,
            wheels=wheels,
            memory_limit_seen=config.memory,
            log_path=config.log_path,
            log_tail=("Killed",) if end == "oom" else (COMPILE_ERROR,) if end == "error" else ("done",),
            oom=OOM if end == "oom" else OomEvidence(),
            unit_cache=(("cp311-manylinux_x86_64:binding.o", False),) if end == "ok" else (),
            locked_files=((f"{config.torch.cache_key}-cp311", TORCH_SHA256, TORCH_FILE),)
            if end == "ok"
            else (),
        )

    def run_gate(self, job: GateJob, on_line: Callable[[str], None]) -> tuple[dict[str, Any] | None, str]:
        raise AssertionError("these builds run without the gate")

    def interrupt_cleanup(self, run_id: str) -> int:
        return 0


def _engine(*ends: str | AttemptResult) -> FakeEngine:
    fake = FakeEngine(*ends)
    _: Engine = fake  # the fake is an Engine, as mypy sees it
    return fake


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


def _reporter() -> tuple[Reporter, io.StringIO]:
    out = io.StringIO()
    return Reporter(out, show_log=False), out


def test_an_oom_kill_retries_at_half_the_jobs_and_then_succeeds(
    make_config: Callable[..., AttemptConfig],
) -> None:
    fake = _engine("oom", "ok")
    reporter, out = _reporter()
    attempts = attempts_until_built(fake, _plan(4, 2), _configure(make_config), reporter)
    assert [c.build_env["MAX_JOBS"] for c in fake.configs] == ["4", "2"]
    assert [c.attempt for c in fake.configs] == [1, 2]
    assert [plan.max_jobs for plan, _ in attempts] == [4, 2]
    assert attempts[-1][1].returncode == 0
    assert (
        "attempt 1 was OOM-killed (docker oom event x1; cgroup oom_kill +1); "
        "retrying at MAX_JOBS=2, NVCC_THREADS=2, keeping every unit that finished"
    ) in out.getvalue()


def test_at_one_job_the_nvcc_threads_are_halved_next(make_config: Callable[..., AttemptConfig]) -> None:
    fake = _engine("oom", "ok")
    attempts_until_built(fake, _plan(1, 2), _configure(make_config), _reporter()[0])
    assert [(c.build_env["MAX_JOBS"], c.build_env["NVCC_THREADS"]) for c in fake.configs] == [
        ("1", "2"),
        ("1", "1"),
    ]


def test_an_oom_kill_of_the_smallest_plan_is_final_with_exit_43(
    make_config: Callable[..., AttemptConfig],
) -> None:
    fake = _engine("oom", "oom", "oom", "ok")
    with pytest.raises(OutOfMemory) as caught:
        attempts_until_built(fake, _plan(2, 1), _configure(make_config), _reporter()[0])
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
    reporter, out = _reporter()
    with pytest.raises(OutOfMemory) as caught:
        attempts_until_built(_engine(killed, killed), _plan(2, 1), _configure(make_config), reporter)
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
    fake = _engine("error", "ok")
    with pytest.raises(CompileFailed, match="identifier"):
        attempts_until_built(fake, _plan(4, 2), _configure(make_config), _reporter()[0])
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


@pytest.fixture
def flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[BuildSpec, ImageOptions, list[Path]]:
    """The bundled example for cu130 on a local base, torch's index answered without a network;
    every report written is noted."""
    served = tuple(
        IndexFile(f"torch-2.11.0+cu130-{p}-{p}-manylinux_2_28_x86_64.whl", False) for p in ("cp311", "cp312")
    )
    monkeypatch.setattr(preflight, "read_torch_index", lambda url, **_: TorchIndex(url, served))
    written: list[Path] = []
    monkeypatch.setattr(report_html, "write_beside", written.append)
    spec = BuildSpec(
        recipe=resolve_recipe("wbdemo"), variant=parse_variant("2.11.0+cu130", None), archs=(100, 120), pythons=("cp311",),
        gpus=GpuMode.NONE, resources=Resources(memory=4 * GIB, cpus=2.0, max_jobs=2, nvcc_threads=1),
        output_dir=tmp_path / "out",
    )  # fmt: skip
    return spec, ImageOptions(base_image="wheelbuild-base:fake", ca_bundle=None), written


def test_unchanged_inputs_reuse_the_stored_result_and_start_no_attempt(
    flow: tuple[BuildSpec, ImageOptions, list[Path]], tmp_path: Path
) -> None:
    spec, options, written = flow
    fake = _engine()  # any attempt would fail: the script is empty
    inputs = image_options.image_inputs(fake, options.for_variant(spec.variant))
    key = results.inputs_key(spec, inputs, ("cp311",))
    earlier = tmp_path / "earlier"
    wheel = make_wheel(earlier, "wbdemo", "0.1.0+cu130torch2.11", tag="cp311-cp311-manylinux_2_28_x86_64")
    report = earlier / "build-report.json"
    report.write_text(json.dumps({"run_id": "earlier-run", "gate": [{"wheel": wheel.name, "passed": True}]}))
    results.save(sources.cache_dir() / "results", key, (wheel,), report)

    result = build.run_build(spec, options, _reporter()[0], fake)

    assert fake.configs == []
    assert result.plan is None
    assert [w.path.name for w in result.wheels] == [wheel.name]
    assert written == [result.report]  # once
    stored = json.loads(result.report.read_text())
    assert stored["reused"] == {"key": key, "from_run": "earlier-run"}
    assert result.gate == {wheel.name: "passed in run earlier-run"}


def test_a_build_writes_its_report_once_with_every_attempt(
    flow: tuple[BuildSpec, ImageOptions, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, options, written = flow
    spec = BuildSpec(**{**spec.__dict__, "gate": False})
    # The fake's wheel is pure Python: stamp and check judge real CUDA wheels elsewhere.
    monkeypatch.setattr(build, "stamp_and_check", lambda paths, spec, *_: ((), []))
    fake = _engine("oom", "ok")

    result = build.run_build(spec, options, _reporter()[0], fake)

    assert len(fake.configs) == 2 and fake.reapers == [result.run_id]
    assert written == [result.report]  # once
    report = json.loads(result.report.read_text())
    assert [a["max_jobs"] for a in report["attempts"]] == [2, 1]
    assert report["attempts"][0]["oom_evidence"] == ["docker oom event x1", "cgroup oom_kill +1"]
    assert result.plan is not None and result.plan.max_jobs == 1
    # The keys wheelbuild has always written, plus its schema (report/build_report.py) and the contract it
    # kept, and it reads back equal.
    assert set(report) == {
        "schema", "run_id", "inputs_key", "recipe", "torch", "archs", "pythons", "image", "plan",
        "attempts", "wheels", "checks", "abi", "gate", "contract",
    }  # fmt: skip
    assert report["schema"] == 1 and report["gate"] == {"skipped": GateSkipped().skipped}
    assert "units_recompiled" not in report["attempts"][0] and "units_recompiled" in report["attempts"][1]
    assert read_report(result.report).to_json() == report


class _GatedEngine(FakeEngine):
    """The fake, with a gate container that answers that the wheel imported (no Docker here)."""

    def run_gate(self, job: GateJob, on_line: Callable[[str], None]) -> tuple[dict[str, Any] | None, str]:
        answer = {
            "python": "cp311",
            "imports": [{"module": "wbdemo", "ok": True, "error": ""}],
            "torch": {"version": "2.11.0+cu130", "cuda": "13.0"},
        }
        return answer, ""


def test_the_report_times_each_step_and_the_import_gate_on_the_last_attempts_clock(
    flow: tuple[BuildSpec, ImageOptions, list[Path]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spec, options, _written = flow
    spec = replace(spec, torch_range=False)
    # The fake's wheel is pure Python: stamp and check judge real CUDA wheels elsewhere.
    monkeypatch.setattr(
        build, "stamp_and_check", lambda paths, spec, date_epoch=None: (tuple(map(inspect_wheel, paths)), [])
    )
    wheel = make_wheel(tmp_path / "built", "wbdemo", "0.1.0", tag="cp311-cp311-manylinux_2_28_x86_64")
    # An attempt timed as cibuildwheel's log of two Pythons times it: 622 s.
    timed = AttemptResult(
        attempt=1, returncode=0, duration_s=622.0, wheels=(wheel,), memory_limit_seen=None,
        log_path=tmp_path / "build.log", steps=tuple(two_python_log().steps),
    )  # fmt: skip
    fake = _GatedEngine(timed)
    _: Engine = fake

    result = build.run_build(spec, options, _reporter()[0], fake)

    report = json.loads(result.report.read_text())
    assert report["gate"][0]["passed"] is True
    (attempt,) = report["attempts"]
    phases = [(p["step"], p["python"], p["start_s"], p["end_s"]) for p in attempt["phases"]]
    assert phases[:-1] == [
        (s.step, s.identifier, s.start, s.end) for s in two_python_log().steps
    ]  # cibuildwheel's steps, as attempt_record keeps them
    step, python, start, end = phases[-1]
    assert (step, python) == ("import gate", None)
    assert 622.0 <= start <= end  # after the attempt's end, on its clock: the chart's time axis
    # The image step is timed too (the fake's is instant), so scripts/example can say each phase.
    assert isinstance(report["image"]["seconds"], float) and 0 <= report["image"]["seconds"] < 60
    times = phase_seconds(read_report(result.report))
    assert times["build"] == 622.0 and times["gate"] == round(end - start, 1) and times["range"] is None


def test_what_a_build_prints_holds_no_raw_tuple_or_list(
    flow: tuple[BuildSpec, ImageOptions, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, options, _ = flow
    spec = BuildSpec(**{**spec.__dict__, "gate": False})
    monkeypatch.setattr(build, "stamp_and_check", lambda paths, spec, date_epoch=None: ((), []))
    reporter, out = _reporter()
    build.run_build(spec, options, reporter, _engine("ok"))
    printed = out.getvalue()
    assert ", archs 100,120 (run " in printed.splitlines()[0]
    # Python's repr of a tuple or list of numbers or strings: (100, 120), [100, 120], ('cp311',)
    assert not re.search(r"[(\[](?:\d+|'[^']*'),(?: (?:\d+|'[^']*'),?)*[)\]]", printed), printed


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
    inputs = image_options.image_inputs(_engine(), options.for_variant(spec.variant))
    proven = replace(spec, pin=PinMode.PROVEN)
    assert results.inputs_key(proven, inputs, ("cp311",)) != results.inputs_key(spec, inputs, ("cp311",))
    with pytest.raises(BadArgument, match="--pin proven writes the torch range"):
        replace(spec, pin=PinMode.PROVEN, torch_range=False)


def test_a_build_writes_beside_each_wheel_the_statement_of_what_went_in(
    flow: tuple[BuildSpec, ImageOptions, list[Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """<wheel>.intoto.json in the run folder: the wheel's sha256 as its subject; the example's
    tree digest, this checkout's images/ files, the pinned CUDA wheels and the torch file the
    attempt's log named as materials; the parameters `build` was given and what it derived,
    MAX_JOBS and NVCC_THREADS apart, as not changing the output."""
    spec, options, _written = flow
    spec = replace(spec, gate=False)
    # The fake's wheel is pure Python: stamp and check judge real CUDA wheels elsewhere.
    monkeypatch.setattr(
        build, "stamp_and_check", lambda paths, spec, *_: (tuple(map(inspect_wheel, paths)), [])
    )

    result = build.run_build(spec, options, _reporter()[0], _engine("ok"))

    (wheel,) = result.wheels
    found = json.loads(wheel.path.with_name(wheel.path.name + ".intoto.json").read_text())
    assert found["_type"] == "https://in-toto.io/Statement/v1"
    assert found["predicateType"] == "https://slsa.dev/provenance/v1"
    assert found["subject"] == [{"name": wheel.path.name, "digest": {"sha256": wheel.sha256}}]
    definition = found["predicate"]["buildDefinition"]
    materials = {m["name"]: m for m in definition["resolvedDependencies"]}
    assert materials[TORCH_FILE]["digest"] == {"sha256": TORCH_SHA256}
    assert materials["source"]["digest"] == {"wheelbuildTreeSha256": results.source_digest(EXAMPLE_DIR)}
    dockerfile = hashlib.sha256((IMAGES_DIR / "Dockerfile.cuda131").read_bytes()).hexdigest()
    assert materials["images/Dockerfile.cuda131"]["digest"] == {"sha256": dockerfile}
    assert materials["pypi:nvidia-cuda-nvcc==13.1.115"]["digest"]["sha256"].startswith("fe5c0604")
    assert materials["image/base"]["uri"] == "wheelbuild-base:fake"
    external, internal = definition["externalParameters"], definition["internalParameters"]
    assert external["package"] == "wbdemo" and external["torch"] == "2.11.0+cu130"
    assert (external["archs"], external["pythons"], external["pin"]) == ([100, 120], ["cp311"], "built")
    report = json.loads(result.report.read_text())
    assert internal["inputsKey"] == report["inputs_key"]
    assert internal["doesNotChangeOutput"] == {"MAX_JOBS": "2", "NVCC_THREADS": "1", "compilerCache": True}
    assert "MAX_JOBS" not in internal["buildEnv"] and internal["buildEnv"]["WBDEMO_CUDA_ARCHS"] == "100;120"
    assert found["predicate"]["runDetails"]["builder"]["version"]["wheelbuild-code"] == results.code_digest(
        Path(build.__file__).parent.parent, tuple(IMAGES_DIR / n for n in ATTEMPT_SCRIPTS)
    )


def test_reused_wheels_come_with_the_statement_of_the_build_that_made_them(
    flow: tuple[BuildSpec, ImageOptions, list[Path]], tmp_path: Path
) -> None:
    spec, options, _written = flow
    fake = _engine()
    key = results.inputs_key(
        spec, image_options.image_inputs(fake, options.for_variant(spec.variant)), ("cp311",)
    )
    earlier = tmp_path / "earlier"
    wheel = make_wheel(earlier, "wbdemo", "0.1.0+cu130torch2.11", tag="cp311-cp311-manylinux_2_28_x86_64")
    wheel.with_name(wheel.name + ".intoto.json").write_text('{"made by": "the earlier run"}')
    report = earlier / "build-report.json"
    report.write_text(json.dumps({"run_id": "earlier-run"}))
    results.save(sources.cache_dir() / "results", key, (wheel,), report)

    result = build.run_build(spec, options, _reporter()[0], fake)

    assert fake.configs == []
    copied = result.run_dir / (wheel.name + ".intoto.json")
    assert copied.read_text() == '{"made by": "the earlier run"}'
