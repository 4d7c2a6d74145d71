"""Per model-version counters for the V2 statistics extension and Prometheus.

Durations are nanoseconds, as the statistics extension reports them. Updates
happen on the event loop thread only, so plain integers need no lock.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from gateway.operation.histogram import Histogram

# Seconds: the bounds of the request-duration histogram (Prometheus percentiles).
REQUEST_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
                   5.0, 10.0)  # fmt: skip
# The same in nanoseconds: a request is counted without a float.
_REQUEST_BOUNDS_NS = tuple(round(bound * 1e9) for bound in REQUEST_BUCKETS)


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def as_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class BatchStats:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ModelStatistics:
    """Counts for one model version, in the shape of the statistics extension."""

    name: str
    version: str
    last_inference_ms: int = 0
    inference_count: int = 0  # rows (batch elements) inferred
    execution_count: int = 0  # backend runs
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    # Response cache (gateway/core/response_cache.py): a hit's lookup and answer; a miss's
    # lookup and insert.
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    batches: dict[int, BatchStats] = field(default_factory=dict)
    failure_reasons: dict[str, int] = field(default_factory=dict)
    # Requests by duration, answered or failed: REQUEST_BUCKETS, one more for the rest.
    durations: list[int] = field(default_factory=lambda: [0] * (len(REQUEST_BUCKETS) + 1))

    def record_success(self, request_ns: int, queue_ns: int, count: int = 1) -> None:
        """`count` requests (a bundle of them) that each took `request_ns`."""
        self.last_inference_ms = time.time_ns() // 1_000_000
        # Duration.add, inline (here and in record_execution): every request counts
        # eight durations, and the calls cost more than the sums.
        success, queue = self.success, self.queue
        success.count += count
        success.ns += request_ns * count
        queue.count += count
        queue.ns += queue_ns * count
        self.durations[bisect_left(_REQUEST_BOUNDS_NS, request_ns)] += count

    def record_cache_hit(self, request_ns: int) -> None:
        """A request answered from the response cache: a success, but neither inferences
        nor a run (Triton's inference_count leaves cache hits out)."""
        self.record_success(request_ns, 0)
        self.cache_hit.add(request_ns)

    def record_failure(self, request_ns: int, reason: str, count: int = 1) -> None:
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.fail.add(request_ns * count, count)
        self.failure_reasons[reason] = self.failure_reasons.get(reason, 0) + count
        self.durations[bisect_left(_REQUEST_BOUNDS_NS, request_ns)] += count

    @property
    def duration_histogram(self) -> Histogram:
        """Request durations in seconds, for Prometheus (built when asked for)."""
        histogram = Histogram(REQUEST_BUCKETS)
        histogram.counts = list(self.durations)
        histogram.sum = (self.success.ns + self.fail.ns) * 1e-9
        return histogram

    def record_execution(
        self,
        batch_size: int,
        requests: int,
        input_ns: int,
        infer_ns: int,
        output_ns: int,
        rows: int | None = None,
    ) -> None:
        """One backend run of `batch_size` rows (padding included; `rows` without it)
        that served `requests` requests."""
        self.execution_count += 1
        self.inference_count += batch_size if rows is None else rows
        # As in Triton, every request of a batch is charged the batch's whole durations.
        d = self.compute_input
        d.count += requests
        d.ns += input_ns * requests
        d = self.compute_infer
        d.count += requests
        d.ns += infer_ns * requests
        d = self.compute_output
        d.count += requests
        d.ns += output_ns * requests
        batch = self.batches.get(batch_size)
        if batch is None:
            batch = self.batches[batch_size] = BatchStats()
        d = batch.compute_input
        d.count += 1
        d.ns += input_ns
        d = batch.compute_infer
        d.count += 1
        d.ns += infer_ns
        d = batch.compute_output
        d.count += 1
        d.ns += output_ns

    def as_dict(self) -> dict[str, Any]:
        """The statistics extension's JSON for this version."""
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.as_dict(),
                "fail": self.fail.as_dict(),
                "queue": self.queue.as_dict(),
                "compute_input": self.compute_input.as_dict(),
                "compute_infer": self.compute_infer.as_dict(),
                "compute_output": self.compute_output.as_dict(),
                "cache_hit": self.cache_hit.as_dict(),
                "cache_miss": self.cache_miss.as_dict(),
            },
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": stats.compute_input.as_dict(),
                    "compute_infer": stats.compute_infer.as_dict(),
                    "compute_output": stats.compute_output.as_dict(),
                }
                for size, stats in sorted(self.batches.items())
            ],
        }


_DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
              "cache_hit", "cache_miss")  # fmt: skip


def merged(parts: list[ModelStatistics]) -> ModelStatistics:
    """One model version's counters summed over the processes that served it (the
    replicas of a Ray deployment); the latest inference is the latest of any."""
    total = ModelStatistics(parts[0].name, parts[0].version)
    for part in parts:
        total.last_inference_ms = max(total.last_inference_ms, part.last_inference_ms)
        total.inference_count += part.inference_count
        total.execution_count += part.execution_count
        for name in _DURATIONS:
            getattr(total, name).add(getattr(part, name).ns, getattr(part, name).count)
        for size, batch in part.batches.items():
            into = total.batches.setdefault(size, BatchStats())
            for name in ("compute_input", "compute_infer", "compute_output"):
                getattr(into, name).add(getattr(batch, name).ns, getattr(batch, name).count)
        for reason, count in part.failure_reasons.items():
            total.failure_reasons[reason] = total.failure_reasons.get(reason, 0) + count
        total.durations = [a + b for a, b in zip(total.durations, part.durations, strict=True)]
    return total
