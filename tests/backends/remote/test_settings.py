"""A remote model's parameters: endpoints and their schemes, defaults, and what is refused."""

from __future__ import annotations

import pytest

from accel_base.proto import model_config_pb2 as mc
from backends.base import BackendUnavailable
from backends.remote.settings import Endpoint, read_settings


def config(**parameters: str) -> mc.ModelConfig:
    result = mc.ModelConfig(name="m", backend="remote")
    for key, value in parameters.items():
        result.parameters[key].string_value = value
    return result


def test_defaults():
    settings = read_settings(config(endpoints="127.0.0.1:8001"))
    assert settings.endpoints == (Endpoint("127.0.0.1:8001", "grpc", False),)
    assert settings.model == "m" and settings.version == ""
    assert (settings.timeout_s, settings.connect_timeout_s, settings.retries) == (30.0, 2.0, 2)
    assert settings.binary_data and settings.max_message_bytes == 256 << 20


def test_schemes_choose_the_protocol_per_endpoint():
    settings = read_settings(
        config(endpoints="a:1, http://b:2/, grpcs://c:3,https://d:4", protocol="http")
    )
    assert [str(e) for e in settings.endpoints] == [
        "http://a:1", "http://b:2", "grpcs://c:3", "https://d:4",
    ]  # fmt: skip


def test_the_remote_names_and_times():
    settings = read_settings(
        config(endpoints="h:1", remote_model="other", remote_version="3", timeout_ms="250",
               retries="0", health_interval_ms="50", binary_data="false")
    )  # fmt: skip
    assert (settings.model, settings.version, settings.timeout_s) == ("other", "3", 0.25)
    assert settings.retries == 0 and settings.health_interval_s == 0.05
    assert not settings.binary_data


@pytest.mark.parametrize(
    ("parameters", "words"),
    [
        ({}, "needs the parameter endpoints"),
        ({"endpoints": " , "}, "needs the parameter endpoints"),
        ({"endpoints": "localhost"}, "must be host:port"),
        ({"endpoints": "h:99999"}, "must be host:port"),
        ({"endpoints": "ftp://h:1"}, "has scheme 'ftp'"),
        ({"endpoints": "h:1,h:1"}, "names one twice"),
        ({"endpoints": "h:1", "protocol": "udp"}, "protocol must be one of grpc, http"),
        ({"endpoints": "h:1", "timeout_ms": "0"}, "timeout_ms must be above 0"),
        ({"endpoints": "h:1", "retries": "-1"}, "retries must be 0 or more"),
        ({"endpoints": "h:1", "timeout_ms": "soon"}, "must be an integer"),
    ],
)
def test_bad_settings_are_refused_with_the_key_named(parameters, words):
    with pytest.raises(BackendUnavailable) as raised:
        read_settings(config(**parameters))
    assert words in str(raised.value) and "model 'm'" in str(raised.value)
