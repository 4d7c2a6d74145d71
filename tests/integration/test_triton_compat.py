"""What clients written for Triton look for, through the unmodified tritonclient: the
server's name, Triton's error texts, and a repository with no config.pbtxt at all."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from models import identity, python_models, simple
from tests.conftest import both_clients, write_ensemble_cycle


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.conftest import start_server

    repo = tmp_path_factory.mktemp("compat") / "repository"
    simple.build(repo)
    identity.build_one(repo, "fp32")
    python_models.build(repo, ("py_strings",))
    # Triton completes them all (a Python model through its own auto_complete_config).
    for name in ("simple", "identity_fp32", "py_strings"):
        bare = repo / f"{name}_bare"
        shutil.copytree(repo / name, bare)
        (bare / "config.pbtxt").unlink()
    write_ensemble_cycle(repo)  # loaded at start with the rest: refused, not hung
    (repo / "broken").mkdir()
    (repo / "broken" / "config.pbtxt").write_text('backend: "python"\n')  # no version
    process = start_server(
        repo, "--server-name", "triton", "--model-control-mode", "explicit",
        "--load-model", "*", log_dir=tmp_path_factory.mktemp("compat-logs"),
    )  # fmt: skip
    yield process
    assert process.stop() == 0, process.log()


def test_the_server_name_is_the_one_asked_for(server):
    for client in both_clients(server):
        metadata = client.get_server_metadata()
        name = metadata["name"] if isinstance(metadata, dict) else metadata.name
        assert name == "triton"


def test_an_unknown_model_in_tritons_words(server):
    for client in both_clients(server):
        with pytest.raises(InferenceServerException) as failed:
            client.get_model_metadata("nope")
        assert failed.value.message().startswith("Request for unknown model: 'nope' is not found")
        with pytest.raises(InferenceServerException) as failed:
            client.get_model_metadata("simple", "7")
        assert "Request for unknown model: 'simple' version 7 is not found" in (
            failed.value.message()
        )


def test_a_failed_load_in_tritons_words(server):
    for client in both_clients(server):
        with pytest.raises(InferenceServerException) as failed:
            client.load_model("broken")
        assert failed.value.message().startswith("failed to load 'broken'")


def test_models_without_a_config_serve_with_a_completed_one(server):
    http = httpclient.InferenceServerClient(server.http_url)
    config = http.get_model_config("simple_bare")
    assert config["platform"] == "onnxruntime_onnx"
    assert [t["name"] for t in config["input"]] == ["INPUT0", "INPUT1"]
    values = np.ones((1, 4), np.float32)
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(values)
    result = http.infer("identity_fp32_bare", [tensor])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), values)
    config = http.get_model_config("py_strings_bare")
    assert config["platform"] == "python" and config["max_batch_size"] == 8
    text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"abc"]], dtype=object))
    assert http.infer("py_strings_bare", [text]).as_numpy("UPPER").tolist() == [[b"ABC"]]


def test_a_config_override_may_leave_the_platform_out(server):
    http = httpclient.InferenceServerClient(server.http_url)
    override = {"max_batch_size": 8, "dynamic_batching": {}}
    http.load_model("identity_fp32_bare", config=json.dumps(override))
    config = http.get_model_config("identity_fp32_bare")
    assert config["platform"] == "onnxruntime_onnx" and "dynamic_batching" in config


def test_input_errors_in_tritons_words(server):
    for client in both_clients(server):
        module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
        first = module.InferInput("INPUT0", [1, 16], "INT32")
        first.set_data_from_numpy(np.zeros((1, 16), np.int32))
        with pytest.raises(InferenceServerException) as failed:
            client.infer("simple", [first])
        assert (
            "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], "
            "but missing required input(s) ['INPUT1']. Please provide all required input(s)."
        ) in failed.value.message()
        pair = [module.InferInput(n, [2, 8], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in pair:
            tensor.set_data_from_numpy(np.zeros((2, 8), np.int32))
        with pytest.raises(InferenceServerException) as failed:
            client.infer("simple", pair)
        assert (
            "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [2,8]"
        ) in failed.value.message()


def test_ensembles_that_contain_each_other_did_not_hang_the_start(server):
    http = httpclient.InferenceServerClient(server.http_url)
    states = {row["name"]: row for row in http.get_model_repository_index()}
    for name in ("cycle_a", "cycle_b"):
        assert states[name]["state"] == "UNAVAILABLE"
        assert "must not form a cycle" in states[name]["reason"]
