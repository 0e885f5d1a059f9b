"""The unit suite: no Docker, no network, no compiler, no external tool; fast. Every test here is
marked `unit`; the fixtures are tests/clikit.py's (all but the sdist that is downloaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.admitkit import bench  # noqa: F401  (the fixture, found by name)
from tests.clikit import (  # noqa: F401  (fixtures, found by name)
    fake_torch_index,
    here,
    invoke,
    make_config,
    make_result,
    own_cache_dir,
    run_cli,
)
from tests.flowkit import flow  # noqa: F401  (the fixture, found by name)

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/unit/ is `unit` (a conftest's pytestmark marks only the conftest)."""
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.unit)
