"""A decoupled Python model's response sender (`request.get_response_sender()`): each
`send` goes to the gateway at once, over the model-call socket, as
("respond", stream token, outputs, parameters, flags, error message or None); the
gateway hands it to the gRPC stream the request came on (gateway/core/decoupled.py)."""

from __future__ import annotations

import threading
from typing import Any

from accel_base import call_wire
from backends.python import pb_utils

MAX_ERROR_CHARS = 4096
# A TritonError's code -> the gateway error class its request fails with.
ERROR_CLASSES = {
    pb_utils.TritonError.INVALID_ARG: "InvalidArgument",
    pb_utils.TritonError.UNSUPPORTED: "InvalidArgument",
    pb_utils.TritonError.NOT_FOUND: "NotFound",
    pb_utils.TritonError.UNAVAILABLE: "Unavailable",
    pb_utils.TritonError.CANCELLED: "Cancelled",
}


class ResponseSender:
    def __init__(self, token: str, requested: tuple[str, ...], send_frame: Any) -> None:
        self._token = token
        self._requested = requested
        self._send_frame = send_frame  # bytes -> None, over this thread's connection
        self._closed = False
        self._lock = threading.Lock()  # a model may send from several threads

    def send(self, response: pb_utils.InferenceResponse | None = None, flags: int = 0) -> None:
        final = bool(flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is None and not final:
            raise pb_utils.TritonModelException("send() without a response must say FINAL")
        if response is not None and not isinstance(response, pb_utils.InferenceResponse):
            raise pb_utils.TritonModelException(
                f"send() takes an InferenceResponse, not {type(response).__name__}"
            )
        outputs, parameters, error = [], {}, None
        if response is not None:
            if response.has_error():
                failure = response.error()
                code = failure.code() if isinstance(failure, pb_utils.TritonError) else None
                message = failure.message() if code is not None else str(failure)
                error = (ERROR_CLASSES.get(code, "Internal"), message[:MAX_ERROR_CHARS])
            else:
                for tensor in response.output_tensors():
                    if not self._requested or tensor.name() in self._requested:
                        outputs.append(call_wire.to_wire(tensor.name(), tensor.as_numpy()))
            parameters = dict(response._parameters)
        frame = call_wire.encode(("respond", self._token, outputs, parameters, final, error))
        with self._lock:
            if self._closed:
                raise pb_utils.TritonModelException(
                    "this request's final response was sent already"
                )
            self._send_frame(frame)  # raises if it cannot: the final may be sent again
            self._closed = final

    def is_cancelled(self) -> bool:
        """Whether the stream's reader left: the model may stop sending."""
        from backends.python.model_calls import cancelled  # the worker's socket

        return cancelled(self._token)
