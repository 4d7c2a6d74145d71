"""TorchServe's inference API, on its own port (8080 by default, as TorchServe's).

- `GET /ping`: {"status": "Healthy"} (500 {"status": "Unhealthy"} before the server is up).
- `POST` or `PUT /predictions/{model}[/{version}]`: the body, its content type, the request's
  headers (a form body's fields by name) go to the model's handler (a TorchServe archive's:
  backends/torchserve/backend.py) as TorchServe's frontend sends them; the answer is
  the handler's bytes with the status, content type and headers it set.

Errors are TorchServe's JSON, {"code": ..., "type": ..., "message": ...}. `predict` is
the one path to a handler, shared with TorchServe's gRPC API.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from urllib.parse import unquote

import numpy as np
import orjson

from accel_base.errors import GatewayError, InvalidArgument, NotFound
from accel_base.ids import uuid4_text
from backends.torchserve import BODY, RESPONSE, RESPONSE_INFO
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.core.interface import Core
from gateway.protocols.http.body import read_body
from gateway.protocols.http.infer_route import (
    ASGIApp,
    Receive,
    Scope,
    Send,
    respond,
    send_reply,
)
from gateway.protocols.http.route import DirectRequest, Reply
from gateway.protocols.torchserve.keys import Keys
from gateway.protocols.torchserve.models import TorchServeModels, model_not_found, resolve
from gateway.protocols.torchserve.openapi import INFERENCE, description
from gateway.protocols.torchserve.replies import (
    NOT_ALLOWED,
    NOT_FOUND,
    TOKEN_FAILED,
    authorized,
    authorized_headers,
    common_headers,
    error_reply,
    failure_reply,
    json_bytes,
    reply_failure,
    ts_error,
    ts_json,
)

log = logging.getLogger("accel_gateway")
MAX_HEADER_BYTES = 8192


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: dict[str, str]  # lower-case names: the handler's, content-type among them
    request_id: str
    final: bool = True  # its request's last (an intermediate response's is False)


# Triton's request parameter that asks each streamed response to say whether it is the
# last (in the response parameter FINAL): HTTP starts a chunked answer at the first that
# is not.
ASK_FINAL, FINAL = "triton_enable_empty_final_response", "triton_final_response"


async def _request(
    core: Core, models: TorchServeModels, name: str, version: str, body: bytes,
    content_type: str, headers: list[tuple[str, str]] | str,
) -> InferRequest:  # fmt: skip
    """`headers`: a list of (name, value), or already as JSON (_http_headers)."""
    request_headers = headers if isinstance(headers, str) else orjson.dumps(headers).decode()
    if len(request_headers) > MAX_HEADER_BYTES:  # they travel with the batch
        raise InvalidArgument(
            f"the request's headers come to {len(request_headers)} bytes, over "
            f"{MAX_HEADER_BYTES} (TorchServe's frontend allows 8 KiB); send fewer"
        )
    data = np.empty((1, 1), dtype=object)
    data[0, 0] = body
    return InferRequest(
        model_name=name,
        model_version=await resolve(core, models, name, version),
        id=uuid4_text(),  # the handler's request id and x-request-id
        parameters={
            # Whole, with its parameters: a form's boundary is one of them (the backend
            # makes the inputs of the body as TorchServe's frontend does).
            "content_type": content_type,
            "request_headers": request_headers,
        },
        inputs=[Tensor(BODY, "BYTES", data)],
        outputs=[RequestedOutput(RESPONSE), RequestedOutput(RESPONSE_INFO)],
    )


def _answer(name: str, response: InferResponse, request_id: str) -> Answer:
    produced = {t.name: t.data for t in response.outputs}
    if RESPONSE not in produced or RESPONSE_INFO not in produced:
        raise InvalidArgument(
            f"model '{name}' is not a TorchServe archive's (it has no outputs "
            f"{RESPONSE} and {RESPONSE_INFO}); call it over the V2 protocol"
        )
    info = orjson.loads(produced[RESPONSE_INFO].reshape(-1)[0])
    # The handler's headers (set_response_content_type is one of them), else its content
    # type as the answer carries it.
    set_headers = {k.lower(): v for k, v in info["headers"].items()}
    if info["content_type"] and "content-type" not in set_headers:
        set_headers["content-type"] = info["content_type"]
    answer = bytes(produced[RESPONSE].reshape(-1)[0])
    final = response.parameters.get(FINAL, True) is not False
    return Answer(info["status"], answer, set_headers, request_id, final)


async def predict(
    core: Core, models: TorchServeModels, name: str, version: str, body: bytes,
    content_type: str, headers: list[tuple[str, str]],
) -> Answer:  # fmt: skip
    """Hand one request to model `name`'s handler (`version` "": its default) and return
    what the handler answered; TsError or GatewayError for what TorchServe refuses. A
    handler that sends intermediate responses fails this with 501 (predict_stream)."""
    request = await _request(core, models, name, version, body, content_type, headers)
    try:
        response = await core.infer(request)
    except NotFound:
        raise model_not_found(name) from None
    return _answer(name, response, request.id)


async def predict_stream(
    core: Core, models: TorchServeModels, name: str, version: str, body: bytes,
    content_type: str, headers: list[tuple[str, str]] | str,
) -> AsyncGenerator[Answer, None]:  # fmt: skip
    """predict(), with the handler's intermediate responses before its answer (one
    answer alone from a handler that sends none)."""
    request = await _request(core, models, name, version, body, content_type, headers)
    request.parameters[ASK_FINAL] = True
    try:
        async for response in core.infer_stream(request):
            if isinstance(response, GatewayError):  # a failed intermediate response
                raise response
            yield _answer(name, response, request.id)
    except NotFound:
        raise model_not_found(name) from None


def _head(answer: Answer) -> list[tuple[bytes, bytes]]:
    reply = [(k.encode("latin-1", "replace"), v.encode("latin-1", "replace"))
             for k, v in answer.headers.items()]  # fmt: skip
    return reply + common_headers(answer.request_id)


def _handler_headers(headers: list[tuple[bytes, bytes]], explain: bool) -> tuple[str, str]:
    """An HTTP request's content type and its headers as the handler's JSON, made once
    for each set of headers (a client sends the same ones request after request). Headers
    over MAX_HEADER_BYTES, refused after this, are made anew and kept by nothing."""
    key = tuple(headers)
    if sum(len(name) + len(value) for name, value in key) > MAX_HEADER_BYTES:
        return _http_headers.__wrapped__(key, explain)
    return _http_headers(key, explain)


@functools.lru_cache(maxsize=64)
def _http_headers(headers: tuple[tuple[bytes, bytes], ...], explain: bool) -> tuple[str, str]:
    content_type = dict(headers).get(b"content-type", b"").decode("latin-1")
    text_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]
    if explain:  # TorchServe's frontend marks an explanation so; BaseHandler reads it
        text_headers.append(("explain", "True"))
    return content_type, orjson.dumps(text_headers).decode()


async def prediction_reply(
    core: Core, models: TorchServeModels, name: str, version: str, explain: bool,
    headers: list[tuple[bytes, bytes]], body: bytes,
) -> Reply:  # fmt: skip
    """The answer to one prediction (or explanation): a handler's intermediate responses
    stream as the chunks of one answer, status and headers from the first, as TorchServe
    sends them."""
    content_type, text_headers = _handler_headers(headers, explain)
    answers = predict_stream(core, models, name, version, body, content_type, text_headers)
    try:
        first = await anext(answers)
    except BaseException:
        await answers.aclose()
        raise
    if first.final:
        await answers.aclose()
        return Reply(first.status, _head(first), first.body)
    return Reply(first.status, _head(first), first.body, _Rest(answers))


class _Rest:
    """The bodies of a stream's answers after its first (direct.py's Chunks). A writer
    stops asking once its client has gone: the stream then runs on to its handler's end,
    which the run timeout bounds."""

    def __init__(self, answers: AsyncGenerator[Answer, None]) -> None:
        self._answers = answers

    async def __anext__(self) -> bytes:
        try:
            answer = await anext(self._answers)
        except GatewayError as exc:  # its status is sent already: the body ends here
            log.warning("TorchServe stream of a prediction ended early: %s", exc.message)
            raise StopAsyncIteration from None
        return answer.body

    async def aclose(self) -> None:
        await self._answers.aclose()  # (an unstarted generator's aclose ends it too)


def _prediction(path: str) -> tuple[str, str, bool] | None:
    """The model, version ("": its default) and whether an explanation is asked, of a
    predictions or explanations URL path; None for any other path."""
    parts = path.strip("/").split("/")
    if parts[0] not in ("predictions", "explanations") or not 2 <= len(parts) <= 3:
        return None
    version = unquote(parts[2]) if len(parts) == 3 else ""
    return unquote(parts[1]), version, parts[0] == "explanations"


class PredictionsRoute:
    """POST /predictions/{model}[/{version}] and /explanations/... on the direct path
    (gateway/protocols/http/direct.py); every other request goes to the app."""

    PREFIXES = (b"/predictions/", b"/explanations/")

    def __init__(self, core: Core, models: TorchServeModels, keys: Keys | None) -> None:
        self.core, self.models, self.keys = core, models, keys

    def match(self, path: str) -> tuple[str, str, bool] | None:
        return _prediction(path)

    def admit(self, request: DirectRequest, matched: tuple[str, str, bool]) -> Reply | None:
        if not authorized_headers(request.headers, self.keys, "inference"):
            return error_reply(400, TOKEN_FAILED, kind="InvalidKeyException")
        try:
            self.core.shedder.check()
        except GatewayError as exc:
            return failure_reply(exc)
        return None

    async def answer(
        self, request: DirectRequest, matched: tuple[str, str, bool], body: bytes
    ) -> Reply:
        try:
            name, version, explain = matched
            return await prediction_reply(
                self.core, self.models, name, version, explain, request.headers, body
            )
        except Exception as exc:
            return failure_reply(exc)

    def failed(self, request: DirectRequest, exc: Exception) -> Reply:
        return failure_reply(exc)


def create_inference_app(
    core: Core, models: TorchServeModels, max_body_bytes: int, keys: Keys | None = None
) -> ASGIApp:
    """`keys`: whose inference key clients must send (key_file.json's); None: none."""

    async def predictions(
        scope: Scope, receive: Receive, send: Send, name: str, version: str, explain: bool
    ) -> None:
        core.shedder.check()
        headers = scope["headers"]
        body = await read_body(receive, dict(headers).get(b"content-length"), max_body_bytes)
        reply = await prediction_reply(core, models, name, version, explain, headers, body)
        await send_reply(send, reply)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method, parts = scope["method"], scope["path"].strip("/").split("/")
        try:
            if method == "OPTIONS" and parts == [""]:  # open, as TorchServe's
                await ts_json(send, 200, description("TorchServe inference API", INFERENCE))
            elif not authorized(scope, keys, "inference"):  # /ping too, as TorchServe 0.12
                await ts_error(send, 400, TOKEN_FAILED, kind="InvalidKeyException")
            elif parts == ["ping"] and method == "GET":
                healthy = core.ready()
                body = json_bytes({"status": "Healthy" if healthy else "Unhealthy"})
                await respond(
                    send, 200 if healthy else 500, body, [(b"content-type", b"application/json")]
                )
            elif (prediction := _prediction(scope["path"])) is not None:
                if method not in ("GET", "POST", "PUT"):  # TorchServe takes all three
                    await ts_error(send, 405, NOT_ALLOWED)
                    return
                await predictions(scope, receive, send, *prediction)
            else:
                await ts_error(send, 404, NOT_FOUND, kind="ResourceNotFoundException")
        except Exception as exc:
            await reply_failure(send, exc)

    return app
