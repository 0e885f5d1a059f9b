"""The nightly matrix: wheelbuild.toml's [[build]] tables expanded into cells, one `wheelbuild
build` each. Pure: a config in, cells out (tomllib to read, no Docker, no network).

    [[build]]
    package = "flash-attn"          # a recipe, a name on the index (causal-conv1d), a project
                                    # path, or an sdist URL#sha256=
    versions = ["2.8.3"]            # releases of a recipe or a name ("latest": the newest);
                                    # omit for a path or an sdist
    torch = ["cu130:newest-3..newest", "cu128"]   # torch variants: a CUDA tag or a rule means
                                    # the newest release(s) on the index tonight
    python = ["3.11", "3.12"]       # one cell per Python; leave it out for the default Pythons
    archs = ["100,120"]             # each entry is one cell's arch list
    pin = "proven"                  # wheels require the torch range they loaded with; a cell
                                    # a published wheel's range covers is not built again
    torch-range = false             # try no torch release but the cell's (default: true)

    [publish]
    to = "host:/srv/wheels/{variant}"   # where each variant's wheels go (`wheelbuild nightly`
                                        # has no default: NIGHTLY_PUBLISH_TO or --to)
    index = "https://host/{variant}/simple/"   # that tree's index over HTTP, for a remote `to`

Every combination of a table's lists is a cell. A cell names what `wheelbuild build` takes.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.version import Version

from ..errors import BadArgument
from ..index.remote import DEFAULT_TO
from ..spec.build_spec import format_archs, parse_archs, parse_ptx, parse_python
from ..spec.config import read_toml
from ..variants import parse_torch_rule, parse_variant

__all__ = ["Cell", "Matrix", "github_matrix", "load_matrix", "parse_matrix", "tracking"]

_KEYS = {"package", "versions", "torch", "python", "archs", "pin", "torch-range"}


@dataclass(frozen=True)
class Cell:
    package: str
    version: str | None
    torch: str  # as written: cu130 or 2.11.0+cu130
    python: str | None  # cp311; None: the default Pythons (`wheelbuild nightly schedule` expands it)
    archs: str  # 100,120
    # "proven": the wheel requires the torch range it loaded with (--pin proven), and a cell whose
    # torch a published wheel's range already covers is not built again.
    pin: str = "built"
    torch_range: bool = True  # each wheel against the torch releases around its own (--torch-range)

    @property
    def id(self) -> str:
        """A name fit for a job and an artifact: flash-attn-2.8.3-cu130-cp311-100.120."""
        name = Path(self.package.split("#")[0]).name.removesuffix(".tar.gz") or self.package
        parts = [name, self.version, self.torch.replace("+", "-"), self.python, self.archs.replace(",", ".")]
        # A word without spaces or quotes: it names a job, an artifact, a folder, a shell word.
        return re.sub(r"[^A-Za-z0-9._-]+", "_", "-".join(p for p in parts if p))

    def build_args(self) -> list[str]:
        """The `wheelbuild build` arguments of this cell."""
        args = [self.package, "--torch", self.torch]
        args += ["--python", self.python] if self.python else []
        args += ["--archs", self.archs]
        args += ["--pin", self.pin] if self.pin != "built" else []
        args += [] if self.torch_range else ["--no-torch-range"]
        return args + (["--version", self.version] if self.version else [])


@dataclass(frozen=True)
class Matrix:
    cells: tuple[Cell, ...]
    publish_to: str  # with {variant}; the local wheelhouse when the file names none (`matrix`)
    # As the file says (None: not declared): the nightly never falls back to a local folder.
    declared_to: str | None = None
    index: str | None = None  # [publish] index: the target's index over HTTP, with {variant}


_EXAMPLES = {"versions": "2.8.3", "torch": "cu130", "python": "3.11", "archs": "100,120"}


def _strings(table: dict[str, object], key: str, where: str, default: list[str] | None = None) -> list[str]:
    value = table.get(key, default)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise BadArgument(
            f"{where}: `{key}` must be a non-empty list of strings, got {value!r}",
            f'write e.g. {key} = ["{_EXAMPLES.get(key, "...")}"]',
        )
    return list(value)


def parse_matrix(config: dict[str, object], source: str = "wheelbuild.toml") -> Matrix:
    builds = config.get("build")
    if not isinstance(builds, list) or not builds:
        raise BadArgument(f"{source} declares no [[build]] table", "add one: see `wheelbuild matrix --help`")
    cells: list[Cell] = []
    for number, table in enumerate(builds, 1):
        where = f"{source} [[build]] #{number}"
        unknown = set(table) - _KEYS
        if unknown:
            raise BadArgument(
                f"{where}: unknown key(s) {', '.join(sorted(unknown))}", f"use {', '.join(sorted(_KEYS))}"
            )
        package = table.get("package")
        if not isinstance(package, str) or not package:
            raise BadArgument(f"{where}: `package` is missing", 'write e.g. package = "flash-attn"')
        versions: list[str | None] = (
            list(_strings(table, "versions", where)) if "versions" in table else [None]
        )
        torches = _strings(table, "torch", where)
        for torch in torches:  # a bad one fails here, not on a runner at night
            if parse_torch_rule(torch) is None:
                parse_variant(torch)
        pythons: list[str | None] = (
            [parse_python(p) for p in _strings(table, "python", where)] if "python" in table else [None]
        )
        archs = [
            format_archs(parse_archs(a), parse_ptx(a)) for a in _strings(table, "archs", where, ["100,120"])
        ]
        pin = table.get("pin", "built")
        if pin not in ("built", "proven"):
            raise BadArgument(f"{where}: `pin` is {pin!r}", 'write pin = "proven" (or "built", the default)')
        torch_range = table.get("torch-range", True)
        if not isinstance(torch_range, bool) or (pin == "proven" and not torch_range):
            raise BadArgument(
                f"{where}: `torch-range` is {torch_range!r}"
                + (' with pin = "proven"' if pin == "proven" else ""),
                'write torch-range = false (no range tried) or true (the default; pin = "proven" needs it)',
            )
        for version, torch, python, arch in itertools.product(versions, torches, pythons, archs):
            cells.append(Cell(package, version, torch, python, arch, pin=pin, torch_range=torch_range))
    ids = [c.id for c in cells]
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise BadArgument(f"{source} names the same cell twice: {', '.join(twice)}", "remove the repeat")
    publish = config.get("publish", {})
    if not isinstance(publish, dict):
        raise BadArgument(f"{source}: [publish] is not a table", 'write [publish] then to = "..."')
    declared = {k: publish.get(k) for k in ("to", "index")}
    for key, value in declared.items():
        if value is not None and not isinstance(value, str):
            raise BadArgument(f"{source}: [publish] {key} is not a string", f'write {key} = "..."')
    return Matrix(
        cells=tuple(cells),
        publish_to=declared["to"] or DEFAULT_TO,
        declared_to=declared["to"] or None,
        index=declared["index"] or None,
    )


def tracking(matrix: Matrix, newest: dict[str, str], newest_torch: dict[str, str] | None = None) -> Matrix:
    """The matrix with each package's newest release (package -> version) added wherever the
    package's cells list versions and lack that one, and each CUDA tag's newest torch (tag ->
    "2.12.0+cu130") where it is newer than the variant the cells name: `--track latest`."""
    cells = list(matrix.cells)
    for cell in matrix.cells:
        version = newest.get(cell.package)
        if cell.version is not None and version is not None:
            extra = replace(cell, version=version)
            if extra not in cells:
                cells.append(extra)
    for cell in list(cells):
        variant = parse_variant(cell.torch)
        torch = (newest_torch or {}).get(variant.tag)
        if torch is not None and Version(torch.split("+")[0]) > Version(variant.torch_version):
            extra = replace(cell, torch=torch)
            if extra not in cells:
                cells.append(extra)
    return replace(matrix, cells=tuple(cells))


def load_matrix(path: Path) -> Matrix:
    # One reader for every config file: directories, devices, huge, binary or too deeply nested
    # files are refused the same way for the matrix and for [tool.wheelbuild].
    config = read_toml(
        path,
        remedy="pass --config a wheelbuild.toml",
        missing="write one (see docs/guides/nightly.md), or pass --config-file",
    )
    return parse_matrix(config, str(path))


def github_matrix(cells: Iterable[Cell]) -> str:
    """A GitHub Actions `strategy.matrix` value: {"include": [{"id", "args", ...}]}."""
    include = [
        {
            "id": c.id,
            "package": c.package,
            "version": c.version or "",
            "torch": c.torch,
            "python": c.python or "",
            "archs": c.archs,
            "args": " ".join(c.build_args()),
        }
        for c in cells
    ]
    return json.dumps({"include": include}, separators=(",", ":"))
