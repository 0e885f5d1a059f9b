"""`wheelbuild plan` and `build` read options from the command line, WHEELBUILD_* variables,
[tool.wheelbuild] and defaults, in that order, and plan prints where each value came from. Run
from a temporary directory with real pyproject.toml and wheelbuild.toml files; no Docker."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request
from pathlib import Path

import click
import pytest
from wheelbuild.cli.main import main
from wheelbuild.cli.params import GIVEN_PATH, GIVEN_TEXT, BoundedInt, NearChoice
from wheelbuild.spec import config, option_table
from wheelbuild.spec.option_table import LIST_KINDS

from tests.clikit import WHEELBUILD, Invoke

# build and plan read torch's index before Docker: from the cache, as seeded.
pytestmark = pytest.mark.usefixtures("fake_torch_index")


def _sources(output: str) -> dict[str, str]:
    """The provenance table: key -> the rest of its line, spaces collapsed."""
    lines = output.split("options (", 1)[1].splitlines()[1:]
    return {line.split()[0]: " ".join(line.split()[1:]) for line in lines if line.startswith("  ")}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_plan_shows_each_value_and_its_source_from_the_real_command(here: Path) -> None:
    _write(
        here / "ext" / "pyproject.toml",
        '[project]\nname = "ext"\nversion = "0.1"\n\n[tool.wheelbuild]\npython = "3.12"\ncpus = 4\narchs = [100]\n',
    )
    _write(here / "wheelbuild.toml", '[tool.wheelbuild]\narchs = "100,120"\nmax-jobs = 2\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHEELBUILD_")}
    env |= {"WHEELBUILD_MEMORY": "64g", "WHEELBUILD_GATE": "0", "WHEELBUILD_CACHE_DIR": str(here / "cache")}
    result = subprocess.run(
        [str(WHEELBUILD), "plan", "./ext", "--nvcc-threads", "1", "-v"],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "options (command line > WHEELBUILD_* > file > default; files: ext/pyproject.toml, wheelbuild.toml):"
        in (result.stdout)
    )
    sources = _sources(result.stdout)
    assert sources["memory"] == "64g from WHEELBUILD_MEMORY"
    assert sources["archs"] == "100,120 from wheelbuild.toml"  # wheelbuild.toml over the project's 100
    assert sources["max-jobs"] == "2 from wheelbuild.toml"
    assert sources["python"] == "3.12 from ext/pyproject.toml"
    assert sources["cpus"] == "4 from ext/pyproject.toml"
    assert sources["nvcc-threads"] == "1 from --nvcc-threads"
    assert sources["gate"] == "false from WHEELBUILD_GATE"
    assert sources["torch"] == "cu130 (default)"
    assert sources["gpus"] == "auto (default)"
    assert set(sources) == {o.key for o in option_table.OPTIONS}
    # ... and the plan itself used them
    assert "memory limit    64.0 GiB" in result.stdout
    assert "CPUs            4\n" in result.stdout
    assert "MAX_JOBS        2\n" in result.stdout


@pytest.mark.parametrize(
    ("args", "env", "file", "expected"),
    [
        (["--memory", "8g"], {"WHEELBUILD_MEMORY": "16g"}, True, "8g from --memory"),
        ([], {"WHEELBUILD_MEMORY": "16g"}, True, "16g from WHEELBUILD_MEMORY"),
        ([], {}, True, "32g from wheelbuild.toml"),
        ([], {}, False, "this machine's, less a reserve (default)"),
    ],
    ids=["cli-over-env", "env-over-file", "file-over-default", "default"],
)
def test_command_line_beats_env_beats_file_beats_default(
    here: Path, invoke: Invoke, args: list[str], env: dict[str, str], file: bool, expected: str
) -> None:
    if file:
        _write(here / "wheelbuild.toml", '[tool.wheelbuild]\nmemory = "32g"\n')
    result = invoke("plan", "--example", "-v", *args, **env)
    assert result.exit_code == 0, result.output
    assert _sources(result.stdout)["memory"] == expected


def test_config_file_and_its_variable_replace_the_current_directorys_file(here: Path, invoke: Invoke) -> None:
    _write(here / "wheelbuild.toml", '[tool.wheelbuild]\nmemory = "32g"\n')
    _write(here / "site" / "build.toml", '[tool.wheelbuild]\nmemory = "24g"\n')
    by_option = invoke("plan", "--example", "-v", "--config-file", "site/build.toml")
    assert _sources(by_option.stdout)["memory"] == "24g from site/build.toml"
    by_env = invoke("plan", "--example", "-v", WHEELBUILD_CONFIG_FILE="site/build.toml")
    assert _sources(by_env.stdout)["memory"] == "24g from site/build.toml"


def test_bool_and_list_options_come_from_env_and_file(here: Path, invoke: Invoke) -> None:
    _write(here / "wheelbuild.toml", '[tool.wheelbuild]\nadmission = true\nenv = { A = "1" }\n')
    result = invoke("plan", "--example", "-v", WHEELBUILD_PYTHON="3.11 3.12", WHEELBUILD_REBUILD="true")
    sources = _sources(result.stdout)
    assert sources["python"] == "3.11 3.12 from WHEELBUILD_PYTHON"
    assert sources["rebuild"] == "true from WHEELBUILD_REBUILD"
    assert sources["admission"] == "true from wheelbuild.toml"
    assert sources["env"] == "A (values not shown) from wheelbuild.toml"


def test_an_options_old_name_still_reads_and_with_its_new_one_is_refused(here: Path, invoke: Invoke) -> None:
    _write(here / "wheelbuild.toml", "[tool.wheelbuild]\ncicc-gate = false\n")
    result = invoke("plan", "--example", "-v")
    assert _sources(result.stdout)["cicc-admission"] == "false from wheelbuild.toml", result.output
    assert "(--no-cicc-admission)" in result.stdout
    _write(here / "wheelbuild.toml", "[tool.wheelbuild]\ncicc-gate = false\ncicc-admission = true\n")
    both = invoke("plan", "--example", "-v")
    assert both.exit_code == 18, both.output
    assert both.stderr.splitlines()[0] == (
        "error: wheelbuild.toml: [tool.wheelbuild] sets cicc-admission twice (cicc-gate is its old name)"
    )


def test_an_unknown_key_stops_plan_and_build_with_17_naming_the_nearest(here: Path, invoke: Invoke) -> None:
    _write(here / "wheelbuild.toml", '[tool.wheelbuild]\nmemroy = "64g"\n')
    for args in (["plan"], ["build"], ["flash-attn"]):
        result = invoke(*args)
        assert result.exit_code == 17, result.output
        assert result.stderr.splitlines() == [
            "error: wheelbuild.toml: [tool.wheelbuild] has no key 'memroy'",
            "remedy: did you mean 'memory'? e.g. memory = \"64g\"",
        ]
        assert result.stdout == ""


def test_a_wrong_type_stops_the_build_with_18_before_docker(here: Path, invoke: Invoke) -> None:
    _write(here / "ext" / "pyproject.toml", '[tool.wheelbuild]\nmax-jobs = "8"\n')
    result = invoke("build", "ext")
    assert result.exit_code == 18, result.output
    assert result.stderr.splitlines() == [
        f"error: {Path('ext') / 'pyproject.toml'}: [tool.wheelbuild] max-jobs must be an integer, not '8'",
        "remedy: write e.g. max-jobs = 8",
    ]


def test_a_good_file_takes_the_build_as_far_as_docker(here: Path, invoke: Invoke) -> None:
    _write(here / "wheelbuild.toml", '[tool.wheelbuild]\nmemory = "6g"\narchs = [120]\n')
    result = invoke("build", "--example")
    assert result.exit_code == 20, result.output  # DockerUnavailable: every option was accepted
    assert "options from files: memory, archs from wheelbuild.toml" in result.stdout


def test_help_works_beside_a_broken_file(here: Path, invoke: Invoke) -> None:
    _write(here / "wheelbuild.toml", "[tool.wheelbuild]\nmemroy = 1\n")
    result = invoke("plan", "--help")
    assert result.exit_code == 0
    assert "WHEELBUILD_MEMORY" in result.stdout and "--config-file" in result.stdout


def _expected_type(row: config.Option) -> tuple[type[click.ParamType], dict[str, object]]:
    """The click type a row's kind and settings ask for, and what that type must carry."""
    if row.choices:
        return NearChoice, {"choices": row.choices}  # a click.Choice that names the nearest
    if row.kind is config.Kind.INT:
        assert row.bounds is not None, row.key  # every integer option here has a range
        return BoundedInt, {"min": row.bounds[0], "max": row.bounds[1]}  # an IntRange: OutOfRange
    if row.kind is config.Kind.NUMBER:
        return click.types.FloatParamType, {}
    if row.kind is config.Kind.PATH:
        return type(GIVEN_PATH), {}
    if row.kind is config.Kind.BOOL:
        return click.types.BoolParamType, {}
    return type(GIVEN_TEXT) if row.refuse_empty else click.types.StringParamType, {}


@pytest.mark.parametrize("name", ["build", "plan"])
def test_the_click_options_of_build_and_plan_are_exactly_the_option_tables_rows(name: str) -> None:
    command = main.commands[name]
    options = [p for p in command.params if isinstance(p, click.Option)]
    params = {o.param for o in option_table.OPTIONS}
    # the table's rows in the table's order, and besides them only what picks the files and PACKAGE
    assert [p.name for p in options if p.name in params] == [o.param for o in option_table.OPTIONS]
    # plan's own: an over-limit peak an error, JSON out; build's: --install into --like's venv
    own = {"strict", "as_json"} if name == "plan" else {"install"}
    assert {p.name for p in options} - params == {"config_file", "example", *own}
    by_param = {p.name: p for p in options}
    for row in option_table.OPTIONS:
        option = by_param[row.param]
        on, _, off = row.short.partition("/")
        assert set(option.opts) == {row.flag, *(f"--{old}" for old in row.old_names), *filter(None, [on])}
        old_negatives = {f"--no-{old}" for old in row.old_names} if row.off else set()
        assert (
            set(option.secondary_opts)
            == set(filter(None, [f"--{row.off}" if row.off else "", off])) | old_negatives
        )
        assert (option.envvar, option.show_envvar) == (row.env, True), row.key
        assert (option.help, option.hidden) == (row.help, row.hidden), row.key
        assert option.multiple == (row.kind in LIST_KINDS), row.key
        assert option.is_flag == (row.kind is config.Kind.BOOL), row.key
        default = option.to_info_dict()["default"]
        if row.kind is config.Kind.BOOL and row.default is None:
            assert not default, row.key  # a flag that only turns on is off when not given
        else:
            assert default == ((row.default,) if option.multiple and row.default is not None else row.default)
        assert option.show_default is (True if row.default is not None and row.show_default else None)
        param_type, carried = _expected_type(row)
        assert type(option.type) is param_type, row.key
        assert {k: getattr(option.type, k) for k in carried} == carried, row.key


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_doctor_reaches_the_torch_index_the_file_names_as_build_would(
    here: Path, invoke: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No network: every request goes to a closed port on 127.0.0.1 (the proxies too), so each
    reach check says which URL it tried. No Docker either: doctor exits 26 on that."""
    # urlopen keeps the opener its first call builds, with the proxies of that moment: this
    # test's must not outlive it (the doctor tests after it reach servers on 127.0.0.1).
    monkeypatch.setattr(urllib.request, "_opener", None)
    port = _closed_port()
    index = f"http://127.0.0.1:{port}"
    proxies = {name: index for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
    _write(here / "wheelbuild.toml", f'[tool.wheelbuild]\ntorch-index-url = "{index}/from-file"\n')
    _write(here / "site.toml", f'[tool.wheelbuild]\ntorch-index-url = "{index}/from-site"\n')

    def tried(*args: str, **env: str) -> str:
        result = invoke("doctor", "--json", *args, **proxies, **env)
        assert result.exit_code == 26, result.output
        (check,) = [c for c in json.loads(result.stdout) if c["check"] == "torch-index"]
        return str(check["found"]).split()[0]

    assert tried() == f"{index}/from-file/torch/"
    assert tried("--config-file", "site.toml") == f"{index}/from-site/torch/"
    assert tried(WHEELBUILD_TORCH_INDEX_URL=f"{index}/from-env") == f"{index}/from-env/torch/"
    assert tried("--torch-index-url", f"{index}/given") == f"{index}/given/torch/"


def test_doctor_and_gc_refuse_a_broken_file_as_build_does(here: Path, invoke: Invoke) -> None:
    _write(here / "wheelbuild.toml", '[tool.wheelbuild]\nbase-image = "ok"\nmemroy = "64g"\n')
    said = [
        "error: wheelbuild.toml: [tool.wheelbuild] has no key 'memroy'",
        "remedy: did you mean 'memory'? e.g. memory = \"64g\"",
    ]
    for args in (["build"], ["doctor"], ["gc", "--dry-run"]):
        result = invoke(*args)
        assert (result.exit_code, result.stderr.splitlines(), result.stdout) == (17, said, ""), args


def test_doctor_and_gc_take_the_config_file_as_build_does() -> None:
    build = next(p for p in main.commands["build"].params if p.name == "config_file")
    for name in ("doctor", "gc"):
        (option,) = [p for p in main.commands[name].params if p.name == "config_file"]
        assert isinstance(option, click.Option) and isinstance(build, click.Option)
        assert (
            (option.opts, option.envvar)
            == (build.opts, build.envvar)
            == (["--config-file"], "WHEELBUILD_CONFIG_FILE")
        )
