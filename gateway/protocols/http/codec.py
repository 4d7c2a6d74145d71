"""V2 HTTP infer bodies <-> InferRequest / InferResponse.

A body is a JSON header, optionally followed by binary tensor data whose start
the `Inference-Header-Content-Length` header gives. Binary inputs become numpy
views of the body (no copy); JSON data goes through numpy in one call.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from accel_base.datatypes import (
    MAX_DIMS,
    MAX_ELEMENTS,
    check_datatype,
    check_shape,
    from_raw,
    json_data,
    raw_view,
)
from accel_base.errors import InvalidArgument
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.core.shared_memory import REGION as SHM_REGION
from gateway.core.shared_memory import InputSource
from gateway.protocols.http import fields
from gateway.protocols.http.fields import brief, check_bool_parameter, get_list, get_string
from gateway.protocols.http.json_data import json_to_array

HEADER_LENGTH = "inference-header-content-length"


def _too_deep() -> InvalidArgument:
    return InvalidArgument(
        f"the request's JSON nests arrays or objects too deeply (at most {MAX_JSON_DEPTH} "
        "levels, fewer in a body with NaN or Infinity)"
    )


def parse_json(data: bytes) -> Any:
    """Parse JSON, accepting NaN and Infinity as Triton does (clients send them for floats).

    orjson refuses nesting past 1024 levels; the json module, which the bodies with NaN or
    Infinity need, recurses, so its RecursionError is caught here and answered as a 400.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        # orjson meets the depth limit before anything past it, NaN included; decided
        # here, as the json module's own limit moves with sys.setrecursionlimit (which
        # some frameworks raise).
        if str(exc).startswith("depth limit exceeded"):
            raise _too_deep() from None
    try:  # the slow path: only bodies with non-finite floats, or invalid ones, come here
        value = json.loads(data)
    except RecursionError:
        raise _too_deep() from None
    except (ValueError, UnicodeDecodeError) as exc:  # ValueError: also >4300-digit integers
        raise InvalidArgument(f"the request's JSON is not valid: {exc}") from None
    # orjson refuses unpaired surrogate escapes ("\ud800"), json does not: refuse them too,
    # since such a string cannot be encoded back to UTF-8 (not even in an error message).
    if _SURROGATE_ESCAPE.search(data) and _has_lone_surrogate(value):
        raise InvalidArgument(
            "the request's JSON has a string with an unpaired surrogate escape (\\ud800 to "
            "\\udfff), which is not Unicode text"
        )
    return value


# orjson's limit. json's is Python's recursion limit (1000) less the frames in use.
MAX_JSON_DEPTH = 1024
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]  # a loop, not recursion: the value may be nested 1000 levels deep
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode()
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
    return False


def _shape(raw: dict[str, Any], where: str) -> tuple[int, ...]:
    value = raw.get("shape")
    if type(value) is list:
        count = 1  # check_shape's limits in the same pass, which calls it only to refuse
        for dim in value:
            # type(), not is_int: a parsed JSON integer is an int, never a subclass.
            if type(dim) is not int or dim < 0:
                break
            if dim:
                count *= dim
                if count > MAX_ELEMENTS:
                    return check_shape(tuple(value), where)  # raises, with its message
        else:
            if len(value) > MAX_DIMS:
                return check_shape(tuple(value), where)  # raises, with its message
            return tuple(value)
    raise InvalidArgument(
        f"{where}: 'shape' must be an array of non-negative integers, got {brief(value)}"
    )


def _parameters(container: dict[str, Any], where: str) -> dict[str, Any]:
    """fields.parameters on the hot path: the parsed body's own object (no copy: nothing
    else holds it), checked in one call; anything else goes to fields for its message."""
    found = container.get("parameters")
    if found is None:
        return {}
    if type(found) is dict:
        for value in found.values():
            if not isinstance(value, (str, int, float)):  # bool is an int
                break
        else:
            return found
    return fields.parameters(container, where)  # raises, naming the field


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
    header = parse_json(header_bytes)
    if not isinstance(header, dict):
        raise InvalidArgument(f"the request body must be a JSON object, got {brief(header)}")
    # The checks below are inline for the common case, with the fields helper (and its
    # message) called only for a value that fails: each field is on every request.
    raw_inputs = header.get("inputs")
    if type(raw_inputs) is not list:
        raw_inputs = get_list(header, "inputs", "the request", required=True)
    view = memoryview(body)
    offset = len(header_bytes)
    inputs = []
    for position, raw in enumerate(raw_inputs):
        if type(raw) is not dict:
            raise InvalidArgument(f"inputs[{position}] must be a JSON object, got {brief(raw)}")
        name = raw.get("name")
        if type(name) is not str:
            name = get_string(raw, "name", f"inputs[{position}]")
        where = f"input '{name}'"
        datatype = raw.get("datatype")
        if type(datatype) is not str:
            datatype = get_string(raw, "datatype", where)
        check_datatype(datatype, where)
        shape = _shape(raw, where)
        parameters = _parameters(raw, where)
        size = parameters.pop("binary_data_size", None)
        if SHM_REGION in parameters:
            if size is not None or raw.get("data") is not None:
                raise InvalidArgument(
                    f"{where} names a shared-memory region and also carries data; give one"
                )
            if shared_memory is None:
                raise InvalidArgument(f"{where}: shared memory is not served on this route")
            data = shared_memory(where, datatype, shape, parameters)
        elif size is not None:
            if raw.get("data") is not None:
                raise InvalidArgument(f"{where} has both 'data' and a binary_data_size; give one")
            if type(size) is not int or size < 0 or offset + size > len(body):
                raise InvalidArgument(
                    f"{where}: binary_data_size {brief(size)} does not fit the "
                    f"{len(body) - offset} bytes of binary data left in the body"
                )
            data = from_raw(view[offset : offset + size], datatype, shape, where)
            offset += size
        elif raw.get("data") is not None:
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
    raw_outputs = header.get("outputs")
    if raw_outputs is not None and type(raw_outputs) is not list:
        get_list(header, "outputs", "the request")  # raises, naming the field
    for position, raw in enumerate(raw_outputs or ()):
        if type(raw) is not dict:
            raise InvalidArgument(f"outputs[{position}] must be a JSON object, got {brief(raw)}")
        name = raw.get("name")
        if type(name) is not str:
            name = get_string(raw, "name", f"outputs[{position}]")
        if "parameters" in raw:
            where = f"output '{name}'"
            parameters = _parameters(raw, where)
            binary = parameters.get("binary_data")
            if binary is not None and type(binary) is not bool:
                check_bool_parameter(parameters, "binary_data", where)
            if parameters.get("classification"):
                raise InvalidArgument(
                    f"{where}: the classification extension is not supported by this server"
                )
        else:
            parameters = {}
        outputs.append(RequestedOutput(name, parameters))
    parameters = _parameters(header, "the request")
    if "binary_data_output" in parameters:
        check_bool_parameter(parameters, "binary_data_output", "the request")
    request_id = header.get("id")
    if type(request_id) is not str:
        request_id = get_string(header, "id", "the request", required=False)
    return InferRequest(
        model_name=model_name,
        model_version=model_version,
        id=request_id,
        parameters=parameters,
        inputs=inputs,
        outputs=outputs,
    )


def encode_response(response: InferResponse, request: InferRequest) -> tuple[bytes, int | None]:
    """The response body and, when binary outputs follow the JSON, the JSON's length."""
    header, blobs = encode_response_pieces(response, request)
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)


def encode_response_pieces(
    response: InferResponse, request: InferRequest
) -> tuple[bytes, list[bytes | memoryview]]:
    """The response's JSON, and the binary outputs that follow it (a large one a view of
    its array, for a writer that sends the pieces without joining them)."""
    binary_default = bool(request.parameters.get("binary_data_output", False))
    wants_binary = {}  # (a loop: a comprehension is a call of its own in 3.11)
    for o in request.outputs:
        wants_binary[o.name] = o.parameters.get("binary_data", binary_default)
    outputs = []
    blobs: list[bytes | memoryview] = []
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
            blob = raw_view(tensor.data, tensor.datatype)
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
    return orjson.dumps(header, option=orjson.OPT_SERIALIZE_NUMPY), blobs


def _json_data(tensor: Tensor) -> Any:
    try:
        return json_data(tensor.data.reshape(-1), tensor.datatype)
    except UnicodeDecodeError:
        raise InvalidArgument(
            f"output '{tensor.name}' holds bytes that are not UTF-8; request it as binary "
            "data (parameter binary_data: true)"
        ) from None
