"""On-demand mode's side of the repository: a request for a model that is not loaded
loads it (once, however many wait), and loads that need room evict the least recently
used idle models (gateway/core/placement decides which; this module knows what idle means
and unloads them). Pinned models are never evicted.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from accel_base.errors import GatewayError, InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from backends.parameters import string_parameter
from gateway.core.placement.ledger import Candidate, NoRoom

if TYPE_CHECKING:
    from gateway.core.model import ModelVersion
    from gateway.core.repository import ModelRepository

RETRY_FAILED_LOAD_S = 10.0  # a model that failed to load is not tried again sooner
EVICTED = "evicted to make room for another model; loads again on its next request"


def _busy(model: Any) -> bool:
    """Requests queued or running, here or (as they last reported) in a front's copy."""
    return bool(model.pending) or any(getattr(model, "copy_pending", {}).values())


class OnDemand:
    def __init__(self, repository: ModelRepository) -> None:
        self.repository = repository

    def candidates(self, loading: str, busy_too: bool = False) -> list[Candidate]:
        """Models that may make room for `loading`: loaded, idle (nothing queued or
        running), not pinned, and not being loaded or unloaded themselves. `busy_too`:
        every model that is not pinned, busy or loading too, whose booked bytes a load
        may wait for."""
        found = []
        now = time.monotonic()
        for name, entry in self.repository.models.items():
            models = [s.model for s in entry.versions.values() if s.model is not None]
            if name == loading or entry.pinned:
                continue
            if busy_too:  # what it holds, the ledger knows (a router holds nothing)
                found.append(Candidate(name, max((m.last_used for m in models), default=now)))
                continue
            busy = entry.lock.locked() or entry.users or any(_busy(m) for m in models)
            if busy or not models or not any(m.footprints for m in models):
                continue  # busy, or nothing to free (a router)
            found.append(Candidate(name, max(m.last_used for m in models)))
        return found

    async def evict(self, names: tuple[str, ...]) -> list[str]:
        """Unload these models to make room; returns those unloaded. Their locks are all
        taken before the first wait (they are free: candidates are unlocked), so a load
        of one of them meanwhile waits for its lock, not for the placement this serves."""
        entries = []
        for name in names:
            entry = self.repository.models.get(name)
            if entry is not None and not entry.lock.locked() and not entry.users:
                await entry.lock.acquire()  # nobody holds or waits for it: taken at once
                entries.append(entry)
        try:
            for entry in entries:
                await self.repository.close_all(entry, EVICTED)
        finally:
            for entry in entries:
                entry.lock.release()
        # The load this makes room for settles the heap when it is done.
        return [entry.name for entry in entries]

    def pinned_on_disk(self, name: str) -> bool:
        if name in self.repository.memory.pinned:
            return True
        try:
            return is_pinned(self.repository.config_on_disk(name))
        except GatewayError:
            return False

    async def get(self, name: str, version: str, missing: GatewayError) -> ModelVersion:
        """On demand: the model version once loaded (this request may start the load);
        in other modes, or for a model not in the repository, `missing` is raised."""
        if self.repository.control_mode != "on-demand" or not self.repository.exists(name):
            raise missing
        entry = self.repository.models.get(name)
        if entry is not None and any(s.model is not None for s in entry.versions.values()):
            raise missing  # loaded: a version it does not serve, or one not ready
        if entry is not None and entry.failed_at is not None:
            ago = time.monotonic() - entry.failed_at
            if ago < RETRY_FAILED_LOAD_S:
                raise Unavailable(
                    f"model '{name}' failed to load {ago:.0f} s ago and is tried again "
                    f"{RETRY_FAILED_LOAD_S:g} s after that: {_failure(entry)}"
                )
        await self.repository.memory.first_load(
            name, lambda: self._load(name), self.repository.max_queue_size
        )
        return self.repository.get(name, version)

    async def _load(self, name: str) -> None:
        entry = self.repository.models.get(name)
        if entry is not None and entry.ready_versions():
            return  # a load call got there first
        try:
            # After an eviction, as the last load call left it (its config override too).
            override = entry.override if entry is not None else None
            await self.repository.load(name, override, if_unloaded=True)
        except NoRoom:
            raise  # the next request tries again: room may be free by then
        except GatewayError:
            if name in self.repository.models:
                self.repository.models[name].failed_at = time.monotonic()
            raise
        self.repository.models[name].failed_at = None


def _failure(entry: Any) -> str:
    reasons = [s.reason for s in entry.versions.values() if s.reason]
    return entry.error or "; ".join(reasons) or "no version loaded"


def is_pinned(config: mc.ModelConfig) -> bool:
    """The config's `pinned` parameter: such a model is never evicted."""
    text = string_parameter(config, "pinned")
    if text is None:
        return False
    if text.strip().lower() not in ("true", "false", "1", "0"):
        raise InvalidArgument(
            f"model '{config.name}': parameter pinned must be true or false, not {text!r}"
        )
    return text.strip().lower() in ("true", "1")
