"""The response cache through the unmodified tritonclient: hits are answered without a
run (execution_count stays), counted in statistics and metrics; models whose answers
depend on more than the request refuse it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from models import digits, python_models
from models.digits import held_out

CACHED = "\nresponse_cache { enable: true }\n"
PIPELINE = ("digits_preprocess", "digits_postprocess", "digits_pipeline")


def enable_cache(repository: Path, *names: str) -> Path:
    """The named models of `repository` with response_cache enabled in their configs."""
    for name in names:
        config = repository / name / "config.pbtxt"
        config.write_text(config.read_text() + CACHED)
    return repository


def simple_inputs(mod, offset: int):
    a = np.arange(16, dtype=np.int32).reshape(1, 16) + offset
    b = np.ones((1, 16), dtype=np.int32)
    inputs = [
        mod.InferInput("INPUT0", [1, 16], "INT32"),
        mod.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a + b


def stats_of(client, protocol: str, model: str) -> tuple[int, int, int, int]:
    """execution_count, inference_count (hits left out, as Triton), cache hits, misses."""
    if protocol == "http":
        row = client.get_inference_statistics(model)["model_stats"][0]
        inference = row["inference_stats"]
        return (row["execution_count"], row["inference_count"],
                inference["cache_hit"]["count"], inference["cache_miss"]["count"])  # fmt: skip
    row = client.get_inference_statistics(model).model_stats[0]
    inference = row.inference_stats
    return (row.execution_count, row.inference_count,
            inference.cache_hit.count, inference.cache_miss.count)  # fmt: skip


@pytest.fixture
def cached_server(repository_copy, server_factory):
    repository = enable_cache(repository_copy("simple", "identity_int32", "accumulate"), "simple")
    return server_factory(repository, "--cache-config", "local,size=1048576")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_hits_are_answered_without_running_the_model(cached_server, protocol):
    mod = httpclient if protocol == "http" else grpcclient
    url = cached_server.http_url if protocol == "http" else cached_server.grpc_url
    client = mod.InferenceServerClient(url)
    for attempt in range(5):
        inputs, expected = simple_inputs(mod, 0)
        result = client.infer("simple", inputs, request_id=f"r{attempt}")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected)
        response = result.get_response()
        assert (response["id"] if protocol == "http" else response.id) == f"r{attempt}"
    assert stats_of(client, protocol, "simple") == (1, 1, 4, 1)  # one run, four hits
    inputs, expected = simple_inputs(mod, 100)  # other inputs: a miss, and a run
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), expected)
    assert stats_of(client, protocol, "simple") == (2, 2, 4, 2)
    # Asking for one output is another question, with its own answer
    only = [mod.InferRequestedOutput("OUTPUT1")]
    answer = client.infer("simple", simple_inputs(mod, 0)[0], outputs=only)
    assert answer.as_numpy("OUTPUT0") is None
    assert stats_of(client, protocol, "simple") == (3, 3, 4, 3)
    # A model without response_cache in its config is never cached
    tensor = mod.InferInput("INPUT0", [1, 3], "INT32")
    tensor.set_data_from_numpy(np.array([[1, 2, 3]], dtype=np.int32))
    for _ in range(2):
        client.infer("identity_int32", [tensor])
    assert stats_of(client, protocol, "identity_int32") == (2, 2, 0, 0)


def test_the_cache_shows_in_metrics(cached_server):
    client = httpclient.InferenceServerClient(cached_server.http_url)
    for _ in range(3):
        client.infer("simple", simple_inputs(httpclient, 7)[0])
    text = httpx.get(f"http://127.0.0.1:{cached_server.metrics_port}/metrics").text
    assert 'nv_cache_num_hits_per_model{model="simple",version="1"} 2' in text
    assert 'nv_cache_num_misses_per_model{model="simple",version="1"} 1' in text
    assert "nv_cache_num_entries 1" in text
    assert "nv_cache_num_lookups 3" in text


def test_a_sequence_model_refuses_the_cache_at_load(repository_copy, server_factory):
    repository = enable_cache(repository_copy("accumulate"), "accumulate")
    server = server_factory(
        repository, "--model-control-mode", "explicit", "--cache-config", "local,size=4096"
    )
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match="depends on the requests before it"):
        client.load_model("accumulate")


def test_without_a_server_cache_the_model_serves_uncached(repository_copy, server_factory):
    repository = enable_cache(repository_copy("simple"), "simple")
    server = server_factory(repository)
    client = httpclient.InferenceServerClient(server.http_url)
    for _ in range(2):
        client.infer("simple", simple_inputs(httpclient, 0)[0])
    assert stats_of(client, "http", "simple") == (2, 2, 0, 0)
    assert "start it with --cache-config local,size=BYTES" in server.log()


def test_a_bad_cache_config_is_refused_by_name(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--model-repository", str(tmp_path),
         "--cache-config", "redis,host=x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "only the 'local' cache is built in" in result.stderr


def test_an_ensemble_answers_from_its_own_cache_before_any_member_runs(
    example_repository, tmp_path, server_factory
):
    repository = tmp_path / "repository"
    shutil.copytree(example_repository / digits.NAME, repository / digits.NAME)
    python_models.build(repository, PIPELINE)
    enable_cache(repository, "digits_pipeline", digits.NAME)  # the top level and a member
    server = server_factory(repository, "--cache-config", "local,size=1048576")
    client = httpclient.InferenceServerClient(server.http_url)
    pixels, _ = held_out()
    images = np.round(pixels[:2] * (255.0 / 16.0)).astype(np.uint8).reshape(2, 8, 8)
    labels = []
    for image in (images[:1], images[:1], images[1:]):
        tensor = httpclient.InferInput("IMAGE", [1, 8, 8], "UINT8")
        tensor.set_data_from_numpy(image)
        labels.append(int(client.infer("digits_pipeline", [tensor]).as_numpy("LABEL")[0, 0]))
    assert labels[0] == labels[1]
    assert stats_of(client, "http", "digits_pipeline")[2:] == (1, 2)  # one hit, two misses
    # The hit ran no member: the classifier and the preprocess ran for the two misses only
    assert stats_of(client, "http", digits.NAME)[0] == 2
    assert stats_of(client, "http", "digits_preprocess")[0] == 2


def test_an_ensemble_with_a_sequence_member_refuses_the_cache(repository_copy, server_factory):
    repository = repository_copy("accumulate")
    (repository / "chain").mkdir()
    (repository / "chain" / "config.pbtxt").write_text(
        """name: "chain"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ 1 ] } ]
ensemble_scheduling { step [ { model_name: "accumulate" model_version: -1
  input_map { key: "INPUT" value: "X" } output_map { key: "OUTPUT" value: "Y" } } ] }
response_cache { enable: true }
"""
    )
    server = server_factory(
        repository, "--model-control-mode", "explicit", "--cache-config", "local,size=4096"
    )
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match="member 'accumulate' answers by more"):
        client.load_model("chain")


def test_a_reloaded_model_never_answers_from_its_last_load(repository_copy, server_factory):
    repository = enable_cache(repository_copy("simple"), "simple")
    server = server_factory(
        repository, "--model-control-mode", "explicit", "--load-model", "simple",
        "--cache-config", "local,size=1048576",
    )  # fmt: skip
    client = httpclient.InferenceServerClient(server.http_url)
    for _ in range(2):
        client.infer("simple", simple_inputs(httpclient, 0)[0])
    assert stats_of(client, "http", "simple") == (1, 1, 1, 1)
    client.load_model("simple")  # the same version again: its files may have changed
    client.infer("simple", simple_inputs(httpclient, 0)[0])
    assert stats_of(client, "http", "simple") == (1, 1, 0, 1)  # ran, not answered from before
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    assert "nv_cache_num_entries 1" in text  # the last load's answer went with it
