"""A known recipe (flash-attn, its sdist downloaded once per machine from PyPI) reads only the
current directory's wheelbuild.toml."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from wheelbuild.cli.main import main

from tests.clikit import NO_DOCKER

Invoke = Callable[..., Result]

# plan reads torch's index before Docker: from the cache, as seeded.
pytestmark = pytest.mark.usefixtures("fake_torch_index")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary current directory and an environment without WHEELBUILD_* settings."""
    for name in list(os.environ):
        if name.startswith("WHEELBUILD_") and name != "WHEELBUILD_CACHE_DIR":
            monkeypatch.delenv(name)
    monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


@pytest.fixture
def invoke(here: Path) -> Invoke:
    def run(*args: str, **env: str) -> Result:
        return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)

    return run


def _sources(output: str) -> dict[str, str]:
    """The provenance table: key -> the rest of its line, spaces collapsed."""
    lines = output.split("options (", 1)[1].splitlines()[1:]
    return {line.split()[0]: " ".join(line.split()[1:]) for line in lines if line.startswith("  ")}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.network  # flash-attn's sdist, from PyPI once per machine (tests/sdists.py)
@pytest.mark.usefixtures("flash_attn_sdist")
def test_a_known_recipe_reads_only_the_current_directorys_file(here: Path, invoke: Invoke) -> None:
    _write(here / "flash-attn" / "pyproject.toml", '[tool.wheelbuild]\nmemory = "8g"\n')  # not the recipe
    _write(here / "wheelbuild.toml", '[tool.wheelbuild]\nmemory = "64g"\narchs = "100"\n')
    result = invoke("plan", "flash-attn")
    assert result.exit_code == 0, result.output
    assert "plan for flash-attn-2.8.3" in result.stdout
    assert _sources(result.stdout)["memory"] == "64g from wheelbuild.toml"
