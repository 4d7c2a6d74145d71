"""V2 HTTP infer bodies <-> InferRequest / InferResponse.

A body is a JSON header, optionally followed by binary tensor data whose start
the `Inference-Header-Content-Length` header gives. Binary inputs become numpy
views of the body (no copy); JSON data goes through numpy in one call.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson

from accel_base.datatypes import (
    NUMPY_DTYPES,
    check_datatype,
    check_shape,
    element_count,
    from_raw,
    to_raw,
)
from accel_base.errors import InvalidArgument
from gateway.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.shared_memory import REGION as SHM_REGION
from gateway.shared_memory import InputSource

HEADER_LENGTH = "inference-header-content-length"


def parse_json(data: bytes) -> Any:
    """Parse JSON, accepting NaN and Infinity as Triton does (clients send them for floats)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:  # the slow path: only bodies with non-finite floats, or invalid ones, come here
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"the request's JSON is not valid: {exc}") from None


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _shape(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value
    ):
        raise InvalidArgument(
            f"{where}: 'shape' must be a list of non-negative integers, got {value!r}"
        )
    return check_shape(tuple(value), where)


def decode_request(
    body: bytes,
    header_length: int | None,
    model_name: str,
    model_version: str,
    shared_memory: InputSource | None = None,
) -> InferRequest:
    if header_length is not None and not 0 <= header_length <= len(body):
        raise InvalidArgument(
            f"Inference-Header-Content-Length is {header_length} but the body has {len(body)} bytes"
        )
    header_bytes = body if header_length is None else body[:header_length]
    header = _object(parse_json(header_bytes), "the request body")
    raw_inputs = header.get("inputs")
    if not isinstance(raw_inputs, list):
        raise InvalidArgument("the request needs an 'inputs' list")
    view = memoryview(body)
    offset = len(header_bytes)
    inputs = []
    for position, raw in enumerate(raw_inputs):
        raw = _object(raw, f"inputs[{position}]")
        name = raw.get("name")
        if not isinstance(name, str):
            raise InvalidArgument(f"inputs[{position}] needs a string 'name'")
        where = f"input '{name}'"
        datatype = raw.get("datatype")
        if not isinstance(datatype, str):
            raise InvalidArgument(f"{where} needs a string 'datatype'")
        check_datatype(datatype, where)
        shape = _shape(raw.get("shape"), where)
        parameters = _object(raw.get("parameters") or {}, f"{where} parameters")
        size = parameters.pop("binary_data_size", None)
        if SHM_REGION in parameters:
            if size is not None or "data" in raw:
                raise InvalidArgument(
                    f"{where} names a shared-memory region and also carries data; give one"
                )
            if shared_memory is None:
                raise InvalidArgument(f"{where}: shared memory is not served on this route")
            data = shared_memory(where, datatype, shape, parameters)
        elif size is not None:
            if not isinstance(size, int) or size < 0 or offset + size > len(body):
                raise InvalidArgument(
                    f"{where}: binary_data_size {size!r} does not fit the {len(body) - offset} "
                    "bytes of binary data left in the body"
                )
            data = from_raw(view[offset : offset + size], datatype, shape, where)
            offset += size
        elif "data" in raw:
            data = json_to_array(raw["data"], datatype, shape, where)
        else:
            raise InvalidArgument(f"{where} has neither 'data' nor a binary_data_size parameter")
        inputs.append(Tensor(name, datatype, data, parameters))
    if offset != len(body):
        raise InvalidArgument(
            f"the body has {len(body) - offset} bytes of binary data that no input claims "
            "(check each input's binary_data_size)"
        )
    outputs = []
    for position, raw in enumerate(header.get("outputs") or []):
        raw = _object(raw, f"outputs[{position}]")
        name = raw.get("name")
        if not isinstance(name, str):
            raise InvalidArgument(f"outputs[{position}] needs a string 'name'")
        parameters = _object(raw.get("parameters") or {}, f"output '{name}' parameters")
        if parameters.get("classification"):
            raise InvalidArgument(
                f"output '{name}': the classification extension is not supported by this server"
            )
        outputs.append(RequestedOutput(name, parameters))
    request_id = header.get("id", "")
    return InferRequest(
        model_name=model_name,
        model_version=model_version,
        id=request_id if isinstance(request_id, str) else str(request_id),
        parameters=_object(header.get("parameters") or {}, "request parameters"),
        inputs=inputs,
        outputs=outputs,
    )


def json_to_array(data: Any, datatype: str, shape: tuple[int, ...], where: str) -> np.ndarray:
    """JSON tensor data (flat or nested, row-major) -> array of `shape`."""
    if datatype == "BF16":
        raise InvalidArgument(f"{where}: BF16 data can only be sent as binary data")
    expected = element_count(shape)
    try:
        if datatype == "BYTES":
            flat = np.asarray(data, dtype=np.object_).reshape(-1)
            array = np.array([_utf8(e, where) for e in flat], dtype=np.object_)
        else:
            array = np.asarray(data, dtype=NUMPY_DTYPES[datatype])
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidArgument(f"{where}: 'data' is not valid {datatype} data: {exc}") from None
    if array.size != expected:
        raise InvalidArgument(
            f"{where}: shape {list(shape)} needs {expected} elements, 'data' has {array.size}"
        )
    return array.reshape(shape)


def _utf8(element: Any, where: str) -> bytes:
    if isinstance(element, str):
        return element.encode()
    raise InvalidArgument(f"{where}: BYTES elements in JSON must be strings, got {element!r}")


def encode_response(response: InferResponse, request: InferRequest) -> tuple[bytes, int | None]:
    """The response body and, when binary outputs follow the JSON, the JSON's length."""
    binary_default = bool(request.parameters.get("binary_data_output", False))
    wants_binary = {
        o.name: o.parameters.get("binary_data", binary_default) for o in request.outputs
    }
    outputs = []
    blobs: list[bytes] = []
    for tensor in response.outputs:
        binary = wants_binary.get(tensor.name, binary_default) or tensor.datatype == "BF16"
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.data.shape),
        }
        if SHM_REGION in tensor.parameters:
            # Written to shared memory: no data and, as in Triton, no parameters (Triton's
            # C++ client reads binary_data_size from any output "parameters" object).
            outputs.append(entry)
            continue
        if binary:
            blob = to_raw(tensor.data, tensor.datatype)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = _json_data(tensor)
        outputs.append(entry)
    header: dict[str, Any] = {
        "model_name": response.model_name,
        "model_version": response.model_version,
        "outputs": outputs,
    }
    if response.id:
        header["id"] = response.id
    if response.parameters:
        header["parameters"] = response.parameters
    header_bytes = orjson.dumps(header, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return header_bytes, None
    return b"".join([header_bytes, *blobs]), len(header_bytes)


def _json_data(tensor: Tensor) -> Any:
    flat = tensor.data.reshape(-1)
    if tensor.datatype == "BYTES":
        try:
            return [e.decode() if isinstance(e, bytes) else str(e) for e in flat]
        except UnicodeDecodeError:
            raise InvalidArgument(
                f"output '{tensor.name}' holds bytes that are not UTF-8; request it as binary "
                "data (parameter binary_data: true)"
            ) from None
    if flat.dtype.kind == "f" and not np.isfinite(flat).all():
        # orjson would write null; Triton writes NaN / Infinity, which clients parse back.
        return orjson.Fragment(json.dumps(flat.tolist()))
    return np.ascontiguousarray(flat)
