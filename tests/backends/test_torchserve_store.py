"""backends/torchserve/store.py: an archive's settings as a repository model's config."""

from __future__ import annotations

import pytest

from accel_base.proto import model_config_pb2 as mc
from backends.torchserve.archive import ArchiveError
from backends.torchserve.store import Defaults, model_config, place_workers, workers_of

GPU, CPU = mc.ModelInstanceGroup.KIND_GPU, mc.ModelInstanceGroup.KIND_CPU


def groups(config: mc.ModelConfig) -> list[tuple[int, int, list[int]]]:
    return [(g.kind, g.count, list(g.gpus)) for g in config.instance_group]


def test_workers_take_turns_on_the_gpus_as_torchserve_hands_out_gpu_id():
    config = model_config("m", {"minWorkers": 5}, Defaults(gpus=2), "m.mar")
    assert groups(config) == [(GPU, 3, [0]), (GPU, 2, [1])]  # workers 0,2,4 and 1,3
    place_workers(config, 1)  # a scale to one worker: the first GPU only
    assert groups(config) == [(GPU, 1, [0])] and workers_of(config) == 1


def test_device_ids_and_device_type_override_number_of_gpu():
    chosen = model_config("m", {"minWorkers": 2, "deviceIds": [3, 1]}, Defaults(gpus=4), "x")
    assert groups(chosen) == [(GPU, 1, [3]), (GPU, 1, [1])]
    cpu = model_config("m", {"minWorkers": 2, "deviceType": "cpu"}, Defaults(gpus=4), "x")
    assert groups(cpu) == [(CPU, 2, [])]
    assert groups(model_config("m", {}, Defaults(), "x")) == [(CPU, 1, [])]


@pytest.mark.parametrize("ids", ["0", [-1], [True], [0.5]])
def test_device_ids_must_be_gpu_numbers(ids):
    with pytest.raises(ArchiveError, match="deviceIds must be GPU numbers"):
        model_config("m", {"deviceIds": ids}, Defaults(), "m.mar")
