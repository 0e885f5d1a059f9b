"""One row of spec/option_table.py is one option everywhere. Proved by adding a row: a command
made from build's table plus one row takes it on the command line (and by its old name), from
its WHEELBUILD_* variable and from [tool.wheelbuild], ranks them as build does, shows it in
--help and in plan's sources, and the docs' reference lists it; nothing but the row is written
for it. The command only prints what it received: no Docker, no network. Real files in a
temporary current directory."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from wheelbuild.cli.options import ConfiguredCommand, ImageFlags, WheelbuildGroup, provenance, table_flags
from wheelbuild.errors import ConfigKeyUnknown, ConfigValueInvalid, OutOfRange
from wheelbuild.spec import config, option_table
from wheelbuild.spec.option_table import Kind, Option, ReferenceRow, reference

KNOB = Option(
    key="knob-count",
    param="knob_count",
    kind=Kind.INT,
    example="4",
    help="How many knobs the build turns.",
    default=2,
    bounds=(1, 9),
    old_names=("knobs",),
)
TABLE = (*option_table.OPTIONS, KNOB)

Invoke = Callable[..., Result]


@click.group(cls=WheelbuildGroup)
def cli() -> None:
    """A group as main is, so that an error is shown with its exit code as main shows it."""


@cli.command(cls=ConfiguredCommand, option_table=TABLE)
@table_flags(TABLE)
def knobbed(package: str, image_flags: ImageFlags, config_file: Path | None, **given: object) -> None:
    click.echo(f"knob_count={given['knob_count']!r}")
    for line in provenance():
        click.echo(line)


@pytest.fixture
def invoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Invoke]:
    """`knobbed --example ARGS` in a temporary current directory, without WHEELBUILD_* settings."""
    for name in list(os.environ):
        if name.startswith("WHEELBUILD_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)

    def run(*args: str, **env: str) -> Result:
        return CliRunner().invoke(cli, ["knobbed", "--example", *args], env=env, catch_exceptions=False)

    yield run


def _source(output: str, key: str) -> str:
    """plan's sources line for `key`, spaces collapsed."""
    lines = [line.split() for line in output.splitlines() if line.startswith("  ")]
    return " ".join(next(words[1:] for words in lines if words[0] == key))


def _file(text: str) -> None:
    Path("wheelbuild.toml").write_text(f"[tool.wheelbuild]\n{text}\n")


def test_a_new_row_is_an_option_with_its_help_variable_and_default(invoke: Invoke) -> None:
    shown = invoke("--help").stdout
    assert "--knob-count INTEGER RANGE" in shown
    assert "How many knobs the build turns." in shown
    assert "WHEELBUILD_KNOB_COUNT" in shown
    assert "--knobs" not in shown  # an old name is taken, never shown
    result = invoke()
    assert result.exit_code == 0, result.output
    assert "knob_count=2" in result.stdout
    assert _source(result.stdout, "knob-count") == "2 (default)"


def test_a_new_row_ranks_command_line_then_variable_then_file_then_default(invoke: Invoke) -> None:
    _file("knob-count = 5")
    from_file = invoke()
    assert "knob_count=5" in from_file.stdout
    assert _source(from_file.stdout, "knob-count") == "5 from wheelbuild.toml"
    from_env = invoke(WHEELBUILD_KNOB_COUNT="7")
    assert "knob_count=7" in from_env.stdout
    assert _source(from_env.stdout, "knob-count") == "7 from WHEELBUILD_KNOB_COUNT"
    from_line = invoke("--knob-count", "9", WHEELBUILD_KNOB_COUNT="7")
    assert "knob_count=9" in from_line.stdout
    assert _source(from_line.stdout, "knob-count") == "9 from --knob-count"
    assert "knob_count=3" in invoke("--knobs", "3").stdout
    # the rows build had are read as before beside it
    assert _source(invoke(WHEELBUILD_MAX_JOBS="4").stdout, "max-jobs") == "4 from WHEELBUILD_MAX_JOBS"


def test_a_new_rows_bad_values_are_refused_by_the_file_and_the_command_line(invoke: Invoke) -> None:
    _file('knob-count = "many"')
    bad_kind = invoke()
    assert bad_kind.exit_code == ConfigValueInvalid.exit_code
    assert "wheelbuild.toml: [tool.wheelbuild] knob-count must be an integer" in bad_kind.stderr
    assert "write e.g. knob-count = 4" in bad_kind.stderr
    _file("knob-cuont = 3")
    typo = invoke()
    assert typo.exit_code == ConfigKeyUnknown.exit_code
    assert "did you mean 'knob-count'? e.g. knob-count = 4" in typo.stderr
    Path("wheelbuild.toml").unlink()
    out_of_range = invoke("--knob-count", "10")
    assert out_of_range.exit_code == OutOfRange.exit_code  # as for --max-jobs 0 and --cpus 0
    assert "error: --knob-count 10 is not from 1 to 9" in out_of_range.stderr


def test_build_itself_does_not_take_the_row_the_test_added(tmp_path: Path) -> None:
    (tmp_path / "wheelbuild.toml").write_text("[tool.wheelbuild]\nknob-count = 5\n")
    with pytest.raises(ConfigKeyUnknown):
        config.load_config(None, None, cwd=tmp_path)
    assert config.load_config(None, None, cwd=tmp_path, options=TABLE).values == {
        "knob-count": (5, "wheelbuild.toml")
    }


def test_the_reference_has_a_row_per_option_with_its_names_kind_and_default() -> None:
    assert reference(TABLE)[-1] == ReferenceRow(
        option="--knob-count",
        config_key="knob-count",
        variable="WHEELBUILD_KNOB_COUNT",
        kind="an integer",
        default="2",
        help="How many knobs the build turns.",
    )
    rows = {row.config_key: row for row in reference()}
    assert list(rows) == [o.key for o in option_table.OPTIONS]
    assert rows["gate"].option == "--gate/--no-gate"
    assert (rows["gate"].default, rows["gate"].kind) == ("true", "true or false")
    assert (rows["verbose"].option, rows["verbose"].default) == ("-v/-q --verbose/--quiet", "false")
    assert (rows["rebuild"].option, rows["rebuild"].default) == ("--rebuild", "false")
    assert rows["gpus"].kind == "a string: one of auto, all, none"
    assert (rows["gpus"].default, rows["output-dir"].default) == ("auto", "wheelhouse")
    assert rows["python"].default == "every one in the image"  # no default: what none means
    assert rows["max-jobs"].variable == "WHEELBUILD_MAX_JOBS"
    assert rows["archs"].help.startswith("CUDA SM archs to compile SASS for")
