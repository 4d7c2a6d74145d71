"""ModelInfer's large raw tensors kept out of protobuf on the gateway's own HTTP/2 server.

protobuf copies a `bytes` field when it parses a message and again when it serializes one,
so a 4 MiB tensor was copied four times between the socket and the model. Here the
request's `raw_input_contents` (field 7) become views of the message as it came, and the
response's `raw_output_contents` (field 6, the last field) are written after the rest of
the message as their own pieces, views of the output arrays, which the writer hands to
the socket without joining. The wire bytes are what protobuf itself reads and writes:
fields may come in any order, and a repeated field's elements keep theirs.
"""

from __future__ import annotations

from typing import NamedTuple

from accel_base.datatypes import VIEW_FROM_BYTES, raw_view
from accel_base.errors import PayloadTooLarge
from accel_base.proto import grpc_service_pb2 as pb
from accel_base.protobuf_wire import varint
from gateway.core.inference import InferResponse
from gateway.core.shared_memory import REGION as SHM_REGION
from gateway.protocols.grpc.codec import encode_response, response_header

RAW_INPUT = 7  # ModelInferRequest.raw_input_contents
RAW_OUTPUT_KEY = bytes([6 << 3 | 2])  # ModelInferResponse.raw_output_contents, length-delimited
MAX_MESSAGE = 2**31  # protobuf's bound on a message, which serializing checked

Buffers = list[bytes | memoryview]


class SplitRequest(NamedTuple):
    """A request without its raw contents, and those as views of the message as it came
    (None: they are in `message`, as protobuf parsed them)."""

    message: pb.ModelInferRequest
    raw: list[memoryview] | None

    @property
    def model_name(self) -> str:  # what an error's log line names
        return self.message.model_name


# A real request has a few top-level fields an input; past this many, the walk (Python,
# per field) would cost more than protobuf's copy: protobuf reads the message whole.
MAX_FIELDS = 512


def split_request(message: bytes) -> SplitRequest:
    """Split unless the message is small, holds no raw contents, or is one this walk does
    not take apart (protobuf then reads it whole, and names its errors)."""
    if len(message) < VIEW_FROM_BYTES:
        return SplitRequest(pb.ModelInferRequest.FromString(message), None)
    view = memoryview(message)
    rest: list[memoryview] = []  # the spans between raw contents
    raws: list[memoryview] = []
    position, end, span, fields = 0, len(view), 0, 0
    while position < end and fields < MAX_FIELDS:
        fields += 1
        start = position
        key, position = _varint(view, position)
        kind = key & 7
        if kind == 2:  # length-delimited: the only kind ModelInferRequest's fields have
            length, position = _varint(view, position)
            if length < 0 or position + length > end:
                break
            if key >> 3 == RAW_INPUT:
                rest.append(view[span:start])
                raws.append(view[position : position + length])
                span = position + length
            position += length
        elif kind == 0 and key >= 0:
            _, position = _varint(view, position)
        else:  # fixed-size, group or malformed: protobuf reads it (or says what is wrong)
            break
    if position != end or not raws:
        return SplitRequest(pb.ModelInferRequest.FromString(message), None)
    rest.append(view[span:end])
    return SplitRequest(pb.ModelInferRequest.FromString(b"".join(rest)), raws)


def _varint(view: memoryview, position: int) -> tuple[int, int]:
    """A varint at `position` and where it ends; (-1, end) when cut short or over 10 bytes."""
    value, shift, end = 0, 0, len(view)
    while position < end and shift < 70:
        byte = view[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    return -1, end + 1


def response_pieces(response: InferResponse) -> Buffers:
    """A ModelInferResponse's wire bytes: the message less its raw contents, then each raw
    content (empty for an output written to shared memory) as its key, length and bytes.
    Large outputs stay views of their arrays; a small response is one piece."""
    sizes = [tensor.data.nbytes for tensor in response.outputs]
    if not sizes or max(sizes) < VIEW_FROM_BYTES:  # all small: protobuf's way, one piece
        return [encode_response(response).SerializeToString()]
    message = response_header(response)
    pieces: Buffers = [message.SerializeToString()]
    size = len(pieces[0]) + sum(sizes)
    if size >= MAX_MESSAGE:  # (BYTES outputs are counted as their pointers: a floor)
        raise PayloadTooLarge(
            f"the response is at least {size} bytes, past the {MAX_MESSAGE - 1} a gRPC "
            "message can hold; request fewer outputs, or ask for them over HTTP"
        )
    small = bytearray()
    for tensor in response.outputs:
        raw = b"" if SHM_REGION in tensor.parameters else raw_view(tensor.data, tensor.datatype)
        small += RAW_OUTPUT_KEY + varint(len(raw))
        if isinstance(raw, memoryview):  # a large tensor: its own piece, never copied here
            pieces.append(bytes(small))
            pieces.append(raw)
            small.clear()
        else:
            small += raw
    if len(pieces) == 1:
        return [pieces[0] + small]
    if small:
        pieces.append(bytes(small))
    return pieces
