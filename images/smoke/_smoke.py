"""What every smoke test shares: the report it writes, and the reasons it skips. The scripts
beside it import it (a script's own folder is first on sys.path)."""

import json
import os

import torch


def write_report(path: str, status: str, reason: str, checks: list | None = None) -> None:
    with open(path, "w") as out:
        json.dump({"status": status, "reason": reason, "checks": checks or []}, out)


def gpu_or_reason() -> tuple[str | None, str]:
    """(None, the GPU's name) when a GPU the wheel holds SASS for is visible, else (the reason to skip, "")."""
    if not torch.cuda.is_available():
        return "no GPU is visible in the gate's container", ""
    major, minor = torch.cuda.get_device_capability()
    arch = major * 10 + minor
    archs = sorted(int(a) for a in os.environ["WHEELBUILD_ARCHS"].split(","))
    name = f"sm_{arch} ({torch.cuda.get_device_name()})"
    if arch not in archs:
        return f"the GPU is {name}; the wheel holds {archs}", ""
    return None, name
