"""builder/'s rooms and the arrows between them, read from the folders: each subpackage is a room,
each module on top of builder/ is a room of its own (the words every room uses), and every import
in builder/, read with ast (top, TYPE_CHECKING, functions), is an arrow. The arrows go one way:
no module imports another that imports it back, no room imports a room that imports it back, and
the rooms stand on at most MAX_FLOORS floors. A new folder is a new room with nothing to declare."""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from pathlib import Path

BUILDER = Path(__file__).resolve().parents[2] / "builder"
MAX_TOP_MODULES = 8  # __init__.py included: the words, not the work
# The pipeline's own depth, one room per concept: cli, nightly, pipeline, engine, gc, report,
# attempt, image, index, wheel, variants, errors. A room that stacks a new floor on top says why.
MAX_FLOORS = 12

# Within the pipeline, the top of it: only these may import the build and the nightly.
IMPORTED_ONLY_BY = {
    "wheelbuild.pipeline.build": {
        "wheelbuild.cli.seams",
        "wheelbuild.nightly.night",
        "wheelbuild.pipeline.verify",
    },
    "wheelbuild.nightly.night": {"wheelbuild.cli.nightly"},
    "wheelbuild.cli.main": {"wheelbuild.cli.entry"},
}
# The one room that imports the Docker SDK, and the one module in it that opens a client.
DOCKER_ROOM = "engine"
CLIENT_OPENER = "engine/docker_engine.py"
CLIENT_CALLS = {"from_env", "DockerClient", "APIClient"}

Graph = Mapping[str, set[str]]


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package) for every .py under root (the package wheelbuild)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        found[".".join(["wheelbuild", *parts])] = (path, is_pkg)
    return found


def _imports(name: str, path: Path, is_pkg: bool, known: set[str]) -> set[str]:
    """The modules one module imports: wheelbuild's by their dotted names, others by their top name."""
    package = name if is_pkg else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets |= {
                a.name if a.name.startswith("wheelbuild") else a.name.split(".")[0] for a in node.names
            }
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module:
                module = node.module if node.module.startswith("wheelbuild") else node.module.split(".")[0]
            else:
                continue
            for alias in node.names:  # `from . import engine` imports the module engine
                sub = f"{module}.{alias.name}"
                targets.add(sub if sub in known else module)
    return targets - {name}


def module_graph(root: Path) -> dict[str, set[str]]:
    modules = _modules(root)
    return {name: _imports(name, path, is_pkg, set(modules)) for name, (path, is_pkg) in modules.items()}


def room_of(name: str) -> str:
    """A subpackage's modules are its room; a module on top of builder/ is a room of its own."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "wheelbuild"


def room_graph(modules: Graph) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for name, targets in modules.items():
        arrows = rooms.setdefault(room_of(name), set())
        arrows |= {room_of(t) for t in targets if t in modules and room_of(t) != room_of(name)}
    return rooms


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan), each sorted."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def floors(graph: Graph) -> dict[str, int]:
    """Each room's floor in an acyclic graph: 1 for a room that imports none, else one above the
    highest room it imports."""
    floor: dict[str, int] = {}

    def of(room: str) -> int:
        if room not in floor:
            floor[room] = 1 + max((of(t) for t in graph[room] if t in graph), default=0)
        return floor[room]

    for room in graph:
        of(room)
    return floor


def wrong_arrows(modules: Graph) -> list[str]:
    wrong = []
    for name, targets in sorted(modules.items()):
        room = room_of(name)
        for target in sorted(targets):
            owners = IMPORTED_ONLY_BY.get(target)
            if owners is not None and name not in owners:
                wrong.append(f"{name} -> {target} (only {sorted(owners)} may import it)")
            if target == "docker" and room != DOCKER_ROOM:
                wrong.append(f"{name} -> docker ({room}/ holds no Docker client: the engine/ room does)")
    return wrong


def test_builder_keeps_few_modules_on_top() -> None:
    top = sorted(p.name for p in BUILDER.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, f"{top}: put what a module does in a folder named for it"


def test_no_module_and_no_room_imports_back() -> None:
    modules = module_graph(BUILDER)
    assert cycles(modules) == []
    assert cycles(room_graph(modules)) == []


def test_the_rooms_stand_on_few_floors() -> None:
    floor = floors(room_graph(module_graph(BUILDER)))
    assert max(floor.values()) <= MAX_FLOORS, sorted(floor.items(), key=lambda item: -item[1])


def test_the_pipeline_top_and_docker_stay_where_they_belong() -> None:
    assert wrong_arrows(module_graph(BUILDER)) == []


def client_openers(root: Path) -> list[str]:
    """Where builder/ opens a docker client (docker.from_env(), DockerClient(), APIClient())."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
                if called in CLIENT_CALLS:
                    found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return found


def test_one_module_opens_the_docker_client() -> None:
    """DockerEngine opens the client (pinged, DockerUnavailable when no daemon answers); the fleet
    and every other Docker use take it from there."""
    assert [where.split(":")[0] for where in client_openers(BUILDER)] == [CLIENT_OPENER]


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if path.parent != root and not (path.parent / "__init__.py").exists():
            (path.parent / "__init__.py").write_text("")
    return root


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """The checks themselves: a module cycle inside one room, a cycle between rooms (one arrow made
    in a function, by its absolute name), a Docker import outside engine/, a client opened outside
    engine/docker_engine.py and an import of the build from below are each found; the floors of a
    chain are counted."""
    root = _tree(
        tmp_path / "builder",
        {
            "errors.py": "",
            "plan/planner.py": "from ..errors import X\nfrom . import fleet\n",
            "plan/fleet.py": "from .planner import Plan\nimport docker\n",
            "engine/docker_engine.py": "from ..plan.planner import Plan\n",
            "wheel/stamp.py": "def f():\n    from wheelbuild.engine.docker_engine import DockerEngine\n",
            "engine/attempt_run.py": "from ..wheel import stamp\n",
            "pipeline/build.py": "",
            "index/publish.py": "from ..pipeline import build\n",
            "cli/dist.py": "def f():\n    import docker\n    return docker.from_env()\n",
        },
    )
    modules = module_graph(root)
    assert cycles(modules) == [["wheelbuild.plan.fleet", "wheelbuild.plan.planner"]]
    assert cycles(room_graph(modules)) == [["engine", "wheel"]]
    assert wrong_arrows(modules) == [
        "wheelbuild.cli.dist -> docker (cli/ holds no Docker client: the engine/ room does)",
        "wheelbuild.index.publish -> wheelbuild.pipeline.build (only ['wheelbuild.cli.seams', "
        "'wheelbuild.nightly.night', 'wheelbuild.pipeline.verify'] may import it)",
        "wheelbuild.plan.fleet -> docker (plan/ holds no Docker client: the engine/ room does)",
    ]
    assert client_openers(root) == ["cli/dist.py:3"]
    chain = {"cli": {"pipeline"}, "pipeline": {"plan", "errors"}, "plan": {"errors"}, "errors": set()}
    assert floors(chain) == {"cli": 4, "pipeline": 3, "plan": 2, "errors": 1}
