"""Errors a person can act on, through the installed `wheelbuild` (run_cli: Docker unreachable, so
a command that got as far as Docker would exit 20): a torch index URL without its scheme, one that
answers 404 (a real HTTP server on 127.0.0.1), one that cannot be reached at all, a mistyped CUDA
tag, and options that take a list."""

from __future__ import annotations

import functools
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from wheelbuild.cli.params import split_list
from wheelbuild.errors import BadUrl, BadVariant, DockerUnavailable, SourceUnavailable, TorchIndexUnreachable

RunCli = Callable[..., subprocess.CompletedProcess[str]]
UNREACHABLE = "http://127.0.0.1:9/simple"  # the discard port: nothing listens, the connection is refused


def _error_and_remedy(result: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.stderr, result.stderr
    return lines[-2], lines[-1]


@pytest.mark.parametrize("command", ["plan", "doctor"])
@pytest.mark.parametrize("given", ["option", "variable"])
def test_a_torch_index_url_without_its_scheme_is_one_line_that_says_add_https(
    run_cli: RunCli, command: str, given: str
) -> None:
    args = (command, "wbdemo") if command == "plan" else (command,)
    if given == "option":
        result = run_cli(*args, "--torch-index-url", "pypi.org/simple")
    else:
        result = run_cli(*args, prefix=("env", "WHEELBUILD_TORCH_INDEX_URL=pypi.org/simple"))
    assert result.returncode == BadUrl.exit_code == 32, result.stderr
    error, remedy = _error_and_remedy(result)
    assert error == (
        "error: the torch index URL 'pypi.org/simple' is not one a request can go to: "
        "its scheme is missing, not http: or https:"
    )
    assert remedy.startswith("remedy: add https:// (--torch-index-url https://pypi.org/simple)")
    assert len(result.stderr.splitlines()) == 2  # nothing before it: no thread's traceback


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def index_of_nothing(tmp_path: Path) -> Iterator[str]:
    """A real HTTP server over an empty folder: every page answers 404."""
    empty = tmp_path / "empty"
    empty.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(empty)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simpel"
    server.shutdown()
    thread.join(timeout=10)


@pytest.mark.parametrize("pythons", [(), ("--python", "3.12")])
def test_a_torch_index_that_answers_404_is_said_to_with_its_url(
    run_cli: RunCli, index_of_nothing: str, pythons: tuple[str, ...]
) -> None:
    result = run_cli("build", "wbdemo", "--torch-index-url", index_of_nothing, *pythons)
    assert result.returncode == TorchIndexUnreachable.exit_code, result.stderr
    error, remedy = _error_and_remedy(result)
    assert error == (
        f"error: the torch index answered 404 (not found) for {index_of_nothing}/torch/: no torch project there"
    )
    assert "has no torch release built with CUDA" not in result.stderr
    assert remedy.startswith("remedy: check --torch-index-url (WHEELBUILD_TORCH_INDEX_URL) for a typo")


def test_build_refuses_an_unreadable_torch_index_before_docker_with_the_line_plan_warns_with(
    run_cli: RunCli,
) -> None:
    """With --python given, plan may plan without the index (it says so); build may not: its
    image's pip would fail on the same index after the setup was spent. It stops before Docker
    (which run_cli makes unreachable: reaching it would exit 20)."""
    planned = run_cli("plan", "wbdemo", "--python", "3.12", "--torch-index-url", UNREACHABLE)
    assert planned.returncode == 0, planned.stderr
    warned = next(line for line in planned.stderr.splitlines() if line.startswith("warning: "))
    cause = warned.removeprefix("warning: ").split("; planned for the Pythons named")[0]
    assert cause.startswith(
        "could not read torch's page on the torch index, http://127.0.0.1:9/simple/torch/"
    )
    assert "build refuses until the index can be read" in warned

    built = run_cli("build", "wbdemo", "--python", "3.12", "--torch-index-url", UNREACHABLE)
    assert built.returncode == TorchIndexUnreachable.exit_code != DockerUnavailable.exit_code, built.stderr
    error, remedy = _error_and_remedy(built)
    assert error == f"error: {cause}"
    assert remedy.startswith("remedy: check the network")
    assert "image" not in built.stdout  # no image stage began


@pytest.mark.parametrize(
    ("tag", "meant"),
    [("cu1300", "cu130 or cu132"), ("cu13", "cu130 or cu132"), ("2.14.1+cu13", "cu130 or cu132")],
)
def test_a_mistyped_cuda_tag_names_the_nearest_tags(run_cli: RunCli, tag: str, meant: str) -> None:
    result = run_cli("plan", "wbdemo", "--torch", tag)
    assert result.returncode == BadVariant.exit_code, result.stderr
    _error, remedy = _error_and_remedy(result)
    assert remedy.startswith(f"remedy: did you mean {meant}? ")


def test_a_misspelled_choice_names_the_nearest_one(run_cli: RunCli) -> None:
    result = run_cli("plan", "wbdemo", "--gpus", "nnone")
    assert result.returncode == 2, result.stderr
    error, remedy = _error_and_remedy(result)
    assert error.startswith("error: ") and error.endswith("(did you mean none?)")
    assert remedy == "remedy: see `wheelbuild plan --help` for what it takes"


def test_a_list_option_takes_commas_and_repeats_alike() -> None:
    """split_list, the callback of calibrate's --unit (the one list option that took repeats only)."""

    @click.command()
    @click.option("--unit", multiple=True, callback=split_list)
    def units(unit: tuple[str, ...]) -> None:
        click.echo(" ".join(unit))

    both = CliRunner().invoke(units, ["--unit", "a.cu,b.cu", "--unit", "c.cu"])
    assert both.output.strip() == "a.cu b.cu c.cu"
    assert CliRunner().invoke(units, ["--unit", "a.cu", "--unit", "b.cu,"]).output.strip() == "a.cu b.cu"


def test_calibrate_unit_takes_a_comma_list_in_its_help(run_cli: RunCli) -> None:
    shown = " ".join(run_cli("calibrate", "--help").stdout.split())
    assert "or several separated by commas" in shown


def test_a_misspelled_recipe_is_named_even_when_the_package_index_cannot_be_reached(run_cli: RunCli) -> None:
    """flash-atn is looked up on the package index as pip would; that index unreachable, the
    remedy still names the recipe it is near."""
    result = run_cli("plan", "flash-atn", prefix=("env", f"WHEELBUILD_SIMPLE_INDEX={UNREACHABLE}"))
    assert result.returncode == SourceUnavailable.exit_code, result.stderr
    error, remedy = _error_and_remedy(result)
    assert error.startswith(f"error: could not look up flash-atn at {UNREACHABLE}/flash-atn/: ")
    assert remedy.startswith("remedy: did you mean flash-attn? check the network")


def test_a_misspelled_choice_in_a_config_file_names_the_nearest_one(run_cli: RunCli, tmp_path: Path) -> None:
    config = tmp_path / "wb.toml"
    config.write_text('[tool.wheelbuild]\ngpus = "nnone"\n')
    result = run_cli("plan", "wbdemo", "--config-file", str(config))
    assert result.returncode == 18, result.stderr
    error, remedy = _error_and_remedy(result)
    assert error.endswith("gpus is 'nnone', not one of auto, all, none")
    assert remedy == 'remedy: did you mean gpus = "none"?'
