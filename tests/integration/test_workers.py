"""Model instances in worker processes, through a real gateway and the unmodified tritonclient:
the same answers as threads, crash and hang recovery, and nothing left behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from test_tritonclient import IDENTITY_DATA
from tritonclient.utils import InferenceServerException

from models.digits import held_out


def in_processes(repository: Path, *names: str, **parameters: str) -> Path:
    """Give the named models of a repository copy worker-process instances."""
    settings = {"execution": "process", **parameters}
    lines = "".join(
        f'\nparameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'
        for key, value in settings.items()
    )
    for name in names:
        with open(repository / name / "config.pbtxt", "a") as config:
            config.write(lines + "\n")
    return repository


def workers_of(server) -> dict[str, int]:
    """Instance name -> pid of the server's worker processes."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == server.process.pid and b"workers.main" in argv:
            found[argv[-2].decode()] = int(entry.name)
    return found


def wait_for(condition, timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def metrics(server) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics") as reply:
        return reply.read().decode()


def pending(server, model: str) -> int:
    """Requests the model has accepted and not yet answered (queued or running)."""
    prefix = f'nv_inference_pending_request_count{{model="{model}",version="1"}} '
    line = next(line for line in metrics(server).splitlines() if line.startswith(prefix))
    return int(float(line.removeprefix(prefix)))


def simple_request():
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    return inputs


def index_row(client, name: str) -> dict:
    return next(row for row in client.get_model_repository_index() if row["name"] == name)


@pytest.fixture
def process_server(repository_copy, server_factory):
    def start(*names: str, args: tuple[str, ...] = (), **parameters: str):
        repository = in_processes(repository_copy(*names), *names, **parameters)
        return server_factory(repository, *args)

    return start


IDENTITIES = [f"identity_{datatype.lower()}" for datatype in IDENTITY_DATA]


@pytest.fixture(scope="module")
def identities_in_processes(example_repository, tmp_path_factory):
    """digits and every identity in worker processes: one gateway (16 workers) for both
    protocols' test below, which only read from it."""
    from tests.conftest import start_server

    repository = tmp_path_factory.mktemp("in-processes") / "repository"
    for name in ("digits", *IDENTITIES):
        shutil.copytree(example_repository / name, repository / name)
    server = start_server(
        in_processes(repository, "digits", *IDENTITIES),
        log_dir=tmp_path_factory.mktemp("in-processes-logs"),
    )
    yield server
    assert server.stop() == 0, server.log()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_every_datatype_and_digits_same_as_threads(identities_in_processes, gateway, protocol):
    server = identities_in_processes
    assert set(workers_of(server)) == {f"{m}-1-0" for m in ("digits", *IDENTITIES)}
    mod = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    thread_url = gateway.http_url if protocol == "http" else gateway.grpc_url
    process, thread = mod.InferenceServerClient(url), mod.InferenceServerClient(thread_url)
    for datatype, data in IDENTITY_DATA.items():
        batch = np.repeat(data, 3, axis=0)
        tensor = mod.InferInput("INPUT0", list(batch.shape), datatype)
        tensor.set_data_from_numpy(batch)
        model = f"identity_{datatype.lower()}"
        out = process.infer(model, [tensor]).as_numpy("OUTPUT0")
        reference = thread.infer(model, [tensor]).as_numpy("OUTPUT0")
        assert out.dtype == reference.dtype, datatype
        if datatype == "BYTES":
            assert out.tolist() == reference.tolist() == batch.tolist()
        else:  # bit for bit, NaN included
            assert out.tobytes() == reference.tobytes() == batch.tobytes(), datatype
    empty = mod.InferInput("INPUT0", [1, 0], "FP32")  # zero-size tensors cross too
    empty.set_data_from_numpy(np.zeros((1, 0), np.float32))
    assert process.infer("identity_fp32", [empty]).as_numpy("OUTPUT0").shape == (1, 0)
    images, _ = held_out()
    tensor = mod.InferInput("pixels", list(images[:64].shape), "FP32")
    tensor.set_data_from_numpy(images[:64])
    out = process.infer("digits", [tensor]).as_numpy("probabilities")
    np.testing.assert_array_equal(out, thread.infer("digits", [tensor]).as_numpy("probabilities"))


def test_kill_9_fails_at_most_the_batch_in_flight(process_server):
    # Requests wait out the restart however slow this machine is (the default bound would
    # answer 503 past 5 s): this test counts failures. test_worker_deaths.py has the bound.
    server = process_server("mlp", "simple", worker_restart_wait_s="60")
    client = httpclient.InferenceServerClient(server.http_url, concurrency=1)
    features = np.random.default_rng(0).random((1, 784), dtype=np.float32)
    # Each answer with the phase its request was sent in: before the kill, after it,
    # or once mlp was READY again.
    results: dict[str, list[tuple[str, bool]]] = {"mlp": [], "simple": []}
    phase = ["before"]
    stop = threading.Event()

    def load(model: str) -> None:
        own = httpclient.InferenceServerClient(server.http_url)
        while not stop.is_set():
            if model == "mlp":
                tensor = httpclient.InferInput("INPUT0", [1, 784], "FP32")
                tensor.set_data_from_numpy(features)
                inputs = [tensor]
            else:
                inputs = simple_request()
            sent = phase[0]
            try:
                own.infer(model, inputs)
                results[model].append((sent, True))
            except InferenceServerException:
                results[model].append((sent, False))
        own.close()

    def answered(model: str, when: str) -> int:
        return sum(ok for sent, ok in results[model] if sent == when)

    clients = 8  # mlp's batches hold at most this many requests
    threads = [threading.Thread(target=load, args=("mlp",)) for _ in range(clients)]
    threads += [threading.Thread(target=load, args=("simple",)) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: answered("mlp", "before") and answered("simple", "before"),
                 what="both models under load")  # fmt: skip
        old_pid = workers_of(server)["mlp-1-0"]
        phase[0] = "killed"
        os.kill(old_pid, signal.SIGKILL)
        wait_for(lambda: workers_of(server).get("mlp-1-0", old_pid) != old_pid, what="a new worker")
        wait_for(lambda: client.is_model_ready("mlp"), what="mlp READY again")
        phase[0] = "ready"
        # mlp serves again, and simple served on through the kill and the restart.
        wait_for(lambda: answered("mlp", "ready") >= 10, what="mlp answers after the restart")
        wait_for(lambda: answered("simple", "killed") + answered("simple", "ready") >= 20,
                 what="simple answers after the kill")  # fmt: skip
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    mlp_failed = sum(not ok for _, ok in results["mlp"])
    # The batch in flight fails (none, when the kill falls between batches); no other does.
    assert mlp_failed <= clients, results["mlp"][-20:]
    assert all(ok for sent, ok in results["mlp"] if sent == "ready"), "failures after READY"
    assert all(ok for _, ok in results["simple"]), "the other model saw failures"
    assert "was killed by signal SIGKILL" in server.log()
    labels = 'model="mlp",version="1",instance="mlp-1-0"'
    text = metrics(server)
    assert f"accel_gateway_worker_deaths{{{labels}}} 1" in text
    assert f"accel_gateway_worker_up{{{labels}}} 1" in text


def test_a_hung_worker_is_killed_after_the_run_timeout(process_server):
    server = process_server("simple", worker_run_timeout_s="1")
    client = httpclient.InferenceServerClient(server.http_url)
    client.infer("simple", simple_request())
    pid = workers_of(server)["simple-1-0"]
    os.kill(pid, signal.SIGSTOP)  # a worker that never answers
    started = time.monotonic()
    with pytest.raises(InferenceServerException, match="run timeout") as failure:
        client.infer("simple", simple_request())
    assert 0.9 < time.monotonic() - started < 10
    assert failure.value.status() == "500"  # the backend's own failure, not the client's
    wait_for(lambda: client.is_model_ready("simple"), what="simple READY again")
    assert workers_of(server)["simple-1-0"] != pid
    np.testing.assert_array_equal(
        client.infer("simple", simple_request()).as_numpy("OUTPUT0"),
        2 * np.arange(16, dtype=np.int32).reshape(1, 16),
    )


def test_repeated_crashes_stop_restarting_until_loaded_again(process_server):
    server = process_server(
        "simple",
        args=("--model-control-mode", "explicit", "--load-model", "*"),
        worker_max_restarts="1",
    )
    client = httpclient.InferenceServerClient(server.http_url)
    first = workers_of(server)["simple-1-0"]
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: workers_of(server).get("simple-1-0", first) != first, what="a restart")
    wait_for(lambda: client.is_model_ready("simple"), what="simple READY")
    os.kill(workers_of(server)["simple-1-0"], signal.SIGKILL)  # a second crash in a row
    wait_for(lambda: "not restarted" in index_row(client, "simple")["reason"], what="retiring")
    row = index_row(client, "simple")
    assert row["state"] == "UNAVAILABLE"
    assert "crashed 2 times in a row" in row["reason"]
    assert not client.is_model_ready("simple")
    with pytest.raises(InferenceServerException, match="no instance left") as failure:
        client.infer("simple", simple_request())
    assert failure.value.status() == "503"
    assert "simple-1-0" not in workers_of(server)
    client.load_model("simple")
    assert client.is_model_ready("simple")
    client.infer("simple", simple_request())


def _memfd_mapped(pid: int) -> bool:
    """Whether the process maps a memfd (a worker's arena, workers/arena.py)."""
    return "/memfd:" in Path(f"/proc/{pid}/maps").read_text()


def _shm_held(pids: list[int]) -> set[str]:
    """The /dev/shm objects the processes `pids` have mapped or open: what a crash would
    leave behind. (Not a listing of /dev/shm before and after: other tests' servers, in
    parallel, add and remove their own there.)"""
    held = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                if "/dev/shm/" in line:
                    held.add(line[line.index("/dev/shm/") :].removesuffix(" (deleted)"))
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("/dev/shm/"):
                        held.add(target.removesuffix(" (deleted)"))
    return held


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie that nobody has reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_no_worker_or_shared_memory_left_after_stop_or_a_gateway_crash(
    repository_copy, server_factory
):
    repository = in_processes(
        repository_copy("simple", "identity_bytes"), "simple", "identity_bytes"
    )
    server = server_factory(repository)
    client = httpclient.InferenceServerClient(server.http_url)
    client.infer("simple", simple_request())
    pids = list(workers_of(server).values())
    assert len(pids) == 2
    # The arenas are memfds, freed with the last process that maps them: no name to leak.
    assert all(_memfd_mapped(pid) for pid in pids), "no arena found: the scan proves nothing"
    assert _shm_held([server.process.pid, *pids]) == set()
    assert server.stop() == 0
    assert not any(alive(pid) for pid in pids), "a worker outlived the gateway"

    crashed = server_factory(repository)
    pids = list(workers_of(crashed).values())
    assert len(pids) == 2
    assert all(_memfd_mapped(pid) for pid in pids)
    assert _shm_held([crashed.process.pid, *pids]) == set()
    crashed.process.kill()  # the gateway itself dies: its workers notice and exit
    crashed.process.wait()
    wait_for(
        lambda: not any(alive(pid) for pid in pids),
        timeout_s=10,
        what="the workers of a killed gateway to exit",
    )


def test_a_cancelled_caller_does_not_stop_the_run_timeout(process_server):
    server = process_server("simple", worker_run_timeout_s="1")
    client = httpclient.InferenceServerClient(server.http_url)
    client.infer("simple", simple_request())
    pid = workers_of(server)["simple-1-0"]
    os.kill(pid, signal.SIGSTOP)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    with pytest.raises(InferenceServerException, match="Deadline"):
        grpc.infer("simple", inputs, client_timeout=0.3)  # the caller gives up first
    wait_for(lambda: workers_of(server).get("simple-1-0", pid) != pid, what="the hung worker's end")
    wait_for(lambda: client.is_model_ready("simple"), what="simple READY again")
    client.infer("simple", simple_request())


def test_an_idle_worker_death_and_queue_timeouts_with_dynamic_batching(
    repository_copy, server_factory
):
    repository = in_processes(
        repository_copy("mlp"), "mlp", worker_run_timeout_s="3", worker_restart_wait_s="60"
    )
    config = repository / "mlp" / "config.pbtxt"
    policy = "default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 300000 }"
    text = config.read_text().replace("dynamic_batching {", "dynamic_batching { " + policy, 1)
    config.write_text(text)
    server = server_factory(repository)
    client = httpclient.InferenceServerClient(server.http_url, concurrency=2)
    tensor = httpclient.InferInput("INPUT0", [1, 784], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 784), np.float32))
    client.infer("mlp", [tensor])
    # A worker that dies between batches fails nothing: the next batch waits for its successor.
    pid = workers_of(server)["mlp-1-0"]
    os.kill(pid, signal.SIGKILL)
    labels = 'model="mlp",version="1",instance="mlp-1-0"'
    wait_for(lambda: f"accel_gateway_worker_deaths{{{labels}}} 1" in metrics(server),
             what="the gateway to see the death")  # fmt: skip
    client.infer("mlp", [tensor])
    # While the one instance is stuck on a hung worker, a queued request still times out
    # (its 300 ms in the queue, not the stuck batch's 3 s run timeout: the messages say).
    os.kill(workers_of(server)["mlp-1-0"], signal.SIGSTOP)
    stuck = client.async_infer("mlp", [tensor])
    wait_for(lambda: pending(server, "mlp") == 1, what="the stuck request to arrive")
    with pytest.raises(InferenceServerException, match="timed out in the queue"):
        client.infer("mlp", [tensor])
    with pytest.raises(InferenceServerException, match="run timeout"):
        stuck.get_result()


def test_unloading_a_model_with_a_hung_batch_answers_it(process_server):
    server = process_server(
        "simple",
        args=("--model-control-mode", "explicit", "--load-model", "simple", "--drain-seconds", "3"),
    )
    client = httpclient.InferenceServerClient(server.http_url, concurrency=2)
    client.infer("simple", simple_request())
    pid = workers_of(server)["simple-1-0"]
    os.kill(pid, signal.SIGSTOP)
    stuck = client.async_infer("simple", simple_request())
    wait_for(lambda: pending(server, "simple") == 1, what="the stuck request to arrive")
    unloading = threading.Thread(target=client.unload_model, args=("simple",))
    started = time.monotonic()
    unloading.start()
    with pytest.raises(InferenceServerException, match="unloaded"):
        stuck.get_result()
    unloading.join(timeout=60)
    # The unload waits the drain's 3 s for the stuck batch, not the worker's unload wait too.
    assert 3 <= time.monotonic() - started < 18
    wait_for(lambda: not alive(pid), what="the hung worker to be killed")
    assert server.stop() == 0


def test_sigterm_with_a_hung_batch_ends_cleanly_within_the_drain(process_server):
    """The server's drain waits for the stuck request; the unload after it gets only
    what is left, so the exit watchdog (drain + 15 s) never ends the process first."""
    server = process_server("simple", args=("--drain-seconds", "3"))
    client = httpclient.InferenceServerClient(server.http_url, concurrency=2)
    client.infer("simple", simple_request())
    os.kill(workers_of(server)["simple-1-0"], signal.SIGSTOP)
    stuck = client.async_infer("simple", simple_request())
    wait_for(lambda: pending(server, "simple") == 1, what="the stuck request to arrive")
    started = time.monotonic()
    assert server.stop(timeout_s=60) == 0  # 3: the watchdog's exit
    assert time.monotonic() - started < 15
    with pytest.raises(InferenceServerException):
        stuck.get_result()


def test_a_failed_restart_reports_repository_paths_only(repository_copy, server_factory):
    repository = in_processes(repository_copy("simple"), "simple", worker_max_restarts="1")
    server = server_factory(repository)
    client = httpclient.InferenceServerClient(server.http_url)
    artifact = repository / "simple" / "1" / "model.onnx"
    artifact.rename(artifact.with_suffix(".gone"))  # the restarted worker cannot load it
    os.kill(workers_of(server)["simple-1-0"], signal.SIGKILL)
    wait_for(lambda: "not restarted" in index_row(client, "simple")["reason"], what="retiring")
    reason = index_row(client, "simple")["reason"]
    with pytest.raises(InferenceServerException) as failure:
        client.infer("simple", simple_request())
    for message in (reason, failure.value.message()):
        assert "failed to restart" in message
        assert str(repository.resolve()) not in message, message
