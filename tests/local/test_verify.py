"""A wheel's statement from its run folder to the tree and back, through the real CLI: `publish
--sign-key` signs it into files/<wheel>.intoto.jsonl, `serve` serves it beside the wheel and the
project pages link it, and `wheelbuild verify`, with no network at all (its own network
namespace), passes the published wheel and refuses, each with its own exit code, a wheel with one
byte changed (73), a statement signed by another key (72), a statement of another wheel (74),
inputs other than this checkout's (75), no statement (71) and a key it cannot use (76).
`publish --require-signed` refuses an unsigned statement and a missing one."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.indexkit import make_wheel
from tests.provenancekit import PUBLISH_CHECKS, cuda_wheel, run_folder, ssh_key
from tests.serving import running_server
from tests.unit.test_verify import Run


def _offline() -> list[str]:
    """A command prefix that runs it in a network namespace of its own: no network to reach."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-n", "true"], check=False).returncode:
        pytest.skip("unshare -n is not available here (needs root or user namespaces)")
    return ["unshare", "-n"]


@pytest.fixture
def published(tmp_path: Path, run_cli: Run) -> tuple[Path, Path, Path]:
    """(the tree's wheel, the signing key, the tree): a run folder published with --sign-key."""
    wheel = run_folder(tmp_path)
    key = ssh_key(tmp_path / "keys", "id_ed25519")
    done = run_cli(
        "publish", str(wheel), *PUBLISH_CHECKS, "--to", str(tmp_path / "tree"), "--sign-key", str(key)
    )
    assert done.returncode == 0, done.stderr
    return tmp_path / "tree" / "files" / wheel.name, key, tmp_path / "tree"


def _verify(run_cli: Run, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("verify", *args, prefix=tuple(_offline()))


def test_a_signed_published_wheel_verifies_offline_and_its_statement_is_served_and_linked(
    published: tuple[Path, Path, Path], run_cli: Run
) -> None:
    wheel, key, tree = published
    sidecar = wheel.with_name(wheel.name + ".intoto.jsonl")
    assert len(sidecar.read_bytes().splitlines()) == 1  # one DSSE envelope, one line
    assert json.loads(sidecar.read_bytes())["signatures"][0]["keyid"].startswith("SHA256:")

    done = _verify(run_cli, str(wheel), "--key", str(key.with_suffix(".pub")))
    assert done.returncode == 0, done.stderr
    assert "signed by SHA256:" in done.stdout and "its subject is this wheel" in done.stdout
    assert "images/Dockerfile.cuda131" in done.stdout and "source" in done.stdout  # inputs compared here
    assert done.stdout.rstrip().endswith("verified")

    with running_server(tree) as url:
        base = url.removesuffix("simple/")
        with urllib.request.urlopen(f"{base}files/{wheel.name.replace('+', '%2B')}.intoto.jsonl") as answer:
            assert answer.headers["Content-Type"].startswith("application/json")
            assert answer.read() == sidecar.read_bytes()
        request = urllib.request.Request(
            f"{url}wbtiny/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
        )
        with urllib.request.urlopen(request) as answer:
            (entry,) = json.load(answer)["files"]
        assert entry["_provenance"] == f"../../files/{wheel.name.replace('+', '%2B')}.intoto.jsonl"
        with urllib.request.urlopen(f"{url}wbtiny/") as answer:
            assert "data-wheelbuild-provenance=" in answer.read().decode()
        page = urllib.request.Request(
            base, headers={"Accept": "text/html"}
        )  # a browser's: the page for people
        with urllib.request.urlopen(page) as answer:
            assert '<a class="provenance" href="files/' in answer.read().decode()


def test_a_wheel_with_one_byte_changed_is_refused_with_exit_73(
    published: tuple[Path, Path, Path], run_cli: Run, tmp_path: Path
) -> None:
    wheel, key, _tree = published
    copy = tmp_path / "copy" / wheel.name
    copy.parent.mkdir()
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0x01
    copy.write_bytes(bytes(data))
    shutil.copy(wheel.with_name(wheel.name + ".intoto.jsonl"), copy.parent)
    done = _verify(run_cli, str(copy), "--key", str(key.with_suffix(".pub")))
    assert done.returncode == 73, done.stderr
    assert "not the file its build made" in done.stderr


def test_a_statement_signed_by_another_key_is_refused_with_exit_72(
    published: tuple[Path, Path, Path], run_cli: Run, tmp_path: Path
) -> None:
    wheel, _key, _tree = published
    other = ssh_key(tmp_path / "keys", "someone_else")
    done = _verify(run_cli, str(wheel), "--key", str(other.with_suffix(".pub")))
    assert done.returncode == 72, done.stderr
    assert "no signature on" in done.stderr


def test_a_statement_of_another_wheel_is_refused_with_exit_74(
    published: tuple[Path, Path, Path], run_cli: Run, tmp_path: Path
) -> None:
    wheel, key, _tree = published
    other = make_wheel(tmp_path / "other", "wbother")
    shutil.copy(wheel.with_name(wheel.name + ".intoto.jsonl"), other.with_name(other.name + ".intoto.jsonl"))
    done = _verify(run_cli, str(other), "--key", str(key.with_suffix(".pub")))
    assert done.returncode == 74, done.stderr
    assert f"is the statement of {wheel.name}" in done.stderr


def test_inputs_other_than_the_ones_here_are_refused_with_exit_75(
    published: tuple[Path, Path, Path], run_cli: Run, tmp_path: Path
) -> None:
    wheel, key, _tree = published
    source = tmp_path / "src-wbtiny"
    (source / "setup.py").write_text("# another source\n")
    done = _verify(run_cli, str(wheel), "--key", str(key.with_suffix(".pub")))
    assert done.returncode == 75, done.stderr
    assert "source: the statement says" in done.stderr
    assert (
        _verify(run_cli, str(wheel), "--key", str(key.with_suffix(".pub")), "--no-materials").returncode == 0
    )


def test_no_statement_exit_71_and_an_unusable_key_exit_76(
    published: tuple[Path, Path, Path], run_cli: Run, tmp_path: Path
) -> None:
    wheel, key, _tree = published
    alone = make_wheel(tmp_path / "alone")
    assert _verify(run_cli, str(alone), "--key", str(key.with_suffix(".pub"))).returncode == 71
    junk = tmp_path / "junk.pub"
    junk.write_text("not a key\n")
    done = _verify(run_cli, str(wheel), "--key", str(junk))
    assert done.returncode == 76 and "not a public key" in done.stderr


def test_a_wheel_published_without_a_statement_is_warned_of_and_verify_says_the_index_has_none(
    tmp_path: Path, run_cli: Run
) -> None:
    """It used to be published without a word, and verify then sent the user to download a
    statement the index never had."""
    bare = cuda_wheel(tmp_path / "copied", "wbbare")  # copied out of its run folder: no statement
    with_one = run_folder(tmp_path)
    tree = tmp_path / "tree"
    done = run_cli("publish", str(bare), str(with_one), *PUBLISH_CHECKS, "--to", str(tree))
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {bare.name} has no provenance statement beside it ({bare.name}.intoto.json), so the "
        "index will have none for `wheelbuild verify`; publish it from the run folder `wheelbuild build` "
        "wrote, where its statement is"
    ]
    assert (tree / "files" / f"{with_one.name}.intoto.jsonl").is_file()
    assert not (tree / "files" / f"{bare.name}.intoto.jsonl").exists()

    refused = _verify(run_cli, str(tree / "files" / bare.name))
    assert refused.returncode == 71, refused.stderr
    cause, remedy = refused.stderr.splitlines()
    assert cause == (
        f"error: {bare.name} has no provenance statement: the index {tree} has none for it "
        "(it was published without one)"
    )
    assert "download" not in remedy and remedy.startswith("remedy: publish it again from the run folder")


def test_without_a_key_verify_says_only_the_hashes_were_checked_and_exits_78(
    tmp_path: Path, run_cli: Run
) -> None:
    """It used to end with "verified", exit 0: a script's `verify && install` passed a wheel whose
    statement anyone who could swap the wheel could swap too."""
    wheel = run_folder(tmp_path)  # a run folder's bare statement, never signed
    done = _verify(run_cli, str(wheel))
    assert done.returncode == 78, done.stderr
    assert "its subject is this wheel (file name and sha256 match)" in done.stdout
    assert "    signer: not checked (no --key)" in done.stdout
    assert "verified" not in done.stdout + done.stderr
    cause, remedy = done.stderr.splitlines()
    assert cause == (
        f"error: {wheel.name}: its sha256 matches its statement, but who made them was not checked (no --key)"
    )
    assert remedy.startswith("remedy: give --key with the publisher's public key, or --rebuild")
    key = ssh_key(tmp_path / "keys", "id_ed25519")
    unsigned = _verify(run_cli, str(wheel), "--key", f"{key}.pub")
    assert unsigned.returncode == 72 and "it is not signed" in unsigned.stderr


def test_a_wheel_published_unsigned_then_with_a_key_gains_its_signature(tmp_path: Path, run_cli: Run) -> None:
    """Published without a key, then again with --sign-key: the same bytes, so the wheel stays;
    its statement in the tree is replaced by the same statement signed, and verify --key passes.
    (It used to say "already there", keep the unsigned statement, and verify then failed: 72.)"""
    wheel = run_folder(tmp_path)
    key = ssh_key(tmp_path / "keys", "id_ed25519")
    tree = tmp_path / "tree"
    first = run_cli("publish", str(wheel), *PUBLISH_CHECKS, "--to", str(tree))
    assert first.returncode == 0, first.stderr
    sidecar = tree / "files" / f"{wheel.name}.intoto.jsonl"
    unsigned = json.loads(sidecar.read_bytes())
    assert unsigned["signatures"] == []
    again = run_cli("publish", str(wheel), *PUBLISH_CHECKS, "--to", str(tree), "--sign-key", str(key))
    assert again.returncode == 0, again.stderr
    signed = json.loads(sidecar.read_bytes())
    assert signed["payload"] == unsigned["payload"] and [s["keyid"][:7] for s in signed["signatures"]] == [
        "SHA256:"
    ]
    done = _verify(run_cli, str(tree / "files" / wheel.name), "--key", str(key.with_suffix(".pub")))
    assert done.returncode == 0, done.stderr
    # --require-signed with a key that did not sign it: the tree's entry is not taken as signed.
    other = ssh_key(tmp_path / "keys", "other")
    refused = run_cli(
        "publish",
        str(wheel),
        *PUBLISH_CHECKS,
        "--to",
        str(tree),
        "--require-signed",
        "--key",
        str(other.with_suffix(".pub")),
    )
    assert refused.returncode == 72, refused.stderr
