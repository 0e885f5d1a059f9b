"""GPU smoke test of a flash-attn wheel: flash_attn_func on small random q/k/v, fp16 and bf16,
causal and not, against plain PyTorch attention computed in float32.

    python flash_attn.py REPORT.json     (WHEELBUILD_ARCHS=100,120: the SASS the wheel holds)

Writes {"status": "passed" | "failed" | "skipped", "reason": ..., "checks": [...]}.
"""

import math
import sys

import torch
from _smoke import gpu_or_reason, write_report


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    # (batch, seqlen, heads, dim) as flash-attn takes them; softmax(q k^T / sqrt(d)) v in float32.
    q, k, v = (t.float().transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = scores.shape[-1]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2)


def main(report: str) -> None:
    skip, name = gpu_or_reason()
    if skip:
        return write_report(report, "skipped", skip)

    from flash_attn import flash_attn_func

    torch.manual_seed(0)
    checks = []
    for dtype, tol in ((torch.float16, 2e-2), (torch.bfloat16, 4e-2)):
        for causal in (False, True):
            q, k, v = (torch.randn(2, 256, 4, 64, device="cuda", dtype=dtype) for _ in range(3))
            out = flash_attn_func(q, k, v, causal=causal)
            err = (out.float() - reference(q, k, v, causal)).abs().max().item()
            checks.append(
                {
                    "name": f"{str(dtype).split('.')[-1]} causal={causal}",
                    "max_abs_err": err,
                    "tolerance": tol,
                    "ok": err <= tol,
                }
            )
    failed = [c["name"] for c in checks if not c["ok"]]
    write_report(
        report,
        "failed" if failed else "passed",
        f"{', '.join(failed)} off on {name}"
        if failed
        else f"{len(checks)} cases match PyTorch attention on {name}",
        checks,
    )


if __name__ == "__main__":
    main(sys.argv[1])
