"""wheelbuild.nightly.matrix: wheelbuild.toml's [[build]] tables into cells (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from wheelbuild.errors import BadArgument, BadVariant, WheelbuildError
from wheelbuild.nightly.matrix import Cell, github_matrix, load_matrix, parse_matrix, tracking

REPO = Path(__file__).resolve().parents[2]


def test_every_combination_of_a_tables_lists_is_a_cell() -> None:
    matrix = parse_matrix(
        {
            "build": [
                {"package": "flash-attn", "versions": ["2.8.3", "2.8.3.post2"], "torch": ["cu130", "cu128"],
                 "python": ["3.11", "cp312"], "archs": ["100,120"]},
                {"package": "./ext", "torch": "cu130", "python": ["3.11"]},
            ]
        }
    )  # fmt: skip
    assert len(matrix.cells) == 2 * 2 * 2 + 1
    assert matrix.cells[0] == Cell("flash-attn", "2.8.3", "cu130", "cp311", "100,120")
    assert matrix.cells[-1] == Cell("./ext", None, "cu130", "cp311", "100,120")  # archs default
    assert matrix.publish_to == "wheelhouse/{variant}"
    assert matrix.cells[0].id == "flash-attn-2.8.3-cu130-cp311-100.120"
    assert matrix.cells[0].build_args() == [
        "flash-attn", "--torch", "cu130", "--python", "cp311", "--archs", "100,120", "--version", "2.8.3"
    ]  # fmt: skip


def test_github_matrix_is_an_include_list_with_the_build_arguments() -> None:
    cells = parse_matrix(
        {"build": [{"package": "wbdemo", "torch": ["2.11.0+cu130"], "python": ["3.11", "3.13"]}]}
    ).cells
    include = json.loads(github_matrix(cells))["include"]
    assert [c["id"] for c in include] == [
        "wbdemo-2.11.0-cu130-cp311-100.120",
        "wbdemo-2.11.0-cu130-cp313-100.120",
    ]
    assert include[1]["args"] == "wbdemo --torch 2.11.0+cu130 --python cp313 --archs 100,120"


@pytest.mark.parametrize(
    ("config", "error", "says"),
    [
        ({}, BadArgument, "no [[build]] table"),
        ({"build": [{"torch": ["cu130"], "python": ["3.11"]}]}, BadArgument, "`package` is missing"),
        ({"build": [{"package": "x", "torch": [], "python": ["3.11"]}]}, BadArgument, "`torch` must be"),
        ({"build": [{"package": "x", "torch": ["cu999"], "python": ["3.11"]}]}, BadVariant, "cu999"),
        ({"build": [{"package": "x", "torch": ["cu130"], "python": ["2.7"]}]}, BadArgument, "2.7"),
        (
            {"build": [{"package": "x", "torch": ["cu130"], "python": ["3.11"], "pythons": []}]},
            BadArgument,
            "unknown key",
        ),
        (
            {"build": [{"package": "x", "torch": ["cu130", "cu130"], "python": ["3.11"]}]},
            BadArgument,
            "same cell twice",
        ),
    ],
)
def test_a_bad_matrix_fails_here_not_on_a_runner_at_night(
    config: dict, error: type[WheelbuildError], says: str
) -> None:
    with pytest.raises(error) as caught:
        parse_matrix(config)
    assert says in caught.value.cause


def test_the_repositorys_own_matrices_parse() -> None:
    nightly = load_matrix(REPO / "wheelbuild.toml")
    # No Python named: `wheelbuild nightly schedule` makes one cell per default Python of each.
    assert {c.torch for c in nightly.cells} == {"cu130", "cu128"} and len(nightly.cells) == 4
    assert {c.python for c in nightly.cells} == {None} and nightly.declared_to is None
    fixture = load_matrix(REPO / "tests" / "fixtures" / "nightly.toml")
    assert [c.id for c in fixture.cells] == ["wbdemo-cu130-100.120"]


def test_a_cell_without_python_builds_the_default_and_publish_declares_no_default_target() -> None:
    matrix = parse_matrix({"build": [{"package": "wbdemo", "torch": ["cu130"]}]})
    assert matrix.cells == (Cell("wbdemo", None, "cu130", None, "100,120"),)
    assert matrix.cells[0].build_args() == ["wbdemo", "--torch", "cu130", "--archs", "100,120"]
    assert matrix.declared_to is None and matrix.index is None
    assert matrix.publish_to == "wheelhouse/{variant}"  # `wheelbuild matrix --format publish-to` only
    declared = parse_matrix(
        {
            "build": [{"package": "wbdemo", "torch": ["cu130"]}],
            "publish": {"to": "h:/w/{variant}", "index": "u"},
        }
    )
    assert (declared.declared_to, declared.index) == ("h:/w/{variant}", "u")


def test_a_missing_or_broken_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BadArgument, match="does not exist"):
        load_matrix(tmp_path / "wheelbuild.toml")
    (tmp_path / "bad.toml").write_text("[[build]\n")
    with pytest.raises(BadArgument, match="not valid TOML"):
        load_matrix(tmp_path / "bad.toml")


def test_tracking_adds_the_newest_release_where_versions_are_listed() -> None:
    matrix = parse_matrix(
        {"build": [
            {"package": "flash-attn", "versions": ["2.8.3"], "torch": ["cu130"], "python": ["3.11", "3.12"]},
            {"package": "./ext", "torch": ["cu130"], "python": ["3.11"]},
        ]}
    )  # fmt: skip
    tracked = tracking(matrix, {"flash-attn": "2.9.0", "./ext": "1.0"})
    added = tracked.cells[len(matrix.cells) :]
    assert [(c.version, c.python) for c in added] == [("2.9.0", "cp311"), ("2.9.0", "cp312")]
    assert tracking(tracked, {"flash-attn": "2.9.0"}) == tracked  # already there: nothing new


def test_tracking_adds_a_newer_torch_for_each_cuda_tag() -> None:
    matrix = parse_matrix({"build": [{"package": "wbdemo", "torch": ["cu130", "cu128"], "python": ["3.11"]}]})
    tracked = tracking(matrix, {}, {"cu130": "2.16.0+cu130", "cu128": "2.9.1+cu128"})  # cu128's is older
    added = tracked.cells[len(matrix.cells) :]
    assert [c.torch for c in added] == ["2.16.0+cu130"]


@pytest.mark.parametrize("kind", ["directory", "binary", "device"])
def test_a_config_that_is_not_a_toml_file_is_a_bad_argument(tmp_path: Path, kind: str) -> None:
    from wheelbuild.errors import BadArgument
    from wheelbuild.nightly.matrix import load_matrix

    path = {"directory": tmp_path, "device": Path("/dev/zero")}.get(kind, tmp_path / "blob")
    if kind == "binary":
        path.write_bytes(b"\xff\xfe\x00" * 100)
    with pytest.raises(BadArgument):
        load_matrix(path)


def test_torch_entries_may_be_rules_read_at_plan_time_and_bad_ones_fail_at_parse() -> None:
    matrix = parse_matrix(
        {
            "build": [
                {"package": "wbdemo", "torch": ["cu130:newest-3..newest", "cu128:newest", "2.14.1+cu130"]}
            ]
        }
    )
    assert [c.torch for c in matrix.cells] == ["cu130:newest-3..newest", "cu128:newest", "2.14.1+cu130"]
    for bad, said in (
        ("cu130:latest", "is not understood"),
        ("cu999:newest", "which wheelbuild does not support"),
        ("cu130:newest..newest-2", "runs from a newer minor to an older one"),
    ):
        with pytest.raises(BadVariant, match=said):
            parse_matrix({"build": [{"package": "wbdemo", "torch": [bad]}]})


def test_a_table_can_turn_the_torch_range_off_but_not_under_pin_proven() -> None:
    off = parse_matrix({"build": [{"package": "wbdemo", "torch": ["2.14.1+cu130"], "torch-range": False}]})
    assert off.cells[0].build_args()[-1] == "--no-torch-range"
    for bad in ({"torch-range": "no"}, {"torch-range": False, "pin": "proven"}):
        with pytest.raises(BadArgument, match="torch-range"):
            parse_matrix({"build": [{"package": "wbdemo", "torch": ["cu130"], **bad}]})
