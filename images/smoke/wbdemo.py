"""GPU smoke test of the wbdemo fixture: its kernels against the same torch ops.

    python wbdemo.py REPORT.json     (WHEELBUILD_ARCHS=100,120: the SASS the wheel holds)

Writes {"status": "passed" | "failed" | "skipped", "reason": ..., "checks": [...]}. Skips, with
the reason, where no GPU is visible or the GPU's arch is not among the wheel's.
"""

import json
import os
import sys

import torch


def main(report: str) -> None:
    def done(status: str, reason: str, checks: list[dict] | None = None) -> None:
        with open(report, "w") as out:
            json.dump({"status": status, "reason": reason, "checks": checks or []}, out)

    if not torch.cuda.is_available():
        return done("skipped", "no GPU is visible in the gate's container")
    major, minor = torch.cuda.get_device_capability()
    arch = major * 10 + minor
    archs = sorted(int(a) for a in os.environ["WHEELBUILD_ARCHS"].split(","))
    if arch not in archs:
        return done("skipped", f"the GPU ({torch.cuda.get_device_name()}) is sm_{arch}; the wheel holds {archs}")

    import wbdemo

    torch.manual_seed(0)
    x = torch.randn(1 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")
    checks = []

    def check(name: str, got: torch.Tensor, want: torch.Tensor, tol: float) -> None:
        err = (got.double() - want.double()).abs().max().item()
        checks.append({"name": name, "max_abs_err": err, "tolerance": tol, "ok": err <= tol})

    check("saxpy", wbdemo.saxpy_(2.5, x, y.clone()), 2.5 * x + y, 1e-5)
    check("scale", wbdemo.scale_(-3.0, x.clone()), -3.0 * x, 1e-6)
    check("relu", wbdemo.relu_(x.clone()), torch.relu(x), 0.0)
    check("sum", wbdemo.sum(x), x.double().sum(), 1e-1)
    torch.cuda.synchronize()
    failed = [c["name"] for c in checks if not c["ok"]]
    name = f"sm_{arch} ({torch.cuda.get_device_name()})"
    done("failed" if failed else "passed", f"{', '.join(failed)} wrong on {name}" if failed else f"4 kernels match torch on {name}", checks)


if __name__ == "__main__":
    main(sys.argv[1])
