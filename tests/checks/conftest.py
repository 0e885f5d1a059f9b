"""The project's own checks: ruff's scope, mypy, the nightly workflow's schema and zizmor audits,
code shape and layering. Every test here is marked `checks`."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/checks/ is `checks` (a conftest's pytestmark marks only the conftest)."""
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.checks)
