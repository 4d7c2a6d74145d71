"""The scheduler for models without dynamic batching: each request runs alone.

Requests wait for an idle instance in arrival order. The wait is bounded in count
(`max_queue_size`) and in time (admission.py): a request that could not start within
its own deadline, or the model's queue budget if it has one, or that a growing backlog
would make wait, gets an immediate 503, and one whose
caller went away or whose deadline passed while it waited does not run.
"""

from __future__ import annotations

import time

from accel_base.errors import Cancelled, GatewayError, Unavailable
from gateway.core.inference import InferRequest, InferResponse
from gateway.core.scheduling.admission import Admission, deadline_of
from gateway.core.scheduling.per_request import request_info, run_requests
from gateway.core.scheduling.pool import InstancePool
from gateway.core.scheduling.responses import backend_failure, build_response
from gateway.core.statistics import ModelStatistics
from gateway.core.validation import RequestRules, check_request
from gateway.operation.tracing.tracer import batch_ran


class DirectScheduler:
    def __init__(
        self,
        pool: InstancePool,
        rules: RequestRules,
        output_datatypes: dict[str, str],
        stats: ModelStatistics,
        max_queue_size: int,
        queue_budget_ms: float | None,  # None: shed only a growing backlog
        per_request: bool = False,
    ) -> None:
        self.pool = pool
        self.per_request = per_request  # the backend answers each request on its own
        self.rules = rules
        self.output_datatypes = output_datatypes
        self.stats = stats
        self.max_queue_size = max_queue_size
        self.pending = 0  # requests accepted and not yet answered
        self.admission = Admission(rules.model, len(pool.instances), queue_budget_ms)

    async def infer(self, request: InferRequest) -> InferResponse:
        start = time.perf_counter_ns()
        try:
            feed, output_names, batch_size = check_request(request, self.rules)
            deadline = deadline_of(request, time.monotonic())
            if self.pending >= self.max_queue_size:
                raise Unavailable(
                    f"model '{self.rules.model}' has {self.pending} requests pending, its "
                    "limit (max_queue_size); retry later"
                )
            running = min(self.pending, len(self.pool.instances))
            self.admission.check(
                running, self.pending - running, self.pending, time.monotonic(), deadline
            )
        except GatewayError:
            self.stats.record_failure(time.perf_counter_ns() - start, "REJECTED")
            raise
        self.pending += 1
        try:
            return await self._run(request, feed, output_names, batch_size, start, deadline)
        finally:
            self.pending -= 1

    async def _run(self, request, feed, output_names, batch_size, start, deadline) -> InferResponse:
        instance = await self.pool.acquire()
        queued = time.perf_counter_ns()
        held = time.monotonic()
        if request.client_gone is not None and request.client_gone():
            self.pool.release(instance)
            self.stats.record_failure(queued - start, "CANCELED")
            raise Cancelled("the client disconnected before the request ran")
        if deadline is not None and held >= deadline:
            self.pool.release(instance)
            self.stats.record_failure(queued - start, "REJECTED")
            raise Unavailable(
                f"request to model '{self.rules.model}' reached its deadline before it ran"
            )
        try:
            if self.per_request:  # scheduling/per_request.py
                info = request_info(request, max(batch_size, 1), output_names)
                parts, infer_ns, failures = await run_requests(
                    instance, feed, output_names, [info], self.rules.model
                )
                if failures:
                    raise failures[0]
                outputs = parts[0]
            else:
                outputs, infer_ns = await instance.run(feed, output_names)
        except Exception as exc:  # the backend's own failure, reported with its message
            self.stats.record_failure(time.perf_counter_ns() - start, "BACKEND")
            raise backend_failure(self.rules.model, exc) from exc
        finally:
            self.pool.release(instance)
        # The backend's own time: the wall time here would count the event loop's other
        # work too, which is not this instance's capacity.
        self.admission.observe(infer_ns / 1e9, 1, (id(instance), batch_size))
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
        if request.trace is not None:
            rows = max(batch_size, 1)
            batch_ran(
                [(request.trace, start)], self.rules.model, self.stats.version, rows, rows,
                queued, infer_ns, ran, done,
            )  # fmt: skip
        return response
