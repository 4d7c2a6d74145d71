"""A TorchServe handler's intermediate responses (`send_intermediate_predict_response`),
which `ts` writes to `context.cl_socket` while the batch runs. For a request that came on
a stream (its RequestInfo carries a stream token: gateway/core/streamed.py), each goes to
the gateway at once as a response of that stream (backends/response_socket.py); the
request's answer then goes the same way, marked final, instead of with the batch. A
request not on a stream (a V2 call) cannot take them: it fails with a 501 that says where
to send it instead, and the others of its batch are answered.

An answer here is the outputs "response" (the handler's bytes) and "response_info"
(JSON: status, reason, content type, headers), as the batch carries them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import orjson

from accel_base import call_wire
from backends import response_socket
from backends.torchserve import RESPONSE, RESPONSE_INFO, otf

# Set on each intermediate answer by `ts` (and to "false" on the last one): how its
# frontend knows more follow. Ours knows by the stream, so clients do not see it.
STREAM_NEXT = "ts_stream_next"
NOT_ON_A_STREAM = (
    "this handler sends intermediate responses (send_intermediate_predict_response), which "
    "need a stream: call it over TorchServe's HTTP API, its gRPC StreamPredictions, or V2's "
    "gRPC ModelStreamInfer"
)


def column(values: list[bytes]) -> np.ndarray:
    array = np.empty((len(values), 1), dtype=object)
    array[:, 0] = values
    return array


def info_json(answer: otf.TsAnswer) -> bytes:
    headers = {k: v for k, v in answer.headers.items() if k != STREAM_NEXT}
    return orjson.dumps({
        "status": answer.status, "reason": answer.reason,
        "content_type": answer.content_type, "headers": headers,
    })  # fmt: skip


def respond_frame(token: str, answer: otf.TsAnswer, final: bool) -> bytes:
    outputs = [
        call_wire.to_wire(RESPONSE, column([answer.body]), "BYTES"),
        call_wire.to_wire(RESPONSE_INFO, column([info_json(answer)]), "BYTES"),
    ]
    return call_wire.encode(("respond", token, outputs, {}, final, None))


class Intermediate:
    """`context.cl_socket` while one batch runs."""

    def __init__(
        self, tokens: dict[str, str],
        send: Callable[[bytes], None] = response_socket.send_frame,
    ) -> None:  # fmt: skip
        self.tokens = tokens  # a TorchServe request id -> its stream's token ("": none)
        self.sent: set[str] = set()  # the request ids that got a response early
        # Those not on a stream that the handler answered early: they fail with a 501 once
        # the batch ends, and the batch's others go on.
        self.refused: set[str] = set()
        self._send = send

    def sendall(self, data: bytes) -> None:
        code, message, answers = otf.decode_predict_response(bytes(data))
        for answer in answers:
            token = self.tokens.get(answer.request_id)
            if not token:
                self.refused.add(answer.request_id)
                continue
            if code == 200:
                self._send(respond_frame(token, answer, final=False))
            else:  # the stream says so, and goes on
                error = (f"HandlerFailed:{code}", message[:512])
                self._send(call_wire.encode(("respond", token, [], {}, False, error)))
            self.sent.add(answer.request_id)

    def finish(self, answers: list[otf.TsAnswer]) -> None:
        """Send the answers of the requests that got responses early, as their final."""
        for answer in answers:
            if answer.request_id in self.sent:
                self._send(respond_frame(self.tokens[answer.request_id], answer, final=True))
