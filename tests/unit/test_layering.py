"""builder/'s rooms and the arrows between them (issue 13, part 7): every import in builder/, read
with ast, goes along an allowed arrow, so no stage imports a room above it."""

from __future__ import annotations

import ast
from pathlib import Path

BUILDER = Path(__file__).resolve().parents[2] / "builder"

# The stages are folders; their room is their name.
STAGES = {"plan", "run", "wheel", "index", "recipes", "report"}

# The modules on top of builder/, each in its room. A new one must be placed here.
TOP = {
    # shared leaves every room may use
    "wheelbuild": "shared",
    "errors": "shared",
    "names": "shared",
    "units": "shared",
    "secrets": "shared",
    "variants": "shared",
    "bundled": "shared",
    "bounded": "shared",
    "records": "shared",  # typed records as JSON: the build report's, by their fields' types
    "dist": "shared",  # --dist's settings and sccache's client config: pure, read by spec, plan and run
    "provenance": "shared",  # a wheel's in-toto Statement and its DSSE envelope: pure
    "signing": "shared",  # Ed25519 and ssh-ed25519 keys: DSSE signatures made and checked
    # what to build: BuildSpec, Resources, GpuMode and the configuration that fills them
    "spec": "spec",
    "config": "spec",
    # the pipeline: orchestration and what it alone uses
    "build": "pipeline",
    "build_run": "pipeline",
    "import_gate": "pipeline",
    "attempts": "pipeline",
    "range_gate": "pipeline",
    "nightly": "pipeline",
    "nightly_publish": "pipeline",
    "nightly_index": "pipeline",
    "nightly_coverage": "pipeline",
    "calibrate": "pipeline",
    "preflight": "pipeline",
    "prebuild": "pipeline",  # every check build makes before its first container; plan runs it too
    "prune": "pipeline",
    "matrix": "pipeline",
    "matrix_runs": "pipeline",
    "sources": "pipeline",
    "pythons": "pipeline",
    "project_pages": "pipeline",  # a simple index's project page, read over HTTP
    "torch_releases": "pipeline",  # torch's releases on its index: Pythons, CUDA, the newest
    "remote_wheel": "pipeline",  # a wheel on a server: one member by byte ranges, or whole
    "requires_python": "pipeline",
    "check": "pipeline",
    "statements": "pipeline",  # the provenance statement a build writes beside each wheel
    "verify": "pipeline",  # `wheelbuild verify`: a wheel against its signed statement, or rebuilt
    "cli": "cli",
    "entry": "cli",  # the console script: loads cli.py, so a Ctrl-C while it loads is one line
    "cli_options": "cli",
    "cli_types": "cli",  # the CLI's click types and option classes (GIVEN_PATH, RenamedOption)
    "cli_spec": "cli",  # build's and plan's options -> BuildSpec, one way for both
    "cli_index": "cli",
    "cli_nightly": "cli",
    "cli_dist": "cli",
    "cli_wheels": "cli",
    "cli_verify": "cli",
}

_BELOW_PIPELINE = {"shared", "plan", "wheel", "recipes", "spec", "run", "index", "report"}

# room -> the rooms it may import (its own included). Lower stages never import higher ones:
# plan/ and wheel/ are pure leaves, run/ may use plan/ (and what to build), index/ knows wheel/ only.
ALLOWED = {
    "shared": {"shared"},
    "plan": {"plan", "shared"},
    "wheel": {"wheel", "shared"},
    "recipes": {"recipes", "plan", "shared"},
    "spec": {"spec", "recipes", "shared"},
    "run": {"run", "plan", "recipes", "spec", "shared"},
    "index": {"index", "wheel", "shared"},
    # the build's record and its page: what plan/, run/ and wheel/ produced, read back
    "report": {"report", "plan", "run", "wheel", "shared"},
    "pipeline": _BELOW_PIPELINE | {"pipeline"},
    "cli": _BELOW_PIPELINE | {"pipeline", "cli"},
}

# Within the pipeline, the top of it: only these may import build.py and nightly.py.
IMPORTED_ONLY_BY = {
    "wheelbuild.build": {"wheelbuild.cli", "wheelbuild.nightly", "wheelbuild.verify"},  # verify --rebuild
    "wheelbuild.nightly": {"wheelbuild.cli_nightly"},
    "wheelbuild.cli": {"wheelbuild.entry"},
}


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
    """The wheelbuild modules one module imports (anywhere in it: top, TYPE_CHECKING, functions)."""
    package = name if is_pkg else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets |= {a.name for a in node.names if a.name.split(".")[0] == "wheelbuild"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and node.module.split(".")[0] == "wheelbuild":
                module = node.module
            else:
                continue
            for alias in node.names:  # `from . import engine` imports the module engine
                sub = f"{module}.{alias.name}"
                targets.add(sub if sub in known else module)
    return targets


def room_of(name: str) -> str:
    parts = name.split(".")
    if len(parts) > 1 and parts[1] in STAGES:
        return parts[1]
    top = parts[1] if len(parts) > 1 else "wheelbuild"
    assert top in TOP, f"{name}: a new module on top of builder/; put it in a room in TOP (or a stage folder)"
    return TOP[top]


def wrong_arrows(root: Path) -> list[str]:
    """Every import under root that goes against ALLOWED or IMPORTED_ONLY_BY, as 'a -> b (room -> room)'."""
    modules = _modules(root)
    wrong = []
    for name, (path, is_pkg) in modules.items():
        for target in sorted(_imports(name, path, is_pkg, set(modules))):
            if target == name:
                continue
            src, dst = room_of(name), room_of(target)
            if dst not in ALLOWED[src]:
                wrong.append(f"{name} -> {target} ({src} -> {dst})")
            owners = IMPORTED_ONLY_BY.get(target)
            if owners is not None and name not in owners:
                wrong.append(f"{name} -> {target} (only {sorted(owners) or 'nobody'} may import it)")
    return wrong


def test_every_import_in_builder_goes_along_an_allowed_arrow() -> None:
    assert wrong_arrows(BUILDER) == []


def test_every_stage_is_a_folder_and_every_room_is_used() -> None:
    for stage in STAGES:
        assert (BUILDER / stage / "__init__.py").is_file(), stage
    rooms = {room_of(name) for name in _modules(BUILDER)}
    assert rooms == set(ALLOWED)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if path.parent != root and not (path.parent / "__init__.py").exists():
            (path.parent / "__init__.py").write_text("")
    return root


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    """The check itself: a plan module reaching up into run/, a wheel module into index/ (in a
    function, by its absolute name), and a stage importing build.py are each refused."""
    root = _tree(
        tmp_path / "builder",
        {
            "errors.py": "",
            "build.py": "",
            "plan/planner.py": "from ..errors import X\nfrom ..run import engine\n",
            "run/engine.py": "from ..plan.planner import Plan\n",
            "wheel/stamp.py": "def f():\n    from wheelbuild.index.publish import publish\n",
            "index/publish.py": "from .. import build\n",
        },
    )
    assert wrong_arrows(root) == [
        "wheelbuild.index.publish -> wheelbuild.build (index -> pipeline)",
        "wheelbuild.index.publish -> wheelbuild.build (only ['wheelbuild.cli', 'wheelbuild.nightly', "
        "'wheelbuild.verify'] may import it)",
        "wheelbuild.plan.planner -> wheelbuild.run.engine (plan -> run)",
        "wheelbuild.wheel.stamp -> wheelbuild.index.publish (wheel -> index)",
    ]
