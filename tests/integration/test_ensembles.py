"""Ensembles through a real gateway and the unmodified tritonclient: Python preprocess ->
ONNX `digits` -> Python postprocess, whose middle model batches under load; loading an
ensemble loads its members; a failing step is named; a wrong section is refused."""

from __future__ import annotations

import queue
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from models import digits, python_models
from models.digits import held_out
from tests.conftest import both_clients, infer_concurrently, write_ensemble_cycle

PIPELINE = ("digits_preprocess", "digits_postprocess", "digits_pipeline")


@pytest.fixture(scope="module")
def server(example_repository, tmp_path_factory):
    from tests.conftest import start_server

    repo = tmp_path_factory.mktemp("ensembles") / "repository"
    # The session's digits (the same build, already trained) rather than training it again.
    shutil.copytree(example_repository / digits.NAME, repo / digits.NAME)
    with open(repo / "digits" / "config.pbtxt", "a") as config:  # the middle model batches
        config.write("\ndynamic_batching { max_queue_delay_microseconds: 2000 }\n")
    python_models.build(repo, PIPELINE)
    broken = repo / "broken_pipeline"  # its classifier step reads a tensor nobody writes
    shutil.copytree(repo / "digits_pipeline", broken)
    text = (broken / "config.pbtxt").read_text().replace("digits_pipeline", "broken_pipeline")
    text = text.replace('key: "pixels" value: "pixels"', 'key: "pixels" value: "pxls"')
    (broken / "config.pbtxt").write_text(text)
    optional = repo / "optional_pipeline"  # its IMAGE may be left out, and then?
    shutil.copytree(repo / "digits_pipeline", optional)
    text = (optional / "config.pbtxt").read_text().replace("digits_pipeline", "optional_pipeline")
    text = text.replace(
        "data_type: TYPE_UINT8, dims: [ 8, 8 ] }",
        "data_type: TYPE_UINT8, dims: [ 8, 8 ], optional: true }",
    )
    assert "optional: true" in text
    (optional / "config.pbtxt").write_text(text)
    write_ensemble_cycle(repo)
    process = start_server(
        repo, "--model-control-mode", "explicit", "--load-model", "digits_pipeline",
        log_dir=tmp_path_factory.mktemp("ensemble-logs"),
    )  # fmt: skip
    yield process
    assert process.stop() == 0, process.log()


def images_and_labels(count: int) -> tuple[np.ndarray, np.ndarray]:
    pixels, labels = held_out()
    images = np.round(pixels[:count] * (255.0 / 16.0)).astype(np.uint8).reshape(count, 8, 8)
    return images, labels[:count]


def image_input(module, images: np.ndarray):
    tensor = module.InferInput("IMAGE", list(images.shape), "UINT8")
    tensor.set_data_from_numpy(images)
    return tensor


def test_loading_the_ensemble_loaded_its_members(server):
    http = httpclient.InferenceServerClient(server.http_url)
    ready = {
        row["name"] for row in http.get_model_repository_index() if row.get("state") == "READY"
    }
    assert {"digits", *PIPELINE} <= ready
    config = http.get_model_config("digits_pipeline")
    assert config["platform"] == "ensemble"
    assert [s["model_name"] for s in config["ensemble_scheduling"]["step"]] == [
        "digits_preprocess", "digits", "digits_postprocess",
    ]  # fmt: skip


def test_the_pipeline_classifies_over_http_grpc_and_a_stream(server):
    images, labels = images_and_labels(32)
    for client in both_clients(server):
        module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
        result = client.infer("digits_pipeline", [image_input(module, images)])
        predicted = result.as_numpy("LABEL")[:, 0]
        assert predicted.shape == (32,) and result.as_numpy("CONFIDENCE").dtype == np.float32
        assert np.mean(predicted == labels) > 0.9
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i in range(4):
            grpc.async_stream_infer(
                "digits_pipeline", [image_input(grpcclient, images[i : i + 1])], request_id=str(i)
            )
        got = {}
        for _ in range(4):
            result, error = answers.get(timeout=30)
            assert error is None, error
            got[result.get_response().id] = int(result.as_numpy("LABEL")[0, 0])
    finally:
        grpc.stop_stream()
    http = both_clients(server)[0]
    batch = http.infer("digits_pipeline", [image_input(httpclient, images[:4])])
    assert [got[str(i)] for i in range(4)] == batch.as_numpy("LABEL")[:, 0].tolist()


def test_the_middle_model_batches_under_concurrent_load(server):
    http = httpclient.InferenceServerClient(server.http_url)
    before = http.get_inference_statistics("digits")["model_stats"][0]
    images, labels = images_and_labels(128)
    sent = [[image_input(httpclient, images[i : i + 1])] for i in range(128)]
    results = infer_concurrently(server.http_url, "digits_pipeline", sent)
    predicted = np.array([result.as_numpy("LABEL")[0, 0] for result in results])
    assert np.mean(predicted == labels) > 0.9
    after = http.get_inference_statistics("digits")["model_stats"][0]
    requests = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert requests == 128 and executions < requests
    ensemble = http.get_inference_statistics("digits_pipeline")["model_stats"][0]
    assert ensemble["inference_stats"]["success"]["count"] >= 128


def test_a_failing_step_fails_the_request_with_the_step_named(server):
    http = httpclient.InferenceServerClient(server.http_url)
    images, _ = images_and_labels(1)
    http.unload_model("digits")
    try:
        assert not http.is_model_ready("digits_pipeline")  # ready when its members are
        with pytest.raises(InferenceServerException) as failed:
            http.infer("digits_pipeline", [image_input(httpclient, images)])
        assert "step 1 (model 'digits') failed" in failed.value.message()
        assert failed.value.status() in ("404", "503")
    finally:
        http.load_model("digits")
    assert http.infer("digits_pipeline", [image_input(httpclient, images)]).as_numpy(
        "LABEL"
    ).shape == (1, 1)


def test_a_wrong_section_is_refused_at_load_with_the_reason(server):
    http = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as failed:
        http.load_model("broken_pipeline")
    assert "failed to load 'broken_pipeline'" in failed.value.message()
    assert "step 1 (model 'digits') reads 'pxls'" in failed.value.message()


def test_ensembles_that_contain_each_other_are_refused_not_hung(server):
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    with pytest.raises(InferenceServerException) as failed:
        http.load_model("cycle_a")
    assert "must not form a cycle" in failed.value.message()
    assert "cycle_a -> cycle_b -> cycle_a" in failed.value.message()
    assert http.is_server_live()


def test_a_step_whose_input_the_request_left_out_fails_it_not_the_server(server):
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    http.load_model("optional_pipeline")
    with pytest.raises(InferenceServerException) as failed:
        http.infer("optional_pipeline", [])
    assert failed.value.status() == "400"
    assert "reads IMAGE, which this request did not give" in failed.value.message()
    assert http.is_server_live()


def ready_models(http) -> set[str]:
    return {row["name"] for row in http.get_model_repository_index() if row.get("state") == "READY"}


def test_unload_dependents_takes_the_members_nothing_else_uses(server):
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert "model_repository(unload_dependents)" in http.get_server_metadata()["extensions"]
    http.load_model("optional_pipeline")  # made of the same three models as digits_pipeline
    try:
        # Its members stay: digits_pipeline, loaded, still uses them.
        grpc.unload_model("optional_pipeline", unload_dependents=True)
        assert {"digits", *PIPELINE} <= ready_models(http)
        assert "optional_pipeline" not in ready_models(http)
        http.unload_model("digits_pipeline", unload_dependents=True)
        assert not {"digits", *PIPELINE} & ready_models(http)
    finally:
        http.load_model("digits_pipeline")  # and with it its members, for the tests after
    assert {"digits", *PIPELINE} <= ready_models(http)


def test_unload_without_dependents_leaves_the_members(server):
    http = httpclient.InferenceServerClient(server.http_url, network_timeout=60)
    http.load_model("optional_pipeline")
    http.unload_model("optional_pipeline")
    assert {"digits", *PIPELINE} <= ready_models(http)
    assert "optional_pipeline" not in ready_models(http)


def test_unload_dependents_must_be_a_boolean(server):
    import httpx

    answer = httpx.post(
        f"http://{server.http_url}/v2/repository/models/optional_pipeline/unload",
        json={"parameters": {"unload_dependents": "yes"}},
    )
    assert answer.status_code == 400
    assert "'unload_dependents' must be true or false" in answer.json()["error"]
