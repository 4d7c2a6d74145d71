"""Spare workers (on demand, GPU instances): started ahead with the framework imported,
taken by the next load of their kind, replaced meanwhile, ended with the server. Real
worker processes; the GPU is only the key the spares are kept for, so this runs on a
CPU-only machine, where the spare then loads an ONNX model on the CPU."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from backends.base import Device
from gateway.core.model_config import read_config
from gateway.core.scheduling import spares as spares_module
from gateway.core.scheduling.spares import SpareWorkers
from models import identity
from workers.environment import worker_environment

ONNX = "onnxruntime_onnx"
GPU = Device("gpu", 0)


def kept_spares(spares: SpareWorkers) -> list:
    return [spare for queue in spares._spares.values() for spare in queue]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("spares")
    return repo / identity.build_one(repo, "fp32")


def test_a_gpu_load_takes_the_spare_of_its_kind_and_starts_the_next(model):
    config = read_config(model)
    env, device = worker_environment(config, Device(), os.getpid())
    spares = SpareWorkers(per_kind=2)
    try:
        first = spares.take("m-1-0", env, 0, ONNX, GPU)  # none yet: a new worker
        assert len(spares) == 2
        spare_pids = [s.pid for s in kept_spares(spares)]
        second = spares.take("m-1-1", env, 0, ONNX, GPU)  # the oldest spare
        assert second.pid == spare_pids[0] and second.pid != first.pid
        pids = [s.pid for s in kept_spares(spares)]
        assert len(pids) == 2 and pids[0] == spare_pids[1] and second.pid not in pids
        # The spare imported ONNX Runtime before its load; it loads and runs all the same.
        second.name = "m-1-1"
        second.load(ONNX, model / "1" / "model.onnx", config, device, 60)
        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        second.send_run({"INPUT0": data}, ["OUTPUT0"])
        result = second.reply_within(10.0)
        assert result is not None
        np.testing.assert_array_equal(result[0]["OUTPUT0"], data)
        second.unload(10)
        first.kill()
        first.close()
        # Another kind (other threads, another platform) does not take it.
        other = spares.take("n-1-0", {**env, "OMP_NUM_THREADS": "7"}, 0, ONNX, GPU)
        assert len(spares) == 4 and other.pid not in {s.pid for s in kept_spares(spares)}
        other.kill()
        other.close()
    finally:
        kept = kept_spares(spares)
        spares.close()
    assert len(spares) == 0 and not any(s.alive() for s in kept)


def test_cpu_loads_keep_no_spares_and_a_dead_spare_is_not_handed_out(model):
    env, _ = worker_environment(read_config(model), Device(), os.getpid())
    spares = SpareWorkers(per_kind=1)
    try:
        worker = spares.take("m-1-0", env, 0, ONNX, Device())
        assert len(spares) == 0  # a CPU spare would hold memory no budget counts
        worker.kill()
        worker.close()
        spares.take("m-1-0", env, 0, ONNX, GPU).close()
        (dead,) = kept_spares(spares)
        dead.kill()
        dead.process.wait(10)
        fresh = spares.take("m-1-1", env, 0, ONNX, GPU)
        assert fresh.pid != dead.pid and fresh.alive()
        fresh.kill()
        fresh.close()
    finally:
        spares.close()


def test_spares_of_the_kinds_loaded_longest_ago_are_ended(model, monkeypatch):
    monkeypatch.setattr(spares_module, "MAX_KINDS", 1)
    env, _ = worker_environment(read_config(model), Device(), os.getpid())
    spares = SpareWorkers(per_kind=1)
    try:
        spares.take("a-1-0", env, 0, ONNX, GPU).close()
        (old,) = kept_spares(spares)
        spares.take("b-1-0", {**env, "OMP_NUM_THREADS": "3"}, 0, ONNX, GPU).close()
        (new,) = kept_spares(spares)
        assert new.pid != old.pid
        old.process.wait(10)  # ended
        assert not old.alive()
    finally:
        spares.close()
