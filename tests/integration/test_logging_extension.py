"""Triton's logging extension through the unmodified tritonclient (HTTP and gRPC), JSON
log lines, and the access log, on a real server."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import both_clients

TOKEN = "log-admin-token"


@pytest.fixture
def server(server_factory, repository_copy):
    repository = repository_copy("simple")
    return server_factory(
        repository, "--log-format", "json", "--access-log", "--admin-token", TOKEN
    )


def _settings(client, answer) -> dict:
    if isinstance(client, grpcclient.InferenceServerClient):
        return {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in answer.settings.items()}
    return answer


def test_settings_read_and_changed_through_tritonclient(server):
    for client in both_clients(server):
        metadata = client.get_server_metadata()
        extensions = metadata["extensions"] if isinstance(metadata, dict) else metadata.extensions
        assert "logging" in extensions
        settings = _settings(client, client.get_log_settings())
        assert settings["log_format"] == "json" and settings["log_info"] is True
        headers = {"authorization": f"Bearer {TOKEN}"}  # gRPC keys are lower case
        changed = _settings(
            client, client.update_log_settings({"log_verbose_level": 1}, headers=headers)
        )
        assert changed["log_verbose_level"] == 1
        assert _settings(client, client.get_log_settings())["log_verbose_level"] == 1
        client.update_log_settings({"log_verbose_level": 0}, headers=headers)
        with pytest.raises(InferenceServerException) as raised:
            client.update_log_settings({"log_verbose_level": 1})  # no token
        assert raised.value.status() in ("403", "StatusCode.PERMISSION_DENIED")
        with pytest.raises(InferenceServerException) as raised:
            client.update_log_settings({"log_format": "xml"}, headers=headers)
        assert "log_format must be one of" in raised.value.message()


def test_json_lines_and_an_access_line_per_request(server):
    client = httpclient.InferenceServerClient(server.http_url)
    a = np.zeros((1, 16), dtype=np.int32)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    client.infer("simple", inputs, request_id="req-7")
    with pytest.raises(InferenceServerException):
        client.infer("simple", inputs[:1])  # a missing input: 400
    deadline = time.monotonic() + 5
    while True:
        lines = [line for line in server.log().splitlines() if line.strip()]
        access = [json.loads(line) for line in lines if '"accel_gateway.access"' in line]
        if len(access) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for line in lines:  # every line, the server's start and its libraries' included
        entry = json.loads(line)
        assert {"time", "level", "logger", "message"} <= entry.keys()
    served = [e for e in access if e.get("request_id") == "req-7"]
    assert served and served[0]["model"] == "simple" and served[0]["status"] == 200
    assert served[0]["duration_ms"] > 0
    assert any(e["status"] == 400 for e in access)
