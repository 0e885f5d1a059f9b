"""The example built for real, its statement signed at publish, checked with no network, and
rebuilt from the statement alone (every unit compiled again, the compiler cache not read): the
same sha256. Two builds of the example, a few minutes each."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.integration.conftest import TORCH_INDEX, WHEELBUILD, wheelbuild
from tests.provenancekit import ssh_key


def test_a_signed_statement_verifies_offline_and_a_rebuild_from_it_gives_the_same_wheel(
    cuda_image: str, tmp_path: Path
) -> None:
    built = wheelbuild(
        "build", "wbdemo", "--torch", "cu130", "--torch-index-url", TORCH_INDEX, "--archs", "120", "--python", "3.11",
        "--memory", "4g", "--output-dir", str(tmp_path / "out"), "--no-gate", "--rebuild",
        # Cold, as the rebuild is: in one CI run a compiler cache warmed by the suite's other builds
        # handed this build a binding.o whose DWARF differed (.debug_info 176 bytes apart, every
        # input the same). That gap is open (issue 32's note); test_reproducible checks a cache
        # warmed by builds of the same inputs.
        "--no-compiler-cache",
        timeout=3600,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr
    run_dir = tmp_path / "out" / "runs" / built.run_id
    (wheel,) = run_dir.glob("*.whl")
    statement = json.loads((run_dir / f"{wheel.name}.intoto.json").read_text())
    materials = {m["name"]: m for m in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    torch = [m for name, m in materials.items() if name.startswith("torch-") and name.endswith(".whl")]
    assert torch and all(len(m["digest"]["sha256"]) == 64 and "lock" in m["annotations"] for m in torch)
    assert statement["predicate"]["buildDefinition"]["externalParameters"]["package"] == "wbdemo"

    key = ssh_key(tmp_path / "keys", "id_ed25519")
    published = wheelbuild("publish", str(wheel), "--to", str(tmp_path / "tree"), "--sign-key", str(key))
    assert published.returncode == 0, published.stderr
    served = tmp_path / "tree" / "files" / wheel.name

    offline = subprocess.run(
        ["unshare", "-n", WHEELBUILD, "verify", str(served), "--key", f"{key}.pub"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert "signed by SHA256:" in offline.stdout

    rebuilt = wheelbuild(
        "verify", str(served), "--key", f"{key}.pub", "--rebuild", "--output-dir", str(tmp_path / "again"),
        timeout=3600,
    )  # fmt: skip
    assert rebuilt.returncode == 0, rebuilt.stdout[-4000:] + rebuilt.stderr
    assert "rebuilt: the same sha256" in rebuilt.stdout
