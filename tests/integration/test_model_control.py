"""Model control modes, version policies and load failures, through tritonclient."""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def make_client(server, protocol: str, token: str | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token else None
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url), headers
    return grpcclient.InferenceServerClient(server.grpc_url), headers


def infer_identity(client, protocol: str, model: str = "identity_int32", version: str = ""):
    mod = httpclient if protocol == "http" else grpcclient
    tensor = mod.InferInput("INPUT0", [1, 3], "INT32")
    tensor.set_data_from_numpy(np.array([[1, 2, 3]], dtype=np.int32))
    return client.infer(model, [tensor], model_version=version)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_explicit_load_and_unload(repository_copy, server_factory, protocol):
    repository = repository_copy("identity_int32", "simple")
    server = server_factory(
        repository, "--model-control-mode", "explicit", "--load-model", "simple"
    )
    client, _ = make_client(server, protocol)
    assert client.is_model_ready("simple")
    assert not client.is_model_ready("identity_int32")
    with pytest.raises(InferenceServerException):
        infer_identity(client, protocol)

    client.load_model("identity_int32")
    assert client.is_model_ready("identity_int32")
    np.testing.assert_array_equal(infer_identity(client, protocol).as_numpy("OUTPUT0"), [[1, 2, 3]])

    client.unload_model("identity_int32")
    assert not client.is_model_ready("identity_int32")
    index = client.get_model_repository_index()
    rows = index.models if protocol == "grpc" else index
    states = {(r.name, r.state) if protocol == "grpc" else (r["name"], r["state"]) for r in rows}
    assert ("identity_int32", "UNAVAILABLE") in states
    assert ("simple", "READY") in states


def test_admin_token_guards_load_and_unload(repository_copy, server_factory):
    repository = repository_copy("identity_int32")
    server = server_factory(
        repository, "--model-control-mode", "explicit", "--admin-token", "s3cret"
    )
    for protocol in ("http", "grpc"):
        client, _ = make_client(server, protocol)
        with pytest.raises(InferenceServerException) as info:
            client.load_model("identity_int32")
        assert "admin token" in info.value.message()
        good_headers = {"authorization": "Bearer s3cret"}
        client.load_model("identity_int32", headers=good_headers)
        assert client.is_model_ready("identity_int32")
        client.unload_model("identity_int32", headers=good_headers)


def test_load_with_config_override(repository_copy, server_factory):
    repository = repository_copy("identity_int32")
    server = server_factory(repository, "--model-control-mode", "explicit")
    client = httpclient.InferenceServerClient(server.http_url)
    override = {"name": "identity_int32", "platform": "onnxruntime_onnx", "max_batch_size": 2}
    client.load_model("identity_int32", config=json.dumps(override))
    assert client.get_model_config("identity_int32")["max_batch_size"] == 2


def test_version_policies(repository_copy, server_factory):
    repository = repository_copy("identity_int32")
    model_dir = repository / "identity_int32"
    for version in (2, 3):
        shutil.copytree(model_dir / "1", model_dir / str(version))
    config_path = model_dir / "config.pbtxt"
    base_config = config_path.read_text()
    server = server_factory(repository, "--model-control-mode", "explicit")
    client = httpclient.InferenceServerClient(server.http_url)

    client.load_model("identity_int32")  # default policy: the latest version only
    assert client.get_model_metadata("identity_int32")["versions"] == ["3"]
    assert infer_identity(client, "http").get_response()["model_version"] == "3"

    config_path.write_text(base_config + "\nversion_policy: { all: {} }\n")
    client.load_model("identity_int32")
    assert client.get_model_metadata("identity_int32")["versions"] == ["1", "2", "3"]
    assert infer_identity(client, "http", version="2").get_response()["model_version"] == "2"

    config_path.write_text(base_config + "\nversion_policy: { specific: { versions: [1, 3] } }\n")
    client.load_model("identity_int32")
    assert client.get_model_metadata("identity_int32")["versions"] == ["1", "3"]
    assert not client.is_model_ready("identity_int32", "2")

    config_path.write_text(base_config + "\nversion_policy: { latest: { num_versions: 2 } }\n")
    client.load_model("identity_int32")
    assert client.get_model_metadata("identity_int32")["versions"] == ["2", "3"]


def test_broken_model_is_reported_not_fatal(repository_copy, server_factory):
    repository = repository_copy("simple", "identity_int32")
    (repository / "identity_int32" / "1" / "model.onnx").write_bytes(b"this is not onnx")
    broken = repository / "bad_config"
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text("name: 'bad_config' platform: 'onnxruntime_onnx' bogus: 1")
    server = server_factory(repository)  # mode none: every model loads at start
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    index = {row["name"]: row for row in client.get_model_repository_index()}
    assert index["identity_int32"]["state"] == "UNAVAILABLE"
    assert "onnxruntime could not load" in index["identity_int32"]["reason"]
    assert index["bad_config"]["state"] == "UNAVAILABLE"
    assert "bogus" in index["bad_config"]["reason"]
    with pytest.raises(InferenceServerException) as info:
        infer_identity(client, "http")
    assert info.value.status() == "503"


def test_poll_mode_follows_the_repository(repository_copy, example_repository, server_factory):
    repository = repository_copy("simple")
    server = server_factory(
        repository, "--model-control-mode", "poll", "--repository-poll-secs", "0.2"
    )
    client = httpclient.InferenceServerClient(server.http_url)
    assert not client.is_model_ready("identity_int32")
    shutil.copytree(example_repository / "identity_int32", repository / "identity_int32")
    deadline = time.monotonic() + 20
    while not client.is_model_ready("identity_int32") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.is_model_ready("identity_int32")
    shutil.rmtree(repository / "identity_int32")
    deadline = time.monotonic() + 20
    while client.is_model_ready("identity_int32") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not client.is_model_ready("identity_int32")


def test_failed_reload_keeps_the_serving_version(repository_copy, server_factory):
    repository = repository_copy("identity_int32")
    server = server_factory(
        repository, "--model-control-mode", "explicit", "--load-model", "identity_int32"
    )
    client = httpclient.InferenceServerClient(server.http_url)
    bad = {
        "name": "identity_int32",
        "platform": "onnxruntime_onnx",
        "instance_group": [{"kind": "KIND_GPU", "gpus": [7]}],
    }
    with pytest.raises(InferenceServerException) as info:
        client.load_model("identity_int32", config=json.dumps(bad))
    assert "GPU" in info.value.message()
    assert client.is_model_ready("identity_int32")
    np.testing.assert_array_equal(infer_identity(client, "http").as_numpy("OUTPUT0"), [[1, 2, 3]])


def test_a_new_version_that_fails_to_load_leaves_the_old_one_serving(
    repository_copy, server_factory
):
    repository = repository_copy("identity_int32")
    server = server_factory(
        repository, "--model-control-mode", "explicit", "--load-model", "identity_int32"
    )
    client = httpclient.InferenceServerClient(server.http_url)
    (repository / "identity_int32" / "2").mkdir()
    (repository / "identity_int32" / "2" / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(InferenceServerException) as info:
        client.load_model("identity_int32")  # the latest policy wants version 2 alone
    assert "failed to load 'identity_int32'" in info.value.message()
    assert client.is_model_ready("identity_int32", "1")
    np.testing.assert_array_equal(infer_identity(client, "http").as_numpy("OUTPUT0"), [[1, 2, 3]])
    states = {row["version"]: row["state"] for row in client.get_model_repository_index()
              if row["name"] == "identity_int32"}  # fmt: skip
    assert states == {"1": "READY", "2": "UNAVAILABLE"}


def test_config_override_must_be_a_valid_config_for_that_model(repository_copy, server_factory):
    repository = repository_copy("identity_int32")
    server = server_factory(repository, "--model-control-mode", "explicit")
    client = httpclient.InferenceServerClient(server.http_url)
    for config, fragment in (
        ({"name": "other", "platform": "onnxruntime_onnx"}, "loaded as 'identity_int32'"),
        ({"platform": "onnxruntime_onnx", "max_batch_size": -1}, "max_batch_size must be >= 0"),
        (5, "expected an object"),
    ):
        with pytest.raises(InferenceServerException) as info:
            client.load_model("identity_int32", config=json.dumps(config))
        assert info.value.status() == "400" and fragment in info.value.message()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_repository_is_sealed(repository_copy, server_factory, protocol, tmp_path):
    """A config override cannot point a model at a file outside its directory, however
    the path is spelled, and no answer names the server's own paths."""
    repository = repository_copy("identity_int32")
    outside = tmp_path / "outside.onnx"
    shutil.copy(repository / "identity_int32" / "1" / "model.onnx", outside)
    (repository / "identity_int32" / "1" / "link.onnx").symlink_to(outside)
    server = server_factory(repository, "--model-control-mode", "explicit")
    client, _ = make_client(server, protocol)
    for filename in (str(outside), "../../../outside.onnx", "link.onnx", "/no/such/file"):
        override = {"platform": "onnxruntime_onnx", "default_model_filename": filename}
        with pytest.raises(InferenceServerException) as info:
            client.load_model("identity_int32", config=json.dumps(override))
        status = info.value.status()
        assert status in ("400", "StatusCode.INVALID_ARGUMENT"), (filename, status)
        assert str(repository.resolve()) not in info.value.message()  # the client's own
        # path may be echoed, the server's never
    assert not client.is_model_ready("identity_int32")
    index = client.get_model_repository_index()
    reasons = (
        [r.reason for r in index.models]
        if protocol == "grpc"
        else [r.get("reason", "") for r in index]
    )
    assert reasons and not any(str(repository.resolve()) in reason for reason in reasons)
    # A missing artifact is reported by its place in the repository.
    shutil.rmtree(repository / "identity_int32" / "1")
    (repository / "identity_int32" / "1").mkdir()
    with pytest.raises(InferenceServerException) as info:
        client.load_model("identity_int32")
    assert "identity_int32/1/model.onnx is missing" in info.value.message()
    assert str(repository.resolve()) not in info.value.message()
