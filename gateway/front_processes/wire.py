"""What crosses a front's channel to the model host: requests, answers, errors, tensors.

Messages are marshal'd tuples, one per SOCK_SEQPACKET send (no framing), or a list of
them: what one side sends in one turn of its event loop. Tensors of a
message travel inline while they are small (marshal takes an array's buffer as it is),
and in one shared-memory arena of their own when they are not: a memfd the sender
writes and the receiver maps, passed with the message. The receiver's arrays view the
mapping, which the kernel frees when the last of them is gone, so neither side keeps
track of ranges.

Front -> host:
    ("infer", call, model, version, id, parameters, inputs, outputs, deadline, headers)
    ("cancel", call)                 the front's caller went away
    ("call", call, method, pickled arguments)
Host -> front:
    ("answer", call, model, version, id, parameters, outputs)
    ("error", call, error class name, message, retry after seconds or None)
    ("result", call, pickled result, or its offset and length in the arena)
    ("hello", front index, pickled options, server metadata)   the first message
    ("serving", bool)                readiness of the host's models
    ("stop", drain seconds)          drain and exit
Tensors: (name, datatype, dtype, shape, parameters, bytes) inline, or with an integer
offset for the bytes when the message's arena holds them.
"""

from __future__ import annotations

import marshal
import os
import socket
import struct

from accel_base import errors
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from workers import protocol
from workers.arena import Arena, aligned, grown_size

# Tensors of one message up to this many bytes travel inline; more go through an arena.
INLINE_BYTES = 64 * 1024
# A message (inline tensors, metadata, a model config) is at most this long.
MAX_MESSAGE_BYTES = 1 << 20


def channel_pair() -> tuple[socket.socket, socket.socket]:
    """The (host end, front end) of a new front's channel."""
    ends = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for end in ends:
        end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MAX_MESSAGE_BYTES)
        end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MAX_MESSAGE_BYTES)
        end.setblocking(False)
    return ends  # type: ignore[return-value]


def receive(sock: socket.socket, buffer: bytearray) -> tuple[tuple, Arena | None]:
    """The next message (read into `buffer`, MAX_MESSAGE_BYTES long and reused) and the
    arena that came with it; BlockingIOError when none is waiting, EOFError when the other
    side is gone."""
    message, fds = protocol.receive(sock, MAX_MESSAGE_BYTES, buffer)
    if not fds:
        return message, None
    for extra in fds[1:]:
        os.close(extra)
    arena = Arena(os.fstat(fds[0]).st_size, fds[0])
    os.close(arena.fd)  # the mapping stays, as long as the arena or an array views it
    arena.fd = -1
    return message, arena


class MessageTooLarge(ValueError):
    pass


def encode(message: tuple, limit: int = MAX_MESSAGE_BYTES) -> bytes:
    # Version 2 has no back-references, so encoded messages concatenate into a list.
    data = marshal.dumps(message, 2)
    if len(data) > limit:
        raise MessageTooLarge(
            f"a {message[0]!r} message of {len(data)} bytes is over the channel's {limit}"
        )
    return data


def join(blobs: list[bytes]) -> bytes:
    """One message holding the list of these encoded messages (marshal's list: a type
    byte, a little-endian count, the elements one after another)."""
    return b"[" + struct.pack("<i", len(blobs)) + b"".join(blobs)


# ---- tensors -----------------------------------------------------------------------


def pack_tensors(tensors: list[Tensor]) -> tuple[list[tuple], Arena | None]:
    """Wire tuples for `tensors`, and the arena that holds their bytes when they are too
    many to go inline (the caller sends its descriptor, then closes it)."""
    payloads = [protocol.tensor_payload(t.data) for t in tensors]
    total = sum(len(data) for _, data in payloads)
    if total <= INLINE_BYTES:
        return [
            (t.name, t.datatype, dtype, t.data.shape, t.parameters, data)
            for t, (dtype, data) in zip(tensors, payloads, strict=True)
        ], None
    arena = Arena(grown_size(total + 64 * len(tensors)), name="accel-gateway-front")
    packed, offset = [], 0
    for tensor, (dtype, data) in zip(tensors, payloads, strict=True):
        offset = aligned(offset)
        arena.buffer[offset : offset + len(data)] = data
        packed.append(
            (tensor.name, tensor.datatype, dtype, tensor.data.shape, tensor.parameters,
             (offset, len(data)))
        )  # fmt: skip
        offset += len(data)
    return packed, arena


def unpack_tensors(packed: list[tuple], arena: Arena | None) -> list[Tensor]:
    tensors = []
    for name, datatype, dtype, shape, parameters, payload in packed:
        if isinstance(payload, tuple):
            if arena is None:
                raise ValueError(f"tensor '{name}' is in an arena that did not come")
            buffer, (offset, nbytes) = arena.buffer, payload
        else:
            buffer, offset, nbytes = payload, 0, len(payload)
        data = protocol.read_tensor(buffer, name, dtype, shape, offset, nbytes)
        tensors.append(Tensor(name, datatype, data, parameters))
    return tensors


# ---- requests and answers ------------------------------------------------------------


def request_message(
    call: int, request: InferRequest, headers: list[tuple[str, str]] | None
) -> tuple[tuple, Arena | None]:
    inputs, arena = pack_tensors(request.inputs)
    outputs = [(o.name, o.parameters) for o in request.outputs]
    message = (
        "infer", call, request.model_name, request.model_version, request.id,
        request.parameters, inputs, outputs, request.deadline, headers,
    )  # fmt: skip
    return message, arena


def request_of(message: tuple, arena: Arena | None) -> InferRequest:
    _, _, model, version, id_, parameters, inputs, outputs, deadline, headers = message
    request = InferRequest(
        model, version, id_, parameters, unpack_tensors(inputs, arena),
        [RequestedOutput(name, params) for name, params in outputs], None, deadline,
    )  # fmt: skip
    if headers:
        request.header = _Headers(headers)
    return request


class _Headers:
    """The front's headers (or gRPC metadata) as InferRequest.header: by lower-case name,
    the first value of a repeated one, as the front itself looks them up."""

    __slots__ = ("values",)

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.values: dict[str, str] = {}
        for name, value in pairs:
            self.values.setdefault(name.lower(), value)

    def __call__(self, name: str) -> str | None:
        return self.values.get(name.lower())


def answer_message(call: int, response: InferResponse) -> tuple[tuple, Arena | None]:
    outputs, arena = pack_tensors(response.outputs)
    message = (
        "answer", call, response.model_name, response.model_version, response.id,
        response.parameters, outputs,
    )  # fmt: skip
    return message, arena


def response_of(message: tuple, arena: Arena | None) -> InferResponse:
    _, _, model, version, id_, parameters, outputs = message
    return InferResponse(model, version, id_, parameters, unpack_tensors(outputs, arena))


def result_message(call: int, result: bytes, limit: int) -> tuple[tuple, Arena | None]:
    """A call's pickled result: inline, or in an arena when the channel cannot carry it
    (a large repository's statistics or index)."""
    if len(result) <= limit - 1024:
        return ("result", call, result), None
    arena = Arena(grown_size(len(result)), name="accel-gateway-front")
    arena.buffer[: len(result)] = result
    return ("result", call, (0, len(result))), arena


def result_bytes(message: tuple, arena: Arena | None) -> bytes:
    payload = message[2]
    if isinstance(payload, bytes):
        return payload
    if arena is None:
        raise ValueError("a result is in an arena that did not come")
    offset, nbytes = payload
    return arena.buffer[offset : offset + nbytes]


def error_message(call: int, exc: errors.GatewayError) -> tuple:
    # Named by its nearest class that the base defines (Overloaded: Unavailable), which the
    # front can make; the statuses and Retry-After are its own.
    kind = next(c.__name__ for c in type(exc).__mro__ if c.__module__ == errors.__name__)
    return (
        "error", call, kind, exc.message, exc.retry_after_s, exc.http_status, exc.grpc_status,
    )  # fmt: skip


def error_of(message: tuple) -> errors.GatewayError:
    """The host's error as the front raises it: its class, or its nearest class in the
    base, with the host's statuses and Retry-After."""
    _, _, kind, text, retry_after_s, http_status, grpc_status = message
    exc = (errors.by_name(kind) or errors.GatewayError)(text)
    exc.retry_after_s = retry_after_s
    exc.http_status = http_status
    exc.grpc_status = grpc_status
    return exc
