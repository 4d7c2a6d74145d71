"""Issue 12, "no 500 for bad input", against a real gateway: each case here was a 500, an
empty 503 or a silently wrong answer, and is now a 4xx naming what was wrong (gRPC:
INVALID_ARGUMENT or NOT_FOUND), with real clients where they can send it."""

from __future__ import annotations

import json

import grpc
import httpx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException


def post_infer(gateway, model: str, body: bytes, header_length: int | None = None):
    headers = {}
    if header_length is not None:
        headers["Inference-Header-Content-Length"] = str(header_length)
    url = f"http://{gateway.http_url}/v2/models/{model}/infer"
    return httpx.post(url, content=body, headers=headers, timeout=10)


def post_binary(gateway, model: str, header: dict, blob: bytes) -> httpx.Response:
    """The binary tensor extension: the JSON header, then the tensors' bytes."""
    text = json.dumps(header).encode()
    return post_infer(gateway, model, text + blob, len(text))


def grpc_infer_error(gateway, request: service_pb2.ModelInferRequest) -> grpc.RpcError:
    """The error of a ModelInfer call, with tritonclient's own messages and stub."""
    with grpc.insecure_channel(gateway.grpc_url) as channel, pytest.raises(grpc.RpcError) as info:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=10)
    return info.value


def assert_400(response: httpx.Response, *fragments: str) -> None:
    assert response.status_code == 400, response.text
    for fragment in fragments:
        assert fragment in response.json()["error"], response.text


def identity_input(datatype: str, data: list, shape: list[int] | None = None) -> dict:
    shape = shape if shape is not None else [1, len(data)]
    return {"name": "INPUT0", "shape": shape, "datatype": datatype, "data": data}


def test_outputs_that_is_not_a_list_json_and_binary(gateway):
    body = {"inputs": [identity_input("UINT8", [1, 2])], "outputs": 5}
    assert_400(post_infer(gateway, "identity_uint8", json.dumps(body).encode()), "'outputs'")
    entry = {"name": "INPUT0", "shape": [1, 2], "datatype": "UINT8"}
    entry["parameters"] = {"binary_data_size": 2}
    header = {"inputs": [entry], "outputs": {"name": "OUTPUT0"}}
    assert_400(post_binary(gateway, "identity_uint8", header, b"\x01\x02"), "'outputs'")


def test_more_than_64_dimensions_http_and_grpc(gateway):
    shape = [1] * 65
    body = json.dumps({"inputs": [identity_input("UINT8", [1], shape)]}).encode()
    assert_400(post_infer(gateway, "identity_uint8", body), "65 dimensions, at most 64")
    entry = {"name": "INPUT0", "shape": shape, "datatype": "UINT8"}
    entry["parameters"] = {"binary_data_size": 1}
    assert_400(post_binary(gateway, "identity_uint8", {"inputs": [entry]}, b"\x01"), "65 dim")
    request = service_pb2.ModelInferRequest(model_name="identity_uint8")
    request.inputs.add(name="INPUT0", datatype="UINT8", shape=shape)
    request.raw_input_contents.append(b"\x01")
    error = grpc_infer_error(gateway, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "65 dimensions, at most 64" in error.details()


@pytest.mark.parametrize("leaf", [b"1", b"NaN"])  # orjson, and json for NaN bodies
def test_json_nested_past_the_limit(gateway, leaf):
    deep = b"[" * 100_000 + leaf + b"]" * 100_000
    body = b'{"inputs": [], "parameters": {"p": ' + deep + b"}}"
    assert_400(post_infer(gateway, "simple", body), "too deeply")
    index = httpx.post(
        f"http://{gateway.http_url}/v2/repository/index", content=b'{"ready": ' + deep + b"}"
    )
    assert_400(index, "too deeply")


def test_readiness_of_unknown_or_malformed_models(gateway):
    base = f"http://{gateway.http_url}/v2/models"
    cases = [
        ("/nope/ready", 404, "Request for unknown model: 'nope' is not found"),
        ("/simple/versions/7/ready", 404, "'simple' version 7 is not found"),
        ("/simple/versions/x/ready", 400, "must be a non-negative integer, got 'x'"),
        ("/simple/versions/1_0/ready", 400, "non-negative integer"),  # int() would take it
        ("/nope", 404, "unknown model"),
        ("/nope/config", 404, "unknown model"),
        ("/nope/stats", 404, "unknown model"),
        ("/simple/versions/-1", 400, "non-negative integer"),
        ("/simple/versions/x/config", 400, "non-negative integer"),
        ("/simple/versions/x/stats", 400, "non-negative integer"),
    ]
    for path, status, fragment in cases:
        response = httpx.get(base + path)
        assert response.status_code == status, (path, response.text)
        assert fragment in response.json()["error"], (path, response.text)
    assert httpx.get(f"{base}/simple/versions/1/ready").status_code == 200


def test_tritonclient_readiness_as_against_triton(gateway):
    """is_model_ready is False, not an exception, for an unknown model or version (over
    HTTP any status but 200 means not ready; over gRPC Triton answers ready=false)."""
    http = httpclient.InferenceServerClient(gateway.http_url)
    assert http.is_model_ready("simple") and http.is_model_ready("simple", "1")
    assert not http.is_model_ready("nope")
    assert not http.is_model_ready("simple", "7")
    assert not http.is_model_ready("simple", "x")
    client = grpcclient.InferenceServerClient(gateway.grpc_url)
    assert client.is_model_ready("simple")
    assert not client.is_model_ready("nope")
    assert not client.is_model_ready("simple", "7")
    with pytest.raises(InferenceServerException, match="non-negative integer") as info:
        client.is_model_ready("simple", "x")  # a malformed version is an error, as in Triton
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    for call in (client.get_model_metadata, client.get_model_config):
        with pytest.raises(InferenceServerException) as info:
            call("nope")
        assert info.value.status() == "StatusCode.NOT_FOUND"
        with pytest.raises(InferenceServerException) as info:
            call("simple", "x")
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"


@pytest.mark.parametrize(
    ("model", "datatype", "data", "fragment"),
    [
        ("identity_int32", "INT32", [1.5, 2], "INT32 data must be integers, got number 1.5"),
        ("identity_int32", "INT32", [2.0], "got number 2.0"),
        ("identity_int64", "INT64", ["7"], "got string '7'"),
        ("identity_uint8", "UINT8", [1, 300], "integer 300 (element 1) is out of the range"),
        ("identity_int8", "INT8", [-129], "out of the range of INT8"),
        ("identity_bool", "BOOL", [1, 0], "BOOL data must be true or false, got integer 1"),
        ("identity_fp16", "FP16", [1e300], "out of the range of FP16"),
        ("identity_fp32", "FP32", [None], "FP32 data must be numbers, got null"),
    ],
)
def test_json_tensor_data_must_be_exact(gateway, model, datatype, data, fragment):
    body = json.dumps({"inputs": [identity_input(datatype, data)]}).encode()
    assert_400(post_infer(gateway, model, body), "input 'INPUT0'", fragment)


def test_exact_json_integers_still_work(gateway):
    data = [0, -(2**31), 2**31 - 1]
    body = json.dumps({"inputs": [identity_input("INT32", data)]}).encode()
    response = post_infer(gateway, "identity_int32", body)
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == data


def test_grpc_typed_contents_out_of_range(gateway):
    request = service_pb2.ModelInferRequest(model_name="identity_uint8")
    tensor = request.inputs.add(name="INPUT0", datatype="UINT8", shape=[1, 1])
    tensor.contents.uint_contents.append(300)
    error = grpc_infer_error(gateway, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "does not fit UINT8" in error.details()


def test_wrong_methods_are_405_with_allow(gateway):
    base = f"http://{gateway.http_url}"
    infer = httpx.get(f"{base}/v2/models/simple/infer")
    assert infer.status_code == 405 and infer.headers["allow"] == "POST", infer.text
    metadata = httpx.post(f"{base}/v2/models/simple")
    assert metadata.status_code == 405 and "GET" in metadata.headers["allow"], metadata.text
    assert "is not allowed" in metadata.json()["error"]
