"""SageMaker's container contract against a real server: /ping, /invocations with JSON and
binary bodies, the multi-model target header with on-demand loading, and errors."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from gateway.launch import free_ports
from gateway.protocols.http.sagemaker import model_name_of
from models.digits import held_out


@pytest.mark.parametrize(
    ("target", "name"),
    [("digits.tar.gz", "digits"), ("models/v2/simple.tgz", "simple"), ("mlp", "mlp")],
)
def test_model_name_of_a_target(target, name):
    assert model_name_of(target) == name


@pytest.fixture
def sagemaker(repository_copy, server_factory):
    """A gateway in explicit mode with nothing loaded, SageMaker routes on a free port:
    a multi-model endpoint before its first invocation."""
    *ports, port = free_ports(4)  # all four differ
    repository = repository_copy("digits", "simple")
    server = server_factory(
        repository, "--model-control-mode", "explicit", "--sagemaker", "--sagemaker-port",
        str(port), ports=tuple(ports),
    )  # fmt: skip
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        yield client, server


def json_body(images: np.ndarray) -> dict:
    return {
        "inputs": [
            {
                "name": "pixels",
                "shape": list(images.shape),
                "datatype": "FP32",
                "data": images.ravel().tolist(),
            }
        ]
    }


def test_ping(sagemaker):
    client, _ = sagemaker
    reply = client.get("/ping")
    assert reply.status_code == 200


def test_invocation_loads_the_target_model_on_demand(sagemaker):
    client, server = sagemaker
    triton = httpclient.InferenceServerClient(server.http_url)
    try:
        assert not triton.is_model_ready("digits")
        images = held_out()[0][:3]
        reply = client.post(
            "/invocations",
            json=json_body(images),
            headers={"X-Amzn-SageMaker-Target-Model": "digits.tar.gz"},
        )
        assert reply.status_code == 200, reply.text
        [output] = reply.json()["outputs"]
        assert output["name"] == "probabilities" and output["shape"] == [3, 10]
        assert triton.is_model_ready("digits")
        tensor = httpclient.InferInput("pixels", list(images.shape), "FP32")
        tensor.set_data_from_numpy(images)
        expected = triton.infer("digits", [tensor]).as_numpy("probabilities")
    finally:
        triton.close()
    np.testing.assert_allclose(np.reshape(output["data"], (3, 10)), expected, rtol=1e-6)


def test_binary_body_and_the_one_ready_model_without_a_header(sagemaker):
    client, _ = sagemaker
    images = held_out()[0][:2]
    tensor = httpclient.InferInput("pixels", list(images.shape), "FP32")
    tensor.set_data_from_numpy(images, binary_data=True)
    outputs = [httpclient.InferRequestedOutput("probabilities", binary_data=True)]
    body, json_length = httpclient.InferenceServerClient.generate_request_body(
        [tensor], outputs=outputs
    )
    headers = {"Inference-Header-Content-Length": str(json_length)}
    headers["X-Amzn-SageMaker-Target-Model"] = "digits"
    first = client.post("/invocations", content=body, headers=headers)
    assert first.status_code == 200, first.text
    result = httpclient.InferenceServerClient.parse_response_body(
        first.content, header_length=int(first.headers["Inference-Header-Content-Length"])
    )
    assert result.as_numpy("probabilities").shape == (2, 10)
    # digits is now the only model loaded: it answers without the header too.
    del headers["X-Amzn-SageMaker-Target-Model"]
    second = client.post("/invocations", content=body, headers=headers)
    assert second.status_code == 200, second.text


def test_unknown_target_model_is_404(sagemaker):
    client, _ = sagemaker
    reply = client.post(
        "/invocations",
        json=json_body(held_out()[0][:1]),
        headers={"X-Amzn-SageMaker-Target-Model": "nope.tar.gz"},
    )
    assert reply.status_code == 404
    assert "nope.tar.gz" in reply.json()["error"]


def test_no_header_with_no_model_ready_says_to_name_one(sagemaker):
    client, _ = sagemaker
    reply = client.post("/invocations", json=json_body(held_out()[0][:1]))
    assert reply.status_code == 503
    assert "X-Amzn-SageMaker-Target-Model" in reply.json()["error"]


def test_concurrent_first_invocations_load_the_model_once(sagemaker):
    client, server = sagemaker
    images = held_out()[0][:1]

    def invoke(_: int) -> int:
        headers = {"X-Amzn-SageMaker-Target-Model": "digits.tar.gz"}
        return client.post("/invocations", json=json_body(images), headers=headers).status_code

    with ThreadPoolExecutor(max_workers=6) as pool:
        assert list(pool.map(invoke, range(6))) == [200] * 6
    assert server.log().count("loaded model 'digits'") == 1


def test_binary_length_in_sagemakers_content_type(sagemaker):
    """InvokeEndpoint forwards only its own headers: the JSON length of a binary body
    travels in the content type, as Triton's SageMaker front-end takes it."""
    client, _ = sagemaker
    images = held_out()[0][:2]
    tensor = httpclient.InferInput("pixels", list(images.shape), "FP32")
    tensor.set_data_from_numpy(images, binary_data=True)
    body, json_length = httpclient.InferenceServerClient.generate_request_body([tensor])
    content_type = f"application/vnd.sagemaker-triton.binary+json;json-header-size={json_length}"
    reply = client.post(
        "/invocations",
        content=body,
        headers={"Content-Type": content_type, "X-Amzn-SageMaker-Target-Model": "digits"},
    )
    assert reply.status_code == 200, reply.text
    result = httpclient.InferenceServerClient.parse_response_body(
        reply.content, header_length=int(reply.headers["Inference-Header-Content-Length"])
    )
    assert result.as_numpy("probabilities").shape == (2, 10)


def test_bad_input_names_the_input(sagemaker):
    client, _ = sagemaker
    body = json_body(held_out()[0][:1])
    body["inputs"][0]["shape"] = [1, 63]
    reply = client.post(
        "/invocations", json=body, headers={"X-Amzn-SageMaker-Target-Model": "digits"}
    )
    assert reply.status_code == 400 and "pixels" in reply.json()["error"]


def test_other_paths_are_404(sagemaker):
    client, _ = sagemaker
    assert client.get("/invocations").status_code == 404
    assert client.get("/v2/health/ready").status_code == 404
