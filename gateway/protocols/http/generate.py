"""Triton's generate extension: POST v2/models/{name}[/versions/{version}]/generate and
.../generate_stream.

A request is one flat JSON object. A key that names one of the model's inputs is that
input's value (a scalar, or an array, nested or not); `parameters` is an object of
request parameters; any other key with a scalar value is a parameter too. An input's
shape is its value's, with a batch of one added where the model batches, and a scalar
fills a tensor of ones. The answer is one object: model_name, model_version, and each
output by name: a scalar where it holds one element, else a (nested) array, BYTES as
text.

`generate` answers once: a decoupled model must send exactly one response (else 400:
use generate_stream). `generate_stream` answers with Server-Sent Events, one `data:`
event a response, as they come. A failure before the first event is an ordinary JSON
error with its status; one after it is an event `{"error": message}` and the stream's
end, as Triton sends it (the status, 200, has gone). A client that leaves closes the
model's stream, which cancels the request.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from accel_base.datatypes import json_data
from accel_base.errors import GatewayError, InvalidArgument
from gateway.core.inference import InferRequest, InferResponse, Tensor
from gateway.core.interface import Core
from gateway.protocols.http.body import read_body
from gateway.protocols.http.codec import parse_json
from gateway.protocols.http.fields import brief
from gateway.protocols.http.infer_route import (
    answer_errors,
    check_shedder,
    disconnect_probe,
    failure_reply,
    respond,
    send_reply,
)
from gateway.protocols.http.json_data import json_to_array
from gateway.protocols.http.route import Reply

GENERATE_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/([^/]+))?/(generate(?:_stream)?)")
JSON = (b"content-type", b"application/json")
EVENTS = (b"content-type", b"text/event-stream; charset=utf-8")


def generate_request(body: Any, metadata: dict[str, Any], name: str, version: str) -> InferRequest:
    """The InferRequest a generate body asks for, its inputs shaped by the model's."""
    if not isinstance(body, dict):
        raise InvalidArgument(f"the request body must be a JSON object, got {brief(body)}")
    inputs_meta = {entry["name"]: entry for entry in metadata["inputs"]}
    inputs: list[Tensor] = []
    parameters: dict[str, Any] = {}
    for key, value in body.items():
        if key in inputs_meta:
            meta = inputs_meta[key]
            inputs.append(_tensor(key, value, meta["datatype"], meta["shape"]))
        elif key == "parameters":
            if not isinstance(value, dict):
                raise InvalidArgument(f"'parameters' must be a JSON object, got {brief(value)}")
            for parameter, setting in value.items():
                _once(parameters, parameter)
                parameters[parameter] = _scalar(setting, f"parameter {parameter!r}")
        else:
            _once(parameters, key)
            parameters[key] = _scalar(
                value, f"{key!r} (neither an input of model '{name}', which takes "
                f"{', '.join(inputs_meta) or 'none'}, nor a scalar parameter)"
            )  # fmt: skip
    return InferRequest(
        model_name=name, model_version=version, id="", parameters=parameters, inputs=inputs
    )


def _once(parameters: dict[str, Any], key: str) -> None:
    if key in parameters:
        raise InvalidArgument(
            f"parameter {key!r} is given twice, at the top level and in 'parameters'; give it once"
        )


def _scalar(value: Any, what: str) -> str | int | float | bool:
    if not isinstance(value, str | int | float | bool):
        raise InvalidArgument(f"{what} must be a string, number or boolean, got {brief(value)}")
    return value


def _tensor(name: str, value: Any, datatype: str, dims: list[int]) -> Tensor:
    where = f"input '{name}'"
    given = _dims(value)
    if len(given) == len(dims):
        shape = given
    elif len(given) == len(dims) - 1 and dims and dims[0] == -1:
        shape = [1, *given]  # a batch of one
    elif not given:
        shape = [1] * len(dims)  # a scalar fills a tensor of ones
    else:
        raise InvalidArgument(f"{where}: the model takes shape {dims}, got a value of {given}")
    if any(want not in (-1, got) for want, got in zip(dims, shape, strict=True)):
        raise InvalidArgument(f"{where}: the model takes shape {dims}, got {shape}")
    data = value if isinstance(value, list) else [value]
    return Tensor(name, datatype, json_to_array(data, datatype, tuple(shape), where))


def _dims(value: Any) -> list[int]:
    """A nested array's dimensions, along its first elements (json_to_array checks the
    rest); a scalar's are []."""
    dims = []
    while isinstance(value, list):
        dims.append(len(value))
        value = value[0] if value else None
    return dims


def generate_answer(response: InferResponse) -> bytes:
    """One response as generate's JSON object."""
    answer: dict[str, Any] = {
        "model_name": response.model_name,
        "model_version": response.model_version,
    }
    for tensor in response.outputs:
        answer[tensor.name] = _value(tensor)
    return orjson.dumps(answer)


def _value(tensor: Tensor) -> Any:
    """An output's JSON value: one element as a scalar, else nested as its shape; BYTES
    as text, BF16 as numbers, NaN and Infinity written as Triton writes them."""
    data = tensor.data
    if tensor.datatype == "BYTES":
        try:
            text = json_data(data.reshape(-1), "BYTES")
        except UnicodeDecodeError:
            raise InvalidArgument(
                f"output '{tensor.name}' holds bytes that are not UTF-8 text, which generate "
                f"cannot answer; ask for it over v2/models/{{name}}/infer as binary data"
            ) from None
        data = np.array(text, dtype=object).reshape(data.shape)
    elif tensor.datatype == "BF16":  # uint16 bit patterns: the high half of an FP32
        data = (data.astype(np.uint32) << 16).view(np.float32)
    value = data.reshape(-1)[0] if data.size == 1 else data
    value = value.item() if isinstance(value, np.generic) else value
    value = value.tolist() if isinstance(value, np.ndarray) else value
    if data.dtype.kind == "f" and not np.isfinite(data).all():
        return orjson.Fragment(json.dumps(value))  # orjson would write null
    return value


async def generate_reply(
    core: Core,
    body: bytes,
    name: str,
    version: str,
    stream: bool,
    client_gone: Callable[[], bool] | None = None,
) -> Reply:
    """`client_gone`: whether the client has left (its request is then cancelled, and a
    stream ends at its next event)."""
    request = generate_request(parse_json(body), await core.model_metadata(name, version),
                               name, version)  # fmt: skip
    request.client_gone = client_gone
    responses = _answers(core.infer_stream(request))
    try:
        first = await anext(responses)
        if not stream:
            second = await anext(responses, None)
            if second is not None:
                raise InvalidArgument(
                    f"model '{name}' sent more than one response, which generate cannot "
                    "answer; use generate_stream"
                )
            return Reply(200, [JSON], generate_answer(first))
        event = _event(first)
    except StopAsyncIteration:
        raise InvalidArgument(f"model '{name}' sent no response with outputs") from None
    except BaseException:
        await responses.aclose()  # the model's stream ends with the answer
        raise
    finally:
        if not stream:
            await responses.aclose()
    return Reply(200, [EVENTS, (b"cache-control", b"no-cache")], event,
                 _events(responses, client_gone))  # fmt: skip


async def _answers(responses: AsyncIterator[InferResponse]) -> AsyncIterator[InferResponse]:
    """The responses with outputs (a decoupled model's final flag comes alone), the
    model's stream closed however this one ends. A decoupled model's error response
    (a GatewayError among them) is raised: it ends the answer."""
    try:
        async for response in responses:
            if isinstance(response, GatewayError):
                raise response
            if response.outputs:
                yield response
    finally:
        await responses.aclose()  # type: ignore[attr-defined]


def _event(response: InferResponse) -> bytes:
    return b"data: " + generate_answer(response) + b"\n\n"


async def _events(
    responses: AsyncIterator[InferResponse], client_gone: Callable[[], bool] | None
) -> AsyncIterator[bytes]:
    try:
        async for response in responses:
            if client_gone is not None and client_gone():
                return  # closing the model's stream cancels the request
            yield _event(response)
    except Exception as exc:  # the status has gone: the error is the last event
        yield b"data: " + bytes(failure_reply(exc, "generate_stream").body) + b"\n\n"
    finally:
        await responses.aclose()  # type: ignore[attr-defined]


def with_generate_route(app: ASGIApp, core: Core, max_body_bytes: int) -> ASGIApp:
    """`app` with POST .../generate and .../generate_stream handled here."""

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        match = GENERATE_PATH.fullmatch(scope["path"]) if scope["type"] == "http" else None
        if match is None:
            await app(scope, receive, send)
            return
        if scope["method"] != "POST":
            message = f"{scope['method']} is not allowed on {scope['path']}"
            headers = [JSON, (b"allow", b"POST")]
            await respond(send, 405, orjson.dumps({"error": message}), headers)
            return
        name, version = match[1], match[2] or ""

        async def serve() -> None:
            check_shedder(core, scope)
            headers = dict(scope["headers"])
            body = await read_body(receive, headers.get(b"content-length"), max_body_bytes)
            stream = match[3] == "generate_stream"
            gone = disconnect_probe(receive)
            await send_reply(send, await generate_reply(core, body, name, version, stream, gone))

        await answer_errors(send, scope["path"], serve(), (name, version))

    return route
