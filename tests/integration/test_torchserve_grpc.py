"""TorchServe's gRPC APIs (InferenceAPIsService, ManagementAPIsService) on a real gateway,
called through stubs generated from TorchServe's own .proto files (as TorchServe's users
call them: tests/torchserve_grpc_support.py), with archives made by the real
torch-model-archiver.

The expected codes and details are TorchServe 0.12's own answers to the same calls
(recorded against TorchServe itself), except where noted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest
from google.protobuf import empty_pb2

pytest.importorskip("ts")

from torchserve_grpc_support import Gateway, launch, stubs  # noqa: E402

from backends.torchserve.store import Defaults, add_archive  # noqa: E402
from gateway.protocols.torchserve.replies import TOKEN_FAILED  # noqa: E402
from models.digits import held_out  # noqa: E402
from models.torchserve.archives import build_archive  # noqa: E402

TIMEOUT_S = 240  # a registration starts a worker process
HANDLER_FAILED = "org.pytorch.serve.http.InternalServerException"
NOT_FOUND = "org.pytorch.serve.archive.model.ModelNotFoundException"


@pytest.fixture(scope="module")
def ts(tmp_path_factory) -> SimpleNamespace:
    return stubs(tmp_path_factory.mktemp("torchserve-stubs"))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("model-store")
    for kind in ("digits", "function", "failing", "streaming"):
        build_archive(kind, store)
    build_archive("function", store, name="registered")
    build_archive("function", store / "v2", name="registered", version="2.0")
    return store


@pytest.fixture(scope="module")
def gateway(ts, store, tmp_path_factory) -> Iterator[Gateway]:
    """Token authorization on, the model API on, digits, function and failing served."""
    repository = tmp_path_factory.mktemp("repository")
    kinds = ["digits", "function", "failing", "streaming"]
    for kind in kinds:
        add_archive(store / f"{kind}.mar", repository, Defaults())
    log = tmp_path_factory.mktemp("logs") / "gateway.log"
    served = launch(ts, repository, store, log, kinds, keys=True, model_api=True)
    yield served
    assert served.server.stop() == 0, served.server.log()


def request(ts, model: str, version: str = "", **inputs: bytes):
    return ts.inference.PredictionsRequest(model_name=model, model_version=version, input=inputs)


def digits_input() -> bytes:
    images, _ = held_out()
    return json.dumps({"pixels": images[0].tolist()}).encode()


def refused(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as raised:
        call(*args, timeout=TIMEOUT_S, **kwargs)
    return raised.value


# ---- inference -----------------------------------------------------------------------------


def test_ping_answers_torchserves_health_json(gateway):
    answer = gateway.inference.Ping(empty_pb2.Empty(), metadata=gateway.inference_key, timeout=30)
    assert answer.health == '{\n  "status": "Healthy"\n}'


def test_a_prediction_is_the_rest_apis_answer_byte_for_byte(gateway, ts):
    payload = digits_input()
    rest = gateway.rest.post(
        "/predictions/digits", content=payload,
        headers={"content-type": "application/json", "authorization": gateway.inference_key[0][1]},
    )  # fmt: skip
    assert rest.status_code == 200, rest.text
    for version in ("", "1.0"):
        answer = gateway.inference.Predictions(
            request(ts, "digits", version, data=payload), metadata=gateway.inference_key, timeout=60
        )
        assert answer.prediction == rest.content
    assert json.loads(rest.content)["batch"] == 1


def test_each_input_reaches_the_handler_as_a_field_of_its_name(gateway, ts):
    # The function handler reads "body" (bytes as they were) and "shout"; its status 201
    # is not part of a gRPC answer, as in TorchServe's.
    answer = gateway.inference.Predictions(
        request(ts, "function", body=b"line\r\n--x", shout=b"1"),
        metadata=gateway.inference_key,
        timeout=60,
    )
    assert answer.prediction == b"LINE\r\n--X||1"


@pytest.mark.parametrize(
    "model, version, details",
    [
        ("nothing", "", f"Model not found: nothing\n{NOT_FOUND}"),
        ("digits", "9.9", "Model version: 9.9 does not exist for model: digits\n"
         "org.pytorch.serve.archive.model.ModelVersionNotFoundException"),
        ("", "", "Parameter model_name is required.\nBadRequestException.()"),
    ],
)  # fmt: skip
def test_a_request_refused_before_its_handler_is_torchserves_internal(
    gateway, ts, model, version, details
):
    error = refused(
        gateway.inference.Predictions,
        request(ts, model, version, data=b"x"),
        metadata=gateway.inference_key,
    )
    assert (error.code(), error.details()) == (grpc.StatusCode.INTERNAL, details)


def test_a_handlers_failure_has_its_status_code_and_its_message(gateway, ts):
    predict = gateway.inference.Predictions
    error = refused(predict, request(ts, "failing", body=b"refuse"), metadata=gateway.inference_key)
    assert error.code() == grpc.StatusCode.INTERNAL  # PredictionException's 513
    assert error.details() == f"the input was refused\n{HANDLER_FAILED}"
    error = refused(predict, request(ts, "failing", body=b"crash"), metadata=gateway.inference_key)
    assert error.code() == grpc.StatusCode.UNAVAILABLE  # a handler that breaks: 503
    assert error.details() == f"Prediction failed\n{HANDLER_FAILED}"
    fine = predict(request(ts, "failing", body=b"fine"), metadata=gateway.inference_key, timeout=60)
    assert fine.prediction == b"ok"


def test_every_call_needs_its_apis_key(gateway, ts):
    ping = (gateway.inference.Ping, empty_pb2.Empty())
    predict = (gateway.inference.Predictions, request(ts, "function", body=b"x"))
    listing = (gateway.management.ListModels, ts.management.ListModelsRequest())
    wrong = (("authorization", "Bearer not-the-key"),)
    inference, management = gateway.inference_key, gateway.management_key
    for (call, message), right, other in (
        (ping, inference, management), (predict, inference, management),
        (listing, management, inference),
    ):  # fmt: skip
        for metadata in ((), wrong, other, ((right[0][0], right[0][1][7:]),)):  # no "Bearer"
            error = refused(call, message, metadata=metadata)
            assert (error.code(), error.details()) == (
                grpc.StatusCode.PERMISSION_DENIED,
                TOKEN_FAILED,
            )
        call(message, metadata=right, timeout=60)


def test_stream_predictions_carry_the_one_answer_then_end(gateway, ts):
    stream = gateway.inference.StreamPredictions
    answers = list(
        stream(request(ts, "function", body=b"hi"), metadata=gateway.inference_key, timeout=60)
    )
    assert [a.prediction for a in answers] == [b"hi||1"]
    error = refused(lambda *a, **k: list(stream(*a, **k)), request(ts, "nothing", data=b"x"),
                    metadata=gateway.inference_key)  # fmt: skip
    assert (error.code(), error.details()) == (
        grpc.StatusCode.INTERNAL, f"Model not found: nothing\n{NOT_FOUND}"
    )  # fmt: skip


def test_stream_predictions_carry_a_handlers_intermediate_responses(gateway, ts):
    answers = gateway.inference.StreamPredictions(
        request(ts, "streaming", body=b"one two three"), metadata=gateway.inference_key,
        timeout=60,
    )  # fmt: skip
    assert [a.prediction for a in answers] == [b"one ", b"two ", b"three"]
    # A unary call cannot take them: the handler's batch fails, saying where to go.
    error = refused(gateway.inference.Predictions, request(ts, "streaming", body=b"a b"),
                    metadata=gateway.inference_key)  # fmt: skip
    assert "need a stream" in error.details()


def test_stream_predictions2_answers_each_request_in_turn_failures_in_status(gateway, ts):
    sent = [
        request(ts, "function", body=b"a"),
        request(ts, "failing", body=b"refuse"),
        ts.inference.PredictionsRequest(model_name="function", input={"body": b"b"},
                                        sequence_id="s-1"),
        request(ts, "nothing", data=b"x"),
        # More than run ahead at once (32): the stream waits for room, in order still.
        *(request(ts, "function", body=str(i).encode()) for i in range(40)),
        request(ts, "digits", data=digits_input()),
    ]  # fmt: skip
    answers = list(gateway.inference.StreamPredictions2(iter(sent), metadata=gateway.inference_key,
                                                        timeout=TIMEOUT_S))  # fmt: skip
    assert len(answers) == len(sent)
    assert answers[0].prediction == b"a||1" and not answers[0].HasField("status")

    def failure(answer) -> tuple[int, str, str]:
        info = ts.error_details.ErrorInfo()
        assert answer.status.details[0].Unpack(info)
        return answer.status.code, answer.status.message, info.reason

    assert failure(answers[1]) == (13, "the input was refused", HANDLER_FAILED)
    code, message, _ = failure(answers[2])
    assert code == grpc.StatusCode.UNIMPLEMENTED.value[0] and "sequence_id" in message
    assert failure(answers[3]) == (13, "Model not found: nothing", NOT_FOUND)
    assert [a.prediction for a in answers[4:-1]] == [f"{i}||1".encode() for i in range(40)]
    assert json.loads(answers[-1].prediction)["digit"] in range(10)


def test_without_keys_calls_need_none_and_the_model_api_stays_off(store, tmp_path, ts):
    repository = tmp_path / "repository"
    repository.mkdir()
    add_archive(store / "function.mar", repository, Defaults())
    served = launch(ts, repository, store, tmp_path / "gateway.log", ["function"])
    try:
        assert "Healthy" in served.inference.Ping(empty_pb2.Empty(), timeout=30).health
        answer = served.inference.Predictions(request(ts, "function", body=b"x"), timeout=60)
        assert answer.prediction == b"x||1"
        error = refused(served.management.RegisterModel,
                        ts.management.RegisterModelRequest(url="registered.mar"))  # fmt: skip
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert error.details().startswith("Requested method is not allowed")
    finally:
        assert served.server.stop() == 0, served.server.log()


# ---- management ----------------------------------------------------------------------------


def test_register_describe_list_scale_set_default_and_unregister(gateway, ts):
    m, pb = gateway.management, ts.management

    def msg(method: str, message) -> str:
        return getattr(m, method)(message, metadata=gateway.management_key, timeout=TIMEOUT_S).msg

    def described(version: str = "") -> list[dict]:
        request = pb.DescribeModelRequest(model_name="registered", model_version=version)
        return json.loads(msg("DescribeModel", request))

    register = pb.RegisterModelRequest(url="registered.mar", initial_workers=1, synchronous=True)
    assert msg("RegisterModel", register) == (
        'Model "registered" Version: 1.0 registered with 1 initial workers'
    )
    answer = gateway.inference.Predictions(
        request(ts, "registered", body=b"x"), metadata=gateway.inference_key, timeout=60
    )
    assert answer.prediction == b"x||1"
    [first] = described()
    assert (first["modelName"], first["modelVersion"], first["minWorkers"]) == (
        "registered", "1.0", 1,
    )  # fmt: skip
    listed = json.loads(msg("ListModels", pb.ListModelsRequest()))
    names = ["digits", "failing", "function", "registered", "streaming"]
    assert [model["modelName"] for model in listed["models"]] == names
    page = json.loads(msg("ListModels", pb.ListModelsRequest(limit=1, next_page_token=1)))
    assert page == {"nextPageToken": "2", "models": [{"modelName": "failing",
                                                      "modelUrl": "failing.mar"}]}  # fmt: skip

    scale = pb.ScaleWorkerRequest(model_name="registered", min_worker=2, synchronous=True)
    assert msg("ScaleWorker", scale).startswith("Workers scaled to 2 for model: registered")
    assert described()[0]["minWorkers"] == 2

    second = pb.RegisterModelRequest(url="v2/registered.mar", initial_workers=1, synchronous=True)
    assert msg("RegisterModel", second) == (
        'Model "registered" Version: 2.0 registered with 1 initial workers'
    )
    assert [d["modelVersion"] for d in described("all")] == ["1.0", "2.0"]
    default = pb.SetDefaultRequest(model_name="registered", model_version="2.0")
    assert msg("SetDefault", default) == (
        'Default version successfully updated for model "registered" to "2.0"'
    )
    assert described()[0]["modelVersion"] == "2.0"
    older = pb.UnregisterModelRequest(model_name="registered", model_version="1.0")
    assert msg("UnregisterModel", older) == 'Model "registered" unregistered'
    assert [d["modelVersion"] for d in described("all")] == ["2.0"]
    last = pb.UnregisterModelRequest(model_name="registered")
    assert msg("UnregisterModel", last) == 'Model "registered" unregistered'
    error = refused(m.DescribeModel, pb.DescribeModelRequest(model_name="registered"),
                    metadata=gateway.management_key)  # fmt: skip
    assert error.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    "method, fields, code, details",
    [
        ("DescribeModel", {"model_name": "nothing"}, grpc.StatusCode.NOT_FOUND,
         f"Model not found: nothing\n{NOT_FOUND}"),
        ("RegisterModel", {"url": "nope.mar"}, grpc.StatusCode.NOT_FOUND,
         f"Model not found at: nope.mar\n{NOT_FOUND}"),
        ("RegisterModel", {}, grpc.StatusCode.INVALID_ARGUMENT,
         "Parameter url is required.\norg.pytorch.serve.http.BadRequestException"),
        ("ScaleWorker", {"model_name": "digits", "min_worker": 3, "max_worker": 1},
         grpc.StatusCode.INVALID_ARGUMENT, "max_worker cannot be less than min_worker"),
        ("SetDefault", {"model_name": "function", "model_version": "9.9"},
         grpc.StatusCode.NOT_FOUND, "9.9"),
        ("UnregisterModel", {"model_name": "nothing"}, grpc.StatusCode.NOT_FOUND,
         f"Model not found: nothing\n{NOT_FOUND}"),
        ("UnregisterModel", {}, grpc.StatusCode.INVALID_ARGUMENT,
         "Parameter model_name is required."),
        # TorchServe answers UNKNOWN with no details here (an exception it does not catch):
        # this is its own table's code for 409, with the message.
        ("RegisterModel", {"url": "function.mar"}, grpc.StatusCode.ABORTED,
         "already registered"),
    ],
)  # fmt: skip
def test_each_management_call_refuses_with_torchserves_code(gateway, ts, method, fields, code,
                                                            details):  # fmt: skip
    message = getattr(ts.management, f"{method}Request")(**fields)
    error = refused(getattr(gateway.management, method), message, metadata=gateway.management_key)
    assert error.code() == code
    assert details in error.details()
