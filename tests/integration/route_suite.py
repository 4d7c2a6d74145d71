"""One suite of V2 routes, run against every implementation of the core interface
(gateway/core/interface.py): the in-process core (`serve`), the front-process proxy
(`serve --workers 2`, tests/integration/test_core_implementations.py) and the Ray
ingress (tests/integration/test_ray_serve.py). A route added to a front is added here
once; a core that answers it differently fails here, whichever deployment it is.

Each check takes the server's addresses (`Endpoints`) and asks through the unmodified
tritonclient, over HTTP and gRPC, about the example model `simple` (INT32 add and sub)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


class Endpoints(NamedTuple):
    http_url: str  # host:port
    grpc_url: str


def _clients(where: Endpoints) -> list:
    http = httpclient.InferenceServerClient(where.http_url)
    http.module = httpclient
    grpc = grpcclient.InferenceServerClient(where.grpc_url)
    grpc.module = grpcclient
    return [http, grpc]


def _simple_inputs(module, binary: bool = True) -> tuple[list, np.ndarray]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        if module is httpclient:
            tensor.set_data_from_numpy(a, binary_data=binary)
        else:
            tensor.set_data_from_numpy(a)
    return inputs, a


def health(where: Endpoints) -> None:
    for client in _clients(where):
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("simple")
        assert not client.is_model_ready("no_such_model")


def server_metadata(where: Endpoints) -> None:
    http, grpc = _clients(where)
    metadata = http.get_server_metadata()
    assert metadata["name"] == "accel-gateway"
    assert {"binary_tensor_data", "statistics", "model_configuration"} <= set(
        metadata["extensions"]
    )
    assert list(grpc.get_server_metadata().extensions) == metadata["extensions"]


def model_metadata_and_config(where: Endpoints) -> None:
    http, grpc = _clients(where)
    metadata = http.get_model_metadata("simple")
    assert [(t["name"], t["datatype"]) for t in metadata["inputs"]] == [
        ("INPUT0", "INT32"), ("INPUT1", "INT32"),
    ]  # fmt: skip
    assert [t.name for t in grpc.get_model_metadata("simple").outputs] == ["OUTPUT0", "OUTPUT1"]
    assert http.get_model_config("simple")["name"] == "simple"
    assert grpc.get_model_config("simple").config.max_batch_size == 8


def infer(where: Endpoints) -> None:
    for client in _clients(where):
        for binary in (True, False) if client.module is httpclient else (True,):
            inputs, a = _simple_inputs(client.module, binary)
            result = client.infer("simple", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a)


def infer_stream(where: Endpoints) -> None:
    results: list = []
    client = grpcclient.InferenceServerClient(where.grpc_url)
    client.start_stream(callback=lambda result, error: results.append((result, error)))
    try:
        inputs, a = _simple_inputs(grpcclient)
        client.async_stream_infer("simple", inputs, request_id="7")
    finally:
        client.stop_stream()  # waits for the answers
    ((result, error),) = results
    assert error is None and result.get_response().id == "7"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


def statistics_and_index(where: Endpoints) -> None:
    http, grpc = _clients(where)

    def successes() -> int:
        try:
            (row,) = http.get_inference_statistics("simple")["model_stats"]
        except InferenceServerException:  # under Ray: no replica has reported yet
            return 0
        return row["inference_stats"]["success"]["count"]

    before = successes()
    http.infer("simple", _simple_inputs(httpclient)[0])
    # Counted at once in process; posted by the replicas every so often under Ray.
    deadline = time.monotonic() + 60
    while successes() < before + 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    (row,) = http.get_inference_statistics("simple")["model_stats"]
    assert row["name"] == "simple" and row["inference_stats"]["success"]["count"] > before
    stats = grpc.get_inference_statistics("simple").model_stats
    assert [s.name for s in stats] == ["simple"] and stats[0].version == row["version"]
    index = {row["name"]: row for row in http.get_model_repository_index()}
    assert index["simple"]["state"] == "READY" and index["simple"]["version"] == row["version"]
    over_grpc = {m.name: m for m in grpc.get_model_repository_index().models}
    assert (over_grpc["simple"].state, over_grpc["simple"].version) == ("READY", row["version"])


def log_settings(where: Endpoints) -> None:
    http, grpc = _clients(where)
    settings = http.get_log_settings()
    assert {"log_info", "log_warning", "log_error", "log_verbose_level"} <= set(settings)
    assert grpc.get_log_settings().settings["log_info"].bool_param == settings["log_info"]


def shared_memory_status(where: Endpoints) -> None:
    http, grpc = _clients(where)
    assert http.get_cuda_shared_memory_status() == []
    assert list(grpc.get_cuda_shared_memory_status().regions) == []


def unknown_model(where: Endpoints) -> None:
    for client in _clients(where):
        with pytest.raises(InferenceServerException) as failed:
            client.infer("no_such_model", _simple_inputs(client.module)[0])
        assert "no_such_model" in failed.value.message()
        assert failed.value.status() in ("404", "StatusCode.NOT_FOUND")


def bad_input(where: Endpoints) -> None:
    answer = httpx.post(
        f"http://{where.http_url}/v2/models/simple/infer",
        json={"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16],
                          "data": [0.0] * 16}]},
        timeout=30,
    )  # fmt: skip
    assert answer.status_code == 400
    assert "INPUT0" in answer.json()["error"]
    grpc = grpcclient.InferenceServerClient(where.grpc_url)
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(np.zeros((1, 16), np.float32))
    with pytest.raises(InferenceServerException) as failed:
        grpc.infer("simple", inputs)
    assert failed.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "INPUT0" in failed.value.message()


ROUTES: list[Callable[[Endpoints], None]] = [
    health, server_metadata, model_metadata_and_config, infer, infer_stream,
    statistics_and_index, log_settings, shared_memory_status, unknown_model, bad_input,
]  # fmt: skip
