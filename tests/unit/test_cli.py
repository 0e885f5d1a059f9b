"""The installed `wheelbuild` command, run for real: exit codes and the error/remedy lines.

Docker is unreachable (DOCKER_HOST points at a socket that does not exist), so an input error
that were checked only after connecting would come out as DockerUnavailable (20) instead.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from wheelbuild.errors import OutOfRange
from wheelbuild.recipes import EXAMPLE_DIR

RunCli = Callable[..., subprocess.CompletedProcess[str]]


def _error_and_remedy(result: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    error, remedy = lines
    assert error.startswith("error: ")
    assert remedy.startswith("remedy: ")
    assert len(error) > len("error: ") and len(remedy) > len("remedy: ")
    return error, remedy


def test_control_a_valid_build_reaches_docker_and_fails_with_20(run_cli: RunCli) -> None:
    result = run_cli("build", "wbdemo", "--memory", "6g")
    assert result.returncode == 20, result.stderr
    error, _ = _error_and_remedy(result)
    assert error == "error: no Docker daemon answers at unix:///nonexistent.sock"


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (("build", "foo bar!"), 10, "error: unknown package 'foo bar!': not a known recipe, no such path"),
        (
            ("build", "wbdemo", "--torch", "cu999"),
            11,
            "error: torch variant 'cu999' names CUDA tag 'cu999', which wheelbuild",
        ),
        (("build", "wbdemo", "--torch", "rocm6.2"), 11, "error: torch variant 'rocm6.2' is not understood"),
        (("build", "wbdemo", "--memory", "6x"), 12, "error: memory size '6x' is not understood"),
        (("build", "wbdemo", "--memory", "100m"), 12, "error: memory size '100m' is below the 256 MiB"),
        (("build", "wbdemo", "--archs", "abc"), 38, "error: CUDA arch list 'abc' is not understood"),
        (("build", "wbdemo", "--python", "2.7"), 36, "error: Python version '2.7' is not understood"),
        (
            ("build", "flash-attn", "--version", "not-a-version"),
            37,
            "error: flash-attn version 'not-a-version' is not a version",
        ),
        (
            ("build", "wbdemo", "--ca-bundle", "/nonexistent"),
            14,
            "error: CA bundle /nonexistent does not exist",
        ),
        (("flash-attn", "--torch", "cu999"), 11, "error: torch variant 'cu999' names CUDA tag"),
    ],
    ids=[
        "unknown-package",
        "bad-variant-tag",
        "bad-variant-syntax",
        "bad-memory",
        "memory-too-small",
        "bad-archs",
        "bad-python",
        "bad-recipe-version",
        "missing-ca-bundle",
        "shortcut-bad-variant",
    ],
)
def test_bad_input_fails_with_its_own_code_before_docker_is_touched(
    run_cli: RunCli, args: tuple[str, ...], code: int, error: str
) -> None:
    result = run_cli(*args)
    assert result.returncode == code, result.stderr
    line, _ = _error_and_remedy(result)
    assert line.startswith(error)
    assert "Docker" not in result.stderr
    assert result.stdout == ""  # the build never started: no progress line was printed


def test_recipe_name_is_a_shortcut_for_build_in_help(run_cli: RunCli) -> None:
    result = run_cli("flash-attn", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: wheelbuild build [OPTIONS] [PACKAGE]")
    assert "--torch" in result.stdout
    assert result.stderr == ""


def test_top_level_help_lists_build_and_image(run_cli: RunCli) -> None:
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    commands = result.stdout.split("Commands:", 1)[1].split()
    assert "build" in commands
    assert "image" in commands
    assert result.stdout.startswith("Usage: wheelbuild [OPTIONS] COMMAND [ARGS]...")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("build", "--no-such-option"), "No such option '--no-such-option'"),
        (("plan", "wbdemo", "--max-jobs", "x"), "Invalid value for '--max-jobs'"),
        (("plan", "wbdemo", "--pin", "bilt"), "'bilt' is not one of 'built', 'proven' (did you mean built?)"),
        (("report",), "Missing argument 'RUN'"),
    ],
)
def test_a_usage_error_is_said_as_every_error_is_with_code_2(
    run_cli: RunCli, argv: tuple[str, ...], says: str
) -> None:
    """click's usage errors in wheelbuild's one style: a cause, a remedy, exit 2 (a command line
    it cannot parse), no Usage block."""
    result = run_cli(*argv)
    assert result.returncode == 2
    cause, remedy = result.stderr.splitlines()
    assert cause.startswith("error: ") and says in cause, cause
    assert remedy == f"remedy: see `wheelbuild {argv[0]} --help` for what it takes"


@pytest.mark.parametrize(
    ("argv", "cause"),
    [
        (("plan", "wbdemo", "--max-jobs", "0"), "error: --max-jobs 0 is not from 1 to 8192"),
        (("plan", "wbdemo", "--nvcc-threads", "0"), "error: --nvcc-threads 0 is not from 1 to 8192"),
        (("plan", "wbdemo", "--cpus", "0"), "error: --cpus 0 is not a number of CPUs"),
        (("serve", ".", "--port", "70000"), "error: --port 70000 is not from 0 to 65535"),
        (("gc", "--keep-runs", "-1"), "error: --keep-runs -1 is less than 0"),
    ],
)
def test_a_number_out_of_its_range_is_one_error_with_one_code_for_every_option(
    run_cli: RunCli, argv: tuple[str, ...], cause: str
) -> None:
    """--max-jobs 0 (click's range) and --cpus 0 (wheelbuild's own check) answer alike: a cause,
    a remedy, OutOfRange's code; never click's Usage block."""
    result = run_cli(*argv)
    assert result.returncode == OutOfRange.exit_code == 35, result.stderr
    said, remedy = result.stderr.splitlines()
    assert said == cause
    assert remedy.startswith("remedy: give ")


def test_no_argument_mistake_exits_with_the_catch_all_code_13(run_cli: RunCli, tmp_path: Path) -> None:
    """The mistakes that shared exit 13 each have their own code now."""
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("[tool.wheelbuild\n")
    cases = {
        ("plan", "wbdemo", "--torch-index-url", "pypi.org/simple"): 32,
        ("plan", "wbdemo", "--config-file", str(bad_toml)): 33,
        ("plan", "wbdemo", "--env", "FOO"): 34,
        ("plan", "wbdemo", "--cpus", "0"): 35,
        ("plan", "wbdemo", "--python", "3.11,,3.12"): 36,
        ("plan", "flash-attn", "--version", "not-a-version"): 37,
        ("plan", "wbdemo", "--archs", "9x"): 38,
        ("plan", "flash-attn", "--example"): 39,
        ("build", "https://example.com/x.tar.gz"): 32,
    }
    for argv, code in cases.items():
        result = run_cli(*argv)
        assert result.returncode == code, (argv, result.stderr)
        assert [line.split(":")[0] for line in result.stderr.splitlines()[-2:]] == ["error", "remedy"]


# --- wheelbuild plan: the planner's properties, seen through the real command ----------------


# --- no PACKAGE: the project in this folder, as cibuildwheel and uv build take it ------------


def test_plan_and_build_without_package_take_the_project_in_the_folder(
    run_cli: RunCli, tmp_path: Path
) -> None:
    shutil.copytree(EXAMPLE_DIR, tmp_path, dirs_exist_ok=True)  # a setup.py and a pyproject.toml
    planned = run_cli("plan", "--memory", "8g", "--cpus", "2")
    assert planned.returncode == 0, planned.stderr
    # named as its setup.py names it, not for the folder
    assert planned.stdout.startswith("plan for wbdemo 0.1.0\n"), planned.stdout[:200]
    built = run_cli("build", "--memory", "6g")
    assert built.returncode == 20, built.stderr  # as far as Docker: the folder was a package
    (tmp_path / "pyproject.toml").unlink()  # setup.py alone makes a project too
    assert run_cli("plan", "--memory", "8g").stdout.startswith("plan for wbdemo 0.1.0\n")


@pytest.mark.parametrize("command", ["plan", "build"])
def test_without_package_or_project_says_how_to_build_one_and_the_example(
    run_cli: RunCli, tmp_path: Path, command: str
) -> None:
    seeded = sorted(tmp_path.rglob("*"))  # run_cli's fake torch pages in its cache
    result = run_cli(command, "--memory", "6g")
    assert result.returncode == 39, result.stderr
    error, remedy = _error_and_remedy(result)
    assert (
        error == f"error: no PACKAGE given, and {tmp_path} holds no project (no pyproject.toml or setup.py)"
    )
    assert remedy.startswith("remedy: run it in a project's folder, or name one")
    assert remedy.endswith("add --example to build the bundled example, wbdemo")
    assert result.stdout == ""
    assert sorted(tmp_path.rglob("*")) == seeded  # nothing written (the cache neither)


def test_example_builds_the_bundled_example(run_cli: RunCli) -> None:
    planned = run_cli("plan", "--example", "--memory", "8g", "--cpus", "2")
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.startswith("plan for wbdemo ")
    assert run_cli("build", "--example", "--memory", "6g").returncode == 20  # as far as Docker
    both = run_cli("build", "flash-attn", "--example")
    assert both.returncode == 39 and "give PACKAGE or --example, not both" in both.stderr


# --- options that take a list: repeated, the values add up ----------------------------------


def _archs_row(stdout: str) -> str:
    """The archs row of plan's options table: its value and where it came from."""
    table = stdout.split("\noptions (", 1)[1]
    return next(line for line in table.splitlines() if line.strip().startswith("archs  ")).split(None, 1)[1]


def test_archs_given_twice_add_up_in_plan_and_build(run_cli: RunCli) -> None:
    planned = run_cli("plan", "wbdemo", "--archs", "100", "--archs", "120", "--memory", "8g", "-v")
    assert planned.returncode == 0, planned.stderr
    assert re.match(r"100,120\s+from --archs$", _archs_row(planned.stdout)), planned.stdout
    # build reads the same list: the second --archs is checked beside the first, not instead of it
    built = run_cli("build", "wbdemo", "--archs", "120", "--archs", "1x0")
    assert built.returncode == 38, built.stderr
    assert "error: CUDA arch list '120,1x0' is not understood" in built.stderr


def test_the_archs_variable_takes_several_lists_separated_by_spaces(run_cli: RunCli) -> None:
    done = run_cli("plan", "wbdemo", "--memory", "8g", "-v", prefix=("env", "WHEELBUILD_ARCHS=100 120"))
    assert done.returncode == 0, done.stderr
    assert re.match(r"100,120\s+from WHEELBUILD_ARCHS$", _archs_row(done.stdout)), done.stdout


def test_the_rule_for_list_options_is_in_help(run_cli: RunCli) -> None:
    top = run_cli("--help").stdout
    assert "Options that take a list may be repeated: the values add up" in " ".join(top.split())
    build = " ".join(run_cli("build", "--help").stdout.split())
    for option in ("--archs", "--python", "--env"):
        described = build.split(f"{option} ", 1)[1].split("[env var", 1)[0]
        assert "repeatable, the lists add up" in described, option


def test_python_takes_a_comma_list_as_archs_does(run_cli: RunCli) -> None:
    result = run_cli("plan", "wbdemo", "--python", "3.11,3.13", "--python", "3.11")
    assert result.returncode == 0, result.stderr
    assert "with cp311, cp313 wheels" in result.stdout  # the torch chosen for both, 3.11 once
    refused = run_cli("plan", "wbdemo", "--python", "3.11,")
    assert refused.returncode == 36 and "--python '3.11,' has an empty entry" in refused.stderr


def test_a_memory_size_without_a_unit_asks_whether_gibibytes_were_meant(run_cli: RunCli) -> None:
    result = run_cli("plan", "wbdemo", "--memory", "64")
    assert result.returncode == 12, result.stderr
    assert "(a number without a unit is bytes)" in result.stderr
    assert "remedy: did you mean 64g? " in result.stderr
