"""The statistics board: replicas' counters summed per model version, requests
pending only from replicas that posted lately, traffic per replica."""

from __future__ import annotations

import time

from gateway.core.statistics import ModelStatistics, merged
from gateway.tools.ray import board as board_module
from gateway.tools.ray.board import Board, Post


def stats(name: str, successes: int, batch: int = 1, last_ms: int = 0) -> ModelStatistics:
    result = ModelStatistics(name, "1", last_inference_ms=last_ms)
    for _ in range(successes):
        result.record_execution(batch, 1, 10, 20, 30)
        result.success.add(100)
        result.queue.add(5)
    result.failure_reasons["REJECTED"] = 1
    return result


def test_merged_sums_every_counter_and_keeps_the_latest_inference():
    total = merged([stats("m", 2, last_ms=7), stats("m", 3, batch=4, last_ms=5)])
    assert (total.success.count, total.success.ns) == (5, 500)
    assert (total.inference_count, total.execution_count) == (2 + 12, 5)
    assert total.queue.ns == 25 and total.compute_infer.ns == 100
    assert sorted(total.batches) == [1, 4] and total.batches[4].compute_infer.count == 3
    assert total.failure_reasons == {"REJECTED": 2} and total.last_inference_ms == 7


def test_the_board_sums_replicas_and_counts_pending_only_from_fresh_posts(monkeypatch):
    board = Board()
    board.post("a", Post("m", [stats("m", 2), stats("member", 1)], {("m", "1"): 3}))
    board.post("b", Post("m", [stats("m", 4)], {("m", "1"): 2}))
    rows = {s.name: (s.success.count, pending) for s, pending in board.statistics()}
    assert rows == {"m": (6, 5), "member": (1, 0)}
    assert board.replicas() == {"m": (2, None)}
    assert board.replica_requests() == [("m", "a", 2), ("m", "b", 4)]
    # Replica b stops posting: its counters stay, its queue and its place go.
    board.posts["b"].posted = time.monotonic() - board_module.STALE_S - 1
    rows = {s.name: (s.success.count, pending) for s, pending in board.statistics()}
    assert rows["m"] == (6, 3) and board.replicas() == {"m": (1, None)}


def test_a_long_gone_replica_is_folded_into_the_totals_and_not_counted_twice():
    board = Board()
    board.post("a", Post("m", [stats("m", 2)], {}))
    board.post("b", Post("m", [stats("m", 4)], {}))
    board.posts["b"].posted = time.monotonic() - board_module.RETIRE_S - 1
    board.post("a", Post("m", [stats("m", 3)], {}))  # a's next post retires b
    assert list(board.posts) == ["a"] and board.replicas() == {"m": (1, None)}
    assert [(s.name, s.success.count) for s, _ in board.statistics()] == [("m", 7)]
    assert board.replica_requests() == [("m", "a", 3)]
    # b was only stalled: taken back, its new counters (which hold the old) replace them.
    board.post("b", Post("m", [stats("m", 5)], {}))
    assert [(s.name, s.success.count) for s, _ in board.statistics()] == [("m", 8)]
    assert board.replicas() == {"m": (2, None)}


def test_a_model_that_failed_to_load_says_why_and_serves_where_it_loaded():
    board = Board()
    board.post("a", Post("m", [], {}, "failed to load 'm': no such file"))
    assert board.replicas() == {"m": (0, "failed to load 'm': no such file")}
    board.post("b", Post("m", [stats("m", 1)], {}))
    assert board.replicas() == {"m": (1, "failed to load 'm': no such file")}
