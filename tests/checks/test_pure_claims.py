"""A module whose docstring calls it pure takes values and returns values: it imports no Docker,
no subprocess, no network client, and reads and writes no file. Modules that read files say what
they read instead (host/ reads this machine; bounded.py reads untrusted files with caps)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

BUILDER = Path(__file__).resolve().parents[2] / "builder"
PURE = re.compile(r"\bPure\b")
EFFECT_MODULES = {"docker", "subprocess", "socket", "shutil", "tempfile", "urllib.request", "http.client"}
FILE_CALLS = {
    "open", "read_text", "read_bytes", "write_text", "write_bytes", "iterdir", "glob", "rglob",
    "unlink", "mkdir", "rename", "touch", "read_bounded", "open_regular",
}  # fmt: skip


def effects(tree: ast.Module) -> list[str]:
    """What a module does beyond computing: the effectful modules it imports, the file calls it makes."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name in EFFECT_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module in EFFECT_MODULES:
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in FILE_CALLS:
                found.append(f"{name}() on line {node.lineno}")
    return found


def claims_pure(tree: ast.Module) -> bool:
    return bool(PURE.search(ast.get_docstring(tree) or ""))


def test_every_module_that_says_it_is_pure_is() -> None:
    false_claims = {}
    for path in sorted(BUILDER.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if claims_pure(tree) and effects(tree):
            false_claims[str(path.relative_to(BUILDER))] = effects(tree)
    assert false_claims == {}


def test_the_check_sees_a_file_read_and_a_subprocess() -> None:
    tree = ast.parse('"""Pure."""\nimport subprocess\n\ndef f(p):\n    return p.read_text()\n')
    assert claims_pure(tree)
    assert effects(tree) == ["import subprocess", "read_text() on line 5"]
