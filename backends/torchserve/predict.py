"""A batch through a TorchServe handler with nothing encoded in between.

TorchServe's frontend writes a batch as bytes that `ts`'s reader decodes for
`ts.service.Service.predict`, which runs the handler and encodes its answers as bytes
again (`create_predict_response`). In one process that round trip was three quarters of
a batch's time, so here the batch is made as the reader makes it (`ts_batch`) and the
answers are read off the handler's results and its `Context` as the writer reads them
(`predict`). What the handler sees, and what each answer carries, stay TorchServe's:
tests/backends/test_torchserve_predict.py holds both against `ts`'s reader and writer.
(One difference, to the good: `ts`'s writer sizes a status phrase or content type by
its characters, not its bytes, so a non-ASCII one broke the frame; here it arrives.)

Intermediate responses (`send_intermediate_predict_response`) still come as `ts` writes
them, to `context.cl_socket` (streaming.py).
"""

from __future__ import annotations

import io
import json
import logging
import os
import struct
import time
from typing import Any

from backends.torchserve import answer_json
from backends.torchserve.otf import TsAnswer, TsRequest

log = logging.getLogger("ts.service")  # where ts logs a handler's failure
STREAM_NEXT = "ts_stream_next"
_INT32 = struct.Struct("!i")  # what the frontend's frame holds: a status outside fails


def _value(content_type: str, value: bytes, decode: bool) -> Any:
    """An input's value as ts's reader hands it on: JSON decoded, text as str, else a
    bytearray (and a bytearray, with a warning, where decoding fails): its reader reads
    into one, and handlers write into it (np.frombuffer(...) += 1)."""
    if decode and content_type == "application/json":
        try:
            return json.loads(value.decode("utf-8"))
        except Exception:  # ts forwards the bytes: so do we
            logging.warning("Failed json decoding of input data. Forwarding encoded payload",
                            exc_info=True)  # fmt: skip
    elif decode and content_type.startswith("text"):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            logging.warning("Failed utf-8 decoding of input data. Forwarding encoded payload",
                            exc_info=True)  # fmt: skip
    return bytearray(value)


def ts_batch(requests: list[TsRequest]) -> list[dict[str, Any]]:
    """The batch as `ts.protocol.otf_message_handler.retrieve_msg` reads it from the
    frontend's bytes (ids and headers as bytearrays; inputs' names and types as str)."""
    setting = os.environ.get("TS_DECODE_INPUT_REQUEST")
    decode = setting is None or setting == "true"
    return [
        {
            "requestId": bytearray(request.request_id.encode()),
            "headers": [
                {"name": bytearray(k.encode()), "value": bytearray(v.encode())}
                for k, v in request.headers
            ],  # fmt: skip
            "parameters": [
                {"name": name, "contentType": kind, "value": _value(kind, value, decode)}
                for name, kind, value in request.inputs
            ],
        }
        for request in requests
    ]


def _failed(ids: dict[int, str], message: str, code: int) -> tuple[int, str, list[TsAnswer]]:
    return code, message, [TsAnswer(i, code, "", "", {}, b"error") for i in ids.values()]


class _NotJson(TypeError):
    """A handler's answer that is no bytes, str, tensor or JSON."""


def _body(value: Any) -> bytes:
    # bytes before str, as ts's writer; a tensor as torch.save writes it.
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    import torch

    if isinstance(value, torch.Tensor):
        buffer = io.BytesIO()
        torch.save(value, buffer)
        return buffer.getvalue()
    try:
        return answer_json.dumps(value).encode("utf-8")  # json.dumps(value, indent=2)
    except TypeError as exc:  # (only here: another TypeError fails the batch as in ts)
        raise _NotJson(str(exc)) from exc


def _answer(context: Any, index: int, request_id: str, value: Any) -> TsAnswer:
    if context.stopping_criteria:
        stop = context.stopping_criteria[index](value)
        if stop is not None:
            context.set_response_header(index, STREAM_NEXT, "false" if stop else "true")
    elif context.get_response_headers(index).get(STREAM_NEXT) == "true":
        context.set_response_header(index, STREAM_NEXT, "false")  # the last of a stream
    headers = context.get_response_headers(index)
    for key, header in headers.items():
        if not isinstance(key, str) or not isinstance(header, str):
            # (ts's writer fails the batch on it too: not as unserializable output)
            raise ValueError(f"response header {key!r}: {header!r} is not a string")
    code, phrase = context.get_response_status(index)
    # As ts's writer packs it: struct.error for a status that is no int32, and an int
    # whatever the handler set (numpy's, a bool).
    (status,) = _INT32.unpack(_INT32.pack(200 if code is None else code))
    reason = "" if phrase is None else phrase
    if not isinstance(reason, str):
        raise ValueError(f"response status phrase {reason!r} is not a string")
    content_type = context.get_response_content_type(index) or ""
    return TsAnswer(request_id, status, reason, content_type, dict(headers), _body(value))


def predict(service: Any, batch: list[dict[str, Any]]) -> tuple[int, str, list[TsAnswer]]:
    """`ts.service.Service.predict` on `batch`, answered as (the batch's code, its
    message, each request's answer) instead of as bytes; its failures as ts maps them
    (507 out of memory, a PredictionException's code, else 503)."""
    from ts.service import PREDICTION_METRIC, Service
    from ts.utils.util import PredictionException

    headers, inputs, ids = Service.retrieve_data_for_inference(batch)
    context = service.context
    context.request_ids = ids
    context.request_processor = headers
    context.metrics.request_ids = ids
    context.cl_socket = service.cl_socket
    start = time.time()
    try:
        answers = service._entry_point(inputs, context)  # ts's own handle(), as loaded
    except MemoryError:
        log.error("System out of memory", exc_info=True)
        return _failed(ids, "Out of resources", 507)
    except PredictionException as exc:
        log.error("Prediction error", exc_info=True)
        return _failed(ids, exc.message, exc.error_code)
    except Exception as exc:
        if "CUDA" in str(exc):  # out of device memory, or close to it
            log.error("CUDA out of memory", exc_info=True)
            return _failed(ids, "Out of resources", 507)
        log.warning("Invoking custom service failed.", exc_info=True)
        return _failed(ids, "Prediction failed", 503)
    if not isinstance(answers, list):
        log.warning("model: %s, Invalid return type: %s.", context.model_name, type(answers))
        return _failed(ids, "Invalid model predict output", 503)
    if len(answers) != len(inputs):
        log.warning("model: %s, number of batch response mismatched, expect: %d, got: %d.",
                    context.model_name, len(inputs), len(answers))  # fmt: skip
        return _failed(ids, "number of batch response mismatched", 503)
    context.metrics.add_time(PREDICTION_METRIC, round((time.time() - start) * 1000, 2))
    try:
        answered = [_answer(context, i, ids[i], answers[i]) for i in ids]
    except _NotJson:
        logging.warning("Unable to serialize model output.", exc_info=True)
        return _failed(ids, "Unsupported model output data type.", 503)
    return 200, "Prediction success", answered
