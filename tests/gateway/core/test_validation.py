from __future__ import annotations

import numpy as np
import pytest

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.inference import InferRequest, RequestedOutput, Tensor
from gateway.core.validation import RequestRules, check_request


def rules(max_batch_size: int = 4) -> RequestRules:
    config = mc.ModelConfig(name="m", max_batch_size=max_batch_size)
    config.input.add(name="a", data_type=mc.TYPE_FP32, dims=[2, -1])
    config.input.add(name="b", data_type=mc.TYPE_INT32, dims=[6])
    config.input[1].reshape.shape.extend([2, 3])
    config.output.add(name="y", data_type=mc.TYPE_FP32, dims=[1])
    config.output.add(name="z", data_type=mc.TYPE_FP32, dims=[1])
    return RequestRules.from_config(config)


def request(a_shape=(3, 2, 5), b_shape=(3, 6), a_type="FP32", outputs=()) -> InferRequest:
    return InferRequest(
        "m",
        inputs=[
            Tensor("a", a_type, np.zeros(a_shape, np.float32)),
            Tensor("b", "INT32", np.zeros(b_shape, np.int32)),
        ],
        outputs=[RequestedOutput(name) for name in outputs],
    )


def test_valid_request_reshapes_and_defaults_outputs():
    feed, outputs, batch = check_request(request(), rules())
    assert feed["b"].shape == (3, 2, 3)
    assert outputs == ["y", "z"]
    assert batch == 3


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            request(a_shape=(3, 3, 5)),
            r"unexpected shape for input 'a' for model 'm'. Expected \[-1,2,-1\], got \[3,3,5\]",
        ),
        (request(a_shape=(5, 2, 5), b_shape=(5, 6)), "batch size 5 is outside 1..4"),
        (request(b_shape=(2, 6)), "batch size 2 differs"),
        (request(a_type="FP64"), "expected datatype FP32, got FP64"),
        (request(outputs=("nope",)), "has no output 'nope'; its outputs are: y, z"),
        (
            InferRequest("m", inputs=[Tensor("b", "INT32", np.zeros((1, 6), np.int32))]),
            r"expected 2 inputs but got 1 inputs for model 'm'. Got input\(s\) \['b'\], but "
            r"missing required input\(s\) \['a'\]. Please provide all required input\(s\).",
        ),
        (
            InferRequest("m", inputs=[Tensor("c", "INT32", np.zeros((1, 6), np.int32))]),
            "has no input 'c'; its inputs are: a, b",
        ),
    ],
)
def test_errors_name_input_and_expectation(bad, message):
    with pytest.raises(InvalidArgument, match=message):
        check_request(bad, rules())


def test_unbatched_model_takes_dims_as_is():
    feed, _, batch = check_request(request(a_shape=(2, 7), b_shape=(6,)), rules(max_batch_size=0))
    assert batch == 0 and feed["a"].shape == (2, 7)
