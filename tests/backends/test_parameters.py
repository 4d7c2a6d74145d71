from __future__ import annotations

import pytest
from google.protobuf import text_format

from accel_base.proto import model_config_pb2 as mc
from backends import BackendUnavailable
from backends.parameters import bool_parameter, choice_parameter, int_parameter, string_parameter


def config(**parameters: str) -> mc.ModelConfig:
    text = 'name: "m" platform: "p"'
    for key, value in parameters.items():
        text += f' parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}'
    return text_format.Parse(text, mc.ModelConfig())


def test_absent_parameters_give_defaults():
    cfg = config()
    assert string_parameter(cfg, "k") is None
    assert int_parameter(cfg, "k") is None
    assert bool_parameter(cfg, "k", default=True) is True
    assert choice_parameter(cfg, "k", ("eager", "default")) == "eager"


def test_values_are_parsed():
    cfg = config(n="4", flag="TRUE", off="0", mode="default")
    assert int_parameter(cfg, "n") == 4
    assert bool_parameter(cfg, "flag", default=False) is True
    assert bool_parameter(cfg, "off", default=True) is False
    assert choice_parameter(cfg, "mode", ("eager", "default")) == "default"


def test_bad_values_name_the_model_key_and_expectation():
    cfg = config(n="four", flag="maybe", mode="fast")
    with pytest.raises(BackendUnavailable, match="model 'm': parameter n must be an integer"):
        int_parameter(cfg, "n")
    with pytest.raises(BackendUnavailable, match="flag must be true or false, got 'maybe'"):
        bool_parameter(cfg, "flag", default=False)
    with pytest.raises(BackendUnavailable, match="mode must be one of eager, default, got 'fast'"):
        choice_parameter(cfg, "mode", ("eager", "default"))
