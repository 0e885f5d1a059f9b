"""The local suite: real servers on 127.0.0.1, real compilers and tools on this machine (gcc, nvcc
and ninja from the test extras' wheels, pip, uv, ssh-keygen, strace, chromium), and PyPI for the
tests marked `network`; never Docker. Every test here is marked `local`; the fixtures are
tests/clikit.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.admitkit import bench  # noqa: F401  (the fixture, found by name)
from tests.clikit import (  # noqa: F401  (fixtures, found by name)
    fake_torch_index,
    flash_attn_sdist,
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
    """Every test under tests/local/ is `local` (a conftest's pytestmark marks only the conftest)."""
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.local)
