"""Which executor a model's instances get, and the worker settings from its config."""

from __future__ import annotations

import pytest

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from backends.base import Device
from gateway.core.scheduling.execution import execution_mode, worker_settings


def config(**parameters: str) -> mc.ModelConfig:
    result = mc.ModelConfig(name="m")
    for key, value in parameters.items():
        result.parameters[key].string_value = value
    return result


@pytest.mark.parametrize(
    ("platform", "device", "expected"),
    [
        ("onnxruntime_onnx", Device("cpu"), "thread"),
        ("onnxruntime_onnx", Device("gpu", 0), "process"),
        ("pytorch_libtorch", Device("cpu"), "process"),
        ("tensorflow_savedmodel", Device("cpu"), "process"),
        ("jax_export", Device("cpu"), "process"),
        ("tvm", Device("cpu"), "process"),
    ],
)
def test_defaults(platform, device, expected):
    assert execution_mode(config(), platform, device) == expected


def test_the_config_chooses():
    assert execution_mode(config(execution="process"), "onnxruntime_onnx", Device()) == "process"
    assert execution_mode(config(execution="thread"), "jax_export", Device()) == "thread"
    with pytest.raises(InvalidArgument, match="expected one of process, thread"):
        execution_mode(config(execution="fork"), "onnxruntime_onnx", Device())


def test_worker_settings():
    settings = worker_settings(config(worker_run_timeout_s="2.5", worker_max_restarts="0"))
    assert settings.run_timeout_s == 2.5
    assert settings.max_restarts == 0
    with pytest.raises(InvalidArgument, match="worker_run_timeout_s must be a positive number"):
        worker_settings(config(worker_run_timeout_s="0"))
    with pytest.raises(InvalidArgument, match="worker_max_restarts must be a non-negative"):
        worker_settings(config(worker_max_restarts="-1"))
    for text in ("nan", "inf", "soon"):
        with pytest.raises(InvalidArgument, match="worker_run_timeout_s"):
            worker_settings(config(worker_run_timeout_s=text))
    assert worker_settings(config(worker_load_timeout_s="30")).load_timeout_s == 30


def test_restart_wait_may_be_zero_but_not_negative():
    assert worker_settings(config()).restart_wait_s == 5.0
    assert worker_settings(config(worker_restart_wait_s="0")).restart_wait_s == 0
    assert worker_settings(config(worker_restart_wait_s="2.5")).restart_wait_s == 2.5
    for text in ("-1", "nan", "soon"):
        with pytest.raises(InvalidArgument, match="worker_restart_wait_s must be a number of"):
            worker_settings(config(worker_restart_wait_s=text))
