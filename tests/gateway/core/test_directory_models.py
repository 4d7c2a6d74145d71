"""What SageMaker's routes count as loaded (Core.loaded_models, model_directories): a model
whose worker is restarting is loaded (its requests wait for it), though not ready; a
404 for it would make SageMaker load it again, and get 409."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from gateway.core.model_entry import ModelEntry, VersionState
from gateway.core.placement.manager import MemoryManager
from gateway.core.repository import ModelRepository
from gateway.core.service import InferenceCore


def core_with(tmp_path: Path, **reasons: str | None) -> InferenceCore:
    repository = ModelRepository(tmp_path, "explicit", memory=MemoryManager([]))
    for name, reason in reasons.items():
        model = SimpleNamespace(unavailable_reason=reason)
        repository.models[name] = ModelEntry(name, {1: VersionState("READY", model=model)})
    repository.models["gone"] = ModelEntry("gone", {1: VersionState("UNAVAILABLE", "unloaded")})
    return InferenceCore(repository)


def test_a_model_whose_worker_restarts_is_loaded_though_not_ready(tmp_path):
    core = core_with(tmp_path, up=None, restarting="its worker died; restarting")

    async def scenario():
        core.directory_models.urls.update({"restarting": "/opt/ml/models/r", "gone": "/g"})
        return (
            await core.loaded_models(),
            await core.model_ready("restarting"),
            await core.model_directories(),
        )

    loaded, ready, directories = asyncio.run(scenario())
    assert loaded == ["restarting", "up"] and not ready
    assert directories == {"restarting": "/opt/ml/models/r"}  # "gone" is not reachable


def test_a_first_use_of_a_loaded_model_loads_nothing(tmp_path):
    core = core_with(tmp_path, restarting="its worker died; restarting")
    asyncio.run(core.load_on_first_use("restarting"))  # no load: nothing on disk to load
    assert core.directory_models._first_loads == {}
