"""The in-process pricing harness (benchmarks/in_process.py) over both fronts: it prices
answered requests only, and its pairs compare like with like."""

from __future__ import annotations

import os
import statistics

import pytest

from benchmarks.grpc_path import GrpcPath, simple_grpc_request
from benchmarks.http_path import HttpPath, simple_request
from benchmarks.in_process import paired_difference, path_ns, priced_verdict

PATHS = {
    "http": (HttpPath, simple_request),
    "grpc": (GrpcPath, simple_grpc_request),
}
# What each path says of an answer to a model that is not there.
NOT_FOUND = {
    "http": r"answered 200 x 404$",  # the warm-up's 200 requests, each counted
    "grpc": r"grpc-status 200 x 5 \(.*'missing' is not found",
}


@pytest.mark.parametrize("protocol", PATHS)
def test_each_round_prices_answered_requests(repository_copy, protocol):
    open_path, request = PATHS[protocol]
    repository = repository_copy("simple")
    core = min(os.sched_getaffinity(0))
    requests = {"a": request("simple"), "b": request("simple")}
    rounds = path_ns(repository, requests, core, open_path, 4, 20)
    assert len(rounds["a"]) == len(rounds["b"]) == 4
    assert all(0 < ns < 50_000_000 for ns in rounds["a"] + rounds["b"])
    base, added, _, _ = paired_difference(rounds, "a", "b")
    assert base == statistics.median(rounds["a"])
    assert added == statistics.median(b - a for a, b in zip(rounds["a"], rounds["b"], strict=True))


@pytest.mark.parametrize("protocol", PATHS)
def test_a_path_that_fails_is_not_priced(repository_copy, protocol):
    open_path, request = PATHS[protocol]
    repository = repository_copy("simple")
    with pytest.raises(RuntimeError, match=NOT_FOUND[protocol]):
        core = min(os.sched_getaffinity(0))
        path_ns(repository, {"missing": request("missing")}, core, open_path, 1, 5)


def test_the_verdict_is_judged_at_the_intervals_top():
    # 100 us a request on the core; 2 us added, up to 4 us: 0.980, 0.962 at the top.
    verdict = priced_verdict(100_000, (90_000, 2_000, 1_000, 4_000), 0.97, "gRPC")
    assert verdict.startswith("0.9804 (at the interval's top 0.9615; the gRPC path 90.0 us")
    assert verdict.endswith("goal >= 0.97: not met")
