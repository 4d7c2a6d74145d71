"""The sequence batcher's pure parts: correlation ids and flags, live sequences and their
slots, control tensors and state."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from accel_base.errors import InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.inference import InferRequest
from gateway.core.scheduling.sequence.controls import (
    EMPTY_ROW,
    RowFlags,
    control_feed,
    controls_of,
    server_filled,
    states_of,
)
from gateway.core.scheduling.sequence.registry import Registry, correlation_id


def request(**parameters) -> InferRequest:
    return InferRequest("m", parameters=parameters)


def test_correlation_ids_and_flags_as_triton_reads_them():
    assert correlation_id(request(sequence_id=7, sequence_start=True), "m") == (7, True, False)
    assert correlation_id(request(sequence_id="a", sequence_end=True), "m") == ("a", False, True)
    for bad in ({}, {"sequence_id": 0}, {"sequence_id": ""}, {"sequence_id": True}):
        with pytest.raises(InvalidArgument, match="non-zero or non-empty correlation ID"):
            correlation_id(request(**bad), "m")
    with pytest.raises(InvalidArgument, match="sequence_start must be a boolean"):
        correlation_id(request(sequence_id=1, sequence_start="yes"), "m")


def test_direct_slots_are_held_until_released_and_reused_lowest_first():
    registry = Registry("m", instances=2, slots=2, direct=True, limit=100)
    places = [registry.sequence_for(i, True, 0.0) for i in (1, 2, 3, 4)]
    assert [(s.instance, s.slot) for s in places] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    with pytest.raises(Unavailable, match="4 live sequences, its limit"):
        registry.sequence_for(5, True, 0.0)
    assert registry.sequence_for(3, False, 1.0) is places[2]  # the same sequence again
    registry.release(places[1])
    assert (registry.sequence_for(5, True, 2.0).instance, registry.live[5].slot) == (1, 0)
    with pytest.raises(InvalidArgument, match="must specify the START flag"):
        registry.sequence_for(99, False, 0.0)
    assert [s.id for s in registry.idle(now=1.5, idle_s=1.0)] == [1, 4]  # 3 seen at 1.0


def test_oldest_spreads_sequences_over_instances_up_to_its_limit():
    registry = Registry("m", instances=2, slots=4, direct=False, limit=3)
    assert [registry.sequence_for(i, True, 0.0).instance for i in (1, 2, 3)] == [0, 1, 0]
    with pytest.raises(Unavailable):
        registry.sequence_for(4, True, 0.0)


CONFIG = """
name: "m"
max_batch_size: 4
sequence_batching {
  control_input [
    { name: "S" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "R" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "E" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 5, 9 ] } ] },
    { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
  state [ { input_name: "SI" output_name: "SO" data_type: TYPE_FP32 dims: [ 2 ] } ]
}
"""


def test_control_tensors_carry_the_configured_values():
    config = text_format.Parse(CONFIG, mc.ModelConfig())
    assert server_filled(config) == {"S", "R", "E", "C", "SI"}
    rows = [RowFlags(True, False, True, "x"), EMPTY_ROW, RowFlags(False, True, True, 7)]
    feed = control_feed(controls_of(config), rows, batched=True)
    assert feed["S"].dtype == np.float32 and feed["S"].ravel().tolist() == [1, 0, 0]
    assert feed["R"].dtype == np.bool_ and feed["R"].ravel().tolist() == [True, False, True]
    assert feed["E"].ravel().tolist() == [5, 5, 9] and feed["E"].shape == (3, 1)
    assert feed["C"].ravel().tolist() == [b"x", b"", b"7"]
    (state,) = states_of(config)
    assert (state.input, state.output, state.dims) == ("SI", "SO", (2,))


def test_a_control_without_values_is_refused():
    config = text_format.Parse(
        'name: "m" sequence_batching { control_input [ { name: "S" control [ '
        "{ kind: CONTROL_SEQUENCE_START } ] } ] }",
        mc.ModelConfig(),
    )
    with pytest.raises(InvalidArgument, match="needs exactly one of int32_false_true"):
        controls_of(config)
