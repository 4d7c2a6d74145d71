"""ModelConfig fields the gateway cannot honour are refused by name (config_fields.py)."""

from __future__ import annotations

import logging

import pytest
from google.protobuf import text_format

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.config_fields import check_fields

BASE = 'name: "m" input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ] '


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ('cc_model_filenames { key: "7.5" value: "a.plan" }', "cc_model_filenames"),
        ('metric_tags { key: "team" value: "a" }', "metric_tags"),
        ('model_operations { op_library_filename: "ops.so" }', "op_library_filename"),
        ('batch_input { kind: BATCH_ELEMENT_COUNT target_name: "n" }', "batch_input"),
        ('model_repository_agents { agents { name: "checksum" } }', "model_repository_agents"),
        ('runtime: "model.py"', "runtime"),
        ('model_metrics { metric_control { metric_identifier { family: "f" } } }',
         "model_metrics"),
        ("sequence_batching { iterative_sequence: true }", "iterative_sequence"),
        ("optimization { priority: PRIORITY_MAX }", "optimization.priority"),
        ("optimization { cuda { graphs: true } }", "optimization.cuda.graphs"),
        ('instance_group { name: "g" kind: KIND_MODEL }', "instance_group 'g' kind KIND_MODEL"),
        ('instance_group { profile: "0" }', "instance_group profile"),
        ("instance_group { passive: true }", "instance_group passive"),
        ("instance_group { secondary_devices { device_id: 1 } }", "secondary_devices"),
        ('instance_group { host_policy: "numa0" }', "host_policy"),
        ('output [ { name: "S" data_type: TYPE_INT64 dims: [ 1 ] is_shape_tensor: true } ]',
         "output 'S' is_shape_tensor"),
    ],
)  # fmt: skip
def test_a_field_the_gateway_cannot_honour_is_refused_by_name(extra, field):
    with pytest.raises(InvalidArgument, match=field) as info:
        check_fields(text_format.Parse(BASE + extra, mc.ModelConfig()))
    assert info.value.message.startswith("model 'm': ")


def test_ragged_inputs_are_refused_and_honoured_fields_pass(caplog):
    ragged = BASE.replace("dims: [ 4 ]", "dims: [ 4 ] allow_ragged_batch: true")
    with pytest.raises(InvalidArgument, match="input 'X' allow_ragged_batch"):
        check_fields(text_format.Parse(ragged, mc.ModelConfig()))
    honoured = (
        BASE + "max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 4 ] } "
        'instance_group [ { kind: KIND_CPU count: 2 rate_limiter { resources [ { name: "R" '
        "count: 1 } ] } } ] optimization { execution_accelerators { cpu_execution_accelerator "
        '[ { name: "openvino" } ] } } model_warmup [ { name: "w" batch_size: 1 } ] '
        "response_cache { enable: true }"
    )
    check_fields(text_format.Parse(honoured, mc.ModelConfig()))
    with caplog.at_level(logging.INFO, logger="gateway.core.config_fields"):
        hinted = (
            BASE + "optimization { input_pinned_memory { enable: false } eager_batching: true }"
        )
        check_fields(text_format.Parse(hinted, mc.ModelConfig()))
    assert "optimization.input_pinned_memory, optimization.eager_batching" in caplog.text
