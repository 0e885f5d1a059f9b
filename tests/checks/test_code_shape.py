"""A guard against monsters in builder/: no function over 100 lines and no module over 800, measured
with ast. The limits are far above where a concept ends, so they never decide where a module is
split (a concept is split by meaning, in review); they catch a module or function that has
swallowed several."""

from __future__ import annotations

import ast
from pathlib import Path

BUILDER = Path(__file__).resolve().parents[2] / "builder"

MAX_FUNCTION_LINES = 100
MAX_MODULE_LINES = 800


def _functions(node: ast.AST, prefix: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """qualname -> def, for every function under node, nested ones and methods included."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                found[name] = child
            found.update(_functions(child, f"{name}."))
        else:
            found.update(_functions(child, prefix))
    return found


def _function_lengths() -> dict[str, int]:
    """'path:qualname' -> lines from `def` to its last line (decorators not counted)."""
    found: dict[str, int] = {}
    for path in sorted(BUILDER.rglob("*.py")):
        where = path.relative_to(BUILDER.parent).as_posix()
        for name, node in _functions(ast.parse(path.read_text(), filename=str(path)), "").items():
            assert node.end_lineno is not None
            found[f"{where}:{name}"] = node.end_lineno - node.lineno + 1
    return found


def _module_lengths() -> dict[str, int]:
    return {
        path.relative_to(BUILDER.parent).as_posix(): len(path.read_text().splitlines())
        for path in sorted(BUILDER.rglob("*.py"))
    }


def _over(lengths: dict[str, int], limit: int) -> list[str]:
    return [f"{name}: {lines} lines (limit {limit})" for name, lines in lengths.items() if lines > limit]


def test_no_function_in_builder_is_a_monster() -> None:
    assert _over(_function_lengths(), MAX_FUNCTION_LINES) == []


def test_no_module_in_builder_is_a_monster() -> None:
    assert _over(_module_lengths(), MAX_MODULE_LINES) == []


def test_the_measure_counts_nested_functions_and_methods_without_decorators() -> None:
    tree = ast.parse(
        "@decorator\ndef outer():\n    def inner():\n        pass\n\nclass C:\n    def m(self):\n        pass\n"
    )
    found = {
        name: node.end_lineno - node.lineno + 1
        for name, node in _functions(tree, "").items()
        if node.end_lineno
    }
    assert found == {"outer": 3, "outer.inner": 2, "C.m": 2}
