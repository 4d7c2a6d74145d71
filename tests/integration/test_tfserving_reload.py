"""What TF Serving serves, changed while it runs: a new version under a base path, a
config reload over gRPC (HandleReloadConfigRequest) under load, and the model config
file read again; on a real `accel-gateway tensorflow-model-server` process."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time

import grpc
import httpx
import pytest

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_serving.apis.model_management_pb2")

from google.protobuf import text_format  # noqa: E402
from tensorflow_serving.apis import (  # noqa: E402
    model_management_pb2,
    model_service_pb2_grpc,
)

from models.tfserving.savedmodels import build_strings, model_config_file  # noqa: E402
from tests.conftest import wait_until  # noqa: E402
from tests.integration.tfserving_server import start_tfserving  # noqa: E402


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tfs-reload")
    models = tmp / "models"
    bases = {name: build_strings(models / name, 1) for name in ("keep", "gone", "added")}
    config = model_config_file(tmp / "models.config", {n: bases[n] for n in ("keep", "gone")})
    server, url, grpc_port = start_tfserving(
        tmp, "keep", f"--model_config_file={config}", "--file_system_poll_wait_seconds=1",
        "--model_config_file_poll_wait_seconds=1",
    )  # fmt: skip
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    yield {
        "tmp": tmp, "bases": bases, "config": config, "rest": httpx.Client(base_url=url),
        "models": model_service_pb2_grpc.ModelServiceStub(channel),
    }  # fmt: skip
    channel.close()
    server.terminate()
    server.wait(60)


def _versions(rest: httpx.Client, name: str) -> dict[str, str]:
    answer = rest.get(f"/v1/models/{name}", timeout=10)
    if answer.status_code != 200:
        return {}
    return {s["version"]: s["state"] for s in answer.json()["model_version_status"]}


def _reload(world, text: str):
    request = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(text, request.config)
    return world["models"].HandleReloadConfigRequest(request, timeout=300)


def _entry(name, base, extra=""):
    return (f'config {{ name: "{name}" base_path: "{base}" model_platform: "tensorflow" '
            f"{extra} }}")  # fmt: skip


@contextlib.contextmanager
def _under_load(rest: httpx.Client, model: str, body: dict, clients: int = 3):
    """Requests from `clients` threads until the block ends: the statuses they got.
    Each client pauses 10 ms between requests, leaving the loads under test most of the
    CPU (hundreds of requests still meet each change)."""
    outcomes: list[int] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(base_url=str(rest.base_url), timeout=60) as client:
            while not stop.wait(0.01):
                outcomes.append(client.post(f"/v1/models/{model}:predict", json=body).status_code)

    threads = [threading.Thread(target=load) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.5)
        yield outcomes
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)


def test_a_new_version_is_served_once_it_appears(world) -> None:
    rest, keep = world["rest"], world["bases"]["keep"]
    reverse = {"signature_name": "reverse", "instances": ["abc"]}
    assert rest.post("/v1/models/keep:predict", json=reverse, timeout=120).status_code == 200
    # The latest policy: version 2 comes up, version 1 goes; requests for a signature
    # other than serving_default see no gap while its model changes versions too.
    with _under_load(rest, "keep", reverse) as outcomes:
        staging = build_strings(world["tmp"] / "staging", 2)
        (staging / "2").rename(keep / "2")  # in place whole, as TF Serving asks
        wait_until(lambda: _versions(rest, "keep") == {"2": "AVAILABLE"}, timeout_s=120)
        # The signature's model loads again after the model's own; then version 2 has it.
        two = "/v1/models/keep/versions/2:predict"
        wait_until(lambda: rest.post(two, json=reverse).status_code == 200, timeout_s=120)
    assert outcomes and set(outcomes) == {200}, sorted(set(outcomes))
    answer = rest.post("/v1/models/keep:predict", json={"instances": ["abc"]})
    assert answer.json() == {"predictions": [{"upper": "ABC", "length": 3}]}


def test_a_version_that_fails_to_load_leaves_the_last_one_serving(world) -> None:
    rest, keep = world["rest"], world["bases"]["keep"]
    wait_until(lambda: _versions(rest, "keep") == {"2": "AVAILABLE"}, timeout_s=120)
    broken = world["tmp"] / "broken"
    broken.mkdir()
    shutil.copy(keep / "2" / "saved_model.pb", broken / "saved_model.pb")  # no variables
    broken.rename(keep / "3")
    wait_until(lambda: _versions(rest, "keep") == {"3": "END", "2": "AVAILABLE"}, timeout_s=120)
    for body in ({"instances": ["abc"]}, {"signature_name": "reverse", "instances": ["abc"]}):
        assert rest.post("/v1/models/keep:predict", json=body).status_code == 200
    shutil.rmtree(keep / "3")
    wait_until(lambda: _versions(rest, "keep") == {"2": "AVAILABLE"}, timeout_s=120)


def test_a_reload_under_load_loses_no_request(world) -> None:
    rest, bases = world["rest"], world["bases"]
    wait_until(lambda: _versions(rest, "keep") == {"2": "AVAILABLE"}, timeout_s=120)
    with _under_load(rest, "keep", {"instances": ["x"]}, clients=2) as outcomes:
        # keep: every version now (it loads again); gone: dropped; added: new.
        response = _reload(world, "model_config_list { "
                           + _entry("keep", bases["keep"], "model_version_policy { all {} }")
                           + _entry("added", bases["added"]) + " }")  # fmt: skip
        assert response.status.error_code == 0
    assert outcomes and set(outcomes) == {200}, sorted(set(outcomes))
    assert _versions(rest, "keep") == {"2": "AVAILABLE", "1": "AVAILABLE"}
    assert _versions(rest, "added") == {"1": "AVAILABLE"}  # loaded before the answer
    gone = rest.post("/v1/models/gone:predict", json={"instances": ["x"]})
    assert gone.status_code == 404
    assert gone.json()["error"] == "Servable not found for request: Latest(gone)"


def test_reload_refusals(world, tmp_path_factory) -> None:
    bases = world["bases"]
    elsewhere = build_strings(tmp_path_factory.mktemp("elsewhere") / "m", 1)
    with pytest.raises(grpc.RpcError) as outside:
        _reload(world, f"model_config_list {{ {_entry('m', elsewhere)} }}")
    assert outside.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "outside the directories this server was started with" in outside.value.details()
    label = 'version_labels { key: "stable" value: 9 }'
    with pytest.raises(grpc.RpcError) as unavailable:
        _reload(world, f"model_config_list {{ {_entry('keep', bases['keep'], label)} }}")
    assert unavailable.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "version 9 of model keep, which is not currently available" in (
        unavailable.value.details())  # fmt: skip
    # An empty config is refused, as TF Serving refuses it.
    with pytest.raises(grpc.RpcError) as empty:
        _reload(world, "")
    assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Only ModelConfigList is currently supported" in empty.value.details()
    # Refused whole: what was served still is.
    assert _versions(world["rest"], "added") == {"1": "AVAILABLE"}


def test_the_config_file_is_read_again_when_it_changes(world) -> None:
    bases, rest = world["bases"], world["rest"]
    model_config_file(world["config"], {"gone": bases["gone"]})
    wait_until(lambda: _versions(rest, "gone") == {"1": "AVAILABLE"}, timeout_s=120)
    wait_until(lambda: not _versions(rest, "keep"), timeout_s=60)
    # A file that cannot be served leaves the served set as it is.
    world["config"].write_text("model_config_list { config { name: ")
    time.sleep(3)
    assert _versions(rest, "gone") == {"1": "AVAILABLE"}
