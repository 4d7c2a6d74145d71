"""The adaptive batch window: the arrival estimate and the rule (the batcher using them is
in test_dynamic.py)."""

from __future__ import annotations

import numpy as np
import pytest

from accel_base.proto import model_config_pb2 as mc
from gateway.core.scheduling.planner import BatchingRules, Send, WaitUntil, plan
from gateway.core.scheduling.queue import RequestQueue
from gateway.core.scheduling.window import EXPECTED, ArrivalRate, worth_waiting


def test_a_client_that_waits_for_each_answer_sees_no_company():
    rate = ArrivalRate()
    now = 0.0
    for _ in range(1000):
        rate.arrived(now)
        now += 0.0003  # served
        rate.answered(now)
        now += 0.0002  # the client's own turn-around
    assert rate.per_second(now) == 0.0
    assert not worth_waiting(rate.per_second(now), 0.002)


def test_arrivals_that_overlap_give_their_rate_per_pending_second():
    rate = ArrivalRate()
    now = 0.0
    rate.arrived(now)  # one request stays pending throughout
    for _ in range(2000):
        now += 0.001
        rate.arrived(now)  # 1,000 a second arrive while it is pending
        rate.answered(now)
    assert rate.per_second(now) == pytest.approx(1000.0, rel=0.02)
    assert worth_waiting(rate.per_second(now), 0.002)  # 2 expected in 2 ms
    assert not worth_waiting(rate.per_second(now), 0.0005)  # 0.5 expected


def test_a_bundle_is_its_requests_arriving_together():
    bundle, single = ArrivalRate(), ArrivalRate()
    bundle.arrived(0.0, 4)  # the first finds nobody pending; the other three find it
    for _ in range(4):
        single.arrived(0.0)
    assert bundle.pending == single.pending == 4
    assert bundle._overlaps == single._overlaps == 3.0
    bundle.answered(0.001, 4)
    assert bundle.pending == 0


def test_clients_that_are_all_pending_already_bring_no_company():
    rate = ArrivalRate()
    now = 0.0
    for _ in range(500):  # 8 clients, each sending again once answered
        for _ in range(8):
            now += 0.0001
            rate.arrived(now)
        now += 0.0005
        for _ in range(8):
            rate.answered(now)
    for _ in range(7):
        now += 0.0001
        rate.arrived(now)
    assert worth_waiting(rate.per_second(now), 0.002)  # the eighth is on its way
    rate.arrived(now + 0.0001)
    assert rate.per_second(now + 0.0001) == 0.0  # all eight are here: nobody else comes


def test_a_burst_s_highest_point_is_no_ceiling():
    rate = ArrivalRate()
    now = 0.0
    rate.arrived(now)  # one request stays pending throughout
    for _ in range(2000):  # an open loop: 1,000 a second arrive while it is pending
        now += 0.001
        rate.arrived(now)
        rate.answered(now)
    for _ in range(4):  # a burst reaches a new high once
        rate.arrived(now)
    assert worth_waiting(rate.per_second(now), 0.002)


def test_a_load_that_stopped_is_forgotten_within_seconds():
    rate = ArrivalRate()
    now = 0.0
    rate.arrived(now)
    for _ in range(5000):
        now += 0.0002
        rate.arrived(now)
        rate.answered(now)
    rate.answered(now)
    assert rate.per_second(now) > 1000
    assert rate.per_second(now + 10.0) == 0.0


def test_the_rule_is_expected_arrivals_against_a_threshold():
    assert worth_waiting(EXPECTED / 0.001, 0.001)
    assert not worth_waiting(EXPECTED / 0.001 * 0.99, 0.001)
    assert not worth_waiting(0.0, 10.0)


def _queue_with_one_request() -> RequestQueue:
    queue = RequestQueue.from_config(mc.ModelDynamicBatching(), 10)
    queue.push({"x": np.zeros((1, 2), np.float32)}, ["y"], 1, ("k",), 1.0)
    return queue


def test_the_planner_sends_a_lone_request_at_once_unless_told_to_wait_it_out():
    adaptive = BatchingRules(max_batch_size=8, max_queue_delay_s=0.010)
    triton = BatchingRules(max_batch_size=8, max_queue_delay_s=0.010, adaptive=False)
    queue = _queue_with_one_request()
    assert isinstance(plan(queue, 1.001, adaptive, arrivals_per_s=0.0), Send)
    assert plan(queue, 1.001, adaptive, arrivals_per_s=10_000.0) == WaitUntil(1.010)
    # 9 ms left at 100/s: 0.9 expected, under the threshold.
    assert isinstance(plan(queue, 1.001, adaptive, arrivals_per_s=100.0), Send)
    assert plan(queue, 1.001, triton, arrivals_per_s=0.0) == WaitUntil(1.010)
