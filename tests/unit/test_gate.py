"""The import gate's pure half: which modules and packages a wheel asks to be imported, which
symbols the container must find, and what a container's answer means (the typed error, with the
first undefined symbol demangled). The container itself is tested in tests/integration/test_gate.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from wheelbuild.engine.gate_container import gate_answer


@pytest.mark.parametrize("shape", ["missing", "fifo", "link", "oversized", "a list", "broken JSON"])
def test_a_gate_answer_that_is_not_one_reads_as_no_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    # The answer is written where the wheel's own code ran: it gets no more trust than the wheel.
    monkeypatch.setattr("wheelbuild.engine.gate_container.MAX_GATE_ANSWER", 1024)
    answer = tmp_path / "gate.json"
    if shape == "fifo":
        os.mkfifo(answer)  # a blocking read would hang the build
    elif shape == "link":
        (tmp_path / "elsewhere.json").write_text('{"passed": true}')
        answer.symlink_to(tmp_path / "elsewhere.json")
    elif shape == "oversized":
        answer.write_text('{"passed": true, "pad": "' + "x" * 2048 + '"}')
    elif shape == "a list":
        answer.write_text('[{"passed": true}]')
    elif shape == "broken JSON":
        answer.write_text('{"passed": tr')
    assert gate_answer(answer) is None


def test_a_gate_answer_within_bounds_is_read_as_written(tmp_path: Path) -> None:
    (tmp_path / "gate.json").write_text('{"passed": true, "imports": []}')
    assert gate_answer(tmp_path / "gate.json") == {"passed": True, "imports": []}
