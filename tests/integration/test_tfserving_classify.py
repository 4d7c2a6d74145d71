"""TF Serving's classify and regress methods and MultiInference, over gRPC with the
unmodified `tensorflow-serving-api` stubs and over REST, on the digits classifier that
takes serialized tf.Examples (models/tfserving: build_examples), served by a real
`accel-gateway tensorflow-model-server` process."""

from __future__ import annotations

import base64

import grpc
import httpx
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_serving.apis.classification_pb2")

from tensorflow_serving.apis import (  # noqa: E402
    classification_pb2,
    inference_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from models.digits import held_out  # noqa: E402
from models.tfserving.savedmodels import build_examples  # noqa: E402
from tests.integration.tfserving_server import start_tfserving  # noqa: E402

CLASSIFY, REGRESS = "tensorflow/serving/classify", "tensorflow/serving/regress"
PIXELS = held_out()[0][:3]


def _server(tmp, *flags):
    base = build_examples(tmp / "examples", 4)
    server, url, grpc_port = start_tfserving(
        tmp, "examples", "--model_name=examples", f"--model_base_path={base}", *flags
    )
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    client = httpx.Client(base_url=url, timeout=60)
    return server, channel, client


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server, channel, client = _server(tmp_path_factory.mktemp("tfs-classify"))
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel), client
    channel.close()
    server.terminate()
    server.wait(60)


@pytest.fixture(scope="module")
def stub(served):
    return served[0]


@pytest.fixture(scope="module")
def rest(served) -> httpx.Client:
    return served[1]


@pytest.fixture(scope="module")
def probabilities(rest) -> np.ndarray:
    """The serving_default (predict) signature's answer for PIXELS: what classify and
    regress must agree with."""
    answer = rest.post("/v1/models/examples:predict", json={"instances": PIXELS.tolist()})
    return np.array(answer.json()["predictions"], dtype=np.float32)


def _example(pixels) -> tf.train.Example:
    return tf.train.Example(features=tf.train.Features(feature={
        "pixels": tf.train.Feature(float_list=tf.train.FloatList(value=list(pixels)))
    }))  # fmt: skip


def _request(kind, signature, rows=PIXELS, version=None):
    request = kind()
    request.model_spec.name = "examples"
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    request.input.example_list.examples.extend(_example(p) for p in rows)
    return request


def _scores(result) -> np.ndarray:
    return np.array([[c.score for c in row.classes] for row in result.classifications])


def test_classify_answers_a_class_per_column_for_each_example(stub, probabilities) -> None:
    response = stub.Classify(_request(classification_pb2.ClassificationRequest, "classify"))
    spec = response.model_spec
    assert (spec.name, spec.signature_name) == ("examples", "classify")
    assert response.model_spec.version.value == 4
    rows = response.result.classifications
    assert len(rows) == 3
    assert all([c.label for c in row.classes] == [str(d) for d in range(10)] for row in rows)
    assert np.allclose(_scores(response.result), probabilities, atol=1e-6)
    # A signature with scores alone: the labels are empty, as TF Serving leaves them.
    alone = stub.Classify(_request(classification_pb2.ClassificationRequest, "classify_scores"))
    assert {c.label for row in alone.result.classifications for c in row.classes} == {""}
    assert np.allclose(_scores(alone.result), probabilities, atol=1e-6)


def test_regress_answers_a_value_per_example(stub, probabilities) -> None:
    expected = probabilities @ np.arange(10, dtype=np.float32)
    for signature in ("regress", "regress_column"):  # [batch] and [batch, 1] outputs
        response = stub.Regress(_request(regression_pb2.RegressionRequest, signature, version=4))
        assert response.model_spec.signature_name == signature
        values = [r.value for r in response.result.regressions]
        assert np.allclose(values, expected, atol=1e-4)


def test_context_features_join_each_example_and_the_example_wins(stub, probabilities) -> None:
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name, request.model_spec.signature_name = "examples", "classify"
    listed = request.input.example_list_with_context
    listed.context.CopyFrom(_example(PIXELS[0]))
    listed.examples.add()  # no features: the context's pixels
    listed.examples.append(_example(PIXELS[1]))  # its own pixels win over the context's
    scores = _scores(stub.Classify(request).result)
    assert np.allclose(scores, probabilities[:2], atol=1e-6)


def test_multi_inference_runs_each_task_on_one_version(stub, probabilities) -> None:
    request = inference_pb2.MultiInferenceRequest()
    # The first task's version is every task's, as TF Serving's (there is no version 3).
    for signature, method, version in (("regress", REGRESS, 4), ("classify", CLASSIFY, 3)):
        task = request.tasks.add()
        task.model_spec.name, task.model_spec.signature_name = "examples", signature
        task.model_spec.version.value = version
        task.method_name = method
    request.input.example_list.examples.extend(_example(p) for p in PIXELS)
    results = stub.MultiInference(request).results
    assert [r.model_spec.signature_name for r in results] == ["regress", "classify"]
    assert {r.model_spec.version.value for r in results} == {4}
    values = [r.value for r in results[0].regression_result.regressions]
    assert np.allclose(values, probabilities @ np.arange(10), atol=1e-4)
    assert np.allclose(_scores(results[1].classification_result), probabilities, atol=1e-6)


def _predict_rows(client: httpx.Client, signature: str) -> int:
    examples = [_example(p).SerializeToString() for p in PIXELS]
    encoded = [{"b64": base64.b64encode(e).decode()} for e in examples]
    body = {"signature_name": signature, "inputs": {"inputs": encoded}}
    answer = client.post("/v1/models/examples:predict", json=body)
    assert answer.status_code == 200, answer.text
    return len(answer.json()["outputs"])


def _code(call, request) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as failure:
        call(request)
    return failure.value.code(), failure.value.details()


def test_grpc_refusals_carry_tf_serving_s_codes_and_words(stub) -> None:
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    classify = classification_pb2.ClassificationRequest
    # serving_default is a predict signature on `pixels`: no classification input.
    code, words = _code(stub.Classify, _request(classify, ""))
    assert code == invalid and words.startswith("No classification inputs found in SignatureDef")
    code, words = _code(stub.Regress, _request(regression_pb2.RegressionRequest, "classify"))
    assert (code, words) == (invalid, "Expected one output Tensor.")
    assert _code(stub.Classify, _request(classify, "nope")) == (
        invalid, "No signature was found with the name: nope")  # fmt: skip
    assert _code(stub.Classify, _request(classify, "classify", rows=[])) == (
        invalid, "Input is empty.")  # fmt: skip
    assert _code(stub.Classify, classify())[1] == "Missing ModelSpec"
    missing = _request(classify, "classify", version=9)
    not_found = "Servable not found for request: Specific(examples, 9)"
    assert _code(stub.Classify, missing) == (grpc.StatusCode.NOT_FOUND, not_found)


def test_multi_inference_refusals(stub) -> None:
    def request(*tasks):
        made = inference_pb2.MultiInferenceRequest()
        for name, signature, method in tasks:
            task = made.tasks.add()
            task.model_spec.name, task.model_spec.signature_name = name, signature
            task.method_name = method
        made.input.example_list.examples.append(_example(PIXELS[0]))
        return made

    invalid = grpc.StatusCode.INVALID_ARGUMENT
    one_model = "All ModelSpecs in a MultiInferenceRequest must access the same model name."
    assert _code(stub.MultiInference, request(("examples", "regress", REGRESS),
                                              ("other", "classify", CLASSIFY))) == (
        invalid, one_model)  # fmt: skip
    assert _code(stub.MultiInference, request(("examples", "regress", REGRESS),
                                              ("examples", "regress", REGRESS))) == (
        invalid, "Duplicate evaluation of signature: regress")  # fmt: skip
    assert _code(stub.MultiInference, request(("examples", "", "tensorflow/serving/predict"))) == (
        grpc.StatusCode.UNIMPLEMENTED,
        "Unsupported signature method_name: tensorflow/serving/predict")  # fmt: skip
    assert _code(stub.MultiInference, request(("examples", "nope", REGRESS))) == (
        invalid, "Requested signature not found in model graph: nope")  # fmt: skip
    assert _code(stub.MultiInference, request())[1] == "ModelSpec has no name specified."


def test_rest_classify_and_regress(rest, probabilities) -> None:
    examples = [{"pixels": p} for p in PIXELS.tolist()]
    answer = rest.post("/v1/models/examples:classify",
                       json={"signature_name": "classify", "examples": examples})  # fmt: skip
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [[label for label, _ in row] for row in results] == [[str(d) for d in range(10)]] * 3
    assert np.allclose([[s for _, s in row] for row in results], probabilities, atol=1e-6)
    # Through a label-free version path, with the pixels in the context.
    answer = rest.post("/v1/models/examples/versions/4:regress", json={
        "signature_name": "regress", "context": {"pixels": PIXELS[0].tolist()}, "examples": [{}],
    })  # fmt: skip
    assert answer.status_code == 200, answer.text
    (value,) = answer.json()["results"]
    assert value == pytest.approx(float(probabilities[0] @ np.arange(10)), abs=1e-4)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"signature_name": "classify"}, "When method is classify, key 'examples' is expected"),
        ({"signature_name": "classify", "examples": []}, "'examples' value is an empty array"),
        ({"signature_name": "classify", "examples": [[1.0]]},
         "Example must be JSON object but got JSON Array"),
        ({"signature_name": "classify", "examples": [{"pixels": [1.0, 2]}]},
         "Unexpected element type in feature: pixels expecting type: float"),
        ({"signature_name": "classify", "examples": [{"pixels": [None]}]},
         "Feature: pixels has element with unexpected JSON type: Null"),
        ({"signature_name": "classify", "examples": [{"pixels": [2**63]}]},
         "Feature: pixels has uint64_t element. Only int64_t is supported."),
        ({"signature_name": "nope", "examples": [{}]},
         "No signature was found with the name: nope"),
        ({"signature_name": 7, "examples": [{}]}, "'signature_name' key must be a string value."),
        # Examples the signature cannot parse (integers for its floats, too few): the
        # client's error, as TensorFlow says it.
        ({"signature_name": "classify", "examples": [{"pixels": [1] * 64}]},
         "TensorFlow refused the inputs"),
        ({"signature_name": "classify", "examples": [{"pixels": [1.0]}]},
         "TensorFlow refused the inputs"),
    ],
)  # fmt: skip
def test_rest_refusals(rest, body, words) -> None:
    answer = rest.post("/v1/models/examples:classify", json=body)
    assert answer.status_code == 400
    assert words in answer.json()["error"]


def test_rest_refuses_a_lone_surrogate_and_a_deep_document(rest) -> None:
    lone = rest.post("/v1/models/examples:classify", headers={"content-type": "application/json"},
                     content=b'{"examples": [{"\\ud800": [1.0]}]}')  # fmt: skip
    assert lone.status_code == 400
    assert lone.json()["error"] == "JSON Parse error: The surrogate pair in string is invalid."
    deep = rest.post("/v1/models/examples:classify", content=b"[" * 5000 + b"]" * 5000)
    assert deep.status_code == 400 and "JSON Parse error" in deep.json()["error"]


def test_method_names_are_checked_when_asked(tmp_path) -> None:
    server, channel, client = _server(tmp_path, "--enable_signature_method_name_check")
    try:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = _request(classification_pb2.ClassificationRequest, "regress")
        assert _code(stub.Classify, request) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            "Expected classification signature method_name to be tensorflow/serving/classify. "
            "Was: tensorflow/serving/regress",
        )
        # The right method still runs, and Predict takes any of the three methods.
        regress = stub.Regress(_request(regression_pb2.RegressionRequest, "regress"))
        assert len(regress.result.regressions) == 3
        assert _predict_rows(client, "classify_scores") == 3
    finally:
        channel.close()
        server.terminate()
        server.wait(60)
