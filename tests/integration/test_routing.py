"""Router models with a real server and tritonclient: weights, sticky keys, weights
changed under load, shadows that agree, differ, crawl or fail, and variants whose
signatures differ."""

from __future__ import annotations

import json
import queue
import threading
from collections import Counter

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from models import simple
from models.mlp import write_mlp
from models.router import Variant, write_router
from tests.conftest import infer_concurrently, wait_until

ROWS = np.random.default_rng(0).random((1, 784), dtype=np.float32)
# The slow shadow's batch window: a copy is held at least this long from its batch's
# first, so copies sent within it pile up past the router's bound of 8 in flight.
SLOW_WINDOW_S = 0.5


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.conftest import start_server

    repo = tmp_path_factory.mktemp("routing") / "repository"
    for name, seed in (("eager", 1), ("twin", 1), ("other", 2), ("gone", 1)):
        write_mlp(repo, name, 32, dynamic_batching=False, seed=seed, intra_op_threads=1)
    write_mlp(
        repo, "slow", 32, dynamic_batching=True, max_queue_delay_us=int(SLOW_WINDOW_S * 1e6),
        seed=1, adaptive_window=False,  # each copy waits out the window: a slow shadow
    )  # fmt: skip
    simple.build(repo)
    write_router(repo, "ab", [Variant("eager", 3), Variant("twin", 1)], sticky_key="user")
    write_router(
        repo, "shadowed",
        [Variant("eager", 1), Variant("twin", shadow_rate=1.0), Variant("other", shadow_rate=1.0),
         Variant("slow", shadow_rate=1.0), Variant("gone", shadow_rate=0.5)],
        max_shadow_in_flight=8,
    )  # fmt: skip
    write_router(repo, "mismatch", [Variant("eager", 1), Variant("simple", 1)])
    process = start_server(
        repo, "--model-control-mode", "explicit", "--load-model", "ab",
        "--load-model", "shadowed",  # 256 streamed at once: one rise, not refused by default
        log_dir=tmp_path_factory.mktemp("routing-logs"),
    )  # fmt: skip
    yield process
    assert process.stop() == 0, process.log()


def http_input() -> httpclient.InferInput:
    tensor = httpclient.InferInput("INPUT0", [1, 784], "FP32")
    tensor.set_data_from_numpy(ROWS)
    return tensor


def variant_of(result) -> str:
    return result.get_response()["parameters"]["variant"]


def router_stats(server, name: str) -> dict:
    response = httpx.get(f"http://{server.http_url}/v2/models/{name}/stats")
    response.raise_for_status()
    (row,) = response.json()["model_stats"]
    return {v["model"]: v for v in row["variants"]}


def test_a_router_serves_its_variants_signature_under_its_own_name(server):
    client = httpclient.InferenceServerClient(server.http_url)
    metadata = client.get_model_metadata("ab")
    assert metadata["platform"] == "router"
    assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 784]}]
    result = client.infer("ab", [http_input()])
    assert result.get_response()["model_name"] == "ab"
    direct = client.infer(variant_of(result), [http_input()])
    assert np.array_equal(result.as_numpy("OUTPUT0"), direct.as_numpy("OUTPUT0"))
    # The variant is named in an HTTP header too.
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 784],
                        "data": ROWS.ravel().tolist()}]}  # fmt: skip
    answer = httpx.post(f"http://{server.http_url}/v2/models/ab/infer", json=body)
    assert answer.headers["accel-variant"] == answer.json()["parameters"]["variant"]


def test_weights_are_honoured_over_ten_thousand_streamed_requests(server):
    before = router_stats(server, "ab")
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("INPUT0", [1, 784], "FP32")
    tensor.set_data_from_numpy(ROWS)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    total = 10_000
    for i in range(total):
        client.async_stream_infer("ab", [tensor], request_id=str(i))
    counts: Counter = Counter()
    for _ in range(total):
        result, error = answers.get(timeout=60)
        assert error is None, error
        counts[result.get_response().parameters["variant"].string_param] += 1
    client.stop_stream()
    assert counts["eager"] == pytest.approx(0.75 * total, abs=0.02 * total)
    assert counts["twin"] == pytest.approx(0.25 * total, abs=0.02 * total)
    after = router_stats(server, "ab")
    for name in ("eager", "twin"):  # statistics count the same requests, none failed
        assert after[name]["requests"] - before[name]["requests"] == counts[name]
        assert after[name]["failures"] == 0


def test_the_same_sticky_key_always_reaches_the_same_variant(server):
    client = httpclient.InferenceServerClient(server.http_url)
    chosen = {}
    for user in (f"user-{i}" for i in range(40)):
        by_header = {variant_of(client.infer("ab", [http_input()], headers={"user": user}))
                     for _ in range(5)}  # fmt: skip
        by_parameter = {variant_of(client.infer("ab", [http_input()], parameters={"user": user}))
                        for _ in range(5)}  # fmt: skip
        assert len(by_header) == 1 and by_header == by_parameter, user
        chosen[user] = by_header.pop()
    assert set(chosen.values()) == {"eager", "twin"}  # the keys still spread
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("INPUT0", [1, 784], "FP32")
    tensor.set_data_from_numpy(ROWS)
    for user, variant in list(chosen.items())[:10]:  # gRPC metadata is a header too
        result = grpc.infer("ab", [tensor], headers={"user": user})
        assert result.get_response().parameters["variant"].string_param == variant


def test_weights_change_under_load_without_a_failed_request(server):
    stop = threading.Event()
    failures: list[Exception] = []
    served: Counter = Counter()
    lock = threading.Lock()
    between = 25  # requests answered before, between and after the changes

    def send() -> None:
        client = httpclient.InferenceServerClient(server.http_url)
        while not stop.is_set():
            try:
                variant = variant_of(client.infer("ab", [http_input()]))
                with lock:
                    served[variant] += 1
            except Exception as exc:  # every failure is a defect
                failures.append(exc)

    def total() -> int:
        with lock:
            return sum(served.values())

    def served_between() -> None:
        target = total() + between
        wait_until(lambda: total() >= target or failures, 30, lambda: str(served))

    senders = [threading.Thread(target=send) for _ in range(4)]
    for thread in senders:
        thread.start()
    admin = httpclient.InferenceServerClient(server.http_url)
    try:
        for eager, twin in ((1, 1), (0, 1), (1, 0), (1, 3)):
            served_between()  # under load: requests answered since the last change
            config = {
                "platform": "router",
                "routing": {
                    "sticky_key": "user",
                    "variant": [
                        {"model": "eager", "weight": eager},
                        {"model": "twin", "weight": twin},
                    ],
                },
            }
            admin.load_model("ab", config=json.dumps(config))
        served_between()
    finally:
        stop.set()
        for thread in senders:
            thread.join()
    assert failures == []
    assert total() >= 5 * between
    served.clear()
    for _ in range(40):  # the last weights hold
        served[variant_of(admin.infer("ab", [http_input()]))] += 1
    assert served["twin"] == pytest.approx(30, abs=2) and sum(served.values()) == 40
    admin.load_model("ab")  # back to the config on disk for the other tests


def test_shadows_never_fail_the_caller_and_their_agreement_is_counted(server):
    admin = httpclient.InferenceServerClient(server.http_url)
    admin.unload_model("gone")  # from now on every copy to it fails
    # 16 clients at once: the slow shadow's copies (each held for its window) pile up.
    results = infer_concurrently(server.http_url, "shadowed", [[http_input()] for _ in range(200)])
    assert {variant_of(result) for result in results} == {"eager"}
    expected = {"twin": 200, "other": 200, "slow": 200, "gone": 100}

    def every_copy_finished() -> bool:  # each taken copy counted once it finished
        stats = router_stats(server, "shadowed")
        return all(stats[n]["requests"] + stats[n]["dropped"] == expected[n] for n in expected)

    wait_until(every_copy_finished, 30, lambda: str(router_stats(server, "shadowed")))
    stats = router_stats(server, "shadowed")
    twin, other, slow, gone = (stats[n] for n in ("twin", "other", "slow", "gone"))
    assert stats["eager"]["requests"] == 200 and stats["eager"]["failures"] == 0
    assert twin["compared"] > 0
    assert twin["within_tolerance"] == twin["compared"] == twin["top1_agreed"]
    assert twin["max_abs_error"] == 0
    assert other["compared"] > 0 and other["within_tolerance"] == 0
    assert other["max_abs_error"] > 0
    assert gone["failures"] > 0 and gone["compared"] == 0
    # A slow batch's first copy waits out the whole window, and its latency counts it.
    assert slow["latency_s"]["count"] > 0 and slow["latency_s"]["sum"] >= SLOW_WINDOW_S
    # The slow shadow holds copies: the bound of 8 in flight dropped the excess.
    assert sum(s["dropped"] for s in (twin, other, slow, gone)) > 0
    for name, shadow in (("twin", twin), ("other", other), ("slow", slow), ("gone", gone)):
        assert shadow["requests"] + shadow["dropped"] == expected[name]
    metrics = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    assert 'accel_gateway_shadow_compared{router="shadowed",variant="twin"' in metrics
    assert 'accel_gateway_router_requests{router="shadowed",variant="eager"' in metrics
    assert 'accel_gateway_shadow_abs_error_bucket{router="shadowed",variant="other"' in metrics


def test_variants_with_different_signatures_are_refused_at_load(server):
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("mismatch")
    message = str(refused.value)
    assert "must take and give the same tensors" in message
    assert "input 'INPUT1' of 'simple' is not in 'eager'" in message
    assert not client.is_model_ready("mismatch")
