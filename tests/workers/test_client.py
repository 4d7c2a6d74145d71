"""The gateway's handle on a real worker process, without the event loop: load, batches in
shared memory, arena growth, leases, a reply that is late, failures and the end."""

from __future__ import annotations

import gc
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from backends.base import Device
from gateway.core.model_config import read_config
from models import identity
from workers.client import WorkerError, WorkerGone, WorkerProcess
from workers.environment import worker_environment


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("workers")
    identity.build_one(repo, "fp32")
    identity.build_one(repo, "bytes")
    return repo


def start(repository: Path, model: str) -> WorkerProcess:
    config = read_config(repository / model)
    env, device = worker_environment(config, Device(), os.getpid())
    worker = WorkerProcess(f"{model}-test", env)
    worker.load("onnxruntime_onnx", repository / model / "1" / "model.onnx", config, device, 60)
    return worker


def run(worker: WorkerProcess, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    worker.send_run(inputs, ["OUTPUT0"])
    result = worker.reply_within(10.0)
    assert result is not None
    return result[0]


def test_batches_arena_growth_and_leases(repository):
    worker = start(repository, "identity_fp32")
    try:
        small = np.arange(6, dtype=np.float32).reshape(2, 3)
        held = run(worker, {"INPUT0": small})["OUTPUT0"]  # a response still being encoded
        assert len(worker.leases) == 1
        big = np.random.default_rng(0).random((4, 1 << 18), dtype=np.float32)  # 4 MiB: grows
        np.testing.assert_array_equal(run(worker, {"INPUT0": big})["OUTPUT0"], big)
        np.testing.assert_array_equal(held, small)  # not overwritten by the later batches
        staged = worker.stage([("INPUT0", (2, 3), np.dtype(np.float32))])
        staged["INPUT0"][...] = small + 1
        np.testing.assert_array_equal(run(worker, staged)["OUTPUT0"], small + 1)
        del held
        gc.collect()
        assert len(worker.leases) == 0
    finally:
        worker.unload(10)
    assert worker.process.returncode == 0


def test_remembered_places_follow_a_new_arena(repository):
    """Both sides remember where inputs of one shape sit; after the arena is replaced, the
    same shape at the same offset must be read from the new arena, not the old."""
    worker = start(repository, "identity_fp32")
    try:
        rng = np.random.default_rng(1)
        for rows in (2, 1 << 16, 2, 3, 2):  # the second grows the arena
            data = rng.random((rows, 8), dtype=np.float32)
            np.testing.assert_array_equal(run(worker, {"INPUT0": data})["OUTPUT0"], data)
        staged = worker.stage([("INPUT0", (2, 8), np.dtype(np.float32))])
        staged["INPUT0"][...] = 7
        other = {"INPUT0": np.full((2, 8), 9, np.float32)}  # not the staged dict: copied in
        np.testing.assert_array_equal(run(worker, other)["OUTPUT0"], other["INPUT0"])
    finally:
        worker.unload(10)


def test_bytes_and_a_late_reply(repository):
    worker = start(repository, "identity_bytes")
    try:
        data = np.array([[b"a", b"", "grüße".encode()]], dtype=np.object_)
        assert run(worker, {"INPUT0": data})["OUTPUT0"].tolist() == data.tolist()
        os.kill(worker.pid, signal.SIGSTOP)
        worker.send_run({"INPUT0": data}, ["OUTPUT0"])
        assert worker.reply_within(0.01) is None  # late: the caller goes on waiting elsewhere
        os.kill(worker.pid, signal.SIGCONT)
        assert worker.wait_readable(10)
        assert worker.take_reply()[0]["OUTPUT0"].tolist() == data.tolist()
    finally:
        worker.unload(10)


def test_a_failed_run_and_a_dead_worker(repository):
    worker = start(repository, "identity_fp32")
    worker.send_run({"INPUT0": np.zeros((1, 2), np.int32)}, ["OUTPUT0"])  # wrong datatype
    with pytest.raises(WorkerError) as failure:
        worker.reply_within(10.0)
    assert failure.value.kind  # the backend's exception class, kept for the status
    worker.kill()
    assert worker.wait_readable(10)
    with pytest.raises(WorkerGone):
        worker.take_reply()
    assert worker.exit_description() == "was killed by signal SIGKILL"
    worker.close()


def test_a_worker_and_every_thread_it_has_run_the_given_steps_lower(repository):
    config = read_config(repository / "identity_fp32")
    env, device = worker_environment(config, Device(), os.getpid())
    worker = WorkerProcess("identity_fp32-nice", env, nice=3)
    try:
        worker.load("onnxruntime_onnx", repository / "identity_fp32" / "1" / "model.onnx",
                    config, device, 60)  # fmt: skip
        threads = [int(t) for t in os.listdir(f"/proc/{worker.process.pid}/task")]
        wanted = min(os.getpriority(os.PRIO_PROCESS, 0) + 3, 19)
        assert len(threads) > 1  # the backend's and numpy's pools: lowered from the start
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in threads} == {wanted}
        assert os.getpgid(worker.process.pid) == worker.process.pid  # its own group
        assert os.getsid(worker.process.pid) == os.getsid(0)  # the gateway's autogroup
    finally:
        worker.unload(10)
