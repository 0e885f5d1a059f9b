"""GPU smoke test of the wbdemo fixture: its kernels against the same torch ops.

    python wbdemo.py REPORT.json     (WHEELBUILD_ARCHS=100,120: the SASS the wheel holds)

Writes {"status": "passed" | "failed" | "skipped", "reason": ..., "checks": [...]}. Skips, with
the reason, where no GPU is visible or the GPU's arch is not among the wheel's.
"""

import sys

import torch
from _smoke import gpu_or_reason, write_report


def main(report: str) -> None:
    skip, name = gpu_or_reason()
    if skip:
        return write_report(report, "skipped", skip)

    import wbdemo

    torch.manual_seed(0)
    x = torch.randn(1 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")
    checks = []

    def check(kernel: str, got: torch.Tensor, want: torch.Tensor, tol: float) -> None:
        err = (got.double() - want.double()).abs().max().item()
        checks.append({"name": kernel, "max_abs_err": err, "tolerance": tol, "ok": err <= tol})

    check("saxpy", wbdemo.saxpy_(2.5, x, y.clone()), 2.5 * x + y, 1e-5)
    check("scale", wbdemo.scale_(-3.0, x.clone()), -3.0 * x, 1e-6)
    check("relu", wbdemo.relu_(x.clone()), torch.relu(x), 0.0)
    check("sum", wbdemo.sum(x), x.double().sum(), 1e-1)
    torch.cuda.synchronize()
    failed = [c["name"] for c in checks if not c["ok"]]
    write_report(
        report,
        "failed" if failed else "passed",
        f"{', '.join(failed)} wrong on {name}" if failed else f"4 kernels match torch on {name}",
        checks,
    )


if __name__ == "__main__":
    main(sys.argv[1])
