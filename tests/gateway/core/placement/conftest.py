"""Small real models (ONNX identities) under many names, and a repository on demand over
a fake inventory: the CPU with a budget in bytes, so that placement and eviction happen
at the sizes each model's `memory_bytes` parameter declares."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from backends.base import Device
from gateway.core.placement.inventory import DeviceMemory
from gateway.core.placement.manager import MemoryManager
from gateway.core.repository import ModelRepository
from gateway.core.service import InferenceCore
from models import identity

MB = 10**6


@pytest.fixture(scope="session")
def identity_model(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("identity")
    return base / identity.build_one(base, "int32")


@pytest.fixture
def models_dir(tmp_path, identity_model) -> Callable[..., Path]:
    """`models_dir({"m0": 'key: "memory_bytes" ...'})`: copies of identity_int32 under
    those names, each config with the extra text (parameters, batching) appended."""

    def make(extras: dict[str, str]) -> Path:
        root = tmp_path / "repository"
        for name, extra in extras.items():
            shutil.copytree(identity_model, root / name)
            config = root / name / "config.pbtxt"
            text = config.read_text().replace('name: "identity_int32"', f'name: "{name}"')
            config.write_text(text + "\n" + extra + "\n")
        return root

    return make


@pytest.fixture
def on_demand() -> Callable[..., InferenceCore]:
    """`on_demand(root, budget_mb, **manager options)`: a core whose repository loads on
    demand within a CPU budget of that many megabytes (no reserve)."""

    def make(root: Path, budget_mb: int, max_queue_size: int = 1024, **manager) -> InferenceCore:
        cpu = DeviceMemory(Device("cpu"), 10**12, 10**12, budget_mb * MB)
        memory = MemoryManager([cpu], evicts=True, **manager)
        repository = ModelRepository(root, "on-demand", max_queue_size, memory=memory)
        return InferenceCore(repository)

    return make
