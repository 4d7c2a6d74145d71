"""model_warmup through the unmodified tritonclient: a version reports READY only once its
samples ran on every instance, and a failing sample fails its load, named."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from test_workers import wait_for, workers_of
from tritonclient.utils import InferenceServerException

PY_WARM = Path(__file__).parent / "python_models" / "py_warm"


def py_warm(
    tmp_path: Path, name: str = "py_warm", value: int = 7, sleep_s: float = 0.5,
    change: tuple[str, str] = ("", ""),
) -> Path:  # fmt: skip
    """A repository of the py_warm model under `name`, its warm-up sample reading INPUT
    `value`, its config with `change` made."""
    repository = tmp_path / "repository"
    model_dir = repository / name
    shutil.copytree(PY_WARM, model_dir)
    config = (model_dir / "config.pbtxt").read_text()
    config = config.replace('name: "py_warm"', f'name: "{name}"').replace(*change)
    config = config.replace('string_value: "0.5"', f'string_value: "{sleep_s}"')
    (model_dir / "config.pbtxt").write_text(config)
    (model_dir / "warmup").mkdir()
    (model_dir / "warmup" / "seven").write_bytes(struct.pack("<i", value))
    return repository


def count_seen(client, protocol: str, model: str) -> int:
    mod = httpclient if protocol == "http" else grpcclient
    tensor = mod.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[1]], dtype=np.int32))
    return int(client.infer(model, [tensor]).as_numpy("OUTPUT")[0, 0])


def test_a_slow_warm_up_keeps_the_model_unready_until_every_instance_ran_it(
    tmp_path, server_factory
):
    repository = py_warm(tmp_path, sleep_s=0.5)  # 2 runs x 2 requests x 2 instances: 4 s
    server = server_factory(repository, "--model-control-mode", "explicit")
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
    loaded: list[BaseException | None] = []

    def load() -> None:
        try:
            client_for_load = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
            client_for_load.load_model("py_warm")
            loaded.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            loaded.append(exc)

    thread = threading.Thread(target=load)
    thread.start()
    seen_unready = 0
    while thread.is_alive():
        if not client.is_model_ready("py_warm"):
            seen_unready += 1
        time.sleep(0.1)
    thread.join()
    assert loaded == [None]
    assert seen_unready >= 10  # polled through the warm-up, never ready before its end
    assert client.is_model_ready("py_warm")
    # Whichever instance answers ran the sample count (2) times its batch (2 requests).
    for protocol in ("http", "grpc"):
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        for _ in range(4):
            assert count_seen(client if protocol == "http" else grpc, protocol, "py_warm") == 4
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    (count,) = [
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("accel_gateway_model_warmup_duration_seconds_count")
    ]
    assert count == 1
    (seconds,) = [
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("accel_gateway_model_warmup_duration_seconds_sum")
    ]
    assert seconds >= 4 * 0.5 * 2  # two instances, one after the other
    # The warm-up is no traffic: statistics count none of it.
    stats = client.get_inference_statistics("py_warm")["model_stats"][0]
    assert stats["inference_count"] == 8


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_failing_warm_up_fails_the_load_with_the_sample_named(tmp_path, server_factory, protocol):
    repository = py_warm(tmp_path, "refuses", value=13, sleep_s=0)
    server = server_factory(repository, "--model-control-mode", "explicit")
    client = (
        httpclient.InferenceServerClient(server.http_url)
        if protocol == "http"
        else grpcclient.InferenceServerClient(server.grpc_url)
    )
    with pytest.raises(InferenceServerException) as info:
        client.load_model("refuses")
    message = info.value.message()
    assert "warm-up sample 'sevens' failed on instance refuses-1-0" in message
    assert "this model refuses 13" in message
    assert not client.is_model_ready("refuses")
    # A file of the wrong size is refused before the model runs, and names the sample.
    (repository / "refuses" / "warmup" / "seven").write_bytes(b"\x07\x00")
    with pytest.raises(InferenceServerException) as info:
        client.load_model("refuses")
    assert "warm-up sample 'sevens', input 'INPUT': input_data_file 'seven' holds 2 bytes" in (
        info.value.message()
    )


def test_a_warm_up_file_outside_the_model_is_refused(tmp_path, server_factory):
    repository = py_warm(tmp_path, sleep_s=0, change=('"seven"', '"../../secret"'))
    config = repository / "py_warm" / "config.pbtxt"
    (tmp_path / "secret").write_bytes(struct.pack("<i", 7))
    server = server_factory(repository, "--model-control-mode", "explicit")
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException, match="contains '..'"):
        client.load_model("py_warm")
    link = repository / "py_warm" / "warmup" / "link"
    link.symlink_to(tmp_path / "secret")
    config.write_text(config.read_text().replace('"../../secret"', '"link"'))
    with pytest.raises(InferenceServerException, match="symbolic link"):
        client.load_model("py_warm")


def test_zero_and_random_samples_warm_an_onnx_model_and_a_sequence_model_warms_quietly(
    repository_copy, server_factory
):
    repository = repository_copy("simple", "accumulate")
    config = repository / "simple" / "config.pbtxt"
    config.write_text(
        config.read_text()
        + """
model_warmup {
  name: "zeros_and_random" batch_size: 8 count: 3
  inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } }
  inputs { key: "INPUT1" value: { data_type: TYPE_INT32 dims: [ 16 ] random_data: true } }
}
"""
    )
    server = server_factory(repository)
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.is_model_ready("simple") and client.is_model_ready("accumulate")
    config = client.get_model_config("simple")
    assert config["model_warmup"][0]["name"] == "zeros_and_random"
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    assert "accel_gateway_model_warmup_duration_seconds_count 1" in text
    # The memory warm-up of a sequence model feeds its controls and state: no warning that
    # START, END, READY, CORRID and ACC_IN are missing (the first scripts/serve printed two).
    assert "warm-up batch failed" not in server.log(), server.log()


def test_a_restarted_worker_runs_the_samples_before_it_serves(tmp_path, server_factory):
    repository = py_warm(tmp_path, sleep_s=0, change=("count: 2 } ]", "count: 1 } ]"))
    server = server_factory(repository)
    client = httpclient.InferenceServerClient(server.http_url)
    assert count_seen(client, "http", "py_warm") == 4
    os.kill(workers_of(server)["py_warm-1-0"], signal.SIGKILL)

    def answers() -> bool:
        try:
            return count_seen(client, "http", "py_warm") == 4
        except InferenceServerException:  # restarting: 503 meanwhile
            return False

    wait_for(answers, 60.0, "the restarted worker's answer")
    assert "a new worker process" in server.log()
