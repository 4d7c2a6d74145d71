"""The sequence batcher through a real gateway and the unmodified tritonclient: running sums
under the direct and oldest strategies with interleaved correlation ids (HTTP, gRPC and a
gRPC stream), the control values the model saw, idle sequences released, and the errors
Triton gives for a missing id, a sequence never started and too many live sequences."""

from __future__ import annotations

import importlib.util
import queue
import shutil
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from models import sequence
from tests.conftest import wait_until

# The shared models keep sequence.IDLE_US (5 s): their tests' requests must come within it.
# Only the idle-release test's own copy has a short limit; all that must beat it there is
# two back-to-back requests of one sequence.
IDLE = "accumulate_idle"
IDLE_US = 2_000_000
WINDOWED = "accumulate_windowed"
HAS_TORCH = importlib.util.find_spec("torch") is not None
TORCH_MODELS = [sequence.TORCH, sequence.TORCHSCRIPT] if HAS_TORCH else []


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.conftest import start_server

    repo = tmp_path_factory.mktemp("sequences") / "repository"
    sequence.build(repo)
    shutil.copytree(Path(__file__).parent / "python_models" / "py_counter", repo / "py_counter")
    # A copy with a long window: the oldest strategy waits for its preferred batch of 4
    # sequences however slowly the client's concurrent requests arrive.
    shutil.copytree(repo / sequence.OLDEST, repo / WINDOWED)
    text = (repo / WINDOWED / "config.pbtxt").read_text().replace(sequence.OLDEST, WINDOWED)
    text = text.replace(
        "max_queue_delay_microseconds: 2000", "max_queue_delay_microseconds: 500000"
    )
    (repo / WINDOWED / "config.pbtxt").write_text(text)
    shutil.copytree(repo / sequence.NAME, repo / IDLE)
    text = (repo / IDLE / "config.pbtxt").read_text().replace(sequence.NAME, IDLE)
    (repo / IDLE / "config.pbtxt").write_text(text.replace(str(sequence.IDLE_US), str(IDLE_US)))
    if TORCH_MODELS:  # the state and controls through a PyTorch backend too
        sequence.build_torch_export(repo)
        sequence.build_torchscript(repo)
    process = start_server(repo, log_dir=tmp_path_factory.mktemp("sequence-logs"))
    yield process
    assert process.stop() == 0, process.log()


def value(module, number: int, name: str = "INPUT"):
    tensor = module.InferInput(name, [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[number]], dtype=np.int32))
    return tensor


def step(client, model: str, sequence_id, number: int, start=False, end=False):
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    name = "input" if model == sequence.TORCH else "INPUT"  # torch.export's lower case
    return client.infer(
        model, [value(module, number, name)], sequence_id=sequence_id,
        sequence_start=start, sequence_end=end,
    )  # fmt: skip


@pytest.mark.parametrize("model", [sequence.NAME, sequence.OLDEST, *TORCH_MODELS])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_interleaved_sequences_keep_their_own_sums(server, model, protocol):
    client = (
        httpclient.InferenceServerClient(server.http_url)
        if protocol == "http"
        else grpcclient.InferenceServerClient(server.grpc_url)
    )
    ids = [11, 2**40 + 5, 12]  # its CORRID control is UINT64: numeric ids
    sums = {i: 0 for i in ids}
    for round_ in range(4):
        for k, sequence_id in enumerate(ids):
            number = 10 * k + round_ + 1
            sums[sequence_id] += number
            result = step(client, model, sequence_id, number, start=round_ == 0, end=round_ == 3)
            assert int(result.as_numpy("OUTPUT")[0, 0]) == sums[sequence_id]
            start, end, ready = result.as_numpy("CONTROLS")[0].tolist()
            assert (start, end, ready) == (int(round_ == 0), int(round_ == 3), 1)
            corrid = int(result.as_numpy("CORRID_OUT")[0, 0])
            assert corrid == sequence_id
    # Ended: a request without START is refused, in Triton's words.
    with pytest.raises(InferenceServerException) as failed:
        step(client, model, ids[0], 1)
    assert "must specify the START flag on the first request of the sequence" in (
        failed.value.message()
    )


def test_a_stream_carries_sequences(server):
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for round_ in range(3):
            for sequence_id in (101, 102):
                grpc.async_stream_infer(
                    sequence.NAME, [value(grpcclient, sequence_id)],
                    request_id=f"{sequence_id}-{round_}", sequence_id=sequence_id,
                    sequence_start=round_ == 0, sequence_end=round_ == 2,
                )  # fmt: skip
        got = {}
        for _ in range(6):
            result, error = answers.get(timeout=30)
            assert error is None, error
            got[result.get_response().id] = int(result.as_numpy("OUTPUT")[0, 0])
    finally:
        grpc.stop_stream()
    for sequence_id in (101, 102):
        assert [got[f"{sequence_id}-{r}"] for r in range(3)] == [
            sequence_id * (r + 1) for r in range(3)
        ]


def test_concurrent_sequences_share_batches(server):
    http = httpclient.InferenceServerClient(server.http_url, concurrency=16)
    before = http.get_inference_statistics(WINDOWED)["model_stats"][0]
    ids = list(range(1000, 1008))
    for i in ids:
        step(http, WINDOWED, i, 0, start=True)
    for round_ in range(5):
        sent = [
            http.async_infer(
                WINDOWED,
                [value(httpclient, 1)],
                sequence_id=i,
                sequence_end=round_ == 4,
            )  # fmt: skip
            for i in ids
        ]
        for pending in sent:
            assert int(pending.get_result().as_numpy("OUTPUT")[0, 0]) == round_ + 1
    after = http.get_inference_statistics(WINDOWED)["model_stats"][0]
    requests = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert requests == 48 and executions < requests  # rows of several sequences per batch


def test_errors_in_tritons_words(server):
    http = httpclient.InferenceServerClient(server.http_url)
    tensor = value(httpclient, 1)
    with pytest.raises(InferenceServerException) as failed:
        http.infer(sequence.NAME, [tensor])  # no sequence_id
    assert "must specify a non-zero or non-empty correlation ID" in failed.value.message()
    assert failed.value.status() == "400"
    with pytest.raises(InferenceServerException) as failed:
        step(http, sequence.NAME, 424242, 1)  # never started
    assert failed.value.status() == "400"
    with pytest.raises(InferenceServerException) as failed:
        step(http, sequence.NAME, "user-7", 1, start=True)  # a string for a UINT64 CORRID
    assert failed.value.status() == "400" and "numeric correlation ids" in failed.value.message()
    # The direct strategy has max_batch_size slots on its one instance: one more is refused.
    started = [5000 + i for i in range(sequence.MAX_BATCH_SIZE)]
    try:
        for i in started:
            step(http, sequence.NAME, i, 1, start=True)
        with pytest.raises(InferenceServerException) as failed:
            step(http, sequence.NAME, 6000, 1, start=True)
        assert failed.value.status() == "503"
        assert "live sequences" in failed.value.message()
    finally:
        for i in started:
            step(http, sequence.NAME, i, 0, end=True)


def test_an_idle_sequence_is_released(server):
    http = httpclient.InferenceServerClient(server.http_url)
    assert int(step(http, IDLE, 777, 5, start=True).as_numpy("OUTPUT")[0, 0]) == 5
    assert int(step(http, IDLE, 777, 5).as_numpy("OUTPUT")[0, 0]) == 10
    # The rest of the direct strategy's slots, taken after 777 was last seen: a released slot
    # shows as a new sequence let in, and whenever any is idle, 777 (seen first) is too.
    # Refused STARTs touch no live sequence, so polling them cannot keep 777 alive; were
    # idle sequences never released, the slots would stay full and the wait fail.
    for i in range(1, sequence.MAX_BATCH_SIZE):
        step(http, IDLE, 777 + i, 1, start=True)

    def a_slot_freed() -> bool:
        try:
            step(http, IDLE, 9999, 1, start=True)
        except InferenceServerException as refused:
            assert "live sequences" in refused.message(), refused
            return False
        return True

    wait_until(a_slot_freed, 60, "an idle sequence released", interval_s=0.1)
    with pytest.raises(InferenceServerException) as failed:
        step(http, IDLE, 777, 5)
    assert "must specify the START flag" in failed.value.message()


def test_a_python_model_sees_its_requests_correlation_ids_and_controls(server):
    http = httpclient.InferenceServerClient(server.http_url, concurrency=8)
    for round_ in range(3):
        sent = {
            key: http.async_infer(
                "py_counter",
                [value(httpclient, number)],
                sequence_id=key,
                sequence_start=round_ == 0,
                sequence_end=round_ == 2,
            )  # fmt: skip
            for key, number in (("x", 1), (31, 10), ("y", 100))
        }
        for key, number in (("x", 1), (31, 10), ("y", 100)):
            result = sent[key].get_result()
            assert int(result.as_numpy("OUTPUT")[0, 0]) == number * (round_ + 1)
            assert result.as_numpy("CONTROLS")[0].tolist() == [int(round_ == 0), int(round_ == 2)]
