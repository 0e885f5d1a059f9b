"""What a setup.py says about building here, read as text and as a syntax tree, never run: the
environment switches it reads (and the value each is compared against), the nvcc archs its own
strings name, whether it downloads a prebuilt binary, whether its CUDA extension waits for a GPU,
and the source files it names literally. Parsing is not running; a file that does not parse is
read with regexes instead. Pure."""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")

# Strings shaped like an nvcc arch flag, or an arch given as a flag's own argument ("sm_90").
_ARCH_FLAG = re.compile(
    r"arch=|code=|(?:^|\s)(?:-gencode|--generate-code|-arch|--gpu-architecture|--gpu-code)\b"
)
_ARCH_WORD = re.compile(r"(?:compute|sm|lto)_(\d{2,3})[a-z]?\b")
_BARE_ARCH = re.compile(r"(?:compute|sm)_\d{2,3}[a-z]?")

_TRUTHY = {"1", "true", "yes", "on", "y", "t"}
_OPPOSITE = {"0": "1", "false": "true", "no": "yes", "off": "on", "n": "y", "f": "t", "": "1"}
_CASE_METHODS = {"lower", "upper", "strip", "casefold", "title", "capitalize"}
_CASTS = {"int", "float", "bool", "str", "strtobool", "str2bool", "_str2bool", "str_to_bool", "to_bool"}
_DOWNLOADERS = {"urlretrieve", "urlopen"}
_HTTP_MODULES = {"requests", "httpx", "urllib3", "wget"}


@dataclass(frozen=True)
class EnvRead:
    """One environment variable a build file reads, and the value that takes its switched-on
    branch (what it is compared against, else what its cast or default implies)."""

    name: str
    value: str


@dataclass(frozen=True)
class SetupFindings:
    """What one setup.py says; survey.py decides which reads are switches to set."""

    env_reads: tuple[EnvRead, ...]  # in the order the file reads them, each name once
    archs: frozenset[int]  # SM numbers its nvcc flag strings name
    downloads_prebuilt: bool
    cuda_needs_gpu: bool
    sources: tuple[str, ...]  # relative paths named literally as sources, normalised
    parsed: bool  # False: the file did not parse and regexes read it
    # The default each read gives where it is a literal ("100;120"), by the variable's name.
    env_defaults: tuple[tuple[str, str], ...] = ()


def archs_in_string(text: str) -> set[int]:
    """SM numbers in one string shaped like an nvcc arch flag (``arch=compute_90a,code=sm_90a``,
    ``-arch=sm_90``, ``sm_90`` alone); other strings name none."""
    if _BARE_ARCH.fullmatch(text) or _ARCH_FLAG.search(text):
        return {int(number) for number in _ARCH_WORD.findall(text)}
    return set()


def _truthy(value: str) -> bool | None:
    """True/False for a value that reads as a boolean, None for anything else ("cuda")."""
    folded = value.strip().casefold()
    return True if folded in _TRUTHY else False if folded in _OPPOSITE else None


def _opposite(value: str) -> str:
    turned = _OPPOSITE[value.strip().casefold()]
    return turned.upper() if value.isupper() else turned.title() if value.istitle() else turned


def choose_value(compared: Iterable[tuple[bool, str]], default: str | None) -> str:
    """The value that switches a read on. *compared*: (whether the comparison is == or in, the
    constant) for each comparison the read feeds. A constant that reads as true wins, first an
    ==/in one; else the opposite of one that reads as false (``== "0"`` guards the off branch);
    else another ==/in constant; else the opposite of a default that reads as false; else 1."""
    pairs = list(compared)
    ranked = (
        [c for positive, c in pairs if positive and _truthy(c)]
        + [c for positive, c in pairs if not positive and _truthy(c)]
        + [_opposite(c) for _positive, c in pairs if _truthy(c) is False]
        + [c for positive, c in pairs if positive and _truthy(c) is None]
    )
    if ranked:
        return ranked[0]
    if default is not None and _truthy(default) is False:
        return _opposite(default)
    return "1"


def _constant(node: ast.AST) -> str | None:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str | int)
        and not isinstance(node.value, bool)
    ):
        return str(node.value)
    return None


def _called_name(node: ast.AST) -> str | None:
    """`f` for `f(...)` and `a.b.f(...)`."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name):
            return node.func.id
        if isinstance(node.func, ast.Attribute):
            return node.func.attr
    return None


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _env_key(node: ast.AST) -> tuple[ast.AST, ast.AST | None] | None:
    """(key, default) when *node* reads the environment: os.getenv(k, d), getenv(k),
    os.environ.get(k, d), environ.get(k), os.environ[k]."""
    if isinstance(node, ast.Subscript) and _is_environ(node.value):
        return node.slice, None
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    getenv = (isinstance(func, ast.Name) and func.id == "getenv") or (
        isinstance(func, ast.Attribute) and func.attr == "getenv"
    )
    if getenv or (isinstance(func, ast.Attribute) and func.attr == "get" and _is_environ(func.value)):
        return node.args[0], node.args[1] if len(node.args) > 1 else None
    return None


def _helpers(tree: ast.AST) -> dict[str, int]:
    """Functions that read the environment under one of their parameters (deepspeed's
    `get_env_if_set(key, default)`): name -> that parameter's position."""
    found = {}
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        params = [a.arg for a in function.args.args]
        for node in ast.walk(function):
            read = _env_key(node)
            if read and isinstance(read[0], ast.Name) and read[0].id in params:
                found[function.name] = params.index(read[0].id)
    return found


def _reads(tree: ast.AST) -> Iterator[tuple[ast.AST, str, ast.AST | None]]:
    """(the reading expression, the variable's name, its default) for every read whose name is
    a literal, directly or through a helper, and `"X" in os.environ`."""
    helpers = _helpers(tree)
    for node in ast.walk(tree):
        read = _env_key(node)
        if read is None and isinstance(node, ast.Call) and (name := _called_name(node)) in helpers:
            at = helpers[name or ""]
            if len(node.args) > at:
                read = node.args[at], node.args[at + 1] if len(node.args) > at + 1 else None
        if read is not None and isinstance(read[0], ast.Constant) and isinstance(read[0].value, str):
            yield node, read[0].value, read[1]
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.ops[0], ast.In)
            and _is_environ(node.comparators[0])
            and (key := _constant(node.left))
        ):
            yield node, key, None


class _Reader:
    """One parsed setup.py with the parent of every node, to follow where a read flows."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def climb(self, node: ast.AST) -> tuple[ast.AST, ast.AST | None]:
        """Up through what keeps a read's meaning (.lower(), int(), bool(), `or default`): the
        outermost such expression and its parent."""
        while (parent := self.parents.get(id(node))) is not None:
            if isinstance(parent, ast.Attribute) and parent.attr in _CASE_METHODS:
                call = self.parents.get(id(parent))
                if not (isinstance(call, ast.Call) and call.func is parent):
                    break
                parent = call
            elif isinstance(parent, ast.Call):
                if _called_name(parent) not in _CASTS or not any(a is node for a in parent.args):
                    break
            elif not (isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or)):
                break
            node = parent
        return node, self.parents.get(id(node))

    def comparisons(self, node: ast.AST) -> list[tuple[bool, str]]:
        """What the read at *node* is compared against, directly or through the names it is
        assigned to: (whether by == or in, the constant) each."""
        top, parent = self.climb(node)
        uses = [(top, parent)]
        if isinstance(parent, ast.Assign | ast.AnnAssign):
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            uses = [
                self.climb(use)
                for use in ast.walk(self.tree)
                if isinstance(use, ast.Name) and use.id in names and isinstance(use.ctx, ast.Load)
            ]
        compared = []
        for use, where in uses:
            if isinstance(where, ast.Compare) and len(where.ops) == 1:
                other = where.comparators[0] if where.left is use else where.left
                positive = isinstance(where.ops[0], ast.Eq | ast.In | ast.Is)
                items = other.elts if isinstance(other, ast.Tuple | ast.List | ast.Set) else [other]
                compared += [(positive, c) for c in map(_constant, items) if c is not None]
        return compared


def _env_reads(reader: _Reader) -> tuple[EnvRead, ...]:
    found: dict[str, str] = {}
    in_order = sorted(
        _reads(reader.tree), key=lambda r: (getattr(r[0], "lineno", 0), getattr(r[0], "col_offset", 0))
    )
    for node, name, default in in_order:
        if name in found:
            continue
        if isinstance(node, ast.Compare):  # "X" in os.environ: being set is the switch
            found[name] = "1"
            continue
        found[name] = choose_value(reader.comparisons(node), _constant(default) if default else None)
    return tuple(EnvRead(name, value) for name, value in found.items())


def _env_defaults(tree: ast.AST) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    for _node, name, default in _reads(tree):
        if default is not None and (value := _constant(default)) is not None:
            found.setdefault(name, value)
    return tuple(found.items())


def _strings(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


def _downloads(tree: ast.AST) -> bool:
    """A call that downloads (urlretrieve, urlopen, requests.get, ...) and a string that names a
    prebuilt binary (a .whl, a .so, a GitHub release asset)."""
    calls = any(
        isinstance(node, ast.Call)
        and (
            _called_name(node) in _DOWNLOADERS
            or (
                isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in _HTTP_MODULES
            )
        )
        for node in ast.walk(tree)
    )
    return calls and any(_names_binary(s) for s in _strings(tree))


def _names_binary(text: str) -> bool:
    return ".whl" in text or "releases/download" in text or bool(re.search(r"\.so(?:\.\d+)*$", text))


def _is_availability_check(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "is_available"
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "cuda"
    )


def _decides_cuda(statement: ast.AST) -> bool:
    """Whether a statement holding a GPU check decides the CUDA build: it names CUDAExtension,
    or binds a name that says cuda (WITH_CUDA, use_cuda). A warning that only prints, or sets
    TORCH_CUDA_ARCH_LIST (apex, deepspeed), does not."""
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and (
            node.id == "CUDAExtension" or (isinstance(node.ctx, ast.Store) and "cuda" in node.id.lower())
        ):
            return True
        if isinstance(node, ast.Attribute) and node.attr == "CUDAExtension":
            return True
    return False


def _enclosing(reader: _Reader, node: ast.AST, kind: type[ast.AST]) -> ast.AST | None:
    found = reader.parents.get(id(node))
    while found is not None and not isinstance(found, kind):
        found = reader.parents.get(id(found))
    return found


def _gated_on_gpu(reader: _Reader) -> bool:
    """Whether a torch.cuda.is_available() decides the CUDA build, where it stands or as what a
    function says cuda returns (`def _with_cuda(): return torch.cuda.is_available() and ...`)."""
    for node in ast.walk(reader.tree):
        if not _is_availability_check(node):
            continue
        statement = _enclosing(reader, node, ast.stmt)
        if isinstance(statement, ast.Return):
            function = _enclosing(reader, statement, ast.FunctionDef)
            if isinstance(function, ast.FunctionDef) and "cuda" in function.name.lower():
                return True
        elif statement is not None and _decides_cuda(statement):
            return True
    return False


def source_path(text: str) -> str | None:
    """*text* as a relative source path, normalised, or None: not a source, a glob, absolute."""
    if (
        not text.endswith(SOURCE_SUFFIXES)
        or re.search(r"[*?\[\]{}$%\s\\]", text)
        or text.startswith(("/", "-"))
    ):
        return None
    path = posixpath.normpath(text)
    return path if posixpath.basename(path).partition(".")[0] else None


def _join(node: ast.Call) -> str | None:
    """os.path.join("csrc", "a.cu") of literals only, as one path."""
    parts = [_constant(a) for a in node.args]
    if _called_name(node) != "join" or not parts or not all(isinstance(p, str) for p in parts):
        return None
    return posixpath.join(*[p for p in parts if p is not None])


_LEFT_OUT = re.compile(r"exclude|ignore|skip|remove|disable", re.IGNORECASE)


def _left_out(reader: _Reader, container: ast.AST) -> bool:
    """Whether a list is one of files to leave out (xformers' `exclude_files = [...]`)."""
    holder = reader.parents.get(id(container))
    if isinstance(holder, ast.Assign):
        return any(isinstance(t, ast.Name) and _LEFT_OUT.search(t.id) for t in holder.targets)
    return isinstance(holder, ast.keyword) and bool(holder.arg and _LEFT_OUT.search(holder.arg))


def _sources(reader: _Reader) -> tuple[str, ...]:
    """Source paths written whole in a list, tuple or set (``sources=["csrc/a.cu"]``), or
    joined from literals; not the pieces of an f-string or of a `.replace(".cpp", ".cu")`, nor
    a list of files to leave out."""
    found: dict[str, None] = {}
    for node in ast.walk(reader.tree):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            parent = reader.parents.get(id(node))
            listed = isinstance(parent, ast.List | ast.Tuple | ast.Set) and not _left_out(reader, parent)
            text = node.value if listed else None
        elif isinstance(node, ast.Call):
            text = _join(node)
        if text is not None and (path := source_path(text)):
            found[path] = None
    return tuple(found)


def read_setup_py(text: str) -> SetupFindings:
    """What *text*, a setup.py, says (see the module's docstring). Never raises for what the
    text holds: a file that does not parse, or nests too deep, is read with regexes."""
    try:
        reader = _Reader(ast.parse(text))
        return SetupFindings(
            env_reads=_env_reads(reader),
            archs=frozenset(a for s in _strings(reader.tree) for a in archs_in_string(s)),
            downloads_prebuilt=_downloads(reader.tree),
            cuda_needs_gpu=_gated_on_gpu(reader),
            sources=_sources(reader),
            parsed=True,
            env_defaults=_env_defaults(reader.tree),
        )
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _read_with_regexes(text)


_QUOTED = re.compile(r"""(['"])((?:(?!\1)[^\\\n]|\\.)*)\1""")
_ENV_TEXT = re.compile(
    r"""(?:getenv|environ\.get|environ\[)\s*\(?\s*(['"])([A-Za-z_]\w*)\1(?:\s*,\s*(['"])([^'"\n]*)\3)?"""
)
_COMPARED_TEXT = re.compile(r"""(==|!=|\bnot\s+in\b|\bin\b)\s*[(\[{]?\s*(['"])([^'"\n]*)\2""")


def _read_with_regexes(text: str) -> SetupFindings:
    """The same findings, less sure, from a setup.py that does not parse (Python 2, a stray
    character): reads and comparisons on one line, strings outside comments."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    found: dict[str, str] = {}
    defaults: dict[str, str] = {}
    for line in lines:
        for match in _ENV_TEXT.finditer(line):
            rest = line[match.end() :]
            compared = [(op in ("==", "in"), value) for op, _q, value in _COMPARED_TEXT.findall(rest)]
            found.setdefault(match[2], choose_value(compared, match[4]))
            if match[4] is not None:
                defaults.setdefault(match[2], match[4])
    strings = [m[2] for line in lines for m in _QUOTED.finditer(line)]
    body = "\n".join(lines)
    downloads = bool(re.search(r"\b(?:urlretrieve|urlopen|requests\.get)\b", body))
    return SetupFindings(
        env_reads=tuple(EnvRead(name, value) for name, value in found.items()),
        archs=frozenset(a for s in strings for a in archs_in_string(s)),
        downloads_prebuilt=downloads and any(_names_binary(s) for s in strings),
        cuda_needs_gpu=bool(re.search(r"cuda\.is_available\(\)", body)),
        sources=tuple(dict.fromkeys(p for s in strings if (p := source_path(s)))),
        parsed=False,
        env_defaults=tuple(defaults.items()),
    )
