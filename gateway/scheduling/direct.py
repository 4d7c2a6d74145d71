"""The scheduler for models without dynamic batching: each request runs alone.

Requests wait for an idle instance in arrival order; the wait is bounded by
`max_queue_size`, past which the answer is an immediate 503.
"""

from __future__ import annotations

import time

from accel_base.errors import Cancelled, GatewayError, Unavailable
from gateway.inference import InferRequest, InferResponse
from gateway.scheduling.pool import InstancePool
from gateway.scheduling.responses import backend_failure, build_response
from gateway.statistics import ModelStatistics
from gateway.validation import RequestRules, check_request


class DirectScheduler:
    def __init__(
        self,
        pool: InstancePool,
        rules: RequestRules,
        output_datatypes: dict[str, str],
        stats: ModelStatistics,
        max_queue_size: int,
    ) -> None:
        self.pool = pool
        self.rules = rules
        self.output_datatypes = output_datatypes
        self.stats = stats
        self.max_queue_size = max_queue_size
        self.pending = 0  # requests accepted and not yet answered

    async def infer(self, request: InferRequest) -> InferResponse:
        start = time.perf_counter_ns()
        try:
            feed, output_names, batch_size = check_request(request, self.rules)
        except GatewayError:
            self.stats.record_failure(time.perf_counter_ns() - start, "REJECTED")
            raise
        if self.pending >= self.max_queue_size:
            self.stats.record_failure(time.perf_counter_ns() - start, "REJECTED")
            raise Unavailable(
                f"model '{self.rules.model}' has {self.pending} requests pending, its limit "
                "(max_queue_size); retry later"
            )
        self.pending += 1
        try:
            return await self._run(request, feed, output_names, batch_size, start)
        finally:
            self.pending -= 1

    async def _run(self, request, feed, output_names, batch_size, start) -> InferResponse:
        instance = await self.pool.acquire()
        queued = time.perf_counter_ns()
        if request.client_gone is not None and request.client_gone():
            self.pool.release(instance)
            self.stats.record_failure(queued - start, "CANCELED")
            raise Cancelled("the client disconnected before the request ran")
        try:
            outputs, infer_ns = await instance.run(feed, output_names)
        except Exception as exc:  # the backend's own failure, reported with its message
            self.stats.record_failure(time.perf_counter_ns() - start, "BACKEND")
            raise backend_failure(self.rules.model, exc) from exc
        finally:
            self.pool.release(instance)
        ran = time.perf_counter_ns()
        response = build_response(
            request, self.stats.version, output_names, self.output_datatypes, outputs
        )
        done = time.perf_counter_ns()
        # Time in the instance's thread beyond the backend call is input hand-off.
        self.stats.record_execution(
            max(batch_size, 1), 1, ran - queued - infer_ns, infer_ns, done - ran
        )
        self.stats.record_success(done - start, queued - start)
        return response
