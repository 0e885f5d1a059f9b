"""The zoo: real sdists from PyPI, pinned by sha256 (tests/sdists.py), built for real for cu130 and
one arch (sm_120) through the gate, with nothing but the package named: no --env. Each must give a
wheel with exactly the asked SASS, every shared object linked by its build, that the gate imports;
an sdist that cannot be built from PyPI must be refused saying why.

- causal-conv1d 1.7.0: the CachedWheelsCommand (a prebuilt download unless its FORCE_BUILD switch)
  and nine archs of its own; also built with --keep-package-archs, for the nine-arch compile time;
- grouped-gemm 0.3.0: includes ATen/cuda/CUDAContext.h (cuBLAS, cuSPARSE, cuSOLVER headers);
- torch-cluster 1.6.3: CUDA only with FORCE_CUDA=1 or a GPU, and torch's non-ninja compile path;
- fast-hadamard-transform 1.1.0: its sdist lacks its csrc/, so it cannot be built from PyPI;
- flash-attn (the recipe: its newest release, 2.8.3.post2 today) and mamba-ssm 2.3.2.post1: the
  heavy ones, for the newest cu130 torch (2.14.1), whose ATen.h needs C++20: their -std=c++17 is
  raised to it; mamba-ssm with --keep-package-std is refused, saying so;
- causal-conv1d 1.7.0 for cu132: torch 2.15.0, a CUDA 13.2 build, compiled by the 13.2 toolkit.

Hours on 2 cores, so only with `pytest -m hours`. Each build's run folder goes under
$WHEELBUILD_ZOO_OUT (default: the test's own folder); `bench/zoo --reports DIR` prints the table
of what they did from there.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from wheelbuild.errors import CompileFailed, SourceUnavailable

from tests.integration.conftest import TORCH_INDEX, Completed, wheelbuild
from tests.sdists import SDISTS, fetch


@dataclass(frozen=True)
class Member:
    name: str  # the row's name in bench/zoo, and its folder under the zoo's output
    package: str  # an SDISTS key, or a recipe name
    extra: tuple[str, ...] = ()
    refused: tuple[int, str] | None = None  # (exit code, text in the error) for a refused sdist
    torch: str = "cu130"
    named: bool = False  # built as `wheelbuild build NAME==VERSION`: looked up on PyPI, not a fetched path


ZOO = (
    Member("causal-conv1d", "causal-conv1d==1.7.0"),
    Member("causal-conv1d-nine-archs", "causal-conv1d==1.7.0", ("--keep-package-archs",)),
    Member("causal-conv1d-cu132", "causal-conv1d==1.7.0", torch="cu132", named=True),
    Member("grouped-gemm", "grouped-gemm==0.3.0"),
    Member("torch-cluster", "torch-cluster==1.6.3"),
    Member(
        "fast-hadamard-transform",
        "fast-hadamard-transform==1.1.0",
        refused=(SourceUnavailable.exit_code, "csrc/fast_hadamard_transform"),
    ),
    Member("flash-attn", "flash-attn"),
    # Its setup.py passes -std=c++17, and torch 2.14's ATen.h needs C++20: raised, it builds;
    # kept (--keep-package-std), it is refused saying so.
    Member("mamba-ssm", "mamba-ssm==2.3.2.post1"),
    Member(
        "mamba-ssm-kept-std",
        "mamba-ssm==2.3.2.post1",
        ("--keep-package-std",),
        refused=(CompileFailed.exit_code, "compile failed in torch's own headers, which need C++20"),
    ),
)


def zoo_out(tmp_path: Path) -> Path:
    return Path(os.environ.get("WHEELBUILD_ZOO_OUT") or tmp_path)


def build(member: Member, out: Path) -> Completed:
    if member.package in SDISTS and not member.named:
        path = fetch(member.package)
        source = f"{path}#sha256={SDISTS[member.package].sha256}"
    else:
        source = member.package
    return wheelbuild(
        "build", source, "--torch", member.torch, "--torch-index-url", TORCH_INDEX,
        "--archs", "120", "--python", "3.11", "--output-dir", str(out / member.name), "--rebuild",
        *member.extra,
        timeout=6 * 3600,
    )  # fmt: skip


@pytest.mark.hours
@pytest.mark.usefixtures("cuda_image")
@pytest.mark.parametrize("member", ZOO, ids=[m.name for m in ZOO])
def test_a_real_package_is_built_here_for_exactly_the_asked_arch_and_loads(
    member: Member, tmp_path: Path
) -> None:
    done = build(member, zoo_out(tmp_path))
    if member.refused is not None:
        code, text = member.refused
        assert done.returncode == code, done.stdout[-3000:] + done.stderr
        assert text in done.stderr
        return
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr
    report = json.loads(
        (zoo_out(tmp_path) / member.name / "runs" / done.run_id / "build-report.json").read_text()
    )
    contract = report["contract"]
    assert contract["link_checks"] and all(": linked here: " in check for check in contract["link_checks"])
    assert contract["network"] == "off"
    kept = "--keep-package-archs" in member.extra
    for wheel in report["wheels"]:
        for module, archs in wheel["extension_modules"].items():
            if archs["sass"] or archs["ptx"]:
                assert kept or archs["sass"] == [120], (module, archs)
                assert 120 in archs["sass"], (module, archs)
    assert [g["passed"] for g in report["gate"]] == [True] * len(report["wheels"])
