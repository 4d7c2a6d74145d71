"""The queue and the planner with a fake clock: time is whatever the test says it is."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from accel_base.errors import InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.scheduling.planner import BatchingRules, Send, WaitUntil, plan
from gateway.core.scheduling.queue import RequestQueue


def make_queue(text: str = "", max_total: int = 100) -> RequestQueue:
    return RequestQueue.from_config(text_format.Parse(text, mc.ModelDynamicBatching()), max_total)


def push(queue: RequestQueue, now: float, rows: int = 1, width: int = 4, **kwargs):
    feed = {"x": np.zeros((rows, width), np.float32)}
    return queue.push(feed, ["y"], rows, ("x", width), now, **kwargs)


RULES = BatchingRules(max_batch_size=8, max_queue_delay_s=0.010)


def test_window_opens_at_the_first_arrival():
    queue = make_queue()
    push(queue, now=1.000)
    push(queue, now=1.006)
    assert plan(queue, 1.008, RULES) == WaitUntil(1.010)  # not 1.016: the oldest request counts
    decision = plan(queue, 1.010, RULES)
    assert isinstance(decision, Send) and decision.rows == 2


def test_empty_queue_waits_for_arrivals():
    assert plan(make_queue(), 5.0, RULES) == WaitUntil(None)


def test_full_batch_goes_at_once():
    queue = make_queue()
    for _ in range(3):
        push(queue, now=0.0, rows=3)
    decision = plan(queue, 0.0, RULES)  # 3 + 3 fit, the third would overflow 8
    assert isinstance(decision, WaitUntil)
    push(queue, now=0.001, rows=2)  # 3 + 3 + 2 = 8: max_batch_size reached
    decision = plan(queue, 0.001, RULES)
    assert isinstance(decision, Send) and decision.rows == 8


def test_largest_reachable_preferred_size_goes_at_once():
    queue = make_queue()
    rules = BatchingRules(max_batch_size=8, preferred_sizes=(2, 4), max_queue_delay_s=1.0)
    for _ in range(5):
        push(queue, now=0.0)
    decision = plan(queue, 0.0, rules)
    assert isinstance(decision, Send) and decision.rows == 4


def test_zero_delay_sends_what_is_there():
    queue = make_queue()
    push(queue, now=0.0, rows=3)
    decision = plan(queue, 0.0, BatchingRules(max_batch_size=8))
    assert isinstance(decision, Send) and decision.rows == 3


def test_incompatible_shapes_wait_for_their_own_batch():
    queue = make_queue()
    first = push(queue, now=0.0, width=4)
    odd = push(queue, now=0.0, width=5)
    third = push(queue, now=0.0, width=4)
    decision = plan(queue, 1.0, RULES)
    assert decision.requests == [first, third]
    for pending in decision.requests:
        queue.remove(pending)
    assert plan(queue, 1.0, RULES).requests == [odd]


def test_priority_order_and_default_level():
    queue = make_queue("priority_levels: 3 default_priority_level: 2")
    low = push(queue, now=0.0, priority=3)
    default = push(queue, now=0.1)
    high = push(queue, now=0.2, priority=1)
    assert [p.priority for p in queue.in_order()] == [1, 2, 3]
    assert list(queue.in_order()) == [high, default, low]
    with pytest.raises(InvalidArgument, match="priority 4 is outside 1..3"):
        push(queue, now=0.3, priority=4)


def test_timeout_reject_and_delay():
    queue = make_queue(
        "priority_levels: 2 default_priority_level: 1 "
        "default_queue_policy { default_timeout_microseconds: 1000 timeout_action: REJECT } "
        "priority_queue_policy { key: 2 value { default_timeout_microseconds: 1000 "
        "timeout_action: DELAY } }"
    )
    rejected = push(queue, now=0.0, priority=1)
    delayed = push(queue, now=0.0, priority=2)
    fresh = push(queue, now=0.0005, priority=2)
    assert queue.next_deadline() == pytest.approx(0.001)
    assert queue.expire(0.0009) == []
    assert queue.expire(0.0011) == [rejected]
    assert delayed.delayed and list(queue.in_order()) == [fresh, delayed]


def test_timeout_override_only_shortens():
    queue = make_queue(
        "default_queue_policy { default_timeout_microseconds: 1000 allow_timeout_override: true }"
    )
    assert push(queue, now=0.0, timeout_us=500).deadline == pytest.approx(0.0005)
    assert push(queue, now=0.0, timeout_us=5000).deadline == pytest.approx(0.001)
    no_override = make_queue("default_queue_policy { default_timeout_microseconds: 1000 }")
    assert push(no_override, now=0.0, timeout_us=10).deadline == pytest.approx(0.001)


def test_queue_full():
    queue = make_queue("default_queue_policy { max_queue_size: 2 }")
    push(queue, now=0.0)
    push(queue, now=0.0)
    with pytest.raises(Unavailable, match="max_queue_size 2"):
        push(queue, now=0.0)
    bounded = make_queue(max_total=1)
    push(bounded, now=0.0)
    with pytest.raises(Unavailable, match="1 requests pending"):
        push(bounded, now=0.0)


def test_a_bundle_counts_as_its_requests_against_the_bounds():
    queue = make_queue("default_queue_policy { max_queue_size: 4 }")
    push(queue, now=0.0, rows=3, count=3)
    with pytest.raises(Unavailable, match="max_queue_size 4"):
        push(queue, now=0.0, rows=2, count=2)
    last = push(queue, now=0.0)
    assert len(queue) == 4
    assert queue.remove(last) and len(queue) == 3
    bounded = make_queue(max_total=5)
    push(bounded, now=0.0, rows=4, count=4)
    with pytest.raises(Unavailable, match="5 requests pending"):
        push(bounded, now=0.0, rows=2, count=2)


def test_removed_request_leaves_the_queue():
    queue = make_queue()
    pending = push(queue, now=0.0)
    assert queue.remove(pending) and len(queue) == 0
    assert not queue.remove(pending)
