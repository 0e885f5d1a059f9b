"""A project's name, version and Requires-Python read from its setup.py, setup.cfg and
pyproject.toml as text (wheelbuild.spec.setup_files, through source_metadata), never by running
them: what a literal states is read, what only running could tell is None, never a guess. Each
project here is a real folder of real files; a setup.py that would fail if run proves it is not."""

from __future__ import annotations

from pathlib import Path

import pytest
from wheelbuild.spec.requires_python import SourceMetadata, source_metadata
from wheelbuild.spec.setup_files import FILE_LIMIT

# Run, this raises: any test reading it through it would fail.
_NEVER_RUN = "raise SystemExit('setup.py was run')\n"


def _project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_setup_py_states_its_literal_name_version_and_python_requires(tmp_path: Path) -> None:
    setup = f"""from setuptools import setup
{_NEVER_RUN}
setup(name="heldext", version="0.3.1", python_requires=">=3.10")
"""
    assert source_metadata(_project(tmp_path, {"setup.py": setup})) == SourceMetadata(
        "heldext", "0.3.1", ">=3.10"
    )


def test_names_bound_at_the_top_concatenation_and_fstrings_are_followed(tmp_path: Path) -> None:
    setup = """import setuptools
NAME = "held-ext"
MAJOR = "1"
VERSION = f"{MAJOR}.2" + ".3"
setuptools.setup(name=NAME, version=VERSION)
"""
    assert source_metadata(_project(tmp_path, {"setup.py": setup})) == SourceMetadata(
        "held-ext", "1.2.3", None
    )


def test_an_environment_variables_default_is_the_version_unless_env_gives_it(tmp_path: Path) -> None:
    # As the bundled example does: a version from the environment, and a local label wheelbuild sets.
    setup = """import os
from setuptools import setup
setup(
    name="wbx",
    version=os.environ.get("WBX_VERSION", "0.1.0")
    + (f"+{os.environ['WBX_LOCAL']}" if os.environ.get("WBX_LOCAL") else ""),
)
"""
    project = _project(tmp_path, {"setup.py": setup})
    assert source_metadata(project).version == "0.1.0"
    assert source_metadata(project, {"WBX_VERSION": "2.0"}).version == "2.0"
    assert source_metadata(project, {"WBX_LOCAL": "abc"}).version == "0.1.0+abc"


@pytest.mark.parametrize(
    "version",
    [
        "get_version()",  # only running it could say
        "open('VERSION').read()",
        "os.environ['UNSET_VERSION']",
        "os.getenv('UNSET_VERSION')",
        "'not a version!'",
        "1.0",  # a float is not a string
    ],
)
def test_what_only_running_could_say_is_none_not_a_guess(tmp_path: Path, version: str) -> None:
    setup = f"import os\nfrom setuptools import setup\nsetup(name='heldext', version={version})\n"
    found = source_metadata(_project(tmp_path, {"setup.py": setup}))
    assert found == SourceMetadata("heldext", None, None)


def test_a_setup_py_that_reads_dunder_version_takes_the_one_its_package_states(tmp_path: Path) -> None:
    # flash-attn's shape: setup.py reads __version__ from the package's __init__.py with a regex.
    setup = """import re
from setuptools import setup
def get_version():
    text = open("held_ext/__init__.py").read()
    return re.search(r'__version__ = "(.*)"', text).group(1)
setup(name="held-ext", version=get_version())
"""
    project = _project(tmp_path, {"setup.py": setup, "held_ext/__init__.py": '__version__ = "2.8.3"\n'})
    assert source_metadata(project).version == "2.8.3"
    (project / "held_ext/__init__.py").write_text("__version__ = compute()\n")
    assert source_metadata(project).version is None


def test_setup_cfg_states_name_and_version_with_attr_and_file_directives(tmp_path: Path) -> None:
    cfg = (
        "[metadata]\nname = cfgext\nversion = attr: cfgext.__version__\n[options]\npython_requires = >=3.11\n"
    )
    project = _project(
        tmp_path / "a",
        {
            "setup.cfg": cfg,
            "setup.py": _NEVER_RUN,
            "src/cfgext/__init__.py": 'VERSION = "4.5"\n__version__ = VERSION\n',
        },
    )
    assert source_metadata(project) == SourceMetadata("cfgext", "4.5", ">=3.11")
    cfg = "[metadata]\nname = cfgext\nversion = file: VERSION.txt\n"
    project = _project(tmp_path / "b", {"setup.cfg": cfg, "VERSION.txt": "4.6\n"})
    assert source_metadata(project).version == "4.6"
    escape = _project(
        tmp_path / "c", {"setup.cfg": "[metadata]\nname = x\nversion = file: ../b/VERSION.txt\n"}
    )
    assert source_metadata(escape).version is None  # a file outside the project is not read


def test_pyproject_dynamic_version_is_read_from_setuptools_attr(tmp_path: Path) -> None:
    pyproject = """[project]
name = "dynext"
dynamic = ["version"]
[tool.setuptools.dynamic]
version = {attr = "dynext.__version__"}
"""
    project = _project(
        tmp_path, {"pyproject.toml": pyproject, "dynext/__init__.py": '__version__ = "0.9.1"\n'}
    )
    assert source_metadata(project) == SourceMetadata("dynext", "0.9.1", None)


def test_pyproject_project_table_wins_over_setup_py(tmp_path: Path) -> None:
    pyproject = '[project]\nname = "fromtoml"\nversion = "1.0"\n'
    setup = "from setuptools import setup\nsetup(name='fromsetup', version='2.0', python_requires='>=3.12')\n"
    project = _project(tmp_path, {"pyproject.toml": pyproject, "setup.py": setup})
    # Each field the pyproject lacks comes from the setup.py.
    assert source_metadata(project) == SourceMetadata("fromtoml", "1.0", ">=3.12")


@pytest.mark.parametrize(
    "setup",
    [
        "setup(name='heldext'",  # a syntax error
        "from setuptools import setup\nsetup(name='a')\nsetup(name='b')\n",  # which one? neither
        "x = " + "(" * 10_000 + ")" * 10_000 + "\nsetup(name='deep')\n",  # too deep for the parser
        "A = B\nB = A\nsetup(name=A)\n",  # names bound to each other
        "setup(name='bad name!')\n",  # not a project name
        "setup(name='nul\x00')\n",
    ],
    ids=["syntax-error", "two-setup-calls", "deep-nesting", "name-cycle", "invalid-name", "nul"],
)
def test_a_setup_py_that_cannot_be_read_states_nothing(tmp_path: Path, setup: str) -> None:
    assert source_metadata(_project(tmp_path, {"setup.py": setup})) == SourceMetadata()


def test_a_setup_py_over_the_cap_is_not_read(tmp_path: Path) -> None:
    padding = "#" * FILE_LIMIT + "\n"
    project = _project(tmp_path, {"setup.py": f"setup(name='big', version='1.0')\n{padding}"})
    assert source_metadata(project) == SourceMetadata()
