"""Admission that learns while the build runs: each compile's measured memory corrects the costs of
the compiles still to come. Pure; simulate() runs it, bench/planner measures it, and a real build's
admission wrapper (images/wheelbuild-admit) imports this very file, mounted into the build's
container as wheelbuild_online.py: so it imports the standard library only and parses as Python 3.9.

The plan's costs are a model's (a profile, or for a package nobody measured the default model's
guess). While the build runs, each compile's memory is measured (the watcher, or the sampled memory
of its processes), and a unit's measured peak over its predicted cost is a ratio that says how far
off the model is for units like it. Units are alike by family: the source's basename with its
digits taken out (flash_bwd_hdim128_fp16_sm80.cu and flash_bwd_hdim256_fp16_sm80.cu are one family,
flash_fwd_… another), since a package's kernels are instantiated from templates whose cost grows
with their parameters, and within a kind (host compile or device compile, by the source's suffix)
units are less alike than within a family (flash-attn's backward kernels cost 1.65 times its
forward ones).

The correction, for a unit not yet past its peak:
- of a family with a unit settled (one whose peak is over: its compile has finished): its cost
  times the family's ratio, the highest seen (settled or still growing), times 1 + MARGIN;
- of a family none of whose units has settled: its cost times the highest of COLD (the model is
  not trusted yet) and the ratios seen in its family and its kind.
A running unit is charged at least what it holds now. So a first build of
an unknown package admits each family's first units at COLD times their guess, and the rest at
what the first ones measured; a model that is right costs only the first units' wait.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["COLD", "MARGIN", "Learner", "family_of", "kind_of"]

# An unsettled family's units are charged this many times their predicted cost (at least), when
# the model is a guess (the default model: nothing of the package measured): it covers a guess
# wrong by half. bench/planner, blind against flash-attn's measured units (the guess 4 GiB per
# arch, its backward kernels 6.4-7.2): 0 of 270 first attempts OOM-killed with it (peaks as
# measured, +10%, +25%); with 1, OOM-killed at +25% on 4 of 5 machines tried; 1.5 passed there,
# and costs 0.05-0.22 of the oracle less where memory binds, but would not cover a guess wrong by
# half.
COLD = 2.0
# A profile (measured units, or units estimated from measured kin): trusted more, not blindly.
COLD_PROFILE = 1.0
# On top of the highest ratio seen: the next unit of a family may be heavier than the ones seen.
MARGIN = 0.10

HOST_SUFFIXES = (".cpp", ".cc", ".cxx", ".c")


def kind_of(name: str) -> str:
    """ "host" for a host compile (C/C++ source), "device" for a CUDA one (.cu and the rest)."""
    return "host" if name.lower().endswith(HOST_SUFFIXES) else "device"


def family_of(name: str) -> str:
    """The unit's family: its source's basename without digits (template instances of one kernel)."""
    return re.sub(r"\d+", "", name.rsplit("/", 1)[-1])


@dataclass
class Learner:
    """The corrections learned so far in one build (mutable: it is the build's running state)."""

    names: tuple[str, ...]  # each unit's source name, by unit index
    cold: float = COLD
    margin: float = MARGIN
    family_ratio: dict[str, float] = field(default_factory=dict)
    kind_ratio: dict[str, float] = field(default_factory=dict)
    settled: set[str] = field(default_factory=set)  # families with a unit past its peak
    seen: set[int] = field(default_factory=set)  # units measured holding memory

    def observe(self, unit: int, held: int, predicted: int) -> None:
        """Unit `unit` holds `held` bytes now against a predicted cost of `predicted`."""
        if held <= 0 or predicted <= 0:
            return
        self.seen.add(unit)
        ratio = held / predicted
        name = self.names[unit]
        family, kind = family_of(name), kind_of(name)
        self.family_ratio[family] = max(self.family_ratio.get(family, 0.0), ratio)
        self.kind_ratio[kind] = max(self.kind_ratio.get(kind, 0.0), ratio)

    def settle(self, unit: int) -> None:
        """Unit `unit`'s compile is over: what it was seen to hold is its peak."""
        if unit in self.seen:
            self.settled.add(family_of(self.names[unit]))

    def factor(self, unit: int) -> float:
        """What unit `unit`'s predicted cost is multiplied by now."""
        name = self.names[unit]
        family = family_of(name)
        if family in self.settled:
            return self.family_ratio[family] * (1 + self.margin)
        seen = max(self.family_ratio.get(family, 0.0), self.kind_ratio.get(kind_of(name), 0.0))
        return max(self.cold, seen * (1 + self.margin))

    def cost(self, unit: int, predicted: int, held: int = 0) -> int:
        """Unit `unit`'s corrected cost: its predicted cost times its factor, and at least what
        it holds now (`held`, measured)."""
        return max(math.ceil(predicted * self.factor(unit)), held)
