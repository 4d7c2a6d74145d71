"""Admission control: the predicted wait against the queue budget and the deadline, on
its own and in the scheduler for models without dynamic batching."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from google.protobuf import text_format

from accel_base.errors import InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from backends.base import Backend, TensorSpec
from gateway.core.inference import InferRequest, Tensor
from gateway.core.scheduling import DirectScheduler, Instance, InstancePool
from gateway.core.scheduling.admission import (
    EXEMPT_PER_INSTANCE,
    Admission,
    Overloaded,
    deadline_of,
    queue_budget,
)
from gateway.core.statistics import ModelStatistics
from gateway.core.validation import RequestRules
from tests.clocks import runs_take


def test_the_predicted_wait_counts_busy_instances_and_queued_rows():
    admission = Admission("m", instances=2, budget_ms=40)
    assert admission.wait_s(2, 500) == 0.0  # nothing measured yet: admit
    admission.observe(0.002)
    admission.observe(0.004, rows=4)
    assert admission.mean_s == pytest.approx(0.0022)  # moving averages
    assert admission.mean_rows == pytest.approx(1.3) and admission.var_rows > 0
    # Runs of two rows only: the cost is all by the row.
    admission.mean_rows, admission.mean_s, admission.var_rows = 2, 0.002, 0
    assert admission.cost() == (0.0, 0.001)
    assert admission.wait_s(1, 0) == 0.0  # an instance is free
    assert admission.wait_s(2, 0) == pytest.approx(0.001)  # one of two finishes first
    assert admission.wait_s(1, 10) == pytest.approx(0.005)  # ten rows on two instances
    assert admission.wait_s(2, 78) == pytest.approx(0.040)
    admission.check(2, 78, requests_ahead=80, now=0.0)
    with pytest.raises(Overloaded, match="overloaded.*queue budget") as refused:
        admission.check(2, 79, requests_ahead=81, now=0.0)
    assert refused.value.retry_after_s == 1 and refused.value.http_status == 503


def test_a_backlog_is_predicted_from_a_runs_fixed_cost_and_its_cost_a_row():
    admission = Admission("m", instances=1, budget_ms=30, max_batch=64)
    for rows in [4, 8, 12, 6, 10] * 20:  # a calm moment: 2 ms a batch plus 0.5 ms a row
        admission.observe(0.002 + 0.0005 * rows, rows=rows)
    assert 6 < admission.var_rows < 10  # the sizes' variance is 8
    fixed, per_row = admission.cost()
    assert fixed == pytest.approx(0.002, rel=0.05) and per_row == pytest.approx(0.0005, rel=0.05)
    # A hiccup left 50 rows queued: one batch of 50, 27 ms, not 50 calm rows' 0.75 ms each.
    assert admission.wait_s(0, 50) == pytest.approx(0.027, rel=0.05)
    admission.check(0, 50, requests_ahead=50, now=0.0)
    with pytest.raises(Overloaded):
        admission.check(0, 70, requests_ahead=70, now=0.0)  # two batches: 39 ms


def test_full_batches_are_predicted_from_their_rows_not_from_calm_one_row_runs():
    admission = Admission("m", instances=1, budget_ms=50, max_batch=64)
    for _ in range(50):
        admission.observe(0.004)  # calm: one row a run
    # 64 queued rows would be one batch of 64; counted in one-row runs they cost 256 ms,
    # past the budget: the first moments of an overload admit too few rather than many.
    with pytest.raises(Overloaded):
        admission.check(1, 64, requests_ahead=65, now=0.0)
    for _ in range(50):
        admission.observe(0.028, rows=64)  # overloaded: full batches, 0.44 ms a row
    admission.check(1, 40, requests_ahead=41, now=0.0)  # 28 + 3.6 + 15.2 ms


def test_a_burst_after_a_calm_spell_is_priced_by_the_batch_sizes_that_ran_before():
    admission = Admission("m", instances=1, budget_ms=50, max_batch=64)
    for _ in range(50):
        admission.observe(0.008, rows=64)  # a busy hour: full batches
    for _ in range(500):
        admission.observe(0.004)  # then calm: one row a run, the averages forget the rest
    assert admission.mean_rows == pytest.approx(1.0)
    # 100 rows: a batch of 64 (8 ms) and one of 36, priced as the next size run, 64.
    assert admission.by_sizes(100) == pytest.approx(0.016)
    assert admission.wait_s(1, 100) == pytest.approx(0.020)
    admission.check(1, 100, requests_ahead=101, now=0.0)
    # Past the largest size run, a size costs what the largest costs a row.
    assert admission.size_cost(128) == pytest.approx(0.016, rel=0.01)
    admission.observe(0.002, rows=2)
    assert admission.size_cost(2) == pytest.approx(0.002)
    assert admission.size_cost(3) == pytest.approx(0.008)  # the next larger size that ran


def test_a_deadline_sooner_than_the_budget_refuses_sooner():
    admission = Admission("m", instances=1, budget_ms=100)
    admission.observe(0.010)
    admission.check(1, 2, requests_ahead=3, now=5.0, deadline=5.05)  # 30 ms of 50 left
    with pytest.raises(Overloaded, match="deadline"):
        admission.check(1, 2, requests_ahead=3, now=5.0, deadline=5.02)


def test_a_few_requests_ahead_are_admitted_past_the_budget_of_a_slow_model():
    admission = Admission("m", instances=1, budget_ms=5)
    admission.observe(0.100)  # 100 ms runs: a 5 ms budget would refuse all but one
    ahead = EXEMPT_PER_INSTANCE - 1
    admission.check(1, ahead - 1, requests_ahead=ahead, now=0.0)  # a closed loop of 8
    with pytest.raises(Overloaded):
        admission.check(1, ahead, requests_ahead=ahead + 1, now=0.0)
    with pytest.raises(Overloaded, match="deadline"):  # its own deadline still holds
        admission.check(1, 1, requests_ahead=2, now=0.0, deadline=0.05)


def test_the_requests_exempt_from_the_budget_grow_with_the_instances():
    admission = Admission("m", instances=3, budget_ms=5)
    admission.observe(0.100)
    ahead = 3 * EXEMPT_PER_INSTANCE - 1  # a closed loop of 24 on three instances
    admission.check(3, ahead - 3, requests_ahead=ahead, now=0.0)
    with pytest.raises(Overloaded):
        admission.check(3, ahead - 2, requests_ahead=ahead + 1, now=0.0)


def test_a_standing_queue_without_budget_deadline_or_growth_is_not_priced(monkeypatch):
    # Nothing bounds such a request's wait, so none is predicted: a closed loop of 64
    # pays no cost model per request.
    admission = Admission("m", instances=1, budget_ms=None)
    admission.observe(0.100)
    monkeypatch.setattr(Admission, "wait_s", lambda *_: pytest.fail("wait predicted"))
    admission.check(1, 500, requests_ahead=501, now=0.0)
    monkeypatch.undo()
    with pytest.raises(Overloaded, match="deadline"):  # a deadline is still a bound
        admission.check(1, 500, requests_ahead=501, now=0.0, deadline=0.5)


def test_deadline_of_takes_the_sooner_of_the_front_and_the_timeout_parameter():
    assert deadline_of(InferRequest("m"), 10.0) is None
    assert deadline_of(InferRequest("m", parameters={"timeout": 2_000_000}), 10.0) == 12.0
    with_front = InferRequest("m", parameters={"timeout": 2_000_000}, deadline=11.0)
    assert deadline_of(with_front, 10.0) == 11.0
    with pytest.raises(InvalidArgument, match="timeout"):
        deadline_of(InferRequest("m", parameters={"timeout": 1.5}), 0.0)


def test_queue_budget_parameter():
    config = mc.ModelConfig(name="m")
    assert queue_budget(config, 5.0) == 5.0
    assert queue_budget(config, None) is None  # the default: no fixed budget
    config.parameters["queue_budget_ms"].string_value = "250"
    assert queue_budget(config, 5.0) == 250.0
    for bad in ("0", "-3", "soon", "inf"):
        config.parameters["queue_budget_ms"].string_value = bad
        with pytest.raises(InvalidArgument, match="queue_budget_ms"):
            queue_budget(config, 5.0)


class SleepingBackend(Backend):
    """y = x after `sleep_s` (on the instance's thread); counts its runs, and those that
    ended; a run may first wait for a gate the test opens."""

    def __init__(self, sleep_s: float, gate: threading.Event | None = None) -> None:
        self.sleep_s = sleep_s
        self.gate = gate
        self.runs = 0
        self.ended = 0

    def inputs(self):
        return [TensorSpec("x", "FP32", (1,))]

    def outputs(self):
        return [TensorSpec("y", "FP32", (1,))]

    def run(self, inputs, output_names):
        self.runs += 1
        if self.gate is not None:
            self.gate.wait(10)
        time.sleep(self.sleep_s)
        self.ended += 1
        return {"y": inputs["x"]}

    @classmethod
    def inline_capable(cls) -> bool:
        return False  # on its thread, so that the event loop goes on while it runs

    def unload(self) -> None:
        pass


def direct(backend: Backend, budget_ms: float, run_ns: int | None = None) -> DirectScheduler:
    """`run_ns`: what every run measures (None: this machine's clock)."""
    config = text_format.Parse(
        'name: "m" input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ] '
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]',
        mc.ModelConfig(),
    )
    timed = {} if run_ns is None else {"clock_ns": runs_take(run_ns)}
    pool = InstancePool([Instance(backend, "i0", cores=2, **timed)], "m")
    return DirectScheduler(
        pool, RequestRules.from_config(config), {"y": "FP32"}, ModelStatistics("m", "1"),
        max_queue_size=1000, queue_budget_ms=budget_ms,
    )  # fmt: skip


def one(value: float, **parameters) -> InferRequest:
    data = np.array([value], dtype=np.float32)
    return InferRequest("m", inputs=[Tensor("x", "FP32", data)], parameters=parameters)


def test_an_overloaded_model_refuses_at_once_and_serves_the_admitted(burst):
    gate = threading.Event()
    gate.set()
    backend = SleepingBackend(0.0, gate)
    # Runs of 5 ms by the instance's clock; more than EXEMPT_PER_INSTANCE runs in 150 ms.
    scheduler = direct(backend, budget_ms=150, run_ns=5_000_000)

    async def scenario():
        for _ in range(2):  # the second run measures the service time (a first is left out)
            await scheduler.infer(one(0))
        requests = [one(v) for v in range(80)]
        return await burst(scheduler.infer, requests, lambda: backend.ended, hold=gate)

    served, refused = asyncio.run(scenario())
    assert all(isinstance(exc, Overloaded) for exc, _ in refused)
    # 150 ms of 5 ms runs: thirty admitted, the rest refused before any of them ran.
    assert 29 <= len(served) <= 31 and len(refused) == 80 - len(served)
    assert {ended for _, ended in refused} == {2}
    assert backend.runs == 2 + len(served)
    assert scheduler.stats.as_dict()["inference_stats"]["fail"]["count"] == len(refused)


def test_a_request_whose_deadline_passes_while_it_waits_does_not_run():
    gate = threading.Event()
    backend = SleepingBackend(0, gate)
    scheduler = direct(backend, budget_ms=10_000)

    async def scenario():
        first = asyncio.ensure_future(scheduler.infer(one(1)))  # held at the gate
        second = asyncio.ensure_future(scheduler.infer(one(2, timeout=20_000)))
        await asyncio.sleep(0.05)  # at least this long: the 20 ms pass while it waits
        gate.set()
        with pytest.raises(Unavailable, match="deadline before it ran"):
            await second
        await first

    asyncio.run(scenario())
    assert backend.runs == 1


def test_the_first_run_of_each_size_on_an_instance_is_left_out():
    admission = Admission("m", instances=1, budget_ms=50)
    # A GPU model's first run at each batch size compiles kernels: 1 s, then 4 ms.
    for rows in (1, 2, 4):
        admission.observe(1.0, rows, size=(0, rows))
        admission.observe(0.004, rows, size=(0, rows))
    assert admission.mean_s < 0.005
    admission.check(1, 10, requests_ahead=10, now=0.0)  # 10 rows at ~3 ms: admitted
    admission.observe(0.9, 8, size=(1, 8))  # another instance's first run: left out too
    assert admission.mean_s < 0.005
    admission.observe(0.5, 8, size=(0, 8))  # a new size on the first: left out
    admission.observe(0.5, 8, size=(0, 8))  # the same size again: it counts
    assert admission.mean_s > 0.04
