"""A known recipe (flash-attn, its sdist downloaded once per machine from PyPI) reads only the
current directory's wheelbuild.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_config_cli import Invoke, _sources, _write


@pytest.mark.usefixtures("flash_attn_sdist")
def test_a_known_recipe_reads_only_the_current_directorys_file(here: Path, invoke: Invoke) -> None:
    _write(here / "flash-attn" / "pyproject.toml", '[tool.wheelbuild]\nmemory = "8g"\n')  # not the recipe
    _write(here / "wheelbuild.toml", '[tool.wheelbuild]\nmemory = "64g"\narchs = "100"\n')
    result = invoke("plan", "flash-attn")
    assert result.exit_code == 0, result.output
    assert "plan for flash-attn-2.8.3" in result.stdout
    assert _sources(result.stdout)["memory"] == "64g from wheelbuild.toml"
