"""What the repository keeps of each model: its versions' states and the lock its loads
and unloads take turns on; and the checks of names and versions a request brings."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from accel_base.errors import InvalidArgument
from gateway.core.model import ModelVersion


@dataclass(slots=True)
class VersionState:
    state: str  # READY, LOADING, UNLOADING, UNAVAILABLE
    reason: str = ""
    model: ModelVersion | None = None


@dataclass(slots=True)
class ModelEntry:
    name: str
    versions: dict[int, VersionState] = field(default_factory=dict)
    fingerprint: tuple = ()  # what the files looked like when last loaded (poll mode)
    error: str = ""  # why the model as a whole (its config) could not load
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Loads and unloads that hold or wait for the lock, counted before they wait: a
    # lock just released may still have a woken waiter, and eviction never waits.
    users: int = 0
    failed_at: float | None = None  # on demand: when its last load failed (clock seconds)
    # The config override of its last load call, which an on-demand reload keeps.
    override: dict[str, Any] | None = None
    pinned: bool = False  # never evicted (its config's `pinned` parameter, or --pin-model)

    def ready_versions(self) -> list[int]:
        return sorted(v for v, s in self.versions.items() if s.state == "READY")


def is_ready_state(state: VersionState | None) -> bool:
    return state is not None and state.state == "READY"


def model_name_ok(name: str) -> bool:
    """A name that can only mean a directory directly under the repository."""
    return bool(name) and "/" not in name and not name.startswith(".")


def check_version(version: str) -> None:
    """A model version as the protocol writes it: '' (the latest) or decimal digits. int()
    alone would also take ' 1', '+1', '1_0' and '-1'."""
    if version and not (version.isascii() and version.isdigit()):
        raise InvalidArgument(f"model version must be a non-negative integer, got '{version[:60]}'")


def retrieved(task: asyncio.Future) -> None:
    """Mark a shielded task's failure as seen: its caller may have gone away."""
    if not task.cancelled():
        task.exception()
