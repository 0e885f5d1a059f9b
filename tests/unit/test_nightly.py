"""wheelbuild.nightly.night: which cells a night builds, their arguments, which wheels pass, where they go,
and the coverage table. Pure parts directly; the index read over HTTP from a real `serve`."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from click.testing import CliRunner
from wheelbuild.cli.main import main
from wheelbuild.cli.seams import Seams
from wheelbuild.errors import (
    BadArgument,
    BadVariant,
    BuildFailed,
    ImportGateFailed,
    NightIncomplete,
    PublishTargetMissing,
)
from wheelbuild.image.options import ImageOptions
from wheelbuild.index.project_pages import IndexFile
from wheelbuild.index.remote import RsyncTarget
from wheelbuild.nightly import night as nightly
from wheelbuild.nightly import publish as nightly_publish
from wheelbuild.nightly.matrix import Cell, load_matrix, parse_matrix
from wheelbuild.nightly.night import (
    CellOutcome,
    Release,
    coverage_html,
    coverage_markdown,
    coverage_rows,
    feasible_cells,
    github_output,
    held_wheel,
    image_options,
    lines_output,
    production_pythons,
    publish_night,
    publish_target,
    published_keys,
    report_verdict,
    source_of,
)
from wheelbuild.pipeline import check
from wheelbuild.progress.console import Console
from wheelbuild.recipes import resolve_recipe
from wheelbuild.spec.torch_releases import TorchIndex
from wheelbuild.variants import DEFAULT_TORCH, CudaCompiler, TorchCeiling

from tests.indexkit import make_wheel

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "nightly.toml"
CUDA12 = CudaCompiler(version="12.8", home="/usr/local/cuda-12.8")
IMAGE = ("cp310", "cp311", "cp312", "cp313", "cp314", "cp315")
TORCH = frozenset({"cp310", "cp311", "cp312", "cp313", "cp314"})


def _feasible(
    config: dict[str, Any], cuda12: CudaCompiler | None = CUDA12, requires: str | None = None
) -> Any:
    cells = parse_matrix(config).cells
    return feasible_cells(
        cells, IMAGE, {c.torch: TORCH for c in cells}, {source_of(c): requires for c in cells}, cuda12
    )


def test_a_cell_without_python_is_one_cell_per_python_the_image_and_torch_both_have() -> None:
    good, skipped = _feasible({"build": [{"package": "wbdemo", "torch": ["cu130"]}]})
    assert [c.python for c in good] == ["cp310", "cp311", "cp312", "cp313", "cp314"]
    assert [(s.cell.id, s.why) for s in skipped] == [
        (
            "wbdemo-cu130-cp315-100.120",
            f"cp315: torch {DEFAULT_TORCH['cu130']} has no cp315 wheel on its index",
        )
    ]


def test_requires_python_leaves_pythons_out_with_the_reason() -> None:
    good, skipped = _feasible({"build": [{"package": "wbdemo", "torch": ["cu130"]}]}, requires=">=3.12")
    assert [c.python for c in good] == ["cp312", "cp313", "cp314"]
    assert "requires Python >=3.12" in skipped[0].why


def test_a_named_python_torch_has_no_wheel_for_is_skipped_not_built() -> None:
    good, skipped = _feasible(
        {"build": [{"package": "wbdemo", "torch": ["cu130"], "python": ["3.13", "3.15"]}]}
    )
    assert [c.id for c in good] == ["wbdemo-cu130-cp313-100.120"]
    assert [s.cell.python for s in skipped] == ["cp315"] and "no cp315 wheel" in skipped[0].why


def test_cu12x_cells_compile_with_the_default_cuda12_layer_and_impossible_archs_are_skipped() -> None:
    config = {"build": [{"package": "wbdemo", "torch": ["cu128"], "python": ["3.12"], "archs": ["100,120"]}]}
    good, skipped = _feasible(config)
    assert [c.torch for c in good] == ["cu128"] and skipped == ()
    good, skipped = _feasible(config, cuda12=None)
    assert good == () and "needs a CUDA 12.x compiler" in skipped[0].why
    volta = {"build": [{"package": "wbdemo", "torch": ["cu130"], "python": ["3.12"], "archs": ["70"]}]}
    good, skipped = _feasible(volta)
    assert good == () and "cannot compile sm_70" in skipped[0].why


def test_the_production_image_pythons_come_from_the_installed_cibuildwheel() -> None:
    pythons = production_pythons()
    assert {"cp311", "cp312", "cp313"} <= set(pythons) and "cp39" not in pythons
    assert all(p.startswith("cp3") and not p.endswith("t") for p in pythons)


def test_the_test_base_is_out_of_reach_unless_the_nightlys_own_base_image_names_it() -> None:
    # scripts/setup exports WHEELBUILD_BASE_IMAGE for the test suite: the nightly ignores it.
    assert image_options({"WHEELBUILD_BASE_IMAGE": "wheelbuild-base:bookworm"}).base_image is None
    assert image_options({"WHEELBUILD_CUDA12_IMAGE": "nvidia/cuda:12.8"}).cuda12_image is None
    assert image_options({}, "wheelbuild-base:bookworm").base_image == "wheelbuild-base:bookworm"


def test_build_cell_builds_on_the_production_base_with_the_gate_and_records_the_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nightly, "torch_python_tags", lambda *a, **k: frozenset({"cp311", "cp313"}))
    # The index the cu130 rule is read from, answered without a network: a labelled release.
    served = (IndexFile("torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl", False),)
    monkeypatch.setattr(nightly, "read_torch_index", lambda url, **_: TorchIndex(url, served))
    seen: list[tuple[Any, ImageOptions]] = []

    def fake_run_build(spec: Any, options: ImageOptions, console: Any, engine: Any) -> Any:
        seen.append((spec, options))
        raise BuildFailed("cibuildwheel failed", "look at build.log")

    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        [
            "nightly",
            "build-cell",
            "wbdemo-2.14.1-cu130-cp311-100.120",
            "--config-file",
            str(FIXTURE),
            "--out",
            str(out),
        ],
        env={"WHEELBUILD_BASE_IMAGE": "wheelbuild-base:test", nightly.BASE_IMAGE_ENV: ""},
        obj=Seams(run_build=fake_run_build),
    )
    assert result.exit_code == BuildFailed.exit_code, result.output
    ((spec, options),) = seen
    assert options.base_image is None and options.cuda12_image is None
    assert spec.gate and spec.pythons == ("cp311",) and spec.output_dir == out
    record = json.loads((out / "cell.json").read_text())
    assert record["status"] == "failed" and record["exit_code"] == BuildFailed.exit_code
    # the fixture names torch-range = false
    assert record["args"] == [
        "wbdemo",
        "--torch",
        "2.14.1+cu130",
        "--python",
        "cp311",
        "--archs",
        "100,120",
        "--no-torch-range",
    ]


def test_build_cell_refuses_a_cell_the_plan_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nightly, "torch_python_tags", lambda *a, **k: frozenset({"cp311"}))
    served = (IndexFile("torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl", False),)
    monkeypatch.setattr(nightly, "read_torch_index", lambda url, **_: TorchIndex(url, served))
    matrix = parse_matrix({"build": [{"package": "wbdemo", "torch": ["cu130"], "archs": ["70"]}]})
    with pytest.raises(BadArgument, match="cannot compile sm_70"):
        nightly.build_cell(
            matrix,
            "wbdemo-2.14.1-cu130-70",
            Path("/nonexistent"),
            {},
            torch_index_url=None,
            console=Console(io.StringIO(), show_log=False),
            engine=None,  # type: ignore[arg-type]  # the production base: Docker is never asked
        )


def test_arguments_are_a_json_list_never_a_shell_string() -> None:
    hostile = Cell(
        package="./my ext'$(touch pwned)", version=None, torch="cu130", python="cp311", archs="100"
    )
    schedule = nightly.NightSchedule(build=(hostile,), published=(), skipped=(), keys={hostile.id: "k"})
    cells_line, count_line = github_output(schedule).splitlines()
    include = json.loads(cells_line.removeprefix("cells="))["include"]
    assert include[0]["args"] == hostile.build_args() and include[0]["args"][0] == "./my ext'$(touch pwned)"
    assert count_line == "count=1"
    cell_id, args = lines_output(schedule).split(" ", 1)
    assert cell_id == hostile.id == "my_ext_touch_pwned_-cu130-cp311-100"  # one word, nothing to expand
    assert json.loads(args) == hostile.build_args()


def test_no_target_is_a_typed_error_never_a_folder_of_the_checkout() -> None:
    matrix = load_matrix(REPO / "wheelbuild.toml")
    assert matrix.declared_to is None
    with pytest.raises(PublishTargetMissing, match="no publish target"):
        publish_target(matrix, None, {})
    assert publish_target(matrix, None, {nightly.PUBLISH_TO_ENV: "h:/srv/{variant}"}) == "h:/srv/{variant}"
    assert publish_target(matrix, "/srv/x/{variant}", {nightly.PUBLISH_TO_ENV: "h:/y"}) == "/srv/x/{variant}"
    with pytest.raises(PublishTargetMissing, match="no index URL"):
        published_keys("ci@wheels.example:/srv/{variant}", None, ["cu130"])


def test_the_repositorys_matrix_uses_the_default_pythons_and_the_default_cuda12_layer() -> None:
    matrix = load_matrix(REPO / "wheelbuild.toml")
    assert {c.python for c in matrix.cells} == {None}
    assert "cuda12" not in (REPO / "wheelbuild.toml").read_text().replace("CUDA 12 layer", "")


def _key(label: str) -> str:
    """An inputs key (a sha256 hex digest, as a build makes one) that stands for *label*."""
    return hashlib.sha256(label.encode()).hexdigest()


def test_the_wheel_a_cell_would_build_is_found_among_an_upload_servers_files() -> None:
    served = {
        "flash_attn-2.8.3+cu130torch2.11-cp311-cp311-manylinux_2_28_x86_64.whl",
        "flash_attn-2.8.3+cu128torch2.10-cp312-cp312-manylinux_2_28_x86_64.whl",
        "wbdemo-0.1.0+cu130torch2.11-cp310-abi3-manylinux_2_28_x86_64.whl",
        "not a wheel name.whl",
    }
    cu130 = Release("flash-attn", "2.8.3", "cu130torch2.11", "cp311")
    assert (
        held_wheel(cu130, served) == "flash_attn-2.8.3+cu130torch2.11-cp311-cp311-manylinux_2_28_x86_64.whl"
    )
    for other in (
        Release("flash-attn", "2.8.3", "cu130torch2.11", "cp312"),  # another Python
        Release("flash-attn", "2.8.2", "cu130torch2.11", "cp311"),  # another release
        Release("flash-attn", "2.8.3", "cu128torch2.10", "cp311"),  # another variant
        Release("flash-attn-3", "2.8.3", "cu130torch2.11", "cp311"),  # another project
        Release("wbdemo", "0.1.0", "cu130torch2.11", "cp313t"),  # abi3 is not for free-threaded
    ):
        assert held_wheel(other, served) is None, other
    # An abi3 wheel serves every later CPython.
    assert held_wheel(Release("wbdemo", "0.1.0", "cu130torch2.11", "cp313"), served) == (
        "wbdemo-0.1.0+cu130torch2.11-cp310-abi3-manylinux_2_28_x86_64.whl"
    )


def _cell_dir(
    root: Path, cell_id: str, *, gate: bool = True, status: str = "passed", tag: str | None = None
) -> Path:
    out = root / cell_id
    run = out / "runs" / "r1"
    wheel = make_wheel(
        run, payload=cell_id, version="0.1.0+cu130torch2.11", tag=tag or f"{cell_id.split('-')[2]}-none-any"
    )
    report = {
        "inputs_key": _key(cell_id),
        "torch": {"variant": "2.11.0+cu130"},
        "archs": [100, 120],
        "checks": [],
        "gate": [{"wheel": wheel.name, "passed": gate}],
    }
    (run / "build-report.json").write_text(json.dumps(report))
    record: dict[str, object] = {
        "id": cell_id,
        "torch": "cu130",
        "status": status,
        "run": "runs/r1",
        "wheels": [wheel.name],
    }
    if status == "failed":
        record |= {"exit_code": 40, "error": "nvcc failed"}
    (out / "cell.json").write_text(json.dumps(record))
    return out


def test_report_verdict_passes_only_wheels_every_check_and_the_gate_passed() -> None:
    assert report_verdict({"checks": [], "gate": [{"wheel": "a.whl", "passed": True}]}, ["a.whl"]) is None
    assert "no wheel" in str(report_verdict({"checks": [], "gate": []}, []))
    assert "checks failed: no sm_120" in str(
        report_verdict({"checks": [{"cause": "no sm_120"}], "gate": []}, ["a.whl"])
    )
    assert "did not run" in str(report_verdict({"checks": [], "gate": {"skipped": "--no-gate"}}, ["a.whl"]))
    refused = {"checks": [], "gate": [{"wheel": "a.whl", "passed": False}]}
    assert "did not pass a.whl" in str(report_verdict(refused, ["a.whl"]))


def test_a_failed_cell_is_reported_the_others_publish_and_the_coverage_table_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The per-cell re-check is check.check_wheels (real wheels need SASS: the integration test);
    # here it refuses one cell's wheels the way a real refusal would.
    def fake_check(
        paths: Any, variant: Any, archs: Any, on_note: Any = None, **_copies: Any
    ) -> dict[str, Any]:
        if any("refused" in str(p) for p in paths):
            raise ImportGateFailed("x.whl: its build report says the import gate refused it", "rebuild")
        return {}

    monkeypatch.setattr(check, "check_wheels", fake_check)
    night = tmp_path / "night"
    _cell_dir(night, "wbdemo-cu130-cp311-100.120")
    _cell_dir(night, "wbdemo-cu130-cp312-100.120", status="failed")
    _cell_dir(night, "wbdemo-cu130-cp313-100.120", gate=False)
    _cell_dir(night, "wbdemo-cu130-cp314-refused")
    schedule = {
        "build": [
            {"id": i, "torch": "cu130"} for i in ("wbdemo-cu130-cp311-100.120", "wbdemo-cu130-cp310-lost")
        ],
        "published": [{"id": "wbdemo-cu130-cp39-old", "torch": "cu130"}],
        "skipped": [
            {"id": "wbdemo-cu130-cp315-100.120", "torch": "cu130", "why": "torch has <no> cp315 wheel"}
        ],
    }
    (night / "schedule.json").write_text(json.dumps(schedule))
    summary = tmp_path / "summary.md"
    with pytest.raises(NightIncomplete) as caught:
        publish_night(
            [night],
            parse_matrix({"build": [{"package": "wbdemo", "torch": ["cu130"]}]}),
            {"GITHUB_STEP_SUMMARY": str(summary)},
            to=str(tmp_path / "wheelhouse" / "{variant}"),
            say=lambda _line: None,
        )
    assert "4 cell(s) failed" in caught.value.cause
    tree = tmp_path / "wheelhouse" / "cu130"
    assert sorted(p.name for p in (tree / "files").glob("*.whl")) == [
        "wbtiny-0.1.0+cu130torch2.11-cp311-none-any.whl"
    ]
    assert (tree / "files" / "wbtiny-0.1.0+cu130torch2.11-cp311-none-any.whl.inputs").read_text().strip() == (
        _key("wbdemo-cu130-cp311-100.120")
    )
    table = summary.read_text()
    assert "## wheelbuild nightly: 2 published, 4 failed, 1 skipped" in table
    for line in (
        "| wbdemo-cu130-cp311-100.120 | published | tonight: wbtiny-0.1.0+cu130torch2.11-cp311-none-any.whl |",
        "| wbdemo-cu130-cp39-old | published | earlier: its inputs are unchanged |",
        "| wbdemo-cu130-cp312-100.120 | failed | exit 40: nvcc failed |",
        "| wbdemo-cu130-cp313-100.120 | failed | the import gate did not pass wbtiny-0.1.0+cu130torch2.11-cp313-none-any.whl |",
        "| wbdemo-cu130-cp310-lost | failed | no record: its build did not finish |",
        "| wbdemo-cu130-cp315-100.120 | skipped | torch has <no> cp315 wheel |",
    ):
        assert line in table, table
    assert "refused at publish (exit 48)" in table
    page = (tree / "coverage.html").read_text()
    assert "torch has &lt;no&gt; cp315 wheel" in page and "wbdemo-cu130-cp311-100.120" in page


def test_no_target_at_publish_fails_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _cell_dir(tmp_path / "night", "wbdemo-cu130-cp311-100.120")
    with pytest.raises(PublishTargetMissing):
        publish_night(
            [tmp_path / "night"], load_matrix(REPO / "wheelbuild.toml"), {}, to=None, say=lambda _line: None
        )
    assert not (tmp_path / "wheelhouse").exists()


def test_coverage_table_escapes_and_orders_rows() -> None:
    outcomes = [
        CellOutcome("b-cu130", "cu130", (), "a | pipe"),
        CellOutcome("a-cu128", "cu128", (Path("x.whl"),), None),
    ]
    rows = coverage_rows(None, outcomes, {"a-cu128": "tonight: x.whl"})
    assert [(r.id, r.variant, r.status) for r in rows] == [
        ("a-cu128", "cu128", "published"),
        ("b-cu130", "cu130", "failed"),
    ]
    assert "a \\| pipe" in coverage_markdown(rows)
    assert "<td>a | pipe</td>" in coverage_html(rows)
    assert "<script>" not in coverage_html(
        coverage_rows(None, [CellOutcome("<script>", "cu130", (), "x")], {})
    )


def test_the_coverage_page_goes_beside_a_remote_trees_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "rsync.args"
    fake = tmp_path / "bin" / "rsync"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.delenv("WHEELBUILD_SSH_COMMAND", raising=False)
    page = tmp_path / "coverage.html"
    page.write_text("<html></html>")
    nightly_publish._push_page(page, RsyncTarget(host="ci@wheels.example", path="/srv/wheels/cu130/"), print)
    assert log.read_text().splitlines() == [
        "-a",
        "-e",
        "ssh",
        str(page),
        "ci@wheels.example:/srv/wheels/cu130/",
    ]


def test_a_torch_rule_is_one_cell_per_release_it_names_today() -> None:
    """PyTorch-style labels: the CUDA of each release is its label's, so no METADATA is read."""
    labelled = tuple(
        IndexFile(f"torch-{v}-cp311-cp311-manylinux_2_28_x86_64.whl", False)
        for v in (
            "2.15.0+cu132",
            "2.14.1+cu130",
            "2.14.0+cu130",
            "2.13.0+cu130",
            "2.12.1+cu130",
            "2.10.0+cu128",
        )
    )
    matrix = parse_matrix(
        {
            "build": [
                {"package": "wbdemo", "torch": ["cu130:newest-2..newest", "2.10.0+cu128"], "python": ["3.11"]}
            ]
        }
    )
    said: list[str] = []
    with patch.object(nightly, "read_torch_index", lambda url, **_: TorchIndex(url, labelled)):
        expanded = nightly.with_torch_releases(matrix, "https://torch.example/simple", said.append)
    assert [c.torch for c in expanded.cells] == [
        "2.12.1+cu130",
        "2.13.0+cu130",
        "2.14.1+cu130",
        "2.10.0+cu128",
    ]
    assert expanded.cells[0].id == "wbdemo-2.12.1-cu130-cp311-100.120"
    assert said == ["cu130:newest-2..newest: 2.12.1, 2.13.0, 2.14.1 on https://torch.example/simple"]
    too_many = parse_matrix({"build": [{"package": "wbdemo", "torch": ["cu130:newest-5..newest"]}]})
    with (
        patch.object(nightly, "read_torch_index", lambda url, **_: TorchIndex(url, labelled)),
        pytest.raises(BadVariant, match=r"has 3 torch minor\(s\) built with CUDA 13.0; .* needs 6"),
    ):
        nightly.with_torch_releases(too_many, "https://torch.example/simple", said.append)


def test_a_cell_whose_torch_the_recipe_cannot_compile_against_is_skipped_with_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    both = {
        "build": [{"package": "flash-attn", "torch": ["2.13.0+cu130", "2.14.1+cu130"], "python": ["3.12"]}]
    }
    good, skipped = _feasible(both)  # its -std=c++17 is raised to torch 2.14's C++20: no ceiling
    assert [c.torch for c in good] == ["2.13.0+cu130", "2.14.1+cu130"] and skipped == ()
    # A recipe that states a ceiling (a build under the raised standard was seen to fail):
    ceiling = TorchCeiling(first="2.14", last_good="2.13.0", why="its kernels fail under C++20")
    monkeypatch.setattr(
        nightly,
        "resolve_recipe",
        lambda *a, **kw: dataclasses.replace(resolve_recipe(*a, **kw), torch_ceiling=ceiling),
    )
    good, skipped = _feasible(both)
    assert [c.torch for c in good] == ["2.13.0+cu130"]
    assert [(s.cell.torch, s.why) for s in skipped] == [
        ("2.14.1+cu130", "flash-attn cannot be built for torch 2.14.1: its kernels fail under C++20")
    ]


def test_a_schedule_saved_as_plan_json_by_an_earlier_wheelbuild_is_still_read(tmp_path: Path) -> None:
    night = tmp_path / "night"
    _cell_dir(night, "wbdemo-cu130-cp311-100.120")
    earlier = {"skipped": [{"id": "wbdemo-cu130-cp315-100.120", "torch": "cu130", "why": "no cp315 wheel"}]}
    (night / nightly_publish.EARLIER_SCHEDULE_FILE).write_text(json.dumps(earlier))
    outcomes, schedule = nightly_publish.read_outcomes([night])
    assert schedule == earlier and [o.id for o in outcomes] == ["wbdemo-cu130-cp311-100.120"]


def test_nightly_plan_still_runs_the_schedule_with_a_deprecation_warning(tmp_path: Path) -> None:
    missing = tmp_path / "no-such.toml"
    for command in ("schedule", "plan"):
        done = CliRunner().invoke(main, ["nightly", command, "--config-file", str(missing)])
        assert done.exit_code != 0 and f"{missing} does not exist" in done.output
        assert ("deprecated" in done.output) is (command == "plan")
    assert "plan" not in CliRunner().invoke(main, ["nightly", "--help"]).output.split("Commands:")[1]
