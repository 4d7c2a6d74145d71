"""The pure parts of TorchServe's gRPC fronts: a PredictionsRequest's input map as the form
the backend reads back field by field, TorchServe's status codes and details, its token
check, and management messages as the HTTP API's parameters and answers."""

from __future__ import annotations

import json

import grpc
import pytest

from accel_base.errors import HandlerFailed, InvalidArgument, Unavailable
from accel_base.proto.torchserve import management_pb2 as mpb
from backends.torchserve.forms import body_inputs
from gateway.protocols.torchserve.grpc_common import (
    form_body,
    grpc_code,
    inference_failure,
    management_failure,
    token_refusal,
)
from gateway.protocols.torchserve.grpc_management import message_params, response
from gateway.protocols.torchserve.keys import Keys
from gateway.protocols.torchserve.models import model_not_found, version_not_found
from gateway.protocols.torchserve.replies import TOKEN_FAILED, TsError


def read_back(inputs: dict[str, bytes]) -> dict[str, tuple[str, bytes]]:
    body, content_type = form_body(inputs)
    return {name: (kind, value) for name, kind, value in body_inputs(body, content_type)}


@pytest.mark.parametrize(
    "inputs",
    [
        {"data": b'{"pixels": [1, 2]}'},
        # Values a form could confuse: line ends, a delimiter's dashes, nothing at all,
        # every byte value.
        {"a": b"\r\n--\r\n", "b": b"", "c": b"\r", "d": b"\n\n", "e": bytes(range(256)) * 3},
        # Names a Content-Disposition quotes: quotes, backslashes, separators, non-ASCII.
        {'say "hi"': b"1", "back\\slash": b"2", "a;b=c": b"3", "é日本": b"4", "": b"5"},
    ],
)
def test_every_entry_comes_back_as_a_field_of_its_name_without_content_type(inputs):
    assert read_back(inputs) == {name: ("", value) for name, value in inputs.items()}


def test_a_value_holding_the_first_boundary_chosen_still_comes_back(monkeypatch):
    # The boundary is drawn again while a value holds it.
    drawn = iter(["0" * 32, "1" * 32])
    monkeypatch.setattr("secrets.token_hex", lambda _: next(drawn))
    inputs = {"x": b"--" + b"0" * 32 + b"\r\n", "y": b"0" * 32}
    body, content_type = form_body(inputs)
    assert content_type == "multipart/form-data; boundary=" + "1" * 32
    assert {n: v for n, _, v in body_inputs(body, content_type)} == inputs


def test_an_empty_map_or_a_name_with_a_line_end_is_refused_by_name():
    with pytest.raises(InvalidArgument, match="PredictionsRequest.input is empty"):
        form_body({})
    with pytest.raises(InvalidArgument, match="must not hold CR, LF or NUL"):
        form_body({"a\r\nContent-Type: x": b"1"})


def test_http_statuses_map_to_torchserves_grpc_codes():
    assert grpc_code(400) == grpc.StatusCode.INVALID_ARGUMENT
    assert grpc_code(404) == grpc.StatusCode.NOT_FOUND
    assert grpc_code(409) == grpc.StatusCode.ABORTED
    assert grpc_code(413) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert grpc_code(501) == grpc.StatusCode.UNIMPLEMENTED
    assert grpc_code(503) == grpc.StatusCode.UNAVAILABLE
    assert grpc_code(418) == grpc.StatusCode.FAILED_PRECONDITION  # any other 4xx
    assert grpc_code(513) == grpc.StatusCode.INTERNAL  # any other 5xx
    assert grpc_code(507) == grpc.StatusCode.INTERNAL


def test_a_prediction_refused_before_its_handler_is_internal_as_torchserves():
    unknown = inference_failure(model_not_found("m"))
    assert unknown.code == grpc.StatusCode.INTERNAL
    assert unknown.details == (
        "Model not found: m\norg.pytorch.serve.archive.model.ModelNotFoundException"
    )
    version = inference_failure(version_not_found("m", "9"))
    assert version.code == grpc.StatusCode.INTERNAL
    assert version.reason == "org.pytorch.serve.archive.model.ModelVersionNotFoundException"


def test_a_handlers_failure_keeps_its_status_and_its_own_message():
    failure = inference_failure(HandlerFailed("wrapped", 513, "the input was refused"))
    assert failure.code == grpc.StatusCode.INTERNAL
    assert (
        failure.details == "the input was refused\norg.pytorch.serve.http.InternalServerException"
    )
    broken = inference_failure(HandlerFailed("wrapped", 503, "Prediction failed"))
    assert broken.code == grpc.StatusCode.UNAVAILABLE
    overloaded = inference_failure(Unavailable("the server is overloaded"))
    assert (overloaded.code, overloaded.message) == (
        grpc.StatusCode.UNAVAILABLE,
        "the server is overloaded",
    )
    odd = inference_failure(KeyError("x"))
    assert odd.code == grpc.StatusCode.INTERNAL and "KeyError" in odd.message


def test_management_failures_use_the_table_and_model_api_off_is_permission_denied():
    assert management_failure(model_not_found("m")).code == grpc.StatusCode.NOT_FOUND
    assert management_failure(TsError(400, "bad")).code == grpc.StatusCode.INVALID_ARGUMENT
    off = management_failure(TsError(405, "Model API is disabled", "MethodNotAllowedException"))
    assert off.code == grpc.StatusCode.PERMISSION_DENIED
    assert off.reason == "org.pytorch.serve.archive.model.ModelException"
    download = management_failure(TsError(400, "Failed", "DownloadArchiveException"))
    assert download.details == "Failed\norg.pytorch.serve.archive.DownloadArchiveException"


@pytest.mark.parametrize(
    "metadata, allowed",
    [
        ((("authorization", "Bearer key1"),), True),
        ((("authorization", "bearer  key1 "),), True),
        ((("authorization", b"Bearer key1"),), True),
        ((("x-other", "a"), ("authorization", "Bearer key1")), True),
        ((("authorization", "Bearer key2"),), False),
        ((("authorization", "key1"),), False),
        ((("x-other", "Bearer key1"),), False),
        ((), False),
        (None, False),
    ],
)
def test_a_call_needs_the_bearer_key(metadata, allowed, tmp_path):
    keys = Keys(tmp_path)
    live = keys.key("inference")

    def with_live_key(value: str | bytes) -> str | bytes:
        if isinstance(value, bytes):
            return value.replace(b"key1", live.encode())
        return value.replace("key1", live)

    if metadata is not None:
        metadata = tuple((name, with_live_key(value)) for name, value in metadata)
    refusal = token_refusal(metadata, keys, "inference")
    assert (refusal is None) == allowed
    if refusal is not None:  # as TorchServe's: the message alone
        assert (refusal.code, refusal.details) == (grpc.StatusCode.PERMISSION_DENIED, TOKEN_FAILED)
    assert token_refusal(metadata, None, "inference") is None  # no key asked for


def test_with_the_servers_keys_a_call_needs_its_apis_live_key(tmp_path):
    now = [1000.0]
    keys = Keys(tmp_path, expiry_min=1, clock=lambda: now[0])

    def allowed(key: str, kind: str) -> bool:
        return token_refusal((("authorization", f"Bearer {key}"),), keys, kind) is None

    inference, management = keys.key("inference"), keys.key("management")
    assert allowed(inference, "inference") and allowed(management, "management")
    assert not allowed(management, "inference") and not allowed(inference, "management")
    keys.renew("inference")  # POST /token: the old key stops working at once
    assert not allowed(inference, "inference") and allowed(keys.key("inference"), "inference")
    now[0] += 61  # and keys expire
    assert not allowed(keys.key("inference"), "inference")


def test_only_the_fields_given_become_parameters_and_synchronous_always_does():
    request = mpb.RegisterModelRequest(url="m.mar", initial_workers=2, batch_size=0)
    numbers = ("batch_size", "initial_workers", "max_batch_delay")
    params = message_params(request, numbers, ("url", "handler"))
    assert params == {"url": "m.mar", "initial_workers": "2", "synchronous": "false"}
    scale = mpb.ScaleWorkerRequest(model_name="m", min_worker=3, synchronous=True)
    assert message_params(scale, ("min_worker", "max_worker"), ()) == {
        "min_worker": "3",
        "synchronous": "true",
    }


def test_a_status_answer_is_its_line_and_any_other_is_indented_json():
    assert response((200, {"status": 'Model "m" unregistered'})).msg == 'Model "m" unregistered'
    listed = {"models": [{"modelName": "m", "modelUrl": "m.mar"}]}
    msg = response((200, listed)).msg
    assert json.loads(msg) == listed
    assert msg.startswith('{\n  "models": [') and not msg.endswith("\n")
