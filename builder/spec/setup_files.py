"""The name, version and Requires-Python a setuptools project states in its setup.cfg or its
setup.py, read as text and never run: setup.cfg's [metadata] and [options] (with setuptools'
`attr:` and `file:` directives), setup.py's `setup(name=..., version=...)` keywords evaluated
by a small evaluator that knows string literals, names bound at the top of the file, `+`,
f-strings, conditionals and `os.environ.get`/`os.getenv` (from the build's --env, else their
default). Anything else (a function call, a file read) is unknown: None, never a guess; the one
exception is a setup.py that names `__version__`, whose version is then the `__version__ = "..."`
its package states (flash-attn's setup.py reads it so). Each file is read bounded; a file that
cannot be read or parsed states nothing."""

from __future__ import annotations

import ast
import configparser
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..bounded import FileRefused, read_bounded

__all__ = ["StatedMetadata", "attr_value", "from_setup_cfg", "from_setup_py"]

FILE_LIMIT = 1 << 20  # bytes of a setup.py, a setup.cfg or a module read for its metadata
_DEPTH = 20  # how deep the evaluator follows names and expressions (a = b; b = a)
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")  # PEP 508's project name


@dataclass(frozen=True)
class StatedMetadata:
    """What one file states; None where it does not say, or says what only running it can tell."""

    name: str | None = None
    version: str | None = None
    requires_python: str | None = None


def _text(path: Path) -> str | None:
    try:
        return read_bounded(path, FILE_LIMIT).decode("utf-8", errors="replace")
    except (OSError, FileRefused):
        return None


def _valid_name(value: str | None) -> str | None:
    value = (value or "").strip()
    return value if _NAME.match(value) else None


def _valid_version(value: str | None) -> str | None:
    value = (value or "").strip()
    try:
        Version(value)
    except InvalidVersion:
        return None
    return value


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _module_strings(tree: ast.Module) -> dict[str, ast.expr]:
    """The expressions bound to plain names at the top of a module (the last binding wins)."""
    bound: dict[str, ast.expr] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name):
                bound[target.id] = statement.value
        elif (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and statement.value
        ):
            bound[statement.target.id] = statement.value
    return bound


class _Evaluator:
    """Literal strings, built as setup.py files build their name and version, without running them."""

    def __init__(self, bound: Mapping[str, ast.expr], env: Mapping[str, str]) -> None:
        self.bound = bound
        self.env = env

    def value(self, node: ast.expr, depth: int = 0) -> str | None:
        """The string *node* evaluates to; None when only running the file could tell."""
        found = self._value(node, depth)
        return found if isinstance(found, str) else None

    def _value(self, node: ast.expr, depth: int) -> str | bool | None:
        if depth > _DEPTH:
            return None
        deeper = depth + 1
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.Name):
            bound = self.bound.get(node.id)
            return self._value(bound, deeper) if bound is not None else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self._value(node.left, deeper), self._value(node.right, deeper)
            return left + right if isinstance(left, str) and isinstance(right, str) else None
        if isinstance(node, ast.JoinedStr):
            parts = [self._value(part, deeper) for part in node.values]
            return "".join(parts) if all(isinstance(p, str) for p in parts) else None  # type: ignore[arg-type]
        if isinstance(node, ast.FormattedValue) and node.conversion == -1 and node.format_spec is None:
            return self._value(node.value, deeper)
        if isinstance(node, ast.IfExp):
            test = self._environ(node.test)
            if test is _UNKNOWN:
                return None
            return self._value(node.body if test else node.orelse, deeper)
        found = self._environ(node)
        return None if found is _UNKNOWN else found  # type: ignore[return-value]

    def _environ(self, node: ast.expr) -> object:
        """os.environ.get(K[, D]) / os.getenv(K[, D]) / os.environ[K]: the build's --env, else D."""
        if isinstance(node, ast.Subscript) and _dotted(node.value) in {"os.environ", "environ"}:
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value in self.env:
                return self.env[key.value]
            return _UNKNOWN
        if not isinstance(node, ast.Call) or node.keywords:
            return _UNKNOWN
        if _dotted(node.func) not in {"os.environ.get", "environ.get", "os.getenv", "getenv"}:
            return _UNKNOWN
        if not 1 <= len(node.args) <= 2:
            return _UNKNOWN
        key = node.args[0]
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return _UNKNOWN
        if key.value in self.env:
            return self.env[key.value]
        if len(node.args) == 1:
            return None
        default = node.args[1]
        if isinstance(default, ast.Constant) and default.value is None:
            return None
        found = self._value(default, 1)
        return _UNKNOWN if found is None else found


_UNKNOWN = object()


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _setup_call(tree: ast.Module) -> ast.Call | None:
    """The one `setup(...)` (or `setuptools.setup(...)`) call of a setup.py, anywhere in it."""
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _dotted(node.func) in {"setup", "setuptools.setup"}
    ]
    return calls[0] if len(calls) == 1 else None


def from_setup_py(path: Path, env: Mapping[str, str]) -> StatedMetadata:
    """What setup.py's setup() call states as literals (the module doc)."""
    text = _text(path)
    tree = _parse(text) if text is not None else None
    call = _setup_call(tree) if tree is not None else None
    if tree is None or call is None or text is None:
        return StatedMetadata()
    evaluator = _Evaluator(_module_strings(tree), env)
    given = {k.arg: k.value for k in call.keywords if k.arg is not None}

    def keyword(key: str) -> str | None:
        return evaluator.value(given[key]) if key in given else None

    name = _valid_name(keyword("name"))
    version = _valid_version(keyword("version"))
    if version is None and "version" in given and name and "__version__" in text:
        version = _package_version(path.parent, name)
    return StatedMetadata(name, version, (keyword("python_requires") or "").strip() or None)


def _package_version(project: Path, name: str) -> str | None:
    """The `__version__ = "..."` the package's own module states, where exactly one states one."""
    package = canonicalize_name(name).replace("-", "_")
    found = {
        version
        for base in (project, project / "src")
        for module in ("__init__.py", "version.py", "_version.py")
        if (version := _valid_version(attr_value(base / package / module, "__version__", {}))) is not None
    }
    return found.pop() if len(found) == 1 else None


def attr_value(module: Path, attribute: str, env: Mapping[str, str]) -> str | None:
    """A string the module binds at its top to *attribute*, read as text (setuptools' `attr:`
    reads it so first, before it would import the module)."""
    text = _text(module)
    tree = _parse(text) if text is not None else None
    if tree is None:
        return None
    bound = _module_strings(tree)
    return _Evaluator(bound, env).value(bound[attribute]) if attribute in bound else None


def _module_file(project: Path, dotted: str) -> Path | None:
    parts = dotted.split(".")
    if not parts or not all(part.isidentifier() for part in parts):
        return None
    for base in (project, project / "src"):
        for candidate in (base.joinpath(*parts, "__init__.py"), base.joinpath(*parts).with_suffix(".py")):
            if candidate.is_file():
                return candidate
    return None


def directive(project: Path, value: str, env: Mapping[str, str]) -> str | None:
    """A setup.cfg (or [tool.setuptools.dynamic]) value: a literal, `attr: pkg.__version__` or
    `file: VERSION`, resolved as text; None where it cannot be."""
    value = value.strip()
    if value.startswith("attr:"):
        module, _, attribute = value.removeprefix("attr:").strip().rpartition(".")
        found = _module_file(project, module) if module and attribute else None
        return attr_value(found, attribute, env) if found else None
    if value.startswith("file:"):
        names = [n.strip() for n in value.removeprefix("file:").split(",") if n.strip()]
        if len(names) != 1 or Path(names[0]).is_absolute() or ".." in Path(names[0]).parts:
            return None
        text = _text(project / names[0])
        return text.strip() if text is not None else None
    return value or None


def from_setup_cfg(path: Path, env: Mapping[str, str]) -> StatedMetadata:
    """setup.cfg's [metadata] name and version and its [options] python_requires."""
    text = _text(path)
    if text is None:
        return StatedMetadata()
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return StatedMetadata()
    name = parser.get("metadata", "name", fallback=None)
    version = parser.get("metadata", "version", fallback=None)
    requires = parser.get("options", "python_requires", fallback=None)
    return StatedMetadata(
        _valid_name(directive(path.parent, name, env) if name else None),
        _valid_version(directive(path.parent, version, env) if version else None),
        (requires or "").strip() or None,
    )
