"""On-demand loading and eviction through a real server (`--model-control-mode
on-demand`) and the unmodified tritonclient: every model known and unloaded until its
first request, concurrent first requests sharing one load, the least recently used idle
model evicted when the host budget is full and loaded again on its next request, a
pinned model loaded at start and never evicted, and the metrics counting it all."""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from models import identity
from tests.conftest import infer_concurrently

NAMES = ("a", "b", "c", "d", "pinned")


def identity_repository(tmp_path, names) -> Path:
    """A repository of copies of identity_int32 under `names`, each booking 100 MB."""
    built = identity.build_one(tmp_path / "built", "int32")
    root = tmp_path / "repository"
    for name in names:
        shutil.copytree(tmp_path / "built" / built, root / name)
        config = root / name / "config.pbtxt"
        text = config.read_text().replace('name: "identity_int32"', f'name: "{name}"')
        config.write_text(
            text + '\nparameters { key: "memory_bytes" value: { string_value: "100MB" } }\n'
        )
    return root


@pytest.fixture
def server(tmp_path, server_factory):
    """Copies of identity_int32 that book 100 MB each, in a host budget of 300 MB."""
    root = identity_repository(tmp_path, NAMES)
    return server_factory(
        root, "--model-control-mode", "on-demand", "--host-memory-budget", "300MB",
        "--memory-reserve", "0", "--pin-model", "pinned",
    )  # fmt: skip


def states(http) -> dict[str, str]:
    return {row["name"]: row["state"] for row in http.get_model_repository_index()}


def tensor(module, value: int):
    made = module.InferInput("INPUT0", [1, 3], "INT32")
    made.set_data_from_numpy(np.full((1, 3), value, np.int32))
    return made


def infer(client, module, model: str, value: int) -> np.ndarray:
    return client.infer(model, [tensor(module, value)]).as_numpy("OUTPUT0")


def metric(server, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    return sum(float(m[1]) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def test_models_load_on_their_first_request_and_the_oldest_idle_one_makes_room(server):
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert states(http) == {
        "a": "UNAVAILABLE", "b": "UNAVAILABLE", "c": "UNAVAILABLE", "d": "UNAVAILABLE",
        "pinned": "READY",
    }  # fmt: skip
    assert not http.is_model_ready("a")

    # Sixteen first requests at once, over both protocols: one load.
    with ThreadPoolExecutor(9) as pool:  # a gRPC client may be shared between threads
        over_http = pool.submit(
            infer_concurrently, server.http_url, "a", [[tensor(httpclient, v)] for v in range(8)]
        )
        calls = [pool.submit(grpc.infer, "a", [tensor(grpcclient, v)]) for v in range(8, 16)]
        answers = over_http.result() + [call.result() for call in calls]
    for value, answer in enumerate(answers):
        np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), np.full((1, 3), value))
    assert metric(server, "accel_gateway_model_loads") == 2  # pinned, then a
    # Each request found its model loaded or waited for it (how many waited is timing).
    waited = metric(server, "accel_gateway_model_cache_misses")
    assert waited >= 1 and waited + metric(server, "accel_gateway_model_cache_hits") == 16

    # The pinned model and a fill the 300 MB with b: c needs room, and a is the oldest idle.
    infer(grpc, grpcclient, "b", 1)
    infer(http, httpclient, "c", 2)
    now = states(http)
    assert (now["a"], now["b"], now["c"], now["pinned"]) == (
        "UNAVAILABLE", "READY", "READY", "READY",
    )  # fmt: skip
    evicted = next(r for r in http.get_model_repository_index() if r["name"] == "a")
    assert "evicted" in evicted["reason"]
    assert metric(server, "accel_gateway_model_evictions") == 1

    # a comes back on its next request, and b, now the oldest idle, goes.
    np.testing.assert_array_equal(infer(http, httpclient, "a", 5), np.full((1, 3), 5))
    now = states(http)
    assert (now["a"], now["b"], now["c"], now["pinned"]) == (
        "READY", "UNAVAILABLE", "READY", "READY",
    )  # fmt: skip


def test_metadata_and_config_requests_load_the_model_too(server):
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert http.get_model_metadata("d")["name"] == "d"
    assert grpc.get_model_config("b").config.name == "b"
    now = states(http)
    assert (now["d"], now["b"]) == ("READY", "READY")
