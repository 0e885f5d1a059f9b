"""Cicc admission with the real toolchain: images/wheelbuild-cicc-admission points the build image's
nvcc.profile at wheelbuild-admit --cicc, and real nvcc compiles, through real sccache, take turns
in cicc when their ciccs' costs do not fit the budget together (and only then).

In the build image, with images/ mounted as a build mounts it: two CUDA sources compiled at once
by `wheelbuild-admit sccache nvcc`, while a poller reads the wrapper's ledger. Nothing is mocked;
each cicc runs a second or two and the test takes seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest
from wheelbuild.wheel.contents import archs_in_elf

pytestmark = pytest.mark.docker

IMAGES = Path(__file__).resolve().parents[2] / "images"

# Enough unrolled kernels that each cicc runs for a second or two: long enough that the two
# compiles' ciccs surely overlap in time, so only cicc admission can keep them apart.
SOURCE = """
template <int K> __global__ void k_@N@(float* x) {
    float v = x[threadIdx.x];
#pragma unroll
    for (int i = 0; i < 512; ++i) v = v * 1.0001f + __sinf(v + i * K);
    x[threadIdx.x] = v;
}
template <int N> struct many { static void go(float* x) { k_@N@<N><<<1, 32>>>(x); many<N - 1>::go(x); } };
template <> struct many<0> { static void go(float*) {} };
void launch_@N@(float* x) { many<24>::go(x); }
"""

SCRIPT = r"""
set -e
cd /tmp
for n in a b; do
    printf %s "$SOURCE" | sed "s/@N@/$n/g" > $n.cu
done
printf %s "$COSTS" > /tmp/costs.json
export WHEELBUILD_ADMIT_COSTS=/tmp/costs.json WHEELBUILD_ADMIT_BUDGET=1000000000
sh /wb/wheelbuild-cicc-admission
export SCCACHE_DIR=/tmp/sccache
sccache --start-server >/dev/null
python3 - <<'PY'
import json, subprocess, time
command = lambda n: ["wheelbuild-admit", "sccache", "nvcc", "-c", f"/tmp/{n}.cu", "-o", f"/tmp/{n}.o",
                     "-gencode", "arch=compute_120,code=sm_120"]
procs = [subprocess.Popen(command(n)) for n in "ab"]
seen = {"running": 0, "waiting": 0, "entries": 0}
while any(p.poll() is None for p in procs):
    try:
        with open("/tmp/wheelbuild-admit/ledger.json") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        state = {"running": {}, "waiting": {}}
    for key in ("running", "waiting"):
        ciccs = [e for e in state[key].values() if e.get("kind") == "cicc"]
        seen[key] = max(seen[key], len(ciccs))
        seen["entries"] += len(ciccs)
    time.sleep(0.005)
seen["codes"] = [p.returncode for p in procs]
print("RESULT " + json.dumps(seen))
PY
cp /tmp/a.o /tmp/b.o /out/
"""


def _run(image: str, costs: dict[str, object], out_dir: Path) -> tuple[dict[str, object], str]:
    client = docker.from_env()
    out = client.containers.run(
        image,
        ["sh", "-c", SCRIPT],
        environment={"COSTS": json.dumps(costs), "SOURCE": SOURCE},
        volumes={str(IMAGES): {"bind": "/wb", "mode": "ro"}, str(out_dir): {"bind": "/out", "mode": "rw"}},
        remove=True,
    ).decode()
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT ")), out


def test_real_ciccs_take_turns_with_cicc_admission(cuda_image: str, tmp_path: Path) -> None:
    units = {"a.cu": 100_000_000, "b.cu": 100_000_000}
    # Each cicc at 0.7 GB in a budget of 1 GB: one at a time.
    per_cicc, out = _run(
        cuda_image,
        {"default": 900_000_000, "units": units, "cicc": dict.fromkeys(units, 700_000_000)},
        tmp_path,
    )
    assert "wheelbuild-before-build: cicc admission in" in out and "CICC_PATH = /tmp/wheelbuild-cicc" in out
    assert per_cicc["codes"] == [0, 0], out
    assert per_cicc["running"] == 1 and per_cicc["waiting"] == 1, per_cicc  # one ran while the other waited
    for name in ("a.o", "b.o"):  # both objects hold their cubin
        assert 120 in archs_in_elf((tmp_path / name).read_bytes()).sass, name
    # At 0.4 GB each, both fit: they run together and neither waits.
    both, out = _run(
        cuda_image,
        {"default": 900_000_000, "units": units, "cicc": dict.fromkeys(units, 400_000_000)},
        tmp_path,
    )
    assert both["codes"] == [0, 0] and both["running"] == 2 and both["waiting"] == 0, (both, out)
    # Without cicc costs, cicc admission lets every cicc through: nothing of theirs enters the ledger.
    unheld, out = _run(cuda_image, {"default": 900_000_000, "units": units}, tmp_path)
    assert unheld["codes"] == [0, 0] and unheld["entries"] == 0, (unheld, out)


# One unit for two archs at nvcc --threads 2, watched as the build's watcher watches it: the
# project's own UnitTracker (builder/host/unit_memory.py, pure, mounted in) over the container's
# processes, sampled every 5 ms.
WATCHED = r"""
set -e
cd /tmp
printf %s "$SOURCE" | sed "s/@N@/a/g" > a.cu
printf %s "$COSTS" > /tmp/costs.json
export WHEELBUILD_ADMIT_COSTS=/tmp/costs.json WHEELBUILD_ADMIT_BUDGET=1000000000
sh /wb/wheelbuild-cicc-admission >/dev/null
python3 - <<'PY'
import json, os, subprocess, sys, time
from pathlib import Path
sys.path.insert(0, "/wbp")
import unit_memory
compile = subprocess.Popen(["wheelbuild-admit", "nvcc", "-c", "/tmp/a.cu", "-o", "/tmp/a.o", "--threads", "2",
                            "-gencode", "arch=compute_100,code=sm_100", "-gencode", "arch=compute_120,code=sm_120"])
tracker, start, group = unit_memory.UnitTracker(), time.monotonic(), Path("/tmp/group")
group.mkdir(exist_ok=True)
while compile.poll() is None:
    (group / "cgroup.procs").write_text("\n".join(p for p in os.listdir("/proc") if p.isdigit()))
    tracker.observe(time.monotonic() - start, "cp", unit_memory.read_processes(group), None)
    time.sleep(0.005)
units, _ = tracker.snapshot()
print("RESULT " + json.dumps({"code": compile.returncode, "units": {u.unit: [u.peak, u.ciccs_at_peak] for u in units}}))
PY
"""


@pytest.mark.parametrize(
    ("cicc_cost", "beside", "ciccs"),
    [(700_000_000, None, 1), (400_000_000, None, 2), (700_000_000, 250_000_000, 2)],
)
def test_the_watcher_counts_the_ciccs_a_unit_ran_at_its_peak(
    cuda_image: str, cicc_cost: int, beside: int | None, ciccs: int
) -> None:
    """nvcc --threads 2 starts both archs' ciccs at once; with cicc admission at 0.7 GB each in 1 GB
    they take turns, and the unit's peak is one cicc's: the watcher must say so, or the model
    learns one arch's peak as two archs' (plan/learned.py). At 0.4 GB both run at its peak, and
    so they do at 0.7 GB when the second costs 0.25 GB beside the first (costs file
    "cicc_beside": its arch's part alone)."""
    costs: dict[str, object] = {
        "default": 900_000_000,
        "units": {"a.cu": 100_000_000},
        "cicc": {"a.cu": cicc_cost},
    }
    if beside is not None:
        costs["cicc_beside"] = {"a.cu": beside}
    out = (
        docker.from_env()
        .containers.run(
            cuda_image,
            ["sh", "-c", WATCHED],
            environment={"COSTS": json.dumps(costs), "SOURCE": SOURCE},
            volumes={
                str(IMAGES): {"bind": "/wb", "mode": "ro"},
                str(IMAGES.parent / "builder" / "host"): {"bind": "/wbp", "mode": "ro"},
            },
            remove=True,
        )
        .decode()
    )
    result = json.loads(
        next(line for line in out.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT ")
    )
    assert result["code"] == 0, out
    assert result["units"]["cp:a"][1] == ciccs, result
