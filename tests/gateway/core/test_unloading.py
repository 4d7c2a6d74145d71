"""Unloading with `unload_dependents` when another model takes up a member meanwhile: the
member list is fixed when the unload starts, but each member is asked again at its turn
(gateway/core/unloading.py). Staged on models whose close waits for the test."""

from __future__ import annotations

import asyncio
from pathlib import Path

from accel_base.proto import model_config_pb2 as mc
from gateway.core.model_entry import ModelEntry, VersionState
from gateway.core.placement.manager import MemoryManager
from gateway.core.repository import ModelRepository


class HeldModel:
    """Stands in for a loaded version: its close waits until the test lets it go."""

    def __init__(self, config: mc.ModelConfig, gate: asyncio.Event | None = None) -> None:
        self.config = config
        self.pending = 0
        self.footprints: list = []
        self.closed = False
        self._gate = gate

    async def close(self) -> None:
        if self._gate is not None:
            await self._gate.wait()
        self.closed = True


def ensemble(name: str, *steps: str) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, platform="ensemble")
    for step in steps:
        config.ensemble_scheduling.step.add(model_name=step)
    return config


def loaded(repository: ModelRepository, model: HeldModel) -> None:
    name = model.config.name
    repository.models[name] = ModelEntry(name, {1: VersionState("READY", model=model)})


def test_a_member_taken_up_during_the_unload_stays_loaded(tmp_path: Path) -> None:
    async def scenario() -> None:
        repository = ModelRepository(tmp_path, "explicit", memory=MemoryManager([]))
        gate = asyncio.Event()
        whole = HeldModel(ensemble("whole", "part", "spare"), gate)
        part = HeldModel(mc.ModelConfig(name="part"))
        spare = HeldModel(mc.ModelConfig(name="spare"))
        for model in (whole, part, spare):
            loaded(repository, model)
        unloading = asyncio.ensure_future(repository.unload("whole", dependents=True))
        for _ in range(5):  # the unload reaches the close of `whole` and waits there
            await asyncio.sleep(0)
        assert not gate.is_set() and not unloading.done()
        # Meanwhile another ensemble that uses `part` is loaded.
        loaded(repository, HeldModel(ensemble("other", "part")))
        gate.set()
        await asyncio.wait_for(unloading, 5)
        assert whole.closed and spare.closed
        assert not part.closed
        assert repository.models["part"].ready_versions() == [1]

    asyncio.run(scenario())


def test_without_a_new_user_every_member_unloads(tmp_path: Path) -> None:
    async def scenario() -> None:
        repository = ModelRepository(tmp_path, "explicit", memory=MemoryManager([]))
        whole = HeldModel(ensemble("whole", "part"))
        part = HeldModel(mc.ModelConfig(name="part"))
        for model in (whole, part):
            loaded(repository, model)
        await asyncio.wait_for(repository.unload("whole", dependents=True), 5)
        assert whole.closed and part.closed

    asyncio.run(scenario())
