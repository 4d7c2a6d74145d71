"""A TF Serving request's model spec resolved (served.py) and a model's version states
(status.py), against a core that answers as the repository would."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from accel_base.errors import NotFound
from gateway.protocols.tfserving.errors import TfsError
from gateway.protocols.tfserving.served import (
    Batching,
    SignatureMissing,
    TfModel,
    TfServing,
    mount_config,
    served_signatures,
)
from gateway.protocols.tfserving.status import version_states


class Core:
    """What served.py and status.py ask of the core, as the repository answers it."""

    def __init__(self, ready: dict[str, list[int]], rows: list[dict]) -> None:
        self.ready, self.rows = ready, rows
        self.loaded: list[str] = []

    async def model_metadata(self, name: str, version: str = "") -> dict:
        if not self.ready.get(name):
            raise NotFound(f"model '{name}' is not ready")
        return {"versions": [str(v) for v in self.ready[name]]}

    async def load_on_first_use(self, name: str) -> None:
        self.loaded.append(name)

    async def repository_index(self, ready_only: bool = False) -> list[dict]:
        return self.rows


def _serving() -> TfServing:
    model = TfModel("m", Path("/models/m"), {"all": {}}, {"stable": 1})
    return TfServing({"m": model}, signatures={"m": {"serving_default": [1, 2], "other": [1]}})


def _resolve(core: Core, version=None, label="", signature=""):
    return asyncio.run(_serving().resolve(core, "m", version, label, signature))


def test_the_default_signature_is_the_model_itself() -> None:
    core = Core({"m": [1, 2]}, [])
    assert _resolve(core) == ("m", None)
    assert _resolve(core, label="stable") == ("m", 1)
    assert core.loaded == []


def test_another_signature_is_its_own_model_loaded_on_first_use() -> None:
    core = Core({"m": [1, 2]}, [])
    assert _resolve(core, version=1, signature="other") == ("m:other", 1)
    assert core.loaded == ["m:other"]
    # The latest version (2) lacks it: as TF Serving, the signature is not found.
    with pytest.raises(SignatureMissing):
        _resolve(core, signature="other")
    # When the latest has it: the signature's model at its own latest, by no number
    # (while versions roll over, the two models change versions at different moments).
    both = TfServing({"m": TfModel("m", Path("/models/m"))},
                     signatures={"m": {"serving_default": [2], "other": [2]}})  # fmt: skip
    assert asyncio.run(both.resolve(Core({}, []), "m", None, "", "other")) == ("m:other", None)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"label": "nope"}, "Unrecognized servable version label: nope"),
        ({"signature": "nope"}, 'Serving signature name: "nope" not found'),
    ],
)
def test_what_the_model_does_not_have(kwargs, words) -> None:
    with pytest.raises(TfsError, match=words):
        _resolve(Core({"m": [1, 2]}, []), **kwargs)
    with pytest.raises(TfsError, match=r"Servable not found for request: Latest\(x\)"):
        asyncio.run(_serving().resolve(Core({}, []), "x", None, "", ""))


def test_version_states_newest_first_with_failures_ended() -> None:
    rows = [
        {"name": "m", "version": "1", "state": "READY", "reason": ""},
        {"name": "m", "version": "2", "state": "UNAVAILABLE", "reason": "no room"},
        {"name": "m", "version": "3", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"name": "m", "version": "4", "state": "LOADING", "reason": ""},
        {"name": "m:other", "version": "1", "state": "READY", "reason": ""},
    ]
    states = asyncio.run(version_states(Core({}, rows), _serving(), "m", None))
    assert [(s["version"], s["state"], s["status"]["error_code"])
            for s in states["model_version_status"]] == [
        ("4", "LOADING", "OK"), ("3", "END", "OK"), ("2", "END", "UNKNOWN"),
        ("1", "AVAILABLE", "OK"),
    ]  # fmt: skip
    one = asyncio.run(version_states(Core({}, rows), _serving(), "m", 1))
    assert [s["version"] for s in one["model_version_status"]] == ["1"]
    with pytest.raises(TfsError, match="Could not find version 9 of model m"):
        asyncio.run(version_states(Core({}, rows), _serving(), "m", 9))


def test_a_version_the_policy_does_not_serve_is_not_found_whatever_the_signature() -> None:
    model = TfModel("m", Path("/models/m"))
    on_disk = {"serving_default": [1, 2], "other": [1]}
    latest = TfServing({"m": model}, signatures={"m": served_signatures(model, on_disk)})
    core = Core({"m": [2]}, [])
    for version in (1, 9):  # 1 is on disk, but the latest policy serves 2 alone
        with pytest.raises(TfsError) as refused:
            asyncio.run(latest.resolve(core, "m", version, "", "other"))
        assert refused.value.message == f"Servable not found for request: Specific(m, {version})"
    # A served version that lacks the signature: the signature is what is missing.
    with pytest.raises(SignatureMissing):
        asyncio.run(_serving().resolve(Core({"m": [1, 2]}, []), "m", 2, "", "other"))


def test_served_signatures_are_those_of_the_versions_the_policy_serves() -> None:
    on_disk = {"serving_default": [1, 2, 3], "old": [1], "new": [3], "mid": [2, 3]}
    latest = TfModel("m", Path("/m"))
    assert served_signatures(latest, on_disk) == {
        "serving_default": [3], "new": [3], "mid": [3]}  # fmt: skip
    two = TfModel("m", Path("/m"), {"latest": {"num_versions": 2}})
    assert served_signatures(two, on_disk) == {
        "serving_default": [2, 3], "new": [3], "mid": [2, 3]}  # fmt: skip
    specific = TfModel("m", Path("/m"), {"specific": {"versions": [1, 9]}})
    assert served_signatures(specific, on_disk) == {"serving_default": [1], "old": [1]}
    assert served_signatures(TfModel("m", Path("/m"), {"all": {}}), on_disk) == on_disk


def test_batching_parameters_are_the_batcher_s_bounds() -> None:
    batching = Batching(max_batch_size=32, batch_timeout_micros=2000, max_enqueued_batches=10,
                        allowed_batch_sizes=(8, 32))  # fmt: skip
    config = mount_config(TfModel("m", Path("/m")), "serving_default", batching)
    assert config["max_batch_size"] == 32
    assert config["dynamic_batching"] == {
        "max_queue_delay_microseconds": 2000, "preferred_batch_size": [8, 32],
        "default_queue_policy": {"max_queue_size": 320},
    }  # fmt: skip
    assert "dynamic_batching" not in mount_config(TfModel("m", Path("/m")), "x", None)
