"""The import gate, for real: each wheel installed with what it declares (torch from the
variant's index) into a fresh venv in a fresh container of the base image (no CUDA toolkit),
every extension module and package imported. A good wheel passes; an extension that calls a
function nobody defines builds, links, and is refused at the gate with the symbol named,
demangled; publish refuses it too, and checks a wheel without a report statically, saying so.

Without an NVIDIA runtime in the Docker daemon (as on these machines) the smoke test is recorded as
skipped with that reason; where a daemon has one it runs on the GPU (images/smoke/)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import docker

from tests.integration.conftest import FIXTURE_TORCH, TORCH_INDEX, FixtureBuild, containers_of_run, wheelbuild


def test_a_good_wheel_passes_the_gate_and_inspect_shows_it(
    fixture_build: FixtureBuild, docker_client: docker.DockerClient
) -> None:
    gates = fixture_build.report["gate"]
    assert [g["wheel"] for g in gates] == [fixture_build.wheel.name]
    gate = gates[0]
    assert gate["passed"] is True and gate["install_error"] is None
    assert [(i["module"], i["ok"]) for i in gate["imports"]] == [("wbdemo._C", True), ("wbdemo", True)]
    assert gate["torch"].startswith(FIXTURE_TORCH.version) and "CUDA 13" in gate["torch"]
    smoke = gate["smoke"]
    if "nvidia" in (docker_client.info().get("Runtimes") or {}):
        # A GPU reached the gate: the kernels ran on it, or it is one the wheel holds no code for.
        assert smoke["status"] == "passed" or "the wheel holds [100, 120]" in smoke["reason"], smoke
    else:
        assert smoke["status"] == "skipped" and "no NVIDIA runtime" in smoke["reason"], smoke
    assert fixture_build.report["abi"][0]["fits"] is True
    assert "import gate: passed (imported wbdemo._C, wbdemo" in fixture_build.result.stdout
    shown = wheelbuild("inspect", str(fixture_build.wheel))
    assert (
        f"import gate passed: imported wbdemo._C, wbdemo with torch {FIXTURE_TORCH.version}" in shown.stdout
    )


def test_an_extension_calling_an_undefined_function_builds_and_is_refused_at_the_gate(
    cuda_image: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    result = wheelbuild(
        "build", "wbdemo", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--archs", "100,120",
        "--python", "3.11", "--memory", "4g", "--output-dir", str(tmp_path),
        "--env", "WBDEMO_UNDEFINED_SYMBOL=1", "--rebuild",
    )  # fmt: skip
    assert result.returncode == 48, result.stdout[-3000:] + result.stderr
    error = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert "does not load: import wbdemo._C fails with undefined symbol" in error
    assert "wbdemo::never_defined(int) (_ZN6wbdemo13never_definedEi)" in error
    run_dir = tmp_path / "runs" / result.run_id
    wheel = next(run_dir.glob("*.whl"))  # it built: kept for a look, not stored as done
    report = json.loads((run_dir / "build-report.json").read_text())
    assert report["gate"][0]["passed"] is False
    assert report["checks"][0]["error"] == "ImportGateFailed"
    assert containers_of_run(docker_client, result.run_id) == []

    tree = tmp_path / "tree"
    refused = wheelbuild("publish", str(wheel), "--to", str(tree))
    assert refused.returncode == 48, refused.stdout + refused.stderr
    assert "its build report says the import gate refused it" in refused.stderr
    assert not list(tree.rglob("*.whl"))


def test_a_wheel_without_a_report_is_checked_statically_and_publish_says_so(
    fixture_build: FixtureBuild, tmp_path: Path
) -> None:
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy2(fixture_build.wheel, alone)
    done = wheelbuild(
        "publish",
        str(alone / fixture_build.wheel.name),
        "--torch",
        FIXTURE_TORCH.variant,
        "--to",
        str(tmp_path / "tree"),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "checked statically only (no build report beside it, so it was never loaded)" in done.stderr
    assert "symbol versions fit manylinux_2_34" in done.stderr
