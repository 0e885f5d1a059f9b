"""Types (issue 13, part 8): mypy passes over builder/ (--strict), tests/ and bench/, and no
explicit `Any` is left in builder/ outside the Docker SDK's edge."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILDER = REPO / "builder"

# The docker SDK is untyped: its client, containers, event stream and df() answer may stay `Any`
# where the engine and the parts of it that start or watch containers hold them, and nowhere
# else; at most this many uses each, so the edge does not grow.
ANY_ALLOWED = {
    "engine/docker_engine.py": 10,
    "engine/containers.py": 4,
    "engine/gate_container.py": 2,
    "engine/unit_compile.py": 2,
    "engine/watcher.py": 3,
}


def test_mypy_passes_over_the_package_the_tests_and_the_bench() -> None:
    # pyproject's [tool.mypy] names what to check; typecheck/wheelbuild shows builder/ to mypy
    # under its import name (a few seconds, most of it the first run's cache).
    done = subprocess.run(
        [sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _any_uses(path: Path) -> list[int]:
    """The lines of *path* that name typing's Any (as `Any` or `typing.Any`); comments and
    strings are not code, so they do not count."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.expr | ast.stmt) and "Any" in _names(node)
    )


def _names(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.ImportFrom):
        return {alias.name for alias in node.names}
    return set()


def test_no_explicit_any_outside_the_docker_edge() -> None:
    found = {
        str(path.relative_to(BUILDER)): uses
        for path in sorted(BUILDER.rglob("*.py"))
        if (uses := _any_uses(path))
    }
    over = {name: lines for name, lines in found.items() if len(lines) > ANY_ALLOWED.get(name, 0)}
    assert over == {}, "Any in builder/ (use a precise type, object, a TypedDict or a Protocol)"


def test_the_any_finder_sees_code_and_not_comments_or_strings(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import typing\nfrom typing import Any\n# Any here is a word\n"
        "x: Any = 1\ny: typing.Any = 2\nz = 'Any'\n"
    )
    assert _any_uses(module) == [2, 4, 5]
