"""A known recipe (flash-attn, its sdist downloaded once per machine from PyPI) reads only the
current directory's wheelbuild.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clikit import Invoke

# plan reads torch's index before Docker: from the cache, as seeded.
pytestmark = pytest.mark.usefixtures("fake_torch_index")


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
    result = invoke("plan", "flash-attn", "-v")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("plan for flash-attn 2.8.3")
    assert _sources(result.stdout)["memory"] == "64g from wheelbuild.toml"
