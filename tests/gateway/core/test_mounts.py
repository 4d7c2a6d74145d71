"""Mounted models (gateway/core/mounts.py): a directory outside the repository, with the
config it is given, served as a model of the repository; the repository's rules hold
inside it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import numpy as np
import pytest

from accel_base.errors import GatewayError
from gateway.core.inference import InferRequest, RequestedOutput, Tensor
from gateway.core.mounts import Mount
from gateway.core.placement.inventory import read_inventory
from gateway.core.placement.manager import MemoryManager
from gateway.core.repository import ModelRepository
from gateway.core.service import InferenceCore

pytest.importorskip("tensorflow")
from models.tfserving.savedmodels import build_strings  # noqa: E402


def _config(policy: dict | None = None) -> dict:
    return {
        "platform": "tensorflow_savedmodel",
        "default_model_filename": ".",  # the version directory is the SavedModel
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
        # A thread, as TF Serving's front mounts them (no worker importing TensorFlow).
        "parameters": {"execution": {"string_value": "thread"}},
        **({"version_policy": policy} if policy else {}),
    }


@pytest.fixture(scope="module")
def strings(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("outside") / "strings"
    build_strings(base, 1)
    build_strings(base, 3)
    return base


def _repository(tmp_path: Path, mounts: dict[str, Mount]) -> ModelRepository:
    root = tmp_path / "repository"
    root.mkdir()
    return ModelRepository(root, "explicit", memory=MemoryManager(read_inventory()), mounts=mounts)


async def _upper(core: InferenceCore, name: str, version: str = "") -> tuple[str, list[bytes]]:
    data = np.array([b"abc", "d\u00e9".encode()], dtype=object)
    request = InferRequest(model_name=name, model_version=version,
                           inputs=[Tensor("text", "BYTES", data)],
                           outputs=[RequestedOutput("upper")])  # fmt: skip
    response = await core.infer(request)
    return response.model_version, list(response.outputs[0].data)


def _served(repository: ModelRepository, name: str, *versions: str) -> list:
    """Load `name`, ask it for each of `versions`, unload it: what each answered."""

    async def scenario() -> list:
        core = InferenceCore(repository)
        await repository.load(name)
        try:
            return [sorted(repository.models[name].versions)] + [
                await _upper(core, name, v) for v in versions
            ]
        finally:
            await repository.unload(name)

    return asyncio.run(scenario())


def test_a_mounted_savedmodel_serves_under_its_name(tmp_path, strings) -> None:
    repository = _repository(tmp_path, {"words": Mount(strings, _config())})
    assert repository.exists("words") and "words" in repository.model_names_on_disk()
    loaded, latest = _served(repository, "words", "")
    assert loaded == [3]  # the latest version only, as a policy-less config says
    assert latest == ("3", [b"ABC", "D\u00c9".encode()])


def test_a_mount_s_version_policy_chooses_its_versions(tmp_path, strings) -> None:
    repository = _repository(tmp_path, {"words": Mount(strings, _config({"all": {}}))})
    loaded, first = _served(repository, "words", "1")
    assert loaded == [1, 3] and first[0] == "1"


def test_a_mount_s_own_versions_are_loaded_whatever_its_policy(tmp_path, strings) -> None:
    # TF Serving's front applies its policies itself: a `specific` one naming a version
    # not on disk serves the others, and a signature's model only its versions.
    policy = {"specific": {"versions": [1, 9]}}
    mount = Mount(strings, _config(policy), versions=frozenset({1}))
    repository = _repository(tmp_path, {"words": mount})
    loaded, first = _served(repository, "words", "")
    assert loaded == [1] and first[0] == "1"


def test_a_link_out_of_a_mounted_directory_is_refused(tmp_path, strings) -> None:
    base = tmp_path / "linked"
    base.mkdir()
    os.symlink(strings / "1", base / "1")  # a version that is a link out of the mount
    repository = _repository(tmp_path, {"words": Mount(base, _config())})
    with pytest.raises(GatewayError, match="outside the model's directory"):
        asyncio.run(repository.load("words"))
