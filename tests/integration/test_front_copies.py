"""Front processes with their own copies of CPU models (`--workers 2`, copies on by
default): every front serves its copy and the server answers as one. Statistics and
metrics sum the copies, a load or an unload reaches every copy, a new version is the one
every front serves, a restarted front loads its copies again, on-demand eviction sees
the fronts' use and drops every copy, and a shared-memory region registered through one
front is used and unregistered through any."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from models import simple
from models.config_text import DynamicBatching
from tests.conftest import wait_until
from tests.integration.test_fronts import front_pids, front_requests
from tests.integration.test_on_demand_server import identity_repository

SIMPLE_INPUTS = {"INPUT0": np.arange(16, dtype=np.int32).reshape(1, 16),
                 "INPUT1": np.ones((1, 16), dtype=np.int32)}  # fmt: skip


def infer_simple(url: str, model: str = "simple", version: str = "") -> httpclient.InferResult:
    """One request on a connection of its own (the kernel spreads connections over fronts)."""
    client = httpclient.InferenceServerClient(url, network_timeout=30.0)
    try:
        tensors = []
        for name, data in SIMPLE_INPUTS.items():
            tensor = httpclient.InferInput(name, [1, 16], "INT32")
            tensor.set_data_from_numpy(data)
            tensors.append(tensor)
        return client.infer(model, tensors, model_version=version)
    finally:
        client.close()


def serve_from_every_front(server, model: str = "simple", fronts: int = 2) -> int:
    """Requests on new connections until every front has served one; how many were sent."""
    sent = 0
    deadline = time.monotonic() + 30
    while len([n for n in front_requests(server).values() if n]) < fronts:
        assert time.monotonic() < deadline, f"not every front serves: {front_requests(server)}"
        result = infer_simple(server.http_url, model)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(16).reshape(1, 16) + 1)
        sent += 1
        if sent % 20 == 0:  # fronts report their copies' counts each second, or when asked
            httpx.get(f"http://{server.http_url}/v2/models/stats")
    return sent


def success_metric(server, model: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    found = re.search(rf'^nv_inference_request_success{{model="{model}",version="1"}} (\S+)$',
                      text, re.M)  # fmt: skip
    return float(found[1]) if found else 0.0


@pytest.fixture
def two_fronts(tmp_path, server_factory):
    repository = tmp_path / "repository"
    simple.build(repository)
    simple.build(repository, "simple_batched", DynamicBatching())
    server = server_factory(
        repository, "--workers", "2", "--model-control-mode", "explicit",
        "--load-model", "simple", "--load-model", "simple_batched",
    )  # fmt: skip
    return server, repository


def test_every_front_serves_its_own_copy_and_statistics_are_summed(two_fronts):
    server, _ = two_fronts
    # The host loaded each model once, and each front loaded its copy.
    wait_until(lambda: server.log().count("loaded model 'simple' version 1") == 3, 30,
               server.log)  # fmt: skip
    sent = serve_from_every_front(server)
    for model in ("simple", "simple_batched"):
        for _ in range(10):
            infer_simple(server.http_url, model)
    sent += 10
    # Any front answers with every front's counts, over both protocols, and the metrics agree.
    for _ in range(4):
        http = httpclient.InferenceServerClient(server.http_url)
        stats = http.get_inference_statistics("simple")["model_stats"][0]
        http.close()
        assert stats["inference_stats"]["success"]["count"] == sent, stats
        assert stats["inference_count"] == sent and stats["execution_count"] == sent
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    stats = grpc.get_inference_statistics("simple_batched", as_json=True)["model_stats"][0]
    assert int(stats["inference_stats"]["success"]["count"]) == 10
    grpc.close()
    assert success_metric(server, "simple") == sent
    assert sum(front_requests(server).values()) == sent + 10


def test_an_unload_and_a_load_reach_every_copy(two_fronts):
    server, repository = two_fronts
    serve_from_every_front(server)
    http = httpclient.InferenceServerClient(server.http_url)
    http.unload_model("simple")
    assert not http.is_model_ready("simple")
    for _ in range(12):  # new connections: both fronts; none serves a copy left behind
        with pytest.raises(InferenceServerException, match="simple"):
            infer_simple(server.http_url)
    # A second version: once loaded, every front serves it as the latest.
    shutil.copytree(repository / "simple" / "1", repository / "simple" / "2")
    http.load_model("simple")
    before = dict(front_requests(server))
    answered_by = set()
    deadline = time.monotonic() + 30
    while len(answered_by) < 2:
        assert time.monotonic() < deadline, front_requests(server)
        assert infer_simple(server.http_url).get_response()["model_version"] == "2"
        http.get_inference_statistics("simple")  # the fronts report their copies' counts
        answered_by = {f for f, n in front_requests(server).items() if n > before.get(f, 0)}
    # Version 2 alone: the default policy serves the latest version only.
    for _ in range(6):
        with pytest.raises(InferenceServerException, match="version 1"):
            infer_simple(server.http_url, version="1")
    http.close()


def test_a_restarted_front_loads_its_copies_again_and_counts_carry_on(two_fronts):
    server, _ = two_fronts
    sent = serve_from_every_front(server)
    http = httpclient.InferenceServerClient(server.http_url)
    stats = http.get_inference_statistics("simple")["model_stats"][0]  # reported in full
    assert stats["inference_stats"]["success"]["count"] == sent
    victim = front_pids(server)[0]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: len(front_pids(server)) == 2 and victim not in front_pids(server), 30)
    wait_until(lambda: server.log().count("loaded model 'simple' version 1") == 4, 30,
               server.log)  # fmt: skip
    for _ in range(20):
        infer_simple(server.http_url)
    stats = http.get_inference_statistics("simple")["model_stats"][0]
    http.close()
    # What the killed front had reported is kept; the new one counts from zero.
    assert stats["inference_stats"]["success"]["count"] == sent + 20


@pytest.fixture
def on_demand(tmp_path, server_factory):
    """Copies of identity_int32 that book 100 MB each, in each of three processes (the
    host and two fronts): 300 MB a model, in a host budget of 900 MB."""
    root = identity_repository(tmp_path, ("a", "b", "c", "d"))
    return server_factory(
        root, "--workers", "2", "--model-control-mode", "on-demand",
        "--host-memory-budget", "900MB", "--memory-reserve", "0",
    )  # fmt: skip


def infer_identity(server, model: str, value: int) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    try:
        tensor = httpclient.InferInput("INPUT0", [1, 3], "INT32")
        tensor.set_data_from_numpy(np.full((1, 3), value, np.int32))
        return client.infer(model, [tensor]).as_numpy("OUTPUT0")
    finally:
        client.close()


def test_eviction_sees_the_fronts_use_and_drops_every_copy(on_demand):
    server = on_demand
    for name in ("a", "b", "c"):
        infer_identity(server, name, 1)
    # `a` is used again through the fronts' copies only: the host learns of it from them.
    for value in range(10):
        np.testing.assert_array_equal(infer_identity(server, "a", value), np.full((1, 3), value))
    http = httpclient.InferenceServerClient(server.http_url)
    http.get_inference_statistics()  # every front's counts, as of now
    infer_identity(server, "d", 2)  # no room: the least recently used goes, which is `b`
    states = {row["name"]: row["state"] for row in http.get_model_repository_index()}
    assert states == {"a": "READY", "b": "UNAVAILABLE", "c": "READY", "d": "READY"}, states
    # No front serves `b` from a copy left behind: it loads again on its next request.
    loads = server.log().count("loaded model 'b'")
    np.testing.assert_array_equal(infer_identity(server, "b", 5), np.full((1, 3), 5))
    assert server.log().count("loaded model 'b'") == loads + 3  # the host and both fronts
    http.close()


@pytest.fixture
def shm_fronts(tmp_path, server_factory):
    repository = tmp_path / "repository"
    simple.build(repository)
    server = server_factory(repository, "--workers", "2", "--allow-shared-memory")
    keys = [f"/gw-fronts-{os.getpid()}-{name}" for name in ("in", "out")]
    handles = [shm.create_shared_memory_region(name, key, 128)
               for name, key in zip(("in", "out"), keys, strict=True)]  # fmt: skip
    yield server, handles, keys
    for handle in handles:
        shm.destroy_shared_memory_region(handle)


def test_a_region_registered_through_one_front_serves_requests_at_every_front(shm_fronts):
    server, (inputs, outputs), (input_key, output_key) = shm_fronts
    serve_from_every_front(server)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    shm.set_shared_memory_region(inputs, [a, np.full((1, 16), 3, np.int32)])
    grpc = grpcclient.InferenceServerClient(server.grpc_url)  # one connection: one front
    grpc.register_system_shared_memory("in", input_key, 128)
    grpc.register_system_shared_memory("out", output_key, 128)
    before = dict(front_requests(server))
    answered_by: set[str] = set()
    deadline = time.monotonic() + 30
    while len(answered_by) < 2:  # each request on a new connection, until both fronts did
        assert time.monotonic() < deadline, front_requests(server)
        http = httpclient.InferenceServerClient(server.http_url)
        assert {r["name"] for r in http.get_system_shared_memory_status()} == {"in", "out"}
        tensors = []
        for position, name in enumerate(("INPUT0", "INPUT1")):
            tensor = httpclient.InferInput(name, [1, 16], "INT32")
            tensor.set_shared_memory("in", 64, offset=64 * position)
            tensors.append(tensor)
        wanted = []
        for position, name in enumerate(("OUTPUT0", "OUTPUT1")):
            output = httpclient.InferRequestedOutput(name, binary_data=True)
            output.set_shared_memory("out", 64, offset=64 * position)
            wanted.append(output)
        shm.set_shared_memory_region(outputs, [np.zeros((2, 16), np.int32)])
        http.infer("simple", tensors, outputs=wanted)
        http.get_inference_statistics("simple")  # the fronts report their copies' counts
        http.close()
        np.testing.assert_array_equal(shm.get_contents_as_numpy(outputs, np.int32, [1, 16]), a + 3)
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(outputs, np.int32, [1, 16], offset=64), a - 3
        )
        answered_by = {f for f, n in front_requests(server).items() if n > before.get(f, 0)}
    grpc.unregister_system_shared_memory("in")
    for _ in range(6):  # no front still knows it
        http = httpclient.InferenceServerClient(server.http_url)
        assert [r["name"] for r in http.get_system_shared_memory_status()] == ["out"]
        tensor = httpclient.InferInput("INPUT0", [1, 16], "INT32")
        tensor.set_shared_memory("in", 64)
        other = httpclient.InferInput("INPUT1", [1, 16], "INT32")
        other.set_data_from_numpy(a)
        with pytest.raises(InferenceServerException, match="in"):
            http.infer("simple", [tensor, other])
        http.close()
    grpc.close()
