"""The image's Python scripts (images/wheelbuild-*, no .py suffix) as modules, so tests can call
their pure functions: the same file the build mounts or copies into the image."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType


def script_module(path: Path) -> ModuleType:
    """The script at `path`, executed as a fresh module named after it."""
    name = path.name.replace("-", "_")
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
