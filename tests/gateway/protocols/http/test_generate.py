"""The generate extension's mapping: a flat JSON object -> inputs and parameters shaped by
the model's metadata, and a response -> one JSON object."""

from __future__ import annotations

import asyncio

import numpy as np
import orjson
import pytest

from accel_base.errors import InvalidArgument
from gateway.core.inference import InferResponse, Tensor
from gateway.protocols.http.generate import _events, generate_answer, generate_request

METADATA = {
    "inputs": [
        {"name": "text_input", "datatype": "BYTES", "shape": [1]},
        {"name": "max_tokens", "datatype": "INT32", "shape": [1]},
        {"name": "pixels", "datatype": "FP32", "shape": [-1, 2, 2]},
    ]
}


def test_inputs_parameters_and_other_keys():
    request = generate_request(
        {"text_input": "hello", "max_tokens": 5, "pixels": [[1, 2], [3, 4]],
         "parameters": {"temperature": 0.5}, "stream": False},
        METADATA, "lm", "",
    )  # fmt: skip
    tensors = {t.name: t for t in request.inputs}
    assert tensors["text_input"].data.tolist() == [b"hello"]
    assert tensors["max_tokens"].data.dtype == np.int32
    assert tensors["max_tokens"].data.shape == (1,)
    assert tensors["pixels"].data.shape == (1, 2, 2)  # a batch of one added
    assert request.parameters == {"temperature": 0.5, "stream": False}
    assert request.outputs == []  # every output


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([1, 2], "must be a JSON object"),
        ({"max_tokens": 1.5}, "INT32 data must be integers"),
        ({"pixels": [[1, 2, 3], [4, 5, 6]]}, r"takes shape \[-1, 2, 2\], got \[1, 2, 3\]"),
        ({"pixels": [1, 2, 3, 4]}, r"takes shape \[-1, 2, 2\], got a value of \[4\]"),
        ({"prompt_list": ["a"]}, "neither an input of model 'lm', which takes text_input"),
        ({"parameters": {"top_k": [1]}}, "parameter 'top_k' must be a string, number or"),
        ({"parameters": 3}, "'parameters' must be a JSON object"),
        ({"seed": 1, "parameters": {"seed": 2}}, "parameter 'seed' is given twice"),
    ],
)
def test_bad_bodies_are_refused_with_what_was_expected(body, message):
    with pytest.raises(InvalidArgument, match=message):
        generate_request(body, METADATA, "lm", "")


def test_the_answer_names_each_output_scalars_as_scalars():
    response = InferResponse(
        "lm", "1",
        outputs=[Tensor("text_output", "BYTES", np.array([b"hi there"], dtype=object)),
                 Tensor("logits", "FP32", np.float32([[0.5, 1.5]])),
                 Tensor("count", "INT32", np.int32([7])),
                 Tensor("words", "BYTES", np.array([[b"a", b"b"], [b"c", b"d"]], dtype=object))],
    )  # fmt: skip
    assert orjson.loads(generate_answer(response)) == {
        "model_name": "lm", "model_version": "1", "text_output": "hi there",
        "logits": [[0.5, 1.5]], "count": 7, "words": [["a", "b"], ["c", "d"]],
    }  # fmt: skip


def test_bytes_that_are_not_text_are_refused():
    response = InferResponse(
        "lm", "1", outputs=[Tensor("raw", "BYTES", np.array([b"\xff"], dtype=object))]
    )
    with pytest.raises(InvalidArgument, match="output 'raw' holds bytes that are not UTF-8"):
        generate_answer(response)


def test_an_error_after_the_first_event_is_the_last_event():
    response = InferResponse("lm", "1", outputs=[Tensor("n", "INT32", np.int32([1]))])

    async def responses():
        yield response
        raise InvalidArgument("the model gave up")

    async def events() -> list[bytes]:
        return [event async for event in _events(responses(), None)]

    assert asyncio.run(events()) == [
        b'data: {"model_name":"lm","model_version":"1","n":1}\n\n',
        b'data: {"error":"the model gave up"}\n\n',
    ]


def test_non_finite_bf16_and_empty_outputs_are_written_as_the_infer_route_writes_them():
    bf16 = (np.float32([1.5, -2.0]).view(np.uint32) >> 16).astype(np.uint16)
    response = InferResponse(
        "lm", "1",
        outputs=[Tensor("x", "FP32", np.float32([np.nan, np.inf])),
                 Tensor("b", "BF16", bf16),
                 Tensor("none", "BYTES", np.empty((2, 0), dtype=object)),
                 Tensor("s", "BYTES", np.array(["already text"], dtype=object))],
    )  # fmt: skip
    assert generate_answer(response) == (
        b'{"model_name":"lm","model_version":"1","x":[NaN, Infinity],"b":[1.5,-2.0],'
        b'"none":[[],[]],"s":"already text"}'
    )


def test_any_failure_after_the_first_event_is_the_last_event():
    async def responses():
        yield InferResponse("lm", "1", outputs=[Tensor("n", "INT32", np.int32([1]))])
        raise RuntimeError("a bug of ours")

    async def events() -> list[bytes]:
        return [event async for event in _events(responses(), None)]

    assert asyncio.run(events())[-1] == (
        b'data: {"error":"internal error: RuntimeError: a bug of ours"}\n\n'
    )
