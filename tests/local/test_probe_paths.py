"""The hardening probe's path cases through the real CLI (each used to hang, spin, write through a
link, or end in a traceback): `report` on a run folder whose page is a link or a directory,
`diff` of a FIFO or a link to /dev/zero named like a wheel, and `publish --sign-key` with a key
others can read. Each is one line of cause and one of remedy, with its exit code."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.indexkit import make_wheel
from tests.provenancekit import PUBLISH_CHECKS, run_folder, ssh_key
from tests.reportkit import range_report

Run = Callable[..., subprocess.CompletedProcess[str]]


def _one_line(done: subprocess.CompletedProcess[str], code: int, says: str) -> None:
    assert done.returncode == code, done.stdout + done.stderr
    cause, remedy = done.stderr.splitlines()
    assert cause.startswith("error: ") and says in cause, cause
    assert remedy.startswith("remedy: ")


def test_report_replaces_a_page_that_is_a_link_and_refuses_a_directory(tmp_path: Path, run_cli: Run) -> None:
    run = tmp_path / "artifact"
    run.mkdir()
    (run / "build-report.json").write_text(json.dumps(range_report()))
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    (run / "build-report.html").symlink_to(precious)
    done = run_cli("report", str(run))
    assert done.returncode == 0, done.stderr
    assert precious.read_text() == "mine\n" and not (run / "build-report.html").is_symlink()
    (run / "build-report.html").unlink()
    (run / "build-report.html").mkdir()
    _one_line(run_cli("report", str(run)), 19, "is a directory, so the page cannot be written there")


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero"])
def test_diff_of_a_fifo_or_a_device_named_like_a_wheel_is_one_line(
    tmp_path: Path, run_cli: Run, kind: str
) -> None:
    wheel = make_wheel(tmp_path / "in")
    hostile = tmp_path / wheel.name.replace("0.1.0", "0.2.0")
    if kind == "fifo":
        os.mkfifo(hostile)
    else:
        hostile.symlink_to("/dev/zero")
    _one_line(run_cli("diff", str(wheel), str(hostile)), 52, "not a regular file")


def test_publish_with_a_signing_key_others_can_read_is_refused_and_nothing_is_written(
    tmp_path: Path, run_cli: Run
) -> None:
    wheel = run_folder(tmp_path)
    key = ssh_key(tmp_path / "keys", "id_ed25519")
    key.chmod(0o644)
    done = run_cli(
        "publish", str(wheel), *PUBLISH_CHECKS, "--to", str(tmp_path / "tree"), "--sign-key", str(key)
    )
    _one_line(done, 76, "readable by its group or others (mode 0644)")
    assert "chmod 600" in done.stderr
    assert not (tmp_path / "tree").exists()
