"""Property tests of the HTTP request decoders (gateway/protocols/http/codec.py), called directly.

For any body, JSON or binary extension, well formed or not, `decode_request` either returns
a request that holds what it claims (every tensor an array of its declared shape and
datatype) or raises a 4xx GatewayError whose message can be sent; never anything else.

ACCEL_FUZZ_EXAMPLES sets the examples per property (default 300; conftest.py).
"""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
from hypothesis import given
from hypothesis import strategies as st

from accel_base.datatypes import ALL_DATATYPES, MAX_DIMS, NUMPY_DTYPES
from accel_base.errors import GatewayError, InvalidArgument
from gateway.core.inference import InferRequest
from gateway.core.shared_memory import SharedMemoryRegistry
from gateway.protocols.http.codec import decode_request
from gateway.protocols.http.json_data import json_to_array

# No region is registered: a tensor naming one must be refused cleanly.
SHARED_MEMORY = SharedMemoryRegistry(enabled=True).input_array

# Text with unpaired surrogates now and then (json.dumps escapes them as \ud800).
texts = st.text(st.characters() | st.integers(0xD800, 0xDFFF).map(chr), max_size=8)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and infinities: the body takes json's slow path
    | texts
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
datatypes = st.sampled_from(ALL_DATATYPES) | texts
ELEMENTS = {
    "BOOL": st.booleans(),
    "FP16": st.floats(width=16) | st.floats(),
    "FP32": st.floats(width=32) | st.floats(),
    "FP64": st.floats(),
    "BYTES": texts,
}


def elements(datatype: str) -> st.SearchStrategy:
    if datatype in ELEMENTS:
        return ELEMENTS[datatype] | scalars
    if datatype in NUMPY_DTYPES and datatype != "BF16":
        info = np.iinfo(NUMPY_DTYPES[datatype])  # a little past the range now and then
        return st.integers(int(info.min) - 2, int(info.max) + 2) | scalars
    return scalars


def nest(flat: list, shape: list[int]) -> list:
    """Row-major nesting of `flat` into `shape` (as clients may send data)."""
    if len(shape) <= 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


@st.composite
def tensors(draw, binary: bool) -> tuple[dict, bytes]:
    """An input entry, mostly well formed, and the bytes it adds to a binary body."""
    datatype = draw(datatypes)
    shape = draw(
        st.lists(st.integers(0, 3), max_size=3)
        | st.lists(st.integers(0, 1), min_size=60, max_size=70)  # around numpy's 64 dimensions
        | st.lists(st.integers(0, 2**70), max_size=3)
    )
    count = math.prod(shape)
    entry: dict = {"name": draw(texts), "datatype": datatype, "shape": shape}
    blob = b""
    if binary and count <= 64:
        item = NUMPY_DTYPES[datatype].itemsize if datatype in NUMPY_DTYPES else 1
        size = count * item
        blob = draw(st.binary(min_size=size, max_size=size) | st.binary(max_size=32))
        entry["parameters"] = {"binary_data_size": draw(st.just(len(blob)) | st.integers(-1, 40))}
    elif count <= 64:
        flat = draw(st.lists(elements(datatype), min_size=count, max_size=count))
        # Nested only where the dimensions are small: [1, 2**70, 0] holds no element, but
        # nested it would be 2**70 empty lists.
        nestable = max(shape, default=0) <= 3
        entry["data"] = draw(st.sampled_from([flat, nest(flat, shape)])) if nestable else flat
    for key in draw(st.lists(st.sampled_from(["name", "datatype", "shape", "data", "parameters"]))):
        if draw(st.booleans()):
            entry.pop(key, None)
        else:
            entry[key] = draw(json_values)
    return entry, blob


@st.composite
def requests(draw, binary: bool) -> tuple[bytes, int | None]:
    inputs = draw(st.lists(tensors(binary), max_size=3))
    header: dict = {"inputs": [entry for entry, _ in inputs]}
    optional = {
        "id": texts | json_values,
        "parameters": st.dictionaries(texts, scalars, max_size=3) | json_values,
        "outputs": st.lists(
            st.fixed_dictionaries(
                {"name": texts},
                optional={"parameters": st.dictionaries(texts, scalars, max_size=3)},
            ),
            max_size=3,
        )
        | json_values,
    }
    for key, values in optional.items():
        if draw(st.booleans()):
            header[key] = draw(values)
    if draw(st.integers(0, 9)) == 0:
        header = draw(json_values)  # not even an object
    text = json.dumps(header).encode()
    if not binary:
        return text, None
    blobs = b"".join(blob for _, blob in inputs) + draw(st.binary(max_size=4) | st.just(b""))
    length = draw(st.just(len(text)) | st.integers(-1, len(text) + len(blobs) + 2))
    return text + blobs, length


def decodes_or_refuses(body: bytes, header_length: int | None) -> InferRequest | None:
    try:
        request = decode_request(body, header_length, "m", "", SHARED_MEMORY)
    except GatewayError as exc:
        assert 400 <= exc.http_status < 500, exc.message
        orjson.dumps({"error": exc.message})  # the error can be sent (no lone surrogate)
        return None
    assert isinstance(request.id, str) and isinstance(request.parameters, dict)
    for tensor in request.inputs:
        assert isinstance(tensor.name, str) and tensor.datatype in NUMPY_DTYPES
        assert isinstance(tensor.data, np.ndarray) and tensor.data.ndim <= MAX_DIMS
        assert tensor.data.dtype == NUMPY_DTYPES[tensor.datatype]
        if tensor.datatype == "BYTES":
            assert all(isinstance(e, bytes) for e in tensor.data.reshape(-1))
    assert all(isinstance(o.name, str) for o in request.outputs)
    return request


@given(requests(binary=False))
def test_json_bodies(body_and_length):
    decodes_or_refuses(*body_and_length)


@given(requests(binary=True))
def test_binary_extension_bodies(body_and_length):
    decodes_or_refuses(*body_and_length)


@given(st.binary(max_size=200), st.none() | st.integers(-2, 210))
def test_arbitrary_bytes(body, header_length):
    decodes_or_refuses(body, header_length)


@given(st.sampled_from(ALL_DATATYPES), st.lists(scalars, max_size=8))
def test_json_data_is_exact_or_refused(datatype, data):
    try:
        array = json_to_array(data, datatype, (len(data),), "input 'x'")
    except InvalidArgument:
        return
    values = array.tolist()
    if datatype == "BYTES":
        assert values == [text.encode() for text in data]
    elif datatype == "BOOL" or datatype.startswith(("INT", "UINT")):
        assert values == data  # exact: no truncation, wrapping or coercion
        assert all(type(v) is type(d) for v, d in zip(values, data, strict=True))
    else:
        assert all(isinstance(d, (int, float)) and not isinstance(d, bool) for d in data)


@given(st.integers(1, 3000), st.sampled_from(["1", "NaN", '"x"', "{}"]))
def test_nesting_at_any_depth(depth, leaf):
    body = b'{"inputs": [], "parameters": {"p": ' + b"[" * depth + leaf.encode()
    body += b"]" * depth + b"}}"
    decodes_or_refuses(body, None)
