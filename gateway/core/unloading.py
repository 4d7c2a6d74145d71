"""Unloading, for the model repository (gateway/core/repository.py): one model, a model
with the members nothing else uses (Triton's `unload_dependents`), or every model when
the server stops. A version's requests get the drain time to finish before its
instances close, and its bytes are released whatever the close raised."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from accel_base.errors import NotFound
from accel_base.proto import model_config_pb2 as mc
from gateway.core.composites import dependents_to_unload, members
from gateway.core.copies import Copies
from gateway.core.model import ModelVersion
from gateway.core.model_entry import ModelEntry, VersionState, retrieved
from gateway.core.placement.manager import MemoryManager

log = logging.getLogger(__name__)


class Unloading:
    """ModelRepository's unloads; the repository gives the attributes below."""

    models: dict[str, ModelEntry]
    memory: MemoryManager
    drain_s: float
    spares: Any
    copies: Copies | None
    _settle: Callable[[], None]
    _loaded: Callable[[str], list[int]]
    _config_on_disk: Callable[[str], mc.ModelConfig | None]

    async def unload(self, name: str, dependents: bool = False) -> None:
        """Unload a model's versions; with `dependents`, then the models it is made of that
        no other loaded model uses (Triton's `unload_dependents`), composites first."""
        names = [name]
        if dependents:
            names += dependents_to_unload(name, self._in_use(), self._members_of)
        before = [self._loaded(n) for n in names]
        # Shielded like a load: a cancelled caller must not leave versions UNLOADING.
        unloading = asyncio.ensure_future(self._unload_in_order(names))
        unloading.add_done_callback(retrieved)
        try:
            await asyncio.shield(unloading)
        finally:
            if [self._loaded(n) for n in names] != before:
                self._settle()

    async def _unload_in_order(self, names: list[str]) -> None:
        """The model, then its members; each member asked again at its turn whether a
        model in use still needs it (a load during the drain may have taken it up)."""
        failure = None
        for index, name in enumerate(names):
            if index and any(name in self._members_of(n) for n in self._in_use() if n != name):
                continue
            try:
                await self._unload(name)
            except Exception as exc:  # the members after it are unloaded all the same
                failure = failure or exc
        if failure is not None:
            raise failure

    def _in_use(self) -> list[str]:
        """Models with a version ready or loading."""
        return [
            n for n, e in self.models.items()
            if any(s.state in ("READY", "LOADING") for s in e.versions.values())
        ]  # fmt: skip

    def _members_of(self, name: str) -> list[str]:
        """What a model in use is made of: its loaded versions' configs, or, while none has
        loaded yet, its config on disk."""
        entry = self.models.get(name)
        states = entry.versions.values() if entry is not None else []
        found: list[str] = []
        for state in states:
            if state.model is not None:
                found += [m for m in members(state.model.config) if m not in found]
        if not found and any(s.state == "LOADING" for s in states):
            config = self._config_on_disk(name)
            found = members(config) if config is not None else []
        return found

    async def _unload(self, name: str, reason: str = "unloaded") -> None:
        entry = self.models.get(name)
        if entry is None:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        entry.users += 1
        try:
            async with entry.lock:
                await self.close_all(entry, reason)
        finally:
            entry.users -= 1

    async def close_all(self, entry: ModelEntry, reason: str) -> None:
        """Unload every version of a model whose lock the caller holds."""
        old = entry.versions
        for state in old.values():
            state.state = "UNLOADING"
        if self.copies is not None:  # no front routes to its copies from here on
            self.copies.routes_changed(entry.name, entry)
        try:
            await self._close_versions(list(old.values()))
        finally:  # whatever a close raised, no version stays UNLOADING
            entry.versions = {v: VersionState("UNAVAILABLE", reason) for v in old}

    async def _close_versions(self, states: list[VersionState]) -> None:
        failure = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_s  # one drain for all of them, not one each
        for state in states:
            if state.model is not None:
                model, state.model = state.model, None
                try:
                    if self.copies is not None:  # they finish what they hold first
                        await self.copies.drop(model)
                    await _drain(model, max(deadline - loop.time(), 0.0))
                    await model.close()
                except Exception as exc:  # the other versions are closed all the same
                    failure = failure or exc
                finally:  # its bytes are not booked forever, whatever happened
                    self.memory.released(model.footprints)
        if failure is not None:
            raise failure

    async def unload_all(self, drain_s: float | None = None) -> None:
        """Unload every model; `drain_s`, when given, bounds the wait for their requests
        (what is left of a stopping server's own drain, which waited for them already)."""
        if drain_s is not None:
            self.drain_s = drain_s  # the server is stopping: no load comes after this
        # All at once: each unload mostly waits for a worker process to end.
        names = list(self.models)
        if self.spares is not None:
            await asyncio.to_thread(self.spares.close)
        results = await asyncio.gather(*map(self._unload, names), return_exceptions=True)
        for name, result in zip(names, results, strict=True):
            if isinstance(result, Exception):
                log.error("model '%s' did not unload cleanly: %s", name, result)


async def _drain(model: ModelVersion, timeout_s: float) -> None:
    """Let requests already accepted finish before the instances go away."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while model.pending and loop.time() < deadline:
        await asyncio.sleep(0.01)
