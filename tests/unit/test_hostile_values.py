"""Values that used to end in a traceback, each now one line of cause and one of remedy with its
own exit code, run through the real console script: numbers past Python's 4,300-digit limit for
int() (packaging raises ValueError, not InvalidVersion, on them), a URL whose bracket is left open
(urllib's ValueError), and a Ctrl-C while the CLI is still loading."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.clikit import NO_DOCKER, WHEELBUILD
from tests.indexkit import make_wheel

DIGITS = "9" * 5000  # past sys.get_int_max_str_digits() (4,300)
Run = Callable[..., subprocess.CompletedProcess[str]]


def _one_line_refusal(done: subprocess.CompletedProcess[str], code: int, says: str) -> None:
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == code, done.stderr[-2000:]
    *_details, cause, remedy = done.stderr.splitlines()
    assert cause.startswith("error: ") and says in cause, cause[:300]
    assert remedy.startswith("remedy: ") and len(remedy) > len("remedy: ")


@pytest.mark.parametrize("command", ["plan", "build"])
@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("flash-attn", "--version", DIGITS), 37, "flash-attn version"),
        (("flash-attn", "--version", f"2.{DIGITS}"), 37, "flash-attn version"),
        (("wbdemo", "--archs", DIGITS), 38, "CUDA arch list"),
        (("wbdemo", "--archs", f"100,{DIGITS}"), 38, "CUDA arch list"),
        (("wbdemo", "--torch", f"2.11.{DIGITS}+cu130"), 11, "torch variant"),
        (("wbdemo", "--torch", f"2.{DIGITS}+cu130"), 11, "torch variant"),
        (("wbdemo", "--dist", "http://[::1"), 32, "is not a scheduler URL"),
        (("wbdemo", "--dist", "http://[::1]:10600x"), 32, "is not a scheduler URL"),
        (
            ("wbdemo", "--torch-index-url", "http://[::1"),
            32,
            "is not one a request can go to: Invalid IPv6 URL",
        ),
        (("wbdemo", "--torch-index-url", "pypi.org/simple"), 32, "its scheme is missing"),
        (
            (f"http://[::1/x.tar.gz#sha256={'a' * 64}",),
            32,
            "is not one wheelbuild downloads: Invalid IPv6 URL",
        ),
        ((f"https://example.com/..#sha256={'a' * 64}",), 32, "its last segment names no file"),
        ((f"https://example.com/x/#sha256={'a' * 64}",), 32, "its last segment names no file"),
        ((f"file:///dev/zero#sha256={'a' * 64}",), 32, "its scheme is file:"),
        ((f"ftp://example.com/x.tar.gz#sha256={'a' * 64}",), 32, "its scheme is ftp:"),
        (("wbdemo", "--archs", ",100"), 38, "has an empty entry"),
        (("wbdemo", "--archs", "100,"), 38, "has an empty entry"),
    ],
    ids=[
        "version-digits",
        "version-minor-digits",
        "archs-digits",
        "archs-second-digits",
        "torch-patch-digits",
        "torch-minor-digits",
        "dist-open-bracket",
        "dist-bad-port",
        "torch-index-open-bracket",
        "torch-index-no-scheme",
        "sdist-open-bracket",
        "sdist-dot-dot",
        "sdist-folder",
        "sdist-file-scheme",
        "sdist-ftp",
        "archs-leading-comma",
        "archs-trailing-comma",
    ],
)
def test_a_value_past_what_python_reads_is_a_one_line_refusal(
    run_cli: Run, command: str, args: tuple[str, ...], code: int, says: str
) -> None:
    """`build` refuses before it looks for Docker (which would be exit 20 here), and `plan` the same."""
    _one_line_refusal(run_cli(command, *args), code, says)


def test_publish_with_a_torch_past_what_python_reads_is_a_bad_variant(run_cli: Run, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "in", requires_dist=("torch==2.11.*",))
    done = run_cli("publish", str(wheel), "--torch", f"2.{DIGITS}+cu130", "--to", str(tmp_path / "tree"))
    _one_line_refusal(done, 11, "torch variant")
    assert not (tmp_path / "tree").exists()


@pytest.mark.parametrize(
    "pin", [f"torch=={DIGITS}.*", f"torch>=2.{DIGITS}", f"torch==2.11.*,!=2.11.{DIGITS}"]
)
def test_a_torch_pin_in_metadata_past_what_python_reads_is_not_a_pin(
    run_cli: Run, tmp_path: Path, pin: str
) -> None:
    """The METADATA is the wheel's, from anywhere: its pin is judged, not a traceback."""
    wheel = make_wheel(tmp_path / "in", requires_dist=(pin,))
    done = run_cli("publish", str(wheel), "--torch", "2.11.0+cu130", "--to", str(tmp_path / "tree"))
    _one_line_refusal(done, 46, "METADATA requires torch")
    assert not (tmp_path / "tree").exists()


# The test's hold on one import of the real CLI: a sitecustomize (Python imports it at startup,
# from PYTHONPATH) puts a finder first on sys.meta_path that, when wheelbuild.pipeline.build is about to
# load, says so on a pipe and waits for a signal. The test sends SIGINT only after it has read that,
# so the Ctrl-C lands inside the CLI's imports every time, with no sleep and no race.
_HOLD = """
import os, signal, sys

class _HoldImport:
    def find_spec(self, name, path=None, target=None):
        if name == "wheelbuild.pipeline.build":
            sys.meta_path.remove(self)
            os.write(int(os.environ["HOLD_FD"]), b"loading\\n")
            signal.pause()  # the default SIGINT handler raises KeyboardInterrupt here
        return None

sys.meta_path.insert(0, _HoldImport())
"""


def test_ctrl_c_while_the_cli_loads_is_one_line_and_exit_130(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(_HOLD)
    read_end, write_end = os.pipe()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHEELBUILD_", "CIBW_"))}
    env.update(PYTHONPATH=str(tmp_path), HOLD_FD=str(write_end), DOCKER_HOST=NO_DOCKER)
    child = subprocess.Popen(
        [sys.executable, str(WHEELBUILD), "--help"],
        env=env,
        pass_fds=(write_end,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write_end)  # the child's copy alone is left: EOF if it dies before the hold
    with os.fdopen(read_end, "rb") as events:
        assert events.readline() == b"loading\n", child.communicate(timeout=60)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert (child.returncode, err, out) == (130, "error: interrupted\n", "")


@pytest.mark.parametrize("command", ["plan", "build"])
def test_an_arch_list_with_an_empty_entry_is_refused_by_plan_and_build(run_cli: Run, command: str) -> None:
    _one_line_refusal(run_cli(command, "flash-attn", "--archs", "100,,120"), 38, "has an empty entry")


# -- the build's environment: names that are names, and no credential by value -------------------


@pytest.mark.parametrize("where", ["wheelbuild.toml", "--config-file"])
def test_an_env_table_key_with_an_equals_sign_is_refused(run_cli: Run, tmp_path: Path, where: str) -> None:
    """{"A=B" = "x"} was read as the variable A set to B=x."""
    config = tmp_path / ("wheelbuild.toml" if where == "wheelbuild.toml" else "other.toml")
    config.write_text('[tool.wheelbuild]\nenv = { "A=B" = "x" }\n')
    args = ("--config-file", str(config)) if where == "--config-file" else ()
    for command in ("plan", "build"):
        _one_line_refusal(
            run_cli(command, "wbdemo", *args), 18, "env sets 'A=B', which is not an environment variable name"
        )


@pytest.mark.parametrize(
    "pair",
    [
        "HF_TOKEN=hunter2-canary",
        "DB_PASSWORD=hunter2-canary",
        "MY_API_KEY=hunter2-canary",
        f"NOTE=ghp_{'x' * 36}",
    ],
)
@pytest.mark.parametrize("command", ["plan", "build"])
def test_a_credential_given_by_value_with_env_is_refused_without_saying_it(
    run_cli: Run, command: str, pair: str
) -> None:
    done = run_cli(command, "wbdemo", "--env", "A=1", "--env", pair)
    _one_line_refusal(done, 34, f"--env {pair.partition('=')[0]}=... gives what looks like a credential")
    assert pair.partition("=")[2] not in done.stdout + done.stderr
    assert "never pass a secret with --env" in done.stderr


def test_a_setting_given_with_env_still_reaches_the_build(run_cli: Run) -> None:
    """Names and values that are not credentials pass parsing: the build gets as far as Docker."""
    done = run_cli("build", "wbdemo", "--env", "FLASH_ATTENTION_FORCE_BUILD=TRUE", "--env", "A=B=x")
    assert done.returncode == 20, done.stderr  # no Docker here: every option was taken


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("http://[::1", "is not a URL wheelbuild can read"),
        ("user@[::1:/x", "looks like a remote tree with an IPv6 host"),
    ],
)
def test_a_publish_target_with_an_open_bracket_is_one_line_and_nothing_is_written(
    run_cli: Run, tmp_path: Path, target: str, says: str
) -> None:
    wheel = make_wheel(tmp_path / "in")
    done = run_cli("publish", str(wheel), "--to", target)
    _one_line_refusal(done, 13, says)
    assert not any(p.name.startswith("user@") for p in tmp_path.iterdir())  # run_cli runs in tmp_path


@pytest.mark.parametrize(
    ("toml", "code", "says"),
    [
        (f"[tool.wheelbuild]\nmax-jobs = {DIGITS}\n", 33, "holds a value no setting takes"),
        (f'[tool.wheelbuild]\narchs = "{DIGITS}"\n', 18, "characters) is not understood"),
    ],
    ids=["max-jobs-digits", "archs-digits"],
)
def test_a_number_past_what_python_reads_in_wheelbuild_toml_is_one_short_line(
    run_cli: Run, tmp_path: Path, toml: str, code: int, says: str
) -> None:
    (tmp_path / "wheelbuild.toml").write_text(toml)
    done = run_cli("plan", "wbdemo")
    _one_line_refusal(done, code, says)
    assert len(done.stderr) < 1000  # the 5,000 digits are not echoed back


def test_yank_of_a_version_past_what_python_reads_and_a_reason_that_is_not_utf8(
    run_cli: Run, tmp_path: Path
) -> None:
    from wheelbuild.index.publish import publish

    wheel = make_wheel(tmp_path / "in")
    publish([wheel], tmp_path / "tree")
    _one_line_refusal(
        run_cli("yank", f"wbtiny=={DIGITS}", "--tree", str(tmp_path / "tree")), 13, "names no wheel"
    )
    reason = os.fsdecode(b"broken \xff build")  # as the shell hands such bytes over
    done = run_cli(
        "yank", "wbtiny==0.1.0+cu130torch2.11", "--tree", str(tmp_path / "tree"), "--reason", reason
    )
    assert done.returncode == 0, done.stderr
    assert (
        'data-yanked="broken \ufffd build"'
        in (tmp_path / "tree" / "simple" / "wbtiny" / "index.html").read_text()
    )
