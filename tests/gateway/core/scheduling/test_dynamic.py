"""The dynamic batcher driven by a real event loop over a fake backend."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from google.protobuf import text_format

from accel_base.errors import Internal, Unavailable
from accel_base.proto import model_config_pb2 as mc
from backends.base import Backend, TensorSpec
from gateway.core.inference import InferRequest, Tensor
from gateway.core.scheduling import DynamicBatcher, Instance, InstancePool
from gateway.core.scheduling.planner import plan
from gateway.core.statistics import ModelStatistics
from gateway.core.validation import RequestRules
from tests.clocks import runs_take


class DoublingBackend(Backend):
    """y = 2x; remembers every batch it ran; fails on negative input; may be slow."""

    def __init__(self, sleep_s: float = 0.0, allowed=None, gate=None) -> None:
        """`gate`: a threading.Event each run waits for first."""
        self.sleep_s = sleep_s
        self.allowed = allowed
        self.gate = gate
        self.batches: list[np.ndarray] = []

    def allowed_batch_sizes(self):
        return self.allowed

    def inputs(self):
        return [TensorSpec("x", "FP32", (-1, 2))]

    def outputs(self):
        return [TensorSpec("y", "FP32", (-1, 2))]

    def run(self, inputs, output_names):
        x = inputs["x"]
        if self.gate is not None:
            self.gate.wait(10)
        self.batches.append(x.copy())
        time.sleep(self.sleep_s)
        if (x < 0).any():
            raise ValueError("negative input")
        return {"y": x * 2}

    def unload(self) -> None:
        pass


def make_batcher(
    backends,
    batching: str = "max_queue_delay_microseconds: 20000",
    max_batch_size: int = 8,
    max_queue_size: int = 100,
    queue_budget_ms: float | None = None,  # the server's default: no fixed budget
    adaptive_window: bool = False,  # Triton's window unless a test asks
    cores: int | None = None,  # the cores the instances see (1: runs up to 1 ms go inline)
    run_ns: int | None = None,  # what every run measures (None: this machine's clock)
    clock: Callable[[], float] | None = None,  # the batcher's clock (None: time.monotonic)
):
    config = text_format.Parse(
        f'name: "m" max_batch_size: {max_batch_size} '
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ] '
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 2 ] } ] '
        f"dynamic_batching {{ {batching} }}",
        mc.ModelConfig(),
    )
    timed = {} if run_ns is None else {"clock_ns": runs_take(run_ns)}
    pool = InstancePool([Instance(b, f"i{n}", cores, **timed) for n, b in enumerate(backends)])
    clocked = {} if clock is None else {"clock": clock}
    return DynamicBatcher(
        pool, RequestRules.from_config(config), {"y": "FP32"}, ModelStatistics("m", "1"),
        config.dynamic_batching, max_batch_size, max_queue_size, queue_budget_ms,
        backends[0].allowed_batch_sizes(), adaptive_window=adaptive_window, **clocked,
    )  # fmt: skip


def request(value: float, rows: int = 1, **parameters) -> InferRequest:
    data = np.full((rows, 2), value, dtype=np.float32) + np.arange(rows, dtype=np.float32)[:, None]
    return InferRequest("m", inputs=[Tensor("x", "FP32", data)], parameters=parameters)


async def gather(batcher, requests):
    return await asyncio.gather(*(batcher.infer(r) for r in requests), return_exceptions=True)


def test_concurrent_requests_share_batches_and_get_their_own_rows():
    backend = DoublingBackend()
    batcher = make_batcher([backend])

    async def go():
        requests = [request(10.0 * i, rows=1 + i % 3) for i in range(12)]
        responses = await gather(batcher, requests)
        await batcher.close()
        return requests, responses

    requests, responses = asyncio.run(go())
    for req, resp in zip(requests, responses, strict=True):
        np.testing.assert_array_equal(resp.outputs[0].data, req.inputs[0].data * 2)
    assert len(backend.batches) < len(requests)
    assert all(len(b) <= 8 for b in backend.batches)
    stats = batcher.stats
    assert stats.inference_count == sum(1 + i % 3 for i in range(12))
    assert stats.execution_count == len(backend.batches)
    assert stats.success.count == 12


def test_a_failing_batch_fails_only_its_requests():
    backend = DoublingBackend()
    batcher = make_batcher([backend], batching="", max_batch_size=1)  # one request per batch

    async def go():
        responses = await gather(batcher, [request(1.0), request(-1.0), request(2.0)])
        await batcher.close()
        return responses

    ok1, bad, ok2 = asyncio.run(go())
    assert isinstance(bad, Internal) and "negative input" in bad.message
    np.testing.assert_array_equal(ok1.outputs[0].data, [[2.0, 2.0]])
    np.testing.assert_array_equal(ok2.outputs[0].data, [[4.0, 4.0]])
    assert batcher.stats.failure_reasons == {"BACKEND": 1}


def test_padding_to_allowed_sizes_is_dropped_from_outputs():
    backend = DoublingBackend(allowed=(4, 8))
    batcher = make_batcher([backend])

    async def go():
        responses = await gather(batcher, [request(1.0, rows=2), request(5.0)])
        await batcher.close()
        return responses

    two, one = asyncio.run(go())
    assert [len(b) for b in backend.batches] == [4]
    assert two.outputs[0].data.shape == (2, 2) and one.outputs[0].data.shape == (1, 2)
    np.testing.assert_array_equal(one.outputs[0].data, [[10.0, 10.0]])
    assert batcher.stats.inference_count == 3  # padding rows are not inferences


def test_cancelled_request_leaves_the_queue_without_running():
    backend = DoublingBackend()
    batcher = make_batcher([backend], batching="max_queue_delay_microseconds: 200000")

    async def go():
        doomed = asyncio.create_task(batcher.infer(request(99.0)))
        await asyncio.sleep(0.01)
        doomed.cancel()
        response = await batcher.infer(request(1.0))
        await batcher.close()
        return response

    asyncio.run(go())
    ran = np.concatenate(backend.batches)
    assert 99.0 not in ran and 198.0 not in ran
    assert batcher.stats.failure_reasons == {"CANCELED": 1}
    assert batcher.pending == 0


def test_queue_timeout_rejects_with_a_clear_error():
    gate = threading.Event()  # the first run holds its instance until the second is out
    backend = DoublingBackend(gate=gate)
    batcher = make_batcher(
        [backend],
        batching="default_queue_policy { default_timeout_microseconds: 200000 }",
        max_batch_size=1,
    )

    async def go():
        first = asyncio.ensure_future(batcher.infer(request(1.0)))
        second = asyncio.ensure_future(batcher.infer(request(2.0)))
        rejected = await asyncio.gather(second, return_exceptions=True)
        gate.set()
        responses = [await first, *rejected]
        await batcher.close()
        return responses

    first, second = asyncio.run(go())
    assert first.outputs[0].data[0, 0] == 2.0
    assert isinstance(second, Unavailable) and "timed out in the queue" in second.message


def test_queue_full_is_immediate():
    batcher = make_batcher(
        [DoublingBackend(sleep_s=0.5)], batching="", max_batch_size=1, max_queue_size=2
    )

    async def go():
        tasks = [asyncio.create_task(batcher.infer(request(1.0))) for _ in range(2)]
        await asyncio.sleep(0)
        start = time.monotonic()
        with pytest.raises(Unavailable, match="queue is full"):
            await batcher.infer(request(3.0))
        elapsed = time.monotonic() - start
        await asyncio.gather(*tasks)
        await batcher.close()
        return elapsed

    assert asyncio.run(go()) < 0.25  # waiting for room would take the run's 0.5 s


def test_preserve_ordering_answers_in_arrival_order():
    # Two instances; the first request's batch is slow, the second's fast.
    slow, fast = DoublingBackend(sleep_s=0.2), DoublingBackend()
    batcher = make_batcher([slow, fast], batching="preserve_ordering: true", max_batch_size=1)
    finished: list[int] = []

    async def one(i: int):
        await batcher.infer(request(float(i)))
        finished.append(i)

    async def go():
        await asyncio.gather(one(0), one(1), one(2))
        await batcher.close()

    asyncio.run(go())
    assert finished == [0, 1, 2]


def test_request_of_a_departed_client_is_dropped_before_running():
    backend = DoublingBackend()
    batcher = make_batcher([backend])

    async def go():
        gone = request(99.0)
        gone.client_gone = lambda: True
        results = await gather(batcher, [gone, request(1.0)])
        await batcher.close()
        return results

    gone_result, ok = asyncio.run(go())
    assert "disconnected" in gone_result.message
    np.testing.assert_array_equal(ok.outputs[0].data, [[2.0, 2.0]])
    assert 99.0 not in np.concatenate(backend.batches)


def test_a_failure_inside_the_batcher_fails_queued_requests_instead_of_hanging(monkeypatch):
    batcher = make_batcher([DoublingBackend()])

    def broken_plan(*args, **kwargs):
        raise RuntimeError("planner bug")

    monkeypatch.setattr("gateway.core.scheduling.dynamic.plan", broken_plan)

    async def go():
        result = await asyncio.wait_for(gather(batcher, [request(1.0)]), timeout=5)
        await batcher.close()
        return result

    (error,) = asyncio.run(go())
    assert isinstance(error, Internal) and "planner bug" in error.message


def test_an_overloaded_batcher_refuses_at_once_by_rows_ahead(burst):
    gate = threading.Event()
    gate.set()
    backend = DoublingBackend(gate=gate)
    # Runs of 10 ms by the instance's clock; more than EXEMPT_PER_INSTANCE rows in 300 ms.
    batcher = make_batcher(
        [backend], batching="", max_batch_size=2, queue_budget_ms=300, run_ns=10_000_000
    )

    async def go():
        for _ in range(2):  # the second batch of one row measures 10 ms a row
            await batcher.infer(request(1.0))
        ran = lambda: len(backend.batches)  # noqa: E731
        requests = [request(float(i)) for i in range(80)]
        _, refused = await burst(batcher.infer, requests, ran, hold=gate)
        await batcher.close()
        return refused

    refused = asyncio.run(go())
    # 300 ms holds thirty rows at 10 ms each (all arrive before a batch of two has run
    # and taught it 5 ms a row): the rest are refused before any ran, with a hint.
    assert 29 <= 80 - len(refused) <= 31
    assert all("overloaded" in exc.message and exc.retry_after_s >= 1 for exc, _ in refused)
    assert {ran for _, ran in refused} == {2}
    assert sum(len(b) for b in backend.batches) == 2 + 80 - len(refused)


def test_the_batchers_admission_counts_a_backlog_in_batches_of_its_max_size():
    batcher = make_batcher([DoublingBackend()], max_batch_size=64, queue_budget_ms=30)
    for rows in [4, 8, 12, 6, 10] * 20:  # calm: 2 ms a batch plus 0.5 ms a row
        batcher.admission.observe(0.002 + 0.0005 * rows, rows=rows)
    # 50 rows a hiccup left queued run as one batch of 50 (27 ms), inside the budget;
    # as batches of one row they would be 125 ms, and by the calm row 37.5 ms.
    assert batcher.admission.wait_s(0, 50) == pytest.approx(0.027, rel=0.05)
    batcher.admission.check(0, 50, requests_ahead=50, now=0.0)


def test_a_request_past_its_deadline_leaves_the_batch_unrun():
    gate = threading.Event()
    backend = DoublingBackend(gate=gate)
    batcher = make_batcher([backend], batching="", max_batch_size=1)

    async def go():
        first = asyncio.ensure_future(batcher.infer(request(1.0)))  # held at the gate
        second = asyncio.ensure_future(batcher.infer(request(2.0, timeout=20_000)))
        await asyncio.sleep(0.05)  # at least this long: the 20 ms pass while it waits
        gate.set()
        with pytest.raises(Unavailable, match="deadline before it ran"):
            await second
        await first
        await batcher.close()

    asyncio.run(go())
    assert [b.tolist() for b in backend.batches] == [[[1.0, 1.0]]]  # the first only


def test_a_lone_client_does_not_wait_the_window():
    # By the batcher's clock no time passes: a batch that waited for its 20 ms window
    # would never go, and the test would time out.
    batcher = make_batcher([DoublingBackend()], adaptive_window=True, clock=lambda: 1000.0)

    async def go():
        for value in range(50):
            await batcher.infer(request(float(value)))
        await batcher.close()

    asyncio.run(asyncio.wait_for(go(), 30))
    assert batcher.stats.queue.count == 50


def closed_loop_clients(
    batcher, clients: int, requests: int, timeout_s: float | None = None
) -> None:
    """`clients` callers, each sending its next request once answered; then close (a
    failure if that takes past `timeout_s`)."""

    async def client(first: float):
        for step in range(requests):
            await batcher.infer(request(first + step))

    async def go():
        await asyncio.gather(*(client(100.0 * n) for n in range(clients)))
        await batcher.close()

    asyncio.run(asyncio.wait_for(go(), timeout_s))


def test_under_load_batches_still_fill_to_the_preferred_size():
    backend = DoublingBackend(sleep_s=0.004)
    batcher = make_batcher(
        [backend], "max_queue_delay_microseconds: 20000 preferred_batch_size: [ 8 ]",
        adaptive_window=True,
    )  # fmt: skip

    closed_loop_clients(batcher, clients=16, requests=6)
    sizes = [len(batch) for batch in backend.batches]
    assert sum(sizes) == 96
    # The first batch may go alone, before any company was seen; the rest fill up.
    assert sum(size == 8 for size in sizes) >= len(sizes) - 2


class InlineBackend(DoublingBackend):
    """Quick enough to run on the event loop itself (Instance.runs_inline)."""

    def inline_capable(self) -> bool:
        return True


def test_batches_that_run_on_the_event_loop_fill_under_load_too():
    # The driver runs an inline batch itself; a lone request must still not run ahead of
    # the others that arrive in the same turn of the loop (each would then run alone).
    backend = InlineBackend()
    batcher = make_batcher(
        [backend], "max_queue_delay_microseconds: 20000 preferred_batch_size: [ 8 ]",
        adaptive_window=True, cores=1, run_ns=500_000,  # 0.5 ms a run: inline on one core
    )  # fmt: skip
    closed_loop_clients(batcher, clients=16, requests=6)
    sizes = [len(batch) for batch in backend.batches]
    assert sum(sizes) == 96 and batcher.pool.instances[0].runs_inline
    assert sum(size == 8 for size in sizes) >= len(sizes) - 2, sizes


def test_a_backlog_of_inline_batches_lets_the_loop_turn_between_batches():
    turns = {"n": 0}

    class Counting(InlineBackend):
        def run(self, inputs, output_names):
            self.seen_turns.append(turns["n"])
            return super().run(inputs, output_names)

    backend = Counting()
    backend.seen_turns = []
    batcher = make_batcher([backend], cores=1, run_ns=200_000)  # inline on one core

    async def go():
        async def count_turns():
            while True:
                turns["n"] += 1
                await asyncio.sleep(0)

        counter = asyncio.create_task(count_turns())
        await batcher.infer(request(0.0))  # the first run goes on the thread, and times it
        await gather(batcher, [request(float(k)) for k in range(48)])  # 6 full batches
        counter.cancel()
        await batcher.close()

    asyncio.run(go())
    seen = backend.seen_turns[1:]  # the inline runs
    between = [later - earlier for earlier, later in itertools.pairwise(seen)]
    assert len(between) >= 5 and min(between) >= 1, backend.seen_turns


def test_fewer_clients_than_a_batch_do_not_wait_out_the_window(monkeypatch):
    # 4 clients that each wait for their answer, a batch of 8 and a 20 ms window: once the
    # four are queued nobody else can come, so the batch goes (Triton's rule waits 20 ms).
    # What the batcher decides is counted, not how long requests waited: every plan made
    # with the four queued is a Send, but for the first rounds, before the clients'
    # ceiling is known (Triton's rule would wait on every one of the twenty).
    decisions: list[str] = []

    def recorded(queue, now, rules, arrivals_per_s=float("inf")):
        decision = plan(queue, now, rules, arrivals_per_s)
        if queue.rows == 4:
            decisions.append(type(decision).__name__)
        return decision

    monkeypatch.setattr("gateway.core.scheduling.dynamic.plan", recorded)
    backend = DoublingBackend(sleep_s=0.001)
    batcher = make_batcher([backend], adaptive_window=True)

    closed_loop_clients(batcher, clients=4, requests=20)
    assert batcher.stats.queue.count == 80
    assert decisions.count("Send") >= 15 and decisions.count("WaitUntil") <= 5, decisions
    assert max(len(batch) for batch in backend.batches) >= 3  # and they still share batches
