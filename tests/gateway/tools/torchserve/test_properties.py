"""gateway/tools/torchserve/properties.py: config.properties as TorchServe reads it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.tools.torchserve.properties import PropertiesError, from_values, parse, read


def test_java_properties_syntax():
    text = """# comment
! another comment
inference_address=http://0.0.0.0:9080
management_address : http://0.0.0.0:9081
models={"m": {"1.0": {"batchSize": 4}}}
load_models=a.mar,\\
    b.mar
"""
    values = parse(text)
    assert values["inference_address"] == "http://0.0.0.0:9080"
    assert values["management_address"] == "http://0.0.0.0:9081"
    assert values["load_models"] == "a.mar,b.mar"
    props = from_values(values, {})
    assert (props.host, props.inference_port) == ("0.0.0.0", 9080)
    assert props.load_models == ["a.mar", "b.mar"]
    assert props.models == {"m": {"1.0": {"batchSize": 4}}}


def test_torchserves_defaults():
    props = read(None, {})
    assert (props.inference_port, props.management_port, props.metrics_port) == (8080, 8081, 8082)
    assert (props.grpc_inference_port, props.grpc_management_port) == (7070, 7071)
    assert props.token_authorization and not props.model_api


def test_environment_overrides_only_when_enabled():
    values = {"job_queue_size": "10"}
    environ = {"TS_JOB_QUEUE_SIZE": "20", "TS_DISABLE_TOKEN_AUTHORIZATION": "true"}
    assert from_values(values, environ).job_queue_size == 10
    enabled = from_values({**values, "enable_envvars_config": "true"}, environ)
    assert enabled.job_queue_size == 20 and not enabled.token_authorization


@pytest.mark.parametrize(
    "values, named",
    [
        ({"inference_address": "https://127.0.0.1:8443"}, "inference_address"),
        ({"job_queue_size": "many"}, "job_queue_size"),
        ({"disable_token_authorization": "yes"}, "disable_token_authorization"),
        ({"models": "{not json"}, "models"),
        ({"metrics_address": "https://10.0.0.1:8082"}, "metrics_address"),
    ],
)
def test_bad_values_are_refused_by_name(values, named):
    with pytest.raises(PropertiesError, match=named):
        from_values(values, {})


def test_keys_not_acted_on_are_named(caplog):
    with caplog.at_level(logging.WARNING):
        from_values({"number_of_netty_threads": "4", "vmargs": "-Xmx1g"}, {})
    assert "number_of_netty_threads, vmargs" in caplog.text


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(PropertiesError, match="--ts-config"):
        read(Path(tmp_path / "none.properties"), {})
