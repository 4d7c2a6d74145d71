"""An ensemble's steps: put in an order that runs, and every mistake in the section named."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.ensemble.plan import check_members, is_ensemble, plan_steps

HEAD = """
name: "e"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [ 4 ] } ]
"""


def step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    maps = "".join(f'input_map {{ key: "{k}" value: "{v}" }} ' for k, v in inputs.items())
    maps += "".join(f'output_map {{ key: "{k}" value: "{v}" }} ' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version} {maps} }}'


def ensemble(*steps: str, head: str = HEAD) -> mc.ModelConfig:
    text = head + "ensemble_scheduling { step [ " + ", ".join(steps) + " ] }"
    return text_format.Parse(text, mc.ModelConfig())


def member(name: str, inputs: dict[str, str], outputs: dict[str, str]) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, platform="onnxruntime_onnx")
    for tensor_name, data_type in inputs.items():
        config.input.add(name=tensor_name, data_type=mc.DataType.Value(data_type), dims=[4])
    for tensor_name, data_type in outputs.items():
        config.output.add(name=tensor_name, data_type=mc.DataType.Value(data_type), dims=[4])
    return config


def test_steps_run_after_the_steps_they_read_from():
    config = ensemble(
        step("post", {"x": "mid"}, {"y": "OUT"}),
        step("pre", {"x": "IN"}, {"y": "mid"}, version=2),
    )
    assert is_ensemble(config)
    steps = plan_steps(config)
    assert [(s.model, s.index, s.version) for s in steps] == [("pre", 1, "2"), ("post", 0, "")]
    fp32 = {"x": "TYPE_FP32"}, {"y": "TYPE_FP32"}
    datatypes = check_members(config, steps, [member("pre", *fp32), member("post", *fp32)])
    assert datatypes == {"IN": "FP32", "mid": "FP32", "OUT": "FP32"}


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ((), "ensemble_scheduling has no step"),
        ((step("a", {"x": "IN"}, {}),), "step 0 (model 'a') has no output_map"),
        ((step("e", {"x": "IN"}, {"y": "OUT"}),), "step 0 names the ensemble itself"),
        ((step("", {"x": "IN"}, {"y": "OUT"}),), "step 0 names no model"),
        (
            (step("a", {"x": "IN"}, {"y": "OUT"}), step("b", {"x": "IN"}, {"y": "OUT"})),
            "tensor 'OUT' is written twice (step 1 (model 'b'))",
        ),
        (
            (step("a", {"x": "nowhere"}, {"y": "OUT"}),),
            "step 0 (model 'a') reads 'nowhere', which is neither an ensemble input",
        ),
        ((step("a", {"x": "IN"}, {"y": "mid"}),), "no step writes the ensemble output 'OUT'"),
        (
            (
                step("a", {"x": "b_out"}, {"y": "a_out"}),
                step("b", {"x": "a_out"}, {"y": "b_out"}),
                step("c", {"x": "IN"}, {"y": "OUT"}),
            ),
            "the steps read each other's outputs in a cycle",
        ),
    ],
)
def test_a_wrong_section_is_refused_with_the_reason(steps, message):
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_steps(ensemble(*steps))


@pytest.mark.parametrize(
    ("inputs", "outputs", "message"),
    [
        ({"z": "TYPE_FP32"}, {"y": "TYPE_FP32"}, "does not feed the model's input 'z'"),
        ({"x": "TYPE_FP32"}, {"w": "TYPE_FP32"}, "maps output 'y', but the model's outputs are w"),
        ({"x": "TYPE_INT32"}, {"y": "TYPE_FP32"}, "input 'x' is INT32, but tensor 'IN' is FP32"),
        ({"x": "TYPE_FP32"}, {"y": "TYPE_FP16"}, "output 'OUT' is declared FP32, but its step"),
    ],
)
def test_maps_are_checked_against_the_members(inputs, outputs, message):
    config = ensemble(step("a", {"x": "IN"}, {"y": "OUT"}))
    with pytest.raises(InvalidArgument, match=message):
        check_members(config, plan_steps(config), [member("a", inputs, outputs)])


def test_a_map_to_an_input_the_model_lacks_is_named():
    config = ensemble(step("a", {"x": "IN", "extra": "IN"}, {"y": "OUT"}))
    with pytest.raises(InvalidArgument, match="maps input 'extra', but the model's inputs are x"):
        check_members(config, plan_steps(config), [member("a", {"x": "TYPE_FP32"},
                                                          {"y": "TYPE_FP32"})])  # fmt: skip
