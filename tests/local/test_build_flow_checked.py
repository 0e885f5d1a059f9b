"""The build's flow over a fake engine (ports.Engine, tests/flowkit.py: no Docker here) whose
attempts leave a real CUDA wheel, an extension module with sm_100 and sm_120 SASS compiled here by
nvcc: run_build stamps and checks it for real (archs, label, torch pin, symbol versions), then
gates it through the fake's gate container. What the report holds and what the build prints."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path

from wheelbuild.attempt.config import ATTEMPT_SCRIPTS
from wheelbuild.attempt.outcome import AttemptResult
from wheelbuild.engine.ports import Engine
from wheelbuild.image.inputs import IMAGES_DIR
from wheelbuild.image.options import ImageOptions
from wheelbuild.pipeline import build, results
from wheelbuild.recipes import EXAMPLE_DIR
from wheelbuild.report.build_report import GateSkipped, read_report
from wheelbuild.report.timings import phase_seconds
from wheelbuild.spec.build_spec import BuildSpec

from tests.flowkit import TORCH_FILE, TORCH_SHA256, GatedEngine, fake_engine, quiet_console
from tests.indexkit import make_wheel
from tests.provenancekit import cuda_extension
from tests.reportkit import two_python_log


def cuda_wbdemo(folder: Path) -> Path:
    """The example's wheel as its build leaves it before the stamp: an extension module with
    sm_100 and sm_120 SASS, no label, no torch pin. Tagged manylinux_2_34: it is linked here, on
    a newer glibc than the image's."""
    so = cuda_extension((100, 120))
    return make_wheel(
        folder, "wbdemo", "0.1.0", tag="cp311-cp311-manylinux_2_34_x86_64",
        extra_files={"wbdemo/_C.cpython-311-x86_64-linux-gnu.so": so},
    )  # fmt: skip


def test_a_build_writes_its_report_once_with_every_attempt(
    flow: tuple[BuildSpec, ImageOptions, list[Path]],
) -> None:
    spec, options, written = flow
    spec = BuildSpec(**{**spec.__dict__, "gate": False})
    fake = fake_engine("oom", "ok", wheel=cuda_wbdemo)

    result = build.run_build(spec, options, quiet_console()[0], fake)

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


def test_the_report_times_each_step_and_the_import_gate_on_the_last_attempts_clock(
    flow: tuple[BuildSpec, ImageOptions, list[Path]], tmp_path: Path
) -> None:
    spec, options, _written = flow
    spec = replace(spec, torch_range=False)
    wheel = cuda_wbdemo(tmp_path / "built")
    # An attempt timed as cibuildwheel's log of two Pythons times it: 622 s.
    timed = AttemptResult(
        attempt=1, returncode=0, duration_s=622.0, wheels=(wheel,), memory_limit_seen=None,
        log_path=tmp_path / "build.log", steps=tuple(two_python_log().steps),
    )  # fmt: skip
    fake = GatedEngine(timed)
    _: Engine = fake

    result = build.run_build(spec, options, quiet_console()[0], fake)

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
    flow: tuple[BuildSpec, ImageOptions, list[Path]],
) -> None:
    spec, options, _ = flow
    spec = BuildSpec(**{**spec.__dict__, "gate": False})
    console, out = quiet_console()
    build.run_build(spec, options, console, fake_engine("ok", wheel=cuda_wbdemo))
    printed = out.getvalue()
    assert ", archs 100,120 (run " in printed.splitlines()[0]
    # Python's repr of a tuple or list of numbers or strings: (100, 120), [100, 120], ('cp311',)
    assert not re.search(r"[(\[](?:\d+|'[^']*'),(?: (?:\d+|'[^']*'),?)*[)\]]", printed), printed


def test_a_build_writes_beside_each_wheel_the_statement_of_what_went_in(
    flow: tuple[BuildSpec, ImageOptions, list[Path]],
) -> None:
    """<wheel>.intoto.json in the run folder: the wheel's sha256 as its subject; the example's
    tree digest, this checkout's images/ files, the pinned CUDA wheels and the torch file the
    attempt's log named as materials; the parameters `build` was given and what it derived,
    MAX_JOBS and NVCC_THREADS apart, as not changing the output."""
    spec, options, _written = flow
    spec = replace(spec, gate=False)

    result = build.run_build(spec, options, quiet_console()[0], fake_engine("ok", wheel=cuda_wbdemo))

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
