"""`accel-gateway serve --tfserving-port --tfserving-rest-port`: every model of a Triton
repository (here the ONNX `simple`) through TF Serving's REST API and its gRPC services,
called with plain HTTP and the unmodified `tensorflow-serving-api` stubs."""

from __future__ import annotations

import grpc
import httpx
import numpy as np
import pytest

pytest.importorskip("tensorflow_serving.apis.predict_pb2")

from google.protobuf import text_format  # noqa: E402
from tensorflow_serving.apis import (  # noqa: E402
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from gateway.launch import free_ports, start_gateway  # noqa: E402
from models import simple  # noqa: E402

A = np.arange(16, dtype=np.int32)
B = np.full(16, 3, dtype=np.int32)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    repository = tmp_path_factory.mktemp("repository")
    simple.build(repository)
    *ports, grpc_port, rest_port = free_ports(5)
    server = start_gateway(
        repository, "--tfserving-port", str(grpc_port), "--tfserving-rest-port", str(rest_port),
        log_path=tmp_path_factory.mktemp("logs") / "gateway.log", ports=tuple(ports),
    )  # fmt: skip
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    yield (httpx.Client(base_url=f"http://127.0.0.1:{rest_port}", timeout=30),
           prediction_service_pb2_grpc.PredictionServiceStub(channel),
           model_service_pb2_grpc.ModelServiceStub(channel))  # fmt: skip
    channel.close()
    assert server.stop() == 0, server.log()


def test_rest_predict_status_and_metadata(served) -> None:
    rest = served[0]
    body = {"inputs": {"INPUT0": [A.tolist()], "INPUT1": [B.tolist()]}}
    outputs = rest.post("/v1/models/simple:predict", json=body).json()["outputs"]
    assert outputs == {"OUTPUT0": [(A + B).tolist()], "OUTPUT1": [(A - B).tolist()]}
    instance = {"INPUT0": A.tolist(), "INPUT1": B.tolist()}
    rows = rest.post("/v1/models/simple/versions/1:predict", json={"instances": [instance]})
    expected = {"OUTPUT0": (A + B).tolist(), "OUTPUT1": (A - B).tolist()}
    assert rows.json()["predictions"] == [expected]
    status = rest.get("/v1/models/simple").json()["model_version_status"]
    assert [(s["version"], s["state"]) for s in status] == [("1", "AVAILABLE")]
    signature = rest.get("/v1/models/simple/metadata").json()["metadata"]["signature_def"]
    inputs = signature["signature_def"]["serving_default"]["inputs"]
    assert inputs["INPUT0"]["dtype"] == "DT_INT32"
    assert [d["size"] for d in inputs["INPUT0"]["tensor_shape"]["dim"]] == ["-1", "16"]
    missing = rest.post("/v1/models/nope:predict", json={"instances": [1]})
    assert missing.status_code == 404
    assert missing.json()["error"] == "Servable not found for request: Latest(nope)"


def test_grpc_with_the_unmodified_stubs(served) -> None:
    _, prediction, models = served
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "simple"
    for name, values in (("INPUT0", A), ("INPUT1", B)):
        request.inputs[name].dtype = 3  # DT_INT32
        request.inputs[name].tensor_shape.dim.add().size = 1
        request.inputs[name].tensor_shape.dim.add().size = 16
        request.inputs[name].int_val.extend(values.tolist())
    response = prediction.Predict(request, timeout=30)
    assert list(response.outputs["OUTPUT0"].int_val) == (A + B).tolist()
    assert response.model_spec.version.value == 1
    asked = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    asked.model_spec.name = "simple"
    defs = get_model_metadata_pb2.SignatureDefMap()
    prediction.GetModelMetadata(asked, timeout=30).metadata["signature_def"].Unpack(defs)
    assert sorted(defs.signature_def["serving_default"].outputs) == ["OUTPUT0", "OUTPUT1"]
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = "simple"
    (row,) = models.GetModelStatus(status, timeout=30).model_version_status
    assert (row.version, row.state) == (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE)


def test_what_a_repository_model_has_not(served) -> None:
    _, prediction, models = served
    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = "simple", "other"
    with pytest.raises(grpc.RpcError) as signature:
        prediction.Predict(request, timeout=30)
    assert signature.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    request.model_spec.signature_name, request.model_spec.version_label = "", "stable"
    with pytest.raises(grpc.RpcError) as label:
        prediction.Predict(request, timeout=30)
    assert label.value.details() == "Unrecognized servable version label: stable"
    # `serve` mounts nothing a request names.
    reload = model_management_pb2.ReloadConfigRequest()
    text_format.Parse('model_config_list { config { name: "m" base_path: "/tmp" } }',
                      reload.config)  # fmt: skip
    with pytest.raises(grpc.RpcError) as refused:
        models.HandleReloadConfigRequest(reload, timeout=30)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
