"""POST .../infer: on the direct path (direct.py, `InferRoute`), and as a plain ASGI
handler in front of the FastAPI app for a request the direct path does not take.

The infer route is the hot path: FastAPI's routing, dependency solving and
Request/Response objects cost about as much as the rest of a small request, and
uvicorn's ASGI machinery about a third of it. Both ways share `infer_reply`, which
decodes, runs and encodes; every other route stays in FastAPI.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from accel_base.errors import GatewayError, Internal, InvalidArgument
from accel_base.logs import REQUEST_ID
from gateway.core.interface import Core
from gateway.core.routing.router import VARIANT_HEADER, VARIANT_PARAMETER
from gateway.operation.log_settings import Occasional
from gateway.operation.tracing.tracer import traced
from gateway.protocols.http.body import read_body
from gateway.protocols.http.codec import HEADER_LENGTH, decode_request, encode_response_pieces
from gateway.protocols.http.compression import choose_encoding, compress, decompress
from gateway.protocols.http.early_refusal import ADMITTED, COUNTED
from gateway.protocols.http.route import DirectRequest, Reply

log = logging.getLogger(__name__)
# A model failing every request is one line every 10 s per route, not one a request.
_backend_failed = Occasional(log, logging.ERROR, 10.0)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_INFER_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/([^/]+))?/infer")
_HEADER_LENGTH = HEADER_LENGTH.encode()
# In a direct request's scope: when it came (perf_counter_ns), while tracing is on.
_STARTED = "gateway.started_ns"


def disconnect_probe(receive: Receive) -> Callable[[], bool] | None:
    """A free check of whether the HTTP client has gone away.

    uvicorn keeps a `disconnected` flag on the object whose method is the ASGI
    `receive`. Reading it costs nothing, where a watcher task awaiting `receive`
    per request halved throughput. Where the flag is missing, no early cancellation.
    """
    cycle = getattr(receive, "__self__", None)
    if cycle is None or not hasattr(cycle, "disconnected"):
        return None
    return lambda: cycle.disconnected


class _Headers:
    """A request's headers as InferRequest.header: a value by name, or all of them (a
    front process forwards them to the model host)."""

    __slots__ = ("headers",)

    def __init__(self, headers: dict[bytes, bytes]) -> None:
        self.headers = headers

    def __call__(self, name: str) -> str | None:
        value = self.headers.get(name.lower().encode("latin-1"))
        return value.decode("latin-1") if value is not None else None

    def items(self) -> list[tuple[str, str]]:
        return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in self.headers.items()]


async def respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]):
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_reply(send: Send, reply: Reply) -> None:
    """`reply` over ASGI: a streamed one (`more`) as the chunks of one body."""
    if reply.more is None:
        await respond(send, reply.status, reply.whole(), reply.headers)
        return
    try:
        await send(
            {"type": "http.response.start", "status": reply.status, "headers": reply.headers}
        )
        await send({"type": "http.response.body", "body": bytes(reply.body), "more_body": True})
        # (uvicorn's send returns quietly once a client has gone: a stream runs on to its
        # end, which its source bounds.)
        while True:
            try:
                chunk = await anext(reply.more)
            except StopAsyncIteration:
                break
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        await reply.more.aclose()


def check_shedder(core: Core, flags: Scope) -> None:
    """Refuse (Unavailable) while the core's shedder says so. `flags`: the request's
    scope, where the protocol says whether it asked already (http/early_refusal.py)."""
    shedder = core.shedder
    if shedder.target_lag_s > 0 and ADMITTED not in flags:  # on, and not asked already
        shedder.check(counted=COUNTED in flags)


async def infer_reply(
    core: Core,
    max_body_bytes: int,
    headers: dict[bytes, bytes],
    body: bytes,
    name: str,
    version: str,
    client_gone: Callable[[], bool] | None,
    started: int,
) -> Reply:
    """Run a V2 infer body (JSON or binary extension) on model `name`: the answer.
    `started`: perf_counter_ns when the request came, for a trace (0: not traced)."""
    encoding = headers.get(b"content-encoding")
    if encoding is not None:
        body = decompress(body, encoding.decode("latin-1"), max_body_bytes)
    header_length = headers.get(_HEADER_LENGTH)
    if header_length is not None and not header_length.isdigit():
        raise InvalidArgument(
            "Inference-Header-Content-Length must be a byte count, got "
            f"'{header_length.decode('latin-1')}'"
        )
    request = decode_request(
        body,
        int(header_length) if header_length is not None else None,
        name,
        version,
        core.shared_memory.input_array,
    )
    request.client_gone = client_gone
    request.header = _Headers(headers)
    REQUEST_ID.set(request.id)  # the lines logged while serving it name it ("": none)
    trace = core.tracing.start(request, "http", started, request.header) if started else None
    if trace is None:
        response = await core.infer(request)
        payload, blobs = encode_response_pieces(response, request)
    else:
        response, (payload, blobs) = await traced(
            trace, core.infer(request), lambda answer: encode_response_pieces(answer, request)
        )
    reply_headers = []
    variant = response.parameters.get(VARIANT_PARAMETER)
    if variant is not None:  # a router answered: which of its variants did
        reply_headers.append((VARIANT_HEADER, str(variant).encode()))
    if not blobs:
        reply_headers.append((b"content-type", b"application/json"))
    else:
        reply_headers.append((b"content-type", b"application/octet-stream"))
        reply_headers.append((_HEADER_LENGTH, str(len(payload)).encode()))
    accept = headers.get(b"accept-encoding")
    chosen = choose_encoding(accept.decode("latin-1")) if accept else None
    if chosen is not None:
        payload = compress(b"".join([payload, *blobs]), chosen)
        reply_headers.append((b"content-encoding", chosen.encode()))
        blobs = []
    return Reply(200, reply_headers, payload, tail=tuple(blobs))


async def serve_infer(
    core: Core,
    max_body_bytes: int,
    scope: Scope,
    receive: Receive,
    send: Send,
    name: str,
    version: str,
) -> None:
    """infer_reply over ASGI: for a request the direct path did not take, and SageMaker's
    routes."""
    check_shedder(core, scope)  # before the body is read: a refusal must cost little
    started = time.perf_counter_ns() if core.tracing.settings.enabled else 0
    headers = dict(scope["headers"])
    body = await read_body(receive, headers.get(b"content-length"), max_body_bytes)
    reply = await infer_reply(
        core, max_body_bytes, headers, body, name, version, disconnect_probe(receive), started
    )
    await send_reply(send, reply)


class InferRoute:
    """POST /v2/models/{name}[/versions/{version}]/infer on the direct path (direct.py)."""

    PREFIXES = (b"/v2/models/",)

    def __init__(self, core: Core, max_body_bytes: int) -> None:
        self.core, self.max_body_bytes = core, max_body_bytes

    def match(self, path: str) -> tuple[str, str] | None:
        match = _INFER_PATH.fullmatch(path)
        return None if match is None else (match[1], match[2] or "")

    def admit(self, request: DirectRequest, matched: tuple[str, str]) -> Reply | None:
        core = self.core
        try:
            check_shedder(core, request.scope)
        except GatewayError as exc:
            return failure_reply(exc, request.path, matched)
        if core.tracing.settings.enabled:
            request.scope[_STARTED] = time.perf_counter_ns()
        return None

    async def answer(self, request: DirectRequest, matched: tuple[str, str], body: bytes) -> Reply:
        try:
            name, version = matched
            return await infer_reply(
                self.core, self.max_body_bytes, dict(request.headers), body, name, version,
                lambda: request.disconnected, request.scope.get(_STARTED, 0),
            )  # fmt: skip
        except Exception as exc:
            return failure_reply(exc, request.path, matched)

    def failed(self, request: DirectRequest, exc: Exception) -> Reply:
        return failure_reply(exc, request.path)


def failure_reply(exc: Exception, path: str, model: tuple[str, str] | None = None) -> Reply:
    """A GatewayError's status and message, anything else a 500, as {"error": message}:
    never a stack trace to the client. `model`: the name and version a request asked for."""
    if not isinstance(exc, GatewayError):
        log.error("unexpected error on %s", path, exc_info=exc)
        return error_reply(f"internal error: {type(exc).__name__}: {exc}", 500)
    if isinstance(exc, Internal):  # a backend's own failure: the operator's news too
        # Keyed by the model and version asked for: not by the path, which a client
        # can spell many ways (versions/1, versions/01, ...).
        key: Any = path
        if model is not None:
            name, version = model
            key = (name, str(int(version)) if version.isdigit() else version)
        _backend_failed(key, "a request on %s failed: %s", path, exc.message)
    return error_reply(exc.message, exc.http_status, exc.retry_after_s)


def error_reply(message: str, status: int, retry_after_s: int | None = None) -> Reply:
    headers = [(b"content-type", b"application/json")]
    if retry_after_s is not None:
        headers.append((b"retry-after", str(retry_after_s).encode()))
    return Reply(status, headers, orjson.dumps({"error": message}))


async def answer_errors(
    send: Send, path: str, handler: Awaitable[None], model: tuple[str, str] | None = None
) -> None:
    """Await `handler`, answering a failure as failure_reply says."""
    try:
        await handler
    except Exception as exc:
        reply = failure_reply(exc, path, model)
        await send_reply(send, reply)


def with_infer_route(app: ASGIApp, core: Core, max_body_bytes: int) -> ASGIApp:
    """`app` with POST /v2/models/{name}[/versions/{version}]/infer handled here."""

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            match = _INFER_PATH.fullmatch(scope["path"])
            if match is not None and scope["method"] != "POST":
                message = f"{scope['method']} is not allowed on {scope['path']}"
                headers = [(b"content-type", b"application/json"), (b"allow", b"POST")]
                await respond(send, 405, orjson.dumps({"error": message}), headers)
                return
            if match is not None:
                version = match[2] or ""
                handler = serve_infer(core, max_body_bytes, scope, receive, send, match[1], version)
                await answer_errors(send, scope["path"], handler, (match[1], version))
                return
        await app(scope, receive, send)

    return route


async def error(send: Send, message: str, status: int, retry_after_s: int | None = None) -> None:
    reply = error_reply(message, status, retry_after_s)
    await send_reply(send, reply)
