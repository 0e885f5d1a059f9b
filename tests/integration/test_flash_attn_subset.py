"""Admission against the static plan on a real ninja build of real flash-attn units (issue 14,
part 1): the pinned 2.8.3 sdist with its source list trimmed to 4 fwd and 2 bwd kernels plus the
binding, built for sm_120 under a memory limit where the static plan must serialize (two bwd
units do not fit together) but two fwd units fit. Three builds run in one test, one after the
other, each on sources salted apart so none finds another's units in the compiler cache: the
static plan, admission (the default: with cicc admission, each compile admitted at its cost
outside cicc and each cicc at its own), and admission of whole units (--no-cicc-admission, the
default until 2026-12-01). bench/subset compares the admission variants over several builds.
A second test builds one trimmed sdist three times (two cold, one warm) for one sha256.

The wheel would not import (flash_api.cpp calls kernels that were cut), so the gate is off: this
measures the build. Twenty-odd minutes on 2 cores, so it runs only with `pytest -m hours`. It
writes its figures to $WHEELBUILD_SUBSET_FIGURES (or the test's folder) and prints them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from wheelbuild.engine.docker_engine import DockerEngine
from wheelbuild.host.ca_bundle import resolve_ca_bundle
from wheelbuild.image.options import ImageOptions
from wheelbuild.pipeline import build as build_pipeline
from wheelbuild.plan.memory_model import MemoryModel, flash_attn_model
from wheelbuild.progress.console import Console
from wheelbuild.recipes.base import LocalSdist
from wheelbuild.recipes.flash_attn import SDISTS, flash_attn_recipe
from wheelbuild.spec.build_spec import BuildSpec, Resources
from wheelbuild.spec.sources import prepare_source
from wheelbuild.units import parse_memory
from wheelbuild.variants import parse_variant

from .conftest import TORCH_INDEX, wheelbuild

KEPT = (
    "flash_fwd_hdim64_fp16_sm80.cu",
    "flash_fwd_hdim128_fp16_sm80.cu",
    "flash_fwd_hdim64_bf16_sm80.cu",
    "flash_fwd_hdim128_bf16_sm80.cu",
    "flash_bwd_hdim64_fp16_sm80.cu",
    "flash_bwd_hdim128_fp16_sm80.cu",
)
MEMORY = os.environ.get("WHEELBUILD_SUBSET_MEMORY", "11.5g")
MAX_MEMBER = 64 * 1024**2  # the sdist is the pinned one; its files are small
SUBSET_CACHE = Path.home() / ".cache" / "wheelbuild-flash-attn-subset"


def trimmed_sdist(original: Path, dest: Path, salt: str, kept: tuple[str, ...] = KEPT) -> Path:
    """The sdist with setup.py's kernel list cut to *kept*, and each kept kernel salted (a comment
    the preprocessor keeps out, but sccache hashes the source text it reads first: a `#line`
    would do the same) so the compiler cache has never seen it."""
    out = dest / original.name
    with tarfile.open(original) as source, tarfile.open(out, "w:gz") as target:
        for member in source.getmembers():
            if not member.isfile():
                target.addfile(member)
                continue
            assert member.size < MAX_MEMBER, member.name
            data = source.extractfile(member).read()  # type: ignore[union-attr]
            name = member.name.rsplit("/", 1)[-1]
            if member.name.endswith("/setup.py") and member.name.count("/") == 1:
                data = _trim_setup(data.decode(), kept).encode()
            elif name in kept:
                data = f'static const char wheelbuild_subset_salt[] = "{salt}";\n'.encode() + data
            target.addfile(replace_size(member, len(data)), io.BytesIO(data))
    return out


def replace_size(member: tarfile.TarInfo, size: int) -> tarfile.TarInfo:
    member.size = size
    return member


def _trim_setup(text: str, kept: tuple[str, ...]) -> str:
    """Every `"csrc/flash_attn/src/<kernel>.cu",` line of setup.py but the kept ones."""
    trimmed = re.sub(
        r'^\s*"csrc/flash_attn/src/(flash_[a-z0-9_]+\.cu)",\n',
        lambda m: m[0] if m[1] in kept else "",
        text,
        flags=re.MULTILINE,
    )
    listed = re.findall(r'^\s*"csrc/flash_attn/src/(flash_[a-z0-9_]+\.cu)",$', trimmed, flags=re.MULTILINE)
    assert sorted(listed) == sorted(kept), f"setup.py changed shape: {listed}"
    return trimmed


def subset_model() -> MemoryModel:
    """flash-attn's profile cut to the same units, in the same order."""
    model = flash_attn_model()
    units = tuple(u for u in model.units if u.name.rsplit("/", 1)[-1] in (*KEPT, "flash_api.cpp"))
    assert len(units) == len(KEPT) + 1
    return replace(model, units=units, name="flash-attn-subset")


def build_subset(
    sdist: Path,
    out: Path,
    admission: bool,
    per_cicc: bool = False,
    max_jobs: int | None = None,
    memory: str = MEMORY,
    compiler_cache: bool = True,
) -> dict[str, object]:
    """One build of the trimmed sdist (see the module doc); its figures. bench/subset runs it too."""
    recipe = replace(
        flash_attn_recipe("2.8.3"),
        source=LocalSdist(sdist, None),
        memory_model=subset_model(),
    )
    spec = BuildSpec(
        recipe=recipe,
        variant=parse_variant("cu130", TORCH_INDEX),
        archs=(120,),
        pythons=("cp311",),
        resources=Resources(memory=parse_memory(memory), cpus=2.0, max_jobs=max_jobs),
        output_dir=out,
        rebuild=True,
        admission=admission,
        cicc_admission=per_cicc,
        gate=False,
        torch_range=False,
        compiler_cache=compiler_cache,
    )
    # As the CLI makes them: the host's CA bundle goes into the image (this network's TLS proxy).
    options = ImageOptions(
        base_image=os.environ.get("WHEELBUILD_BASE_IMAGE"), ca_bundle=resolve_ca_bundle(None)
    )
    started = time.monotonic()
    with DockerEngine(sweep=False) as engine:
        result = build_pipeline.run_build(spec, options, Console(show_log=False), engine)
    wall = time.monotonic() - started
    log = (result.run_dir / "build.log").read_text(errors="replace")
    report = json.loads(result.report.read_text())
    attempts = report["attempts"]
    return {
        "wheels": sorted(str(w) for w in result.run_dir.glob("*.whl")),
        "admission": admission,
        "cicc_admission": admission and per_cicc,
        "ninja_line": _line(log, "wheelbuild-ninja:"),
        "gate_line": _line(log, "wheelbuild-before-build: cicc admission in"),
        "cicc_waits": [
            line for line in map(str.strip, log.splitlines()) if line.startswith("wheelbuild-admit: cicc")
        ],
        "wall_s": round(wall),
        "compile_s": sum(a["build_s"] or 0 for a in attempts),
        "attempts": len(attempts),
        "max_jobs": report["plan"]["max_jobs"],
        "admission_slots": report["plan"].get("admission_slots"),
        "nvcc_threads": report["plan"]["nvcc_threads"],
        "admission_budget": report["plan"]["admission_budget"],
        "predicted_peak": report["plan"]["predicted_peak"],
        "peak_compile": max(a["peak_memory_compile"] or 0 for a in attempts),
        "oom_kills": sum(bool(a["oom_evidence"]) for a in attempts),
        "units": {
            u["unit"]: (u.get("predicted_peak"), u.get("measured_peak")) for u in attempts[-1]["units"]
        },
    }


def _line(log: str, start: str) -> str | None:
    return next((line for line in map(str.strip, log.splitlines()) if line.startswith(start)), None)


@pytest.mark.hours
def test_admission_beats_the_static_plan_on_real_flash_attn_units_with_no_oom(
    cuda_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache of its own, kept between runs: the model these trimmed builds learn is of 7 units
    # under flash-attn 2.8.3's name, and must not reach a plan of the whole release.
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", os.environ.get("WHEELBUILD_SUBSET_CACHE", str(SUBSET_CACHE)))
    original = prepare_source(SDISTS["2.8.3"], print)
    pinned = original.project_dir / original.package
    figures = []
    for name, admission, cicc_admission in (
        ("static", False, False),
        ("admission", True, True),
        ("whole-units", True, False),
    ):
        work = tmp_path / name
        work.mkdir()
        sdist = trimmed_sdist(pinned, work, uuid.uuid4().hex)
        figures.append(build_subset(sdist, work / "out", admission, cicc_admission))
    static, admitted, whole = figures
    summary = {
        "memory": MEMORY,
        "static": static,
        "admission": admitted,
        "admission_of_whole_units": whole,
        "compile_ratio": round(admitted["compile_s"] / static["compile_s"], 3),  # type: ignore[operator]
        "wall_ratio": round(admitted["wall_s"] / static["wall_s"], 3),  # type: ignore[operator]
        "admission_over_whole_units_compile": round(admitted["compile_s"] / whole["compile_s"], 3),  # type: ignore[operator]
    }
    path = Path(os.environ.get("WHEELBUILD_SUBSET_FIGURES", tmp_path / "subset.json"))
    path.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    assert static["max_jobs"] == 1, "the limit must make the static plan serialize"
    # Lookahead: ninja launches twice the CPUs, the wrapper admits the CPUs' worth at once.
    assert admitted["admission_budget"] is not None
    assert (admitted["max_jobs"], admitted["admission_slots"]) == (4, 2), summary
    assert static["oom_kills"] == 0 and admitted["oom_kills"] == 0 and whole["oom_kills"] == 0, summary
    # The launcher ran in the admitted builds; cicc admission in the default one alone.
    assert str(admitted["ninja_line"]).startswith("wheelbuild-ninja: 7 compiles of"), summary
    assert admitted["gate_line"] is not None, summary
    assert static["gate_line"] is None and whole["gate_line"] is None, summary
    assert admitted["compile_s"] < static["compile_s"], summary  # type: ignore[operator]


@pytest.mark.hours
def test_the_subset_built_twice_cold_and_once_warm_gives_one_wheel(
    cuda_image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real flash-attn units, as the example's reproducibility test does it: one trimmed sdist
    (one salt, so the same source), built twice with the compiler cache off (every unit compiled
    for real) into other run folders, then once warm from those. One sha256, or `wheelbuild diff`
    names the first member and ELF section that differ; the figures go to
    $WHEELBUILD_SUBSET_FIGURES (or the test's folder) either way."""
    monkeypatch.setenv("WHEELBUILD_CACHE_DIR", os.environ.get("WHEELBUILD_SUBSET_CACHE", str(SUBSET_CACHE)))
    original = prepare_source(SDISTS["2.8.3"], print)
    sdist = trimmed_sdist(original.project_dir / original.package, tmp_path, uuid.uuid4().hex)
    builds = {
        name: build_subset(sdist, tmp_path / name, admission=True, compiler_cache=cache)
        for name, cache in (("cold-1", False), ("cold-2", False), ("warm", True))
    }
    wheels = {name: Path(str(figures["wheels"][0])) for name, figures in builds.items()}  # type: ignore[index]
    digests = {name: hashlib.sha256(w.read_bytes()).hexdigest() for name, w in wheels.items()}
    diffs = {
        name: wheelbuild("diff", str(wheels["cold-1"]), str(wheels[name])).stderr.strip()
        for name in ("cold-2", "warm")
        if digests[name] != digests["cold-1"]
    }
    summary = {"sha256": digests, "diffs": diffs, "compile_s": {n: b["compile_s"] for n, b in builds.items()}}
    path = Path(os.environ.get("WHEELBUILD_SUBSET_FIGURES", tmp_path / "subset.json"))
    path.with_name(path.stem + "-reproducible.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    assert len(set(digests.values())) == 1, summary
