"""What `wheelbuild gc` asks of the engine: Docker's state as plain values, and removals, one at a
time, never forced. engine.DockerEngine implements it."""

from __future__ import annotations

from typing import Protocol

from ..image.ports import ImageIds
from . import decisions


class GcEngine(ImageIds, Protocol):
    """What `wheelbuild gc` reads of Docker and removes (never forced)."""

    def gc_state(self, scope: decisions.Scope) -> decisions.DockerState: ...

    def gc_remove_image(self, decision: decisions.Decision, scope: decisions.Scope) -> decisions.Removal: ...

    def gc_remove_volume(self, decision: decisions.Decision, scope: decisions.Scope) -> decisions.Removal: ...

    def gc_wheel_cache(
        self, volume: str, image: str, bound: int, prune: bool
    ) -> dict[str, object] | None: ...
