"""What the build-flow tests share (tests/unit/test_build_flow.py with a pure-Python wheel,
tests/local/test_build_flow_checked.py with a real CUDA one): a fake engine in Docker's place
(ports.Engine: no Docker in those suites), a console that prints into a buffer, and the `flow`
fixture, run_build's inputs for the bundled example."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from wheelbuild.attempt.buildlog import BuildLog, MemorySample
from wheelbuild.attempt.config import AttemptConfig
from wheelbuild.attempt.outcome import AttemptResult, OomEvidence
from wheelbuild.engine.ports import Engine, GateJob
from wheelbuild.host.gpu import GpuMode
from wheelbuild.image.cuda_redist import CudaLayer
from wheelbuild.image.inputs import Image, ImageInputs
from wheelbuild.image.options import ImageOptions
from wheelbuild.index.project_pages import IndexFile
from wheelbuild.pipeline import preflight
from wheelbuild.plan.memory_model import GIB
from wheelbuild.progress.console import Console
from wheelbuild.recipes import resolve_recipe
from wheelbuild.report import page as report_html
from wheelbuild.spec.build_spec import BuildSpec, Resources
from wheelbuild.spec.torch_releases import TorchIndex
from wheelbuild.variants import parse_variant

from tests.indexkit import make_wheel

OOM = OomEvidence(docker_oom_events=1, cgroup_oom_kills=1)
COMPILE_ERROR = '/project/csrc/saxpy.cu(5): error: identifier "x" is undefined'

# What the fake's successful attempt installed from the wheel cache, as the log says it.
TORCH_FILE, TORCH_SHA256 = "torch-2.11.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl", "7" * 64

# What an attempt does in the fake: "oom", "ok" (a wheel appears), or "error" (a compile error).
Script = Iterator[str | AttemptResult]


def pure_wheel(folder: Path) -> Path:
    """The example's wheel as far as a pure-Python fake can make it: no extension module."""
    return make_wheel(folder, "wbdemo", "0.1.0", tag="cp311-cp311-manylinux_2_28_x86_64")


class FakeEngine:
    """ports.Engine without Docker: each attempt ends as the script says (or is the result given),
    a successful one with the wheel *wheel* makes in its output folder; every call is noted."""

    def __init__(self, *ends: str | AttemptResult, wheel: Callable[[Path], Path] | None = None) -> None:
        self.ends: Script = iter(ends)
        self.wheel = wheel or pure_wheel
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
            wheels = (self.wheel(config.output_dir),)
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


def fake_engine(*ends: str | AttemptResult, wheel: Callable[[Path], Path] | None = None) -> FakeEngine:
    fake = FakeEngine(*ends, wheel=wheel)
    _: Engine = fake  # the fake is an Engine, as mypy sees it
    return fake


class GatedEngine(FakeEngine):
    """The fake, with a gate container that answers that the wheel imported (no Docker here)."""

    def run_gate(self, job: GateJob, on_line: Callable[[str], None]) -> tuple[dict[str, Any] | None, str]:
        answer = {
            "python": "cp311",
            "imports": [{"module": "wbdemo", "ok": True, "error": ""}],
            "torch": {"version": "2.11.0+cu130", "cuda": "13.0"},
        }
        return answer, ""


def quiet_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(out, show_log=False), out


@pytest.fixture
def flow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[BuildSpec, ImageOptions, list[Path]]:
    """run_build's inputs: the bundled example for cu130 on a local base, torch's index answered without a network;
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
