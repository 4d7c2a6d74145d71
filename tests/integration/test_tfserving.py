"""`accel-gateway tensorflow-model-server`: TF Serving's command line, REST API and gRPC
services over SavedModels built by models/tfserving, laid out as TF Serving serves them,
with a real server process on free ports, called with plain HTTP and with the unmodified
`tensorflow-serving-api` stubs."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_serving.apis.predict_pb2")

from tensorflow_serving.apis import (  # noqa: E402
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from models.digits import held_out  # noqa: E402
from models.tfserving.savedmodels import (  # noqa: E402
    build_digits,
    build_strings,
    build_undeclared_shapes,
    model_config_file,
)
from tests.integration.tfserving_server import start_tfserving  # noqa: E402


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tfs-models")
    strings = build_strings(root / "strings", 7)
    (strings / "7").rename(strings / "00000007")  # as TF Serving's own test models number them
    undeclared = build_undeclared_shapes(root / "undeclared")
    return {"digits": build_digits(root / "digits"), "strings": strings, "undeclared": undeclared}


@pytest.fixture(scope="module")
def served(bases, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tfs-server")
    config = model_config_file(tmp / "models.config", bases, policies={"digits": "all {}"},
                               labels={"digits": {"stable": 1, "canary": 2}})  # fmt: skip
    monitoring = tmp / "monitoring.config"
    monitoring.write_text('prometheus_config { enable: true path: "/monitoring/page" }')
    server, url, grpc_port = start_tfserving(tmp, "digits", f"--model_config_file={config}",
                                             f"--monitoring_config_file={monitoring}")  # fmt: skip
    yield httpx.Client(base_url=url, timeout=60), grpc_port
    server.terminate()
    server.wait(60)


@pytest.fixture(scope="module")
def rest(served) -> httpx.Client:
    return served[0]


@pytest.fixture(scope="module")
def stub(served):
    channel = grpc.insecure_channel(f"127.0.0.1:{served[1]}")
    yield (prediction_service_pb2_grpc.PredictionServiceStub(channel),
           model_service_pb2_grpc.ModelServiceStub(channel))  # fmt: skip
    channel.close()


def test_status_lists_each_version_of_the_policy(rest) -> None:
    ok = {"error_code": "OK", "error_message": ""}
    assert rest.get("/v1/models/digits").json() == {"model_version_status": [
        {"version": str(v), "state": "AVAILABLE", "status": ok} for v in (2, 1)  # newest first
    ]}  # fmt: skip
    # As TF Serving's: a version narrows the answer, a label does not.
    one = rest.get("/v1/models/digits/versions/1").json()["model_version_status"]
    assert [s["version"] for s in one] == ["1"]
    labelled = rest.get("/v1/models/digits/labels/canary").json()["model_version_status"]
    assert [s["version"] for s in labelled] == ["2", "1"]
    missing = rest.get("/v1/models/nothing")
    assert missing.status_code == 404 and "error" in missing.json()


def test_predict_in_row_and_columnar_format(rest) -> None:
    pixels, labels = held_out()
    rows = pixels[:3].tolist()
    # Version 1 has one output: its name is dropped, as TF Serving drops it.
    one = rest.post("/v1/models/digits/versions/1:predict", json={"instances": rows}).json()
    probabilities = np.array(one["predictions"])
    assert probabilities.shape == (3, 10)
    assert np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    # The latest (2) has two: a row per instance, each naming both.
    two = rest.post("/v1/models/digits:predict", json={"instances": rows}).json()["predictions"]
    assert [r["digit"] for r in two] == np.argmax(probabilities, axis=1).tolist()
    assert np.allclose([r["probabilities"] for r in two], probabilities, atol=1e-6)
    columns = rest.post("/v1/models/digits/labels/canary:predict",
                        json={"inputs": {"pixels": rows}}).json()["outputs"]  # fmt: skip
    assert columns["digit"] == [r["digit"] for r in two]


def test_strings_in_text_and_b64_and_other_signatures(rest) -> None:
    upper = rest.post("/v1/models/strings:predict",
                      json={"instances": ["abc", {"b64": "ZMOp"}]}).json()  # fmt: skip
    assert upper["predictions"] == [
        {"upper": "ABC", "length": 3},
        {"upper": "D\u00c9", "length": 2},
    ]
    reversed_ = rest.post("/v1/models/strings:predict",
                          json={"signature_name": "reverse", "inputs": ["abc"]}).json()  # fmt: skip
    assert reversed_ == {"outputs": ["cba"]}
    # A column for a [-1] input runs, and answers in its shape, as TF Serving's session
    # would have taken it (shapes.py).
    column = rest.post("/v1/models/strings:predict",
                       json={"inputs": {"text": [["abc"], ["de"]]}}).json()  # fmt: skip
    assert column == {"outputs": {"upper": [["ABC"], ["DE"]], "length": [[3], [2]]}}


def test_bad_requests_get_tf_serving_s_4xx(rest) -> None:
    rows = held_out()[0][:2].tolist()
    cases = [
        ({"instances": rows, "inputs": rows}, "only one of 'inputs' or 'instances'"),
        ({"signature_name": "serving_default"}, "Missing 'inputs' or 'instances' key"),
        ({"instances": [rows[0], rows[1][:5]]}, "input 'pixels' is ragged"),
        ({"instances": [["a"] * 64]}, "is not of expected type: float"),
        (
            {"signature_name": "nope", "instances": rows},
            'Serving signature name: "nope" not found in signature def',
        ),
    ]
    for body, word in cases:
        answer = rest.post("/v1/models/digits:predict", json=body)
        assert answer.status_code == 400, (body, answer.text)
        assert word in answer.json()["error"], answer.text
    assert rest.post("/v1/models/digits:predict", content=b"{nope").status_code == 400
    assert rest.post("/v1/models/nothing:predict", json={"instances": rows}).status_code == 404
    label = rest.post("/v1/models/digits/labels/nope:predict", json={"instances": rows})
    assert label.json() == {"error": "Unrecognized servable version label: nope"}
    assert label.status_code == 400
    huge = rest.post("/v1/models/digits/versions/99999999999999999999:predict", json={})
    assert huge.status_code == 400 and "Failed to convert version" in huge.text
    # The path's case does not matter (the verb's does), as in TF Serving.
    assert rest.post("/V1/Models/digits:predict", json={"instances": rows}).status_code == 200
    assert rest.post("/v1/models/digits:PREDICT", json={"instances": rows}).status_code == 400


def test_nan_and_infinity_are_taken(rest) -> None:
    body = b'{"instances": [[NaN, Infinity, -Infinity' + b", 0" * 61 + b"]]}"
    answer = rest.post("/v1/models/digits/versions/1:predict", content=body)
    assert answer.status_code == 200, answer.text
    assert len(json.loads(answer.text)["predictions"][0]) == 10


def test_metadata_lists_each_signature_of_the_version(rest) -> None:
    latest = rest.get("/v1/models/digits/metadata").json()
    assert latest["model_spec"] == {"name": "digits", "signature_name": "", "version": "2"}
    defs = latest["metadata"]["signature_def"]["signature_def"]
    assert sorted(defs) == ["logits", "serving_default"]
    pixels = defs["serving_default"]["inputs"]["pixels"]
    assert pixels["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in pixels["tensor_shape"]["dim"]] == ["-1", "64"]
    assert defs["serving_default"]["method_name"] == "tensorflow/serving/predict"
    first = rest.get("/v1/models/digits/versions/1/metadata").json()
    assert list(first["metadata"]["signature_def"]["signature_def"]) == ["serving_default"]
    assert rest.get("/v1/models/digits/versions/9/metadata").status_code == 404


def test_malformed_paths_and_methods(rest) -> None:
    assert rest.get("/v1/models/digits:predict").json() == {
        "error": "Malformed request: GET /v1/models/digits:predict"
    }
    assert rest.post("/v1/models/digits/metadata").status_code == 400
    assert rest.get("/v1/models").json() == {"error": "Missing model name in request."}


def _pixels_request(rows: np.ndarray, **spec) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "digits"
    for key, value in spec.items():
        if key == "version":
            request.model_spec.version.value = value
        else:
            setattr(request.model_spec, key, value)
    request.inputs["pixels"].CopyFrom(tf.make_tensor_proto(rows))
    return request


def test_grpc_predict_with_the_unmodified_stubs(stub) -> None:
    prediction, _ = stub
    rows = held_out()[0][:4]
    answer = prediction.Predict(_pixels_request(rows), 30)
    assert answer.model_spec.name == "digits" and answer.model_spec.version.value == 2
    assert answer.model_spec.signature_name == "serving_default"
    probabilities = tf.make_ndarray(answer.outputs["probabilities"])
    assert probabilities.shape == (4, 10) and len(answer.outputs["probabilities"].float_val) == 40
    assert tf.make_ndarray(answer.outputs["digit"]).tolist() == probabilities.argmax(1).tolist()
    # A label, and an output filter.
    stable = prediction.Predict(_pixels_request(rows, version_label="stable"), 30)
    assert stable.model_spec.version.value == 1 and list(stable.outputs) == ["probabilities"]
    request = _pixels_request(rows, version=2)
    request.output_filter.append("digit")
    assert list(prediction.Predict(request, 30).outputs) == ["digit"]
    logits = prediction.Predict(_pixels_request(rows, signature_name="logits"), 30)
    assert tf.make_ndarray(logits.outputs["logits"]).shape == (4, 10)


def test_grpc_errors_carry_tf_serving_s_codes_and_words(stub) -> None:
    prediction, _ = stub
    rows = held_out()[0][:1]
    cases = [
        (predict_pb2.PredictRequest(model_spec={"name": "intentionally_missing_model"}),
         grpc.StatusCode.NOT_FOUND,
         "Servable not found for request: Latest(intentionally_missing_model)"),
        (_pixels_request(rows, signature_name="nope"), grpc.StatusCode.FAILED_PRECONDITION,
         'Serving signature key "nope" not found.'),
        (_pixels_request(rows, version=9), grpc.StatusCode.NOT_FOUND,
         "Servable not found for request: Specific(digits, 9)"),
        (_pixels_request(rows, version_label="nope"), grpc.StatusCode.INVALID_ARGUMENT,
         "Unrecognized servable version label: nope"),
        (predict_pb2.PredictRequest(model_spec={"name": "digits"}),
         grpc.StatusCode.INVALID_ARGUMENT, "input size does not match signature: 0!=1"),
    ]  # fmt: skip
    for request, code, words in cases:
        with pytest.raises(grpc.RpcError) as refused:
            prediction.Predict(request, 30)
        assert refused.value.code() == code and words in refused.value.details()
    bad = _pixels_request(rows)
    bad.output_filter.append("nothing")
    with pytest.raises(grpc.RpcError, match="output tensor alias not found"):
        prediction.Predict(bad, 30)


def test_grpc_status_and_metadata(stub) -> None:
    prediction, models = stub
    status = models.GetModelStatus(
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "digits"}), 30
    )
    assert [(s.version, s.state) for s in status.model_version_status] == [
        (2, get_model_status_pb2.ModelVersionStatus.AVAILABLE),
        (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE),
    ]
    request = get_model_metadata_pb2.GetModelMetadataRequest(
        model_spec={"name": "strings"}, metadata_field=["signature_def"]
    )
    metadata = prediction.GetModelMetadata(request, 30)
    assert metadata.model_spec.version.value == 7  # its directory: 00000007
    defs = get_model_metadata_pb2.SignatureDefMap()
    assert metadata.metadata["signature_def"].Unpack(defs)
    assert sorted(defs.signature_def) == ["reverse", "serving_default"]
    assert defs.signature_def["reverse"].outputs["reversed"].dtype == tf.string.as_datatype_enum


def _samples(rest: httpx.Client) -> dict[str, float]:
    page = rest.get("/monitoring/page")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    lines = [line for line in page.text.splitlines() if line and not line.startswith("#")]
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines}


def test_tf_serving_s_metrics_on_its_prometheus_page_beside_ours(rest, stub) -> None:
    ok = ':tensorflow:serving:request_count{model_name="digits",status="OK"}'
    # (a name no model has is counted under one label: clients cannot grow the page)
    missing = ':tensorflow:serving:request_count{model_name="(other models)",status="NOT_FOUND"}'
    before = _samples(rest)
    rows = held_out()[0][:2].tolist()
    assert rest.post("/v1/models/digits:predict", json={"instances": rows}).status_code == 200
    stub[0].Predict(_pixels_request(held_out()[0][:1]), 30)
    assert rest.post("/v1/models/nope:predict", json={"instances": rows}).status_code == 404
    after = _samples(rest)
    assert after[ok] - before.get(ok, 0) == 2 and after[missing] - before.get(missing, 0) == 1
    for api, entrypoint in (("predict", "REST"), ("Predict", "GRPC")):
        labels = f'model_name="digits",API="{api}",entrypoint="{entrypoint}"'
        assert after[f":tensorflow:serving:request_latency_count{{{labels}}}"] >= 1
        assert f':tensorflow:serving:request_latency_bucket{{{labels},le="+Inf"}}' in after
    assert any(name.startswith("nv_inference_request_success") for name in after)  # ours
    assert rest.get("/monitoring/prometheus/metrics").status_code == 404  # not the default


def test_a_tf1_graph_the_tf2_loader_refuses_runs_in_a_session(rest, stub) -> None:
    # Its signature declares scalars; the graph takes [None, 1]; a [1] tensor is sent,
    # as TF Serving's own tests send one to its half_plus_three.
    answer = rest.post("/v1/models/undeclared:predict", json={"instances": [2.0, 4.0]})
    assert answer.json() == {"predictions": [4.0, 5.0]}
    request = predict_pb2.PredictRequest(model_spec={"name": "undeclared"})
    request.inputs["x"].CopyFrom(tf.make_tensor_proto([2.0], dtype=tf.float32))
    assert list(stub[0].Predict(request, 30).outputs["y"].float_val) == [4.0]
