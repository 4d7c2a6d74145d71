"""Streaming, the gRPC health service, Prometheus metrics, and raw-HTTP error handling."""

from __future__ import annotations

import queue

import grpc
import httpx
import numpy as np
import tritonclient.grpc as grpcclient
from grpc_health.v1 import health_pb2, health_pb2_grpc


def test_stream_infer_answers_each_request(gateway):
    client = grpcclient.InferenceServerClient(gateway.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for i in range(5):
            tensor = grpcclient.InferInput("INPUT0", [1, 2], "INT64")
            tensor.set_data_from_numpy(np.array([[i, -i]], dtype=np.int64))
            client.async_stream_infer("identity_int64", [tensor], request_id=str(i))
        bad = grpcclient.InferInput("INPUT0", [1, 2], "FP32")
        bad.set_data_from_numpy(np.zeros((1, 2), dtype=np.float32))
        client.async_stream_infer("identity_int64", [bad], request_id="bad")
        answers = [results.get(timeout=10) for _ in range(6)]
    finally:
        client.stop_stream()
    values = {}
    errors = []
    for result, error in answers:
        if error is not None:
            errors.append(error.message())
        else:
            values[result.get_response().id] = result.as_numpy("OUTPUT0").tolist()
    assert values == {str(i): [[i, -i]] for i in range(5)}
    assert len(errors) == 1 and "expected datatype INT64, got FP32" in errors[0]


def test_grpc_health_service(gateway):
    with grpc.insecure_channel(gateway.grpc_url) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "inference.GRPCInferenceService"):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_prometheus_metrics(gateway):
    base = f"http://{gateway.http_url}"
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "UINT8", "data": [1, 2]}]}
    assert httpx.post(f"{base}/v2/models/identity_uint8/infer", json=body).status_code == 200
    text = httpx.get(f"http://127.0.0.1:{gateway.metrics_port}/metrics").text
    assert "# TYPE nv_inference_request_success counter" in text
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert int(lines['nv_inference_request_success{model="identity_uint8",version="1"}']) >= 1
    assert int(lines['nv_inference_count{model="identity_uint8",version="1"}']) >= 1
    assert 'nv_inference_request_failure{model="simple",version="1",reason="REJECTED"}' in lines
    assert 'nv_inference_pending_request_count{model="simple",version="1"}' in lines


def test_raw_http_errors_are_json(gateway):
    base = f"http://{gateway.http_url}"
    cases = [
        (httpx.post(f"{base}/v2/models/simple/infer", content=b"{not json"), 400, "not valid"),
        (httpx.post(f"{base}/v2/models/simple/infer", json={"inputs": 3}), 400, "'inputs' array"),
        (httpx.get(f"{base}/v2/nowhere"), 404, "no such endpoint"),
        (
            httpx.post(
                f"{base}/v2/models/simple/infer",
                json={
                    "inputs": [
                        {
                            "name": "INPUT0",
                            "shape": [1, 16],
                            "datatype": "INT32",
                            "parameters": {"binary_data_size": 64},
                        }
                    ]
                },
            ),
            400,
            "binary_data_size",
        ),
        (
            httpx.post(
                f"{base}/v2/models/simple/infer",
                json={
                    "inputs": [
                        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT33", "data": [0] * 16}
                    ]
                },
            ),
            400,
            "unknown datatype 'INT33'",
        ),
        (
            httpx.post(
                f"{base}/v2/models/simple/infer",
                json={
                    "inputs": [
                        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [0] * 15}
                    ]
                },
            ),
            400,
            "needs 16 elements",
        ),
        (
            httpx.post(
                f"{base}/v2/models/simple/infer",
                content=b'{"inputs":[]}' + b"\x00" * 8,
                headers={"Inference-Header-Content-Length": "13"},
            ),
            400,
            "8 bytes of binary data that no input claims",
        ),
        (httpx.get(f"{base}/v2/models/simple/versions/x"), 400, "integer"),
    ]
    for response, status, fragment in cases:
        assert response.status_code == status, response.text
        assert fragment in response.json()["error"], response.text


def test_body_over_limit_is_413(repository_copy, server_factory):
    server = server_factory(repository_copy("identity_uint8"), "--max-request-bytes", "1000")
    body = {
        "inputs": [{"name": "INPUT0", "shape": [1, 2000], "datatype": "UINT8", "data": [1] * 2000}]
    }
    response = httpx.post(f"http://{server.http_url}/v2/models/identity_uint8/infer", json=body)
    assert response.status_code == 413
    assert "limit" in response.json()["error"]
    # The server goes on serving.
    small = {"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "UINT8", "data": [1, 2]}]}
    ok = httpx.post(f"http://{server.http_url}/v2/models/identity_uint8/infer", json=small)
    assert ok.status_code == 200
