"""The scheduler for models without dynamic batching: each request runs alone.

Requests wait for an idle instance in arrival order. The wait is bounded in count
(`max_queue_size`) and in time (admission.py): a request that could not start within
its own deadline, or the model's queue budget if it has one, or that a growing backlog
would make wait, gets an immediate 503, and one whose
caller went away or whose deadline passed while it waited does not run.
"""

from __future__ import annotations

import asyncio
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
            # (Conditionals, not min() and max(), on the path of every request: a builtin
            # call with its keyword parsing costs several times a comparison.)
            instances = len(self.pool.instances)
            running = self.pending if self.pending < instances else instances
            self.admission.check(
                running, self.pending - running, self.pending, time.monotonic(), deadline
            )
        except GatewayError:
            self.stats.record_failure(time.perf_counter_ns() - start, "REJECTED")
            raise
        self.pending += 1
        try:
            # An idle instance at once, else a wait in line (no coroutine for the first).
            instance = self.pool.try_acquire() or await self.pool.acquire()
            queued = time.perf_counter_ns()
            self._check_still_wanted(request, instance, deadline, queued - start)
            try:
                if self.per_request:  # scheduling/per_request.py
                    run = self._run_alone(instance, request, feed, output_names, batch_size)
                else:
                    run = instance.run(feed, output_names)
                outputs, infer_ns = await run
            except Exception as exc:  # the backend's own failure, reported with its message
                self.stats.record_failure(time.perf_counter_ns() - start, "BACKEND")
                raise backend_failure(self.rules.model, exc) from exc
            finally:
                self.pool.release(instance)
            # The backend's own time: the wall time here would count the event loop's
            # other work too, which is not this instance's capacity.
            self.admission.observe(infer_ns / 1e9, 1, (id(instance), batch_size))
            return self._answer(request, output_names, outputs, infer_ns, batch_size, start,
                                queued)  # fmt: skip
        except asyncio.CancelledError:  # its caller left, waiting or running: Triton's CANCELED
            self.stats.record_failure(time.perf_counter_ns() - start, "CANCELED")
            raise
        finally:
            self.pending -= 1

    def _check_still_wanted(self, request, instance, deadline, waited_ns: int) -> None:
        """Raise (giving the instance back) if the request's caller went away, or its
        deadline passed, while it waited for the instance."""
        if request.client_gone is not None and request.client_gone():
            self.pool.release(instance)
            self.stats.record_failure(waited_ns, "CANCELED")
            raise Cancelled("the client disconnected before the request ran")
        if deadline is not None and time.monotonic() >= deadline:
            self.pool.release(instance)
            self.stats.record_failure(waited_ns, "REJECTED")
            raise Unavailable(
                f"request to model '{self.rules.model}' reached its deadline before it ran"
            )

    async def _run_alone(self, instance, request, feed, output_names, batch_size):
        """A backend that answers each request on its own: its outputs and run time."""
        info = request_info(request, max(batch_size, 1), output_names)
        parts, infer_ns, failures = await run_requests(
            instance, feed, output_names, [info], self.rules.model, [request]
        )
        if failures:
            raise failures[0]
        return parts[0], infer_ns

    def _answer(self, request, output_names, outputs, infer_ns, batch_size, start, queued):
        """The response to a request that ran, with its statistics counted."""
        ran = time.perf_counter_ns()
        response = build_response(
            request, self.stats.version, output_names, self.output_datatypes, outputs
        )
        done = time.perf_counter_ns()
        # Time in the instance's thread beyond the backend call is input hand-off.
        rows = batch_size or 1  # a model without batching: one row
        self.stats.record_execution(rows, 1, ran - queued - infer_ns, infer_ns, done - ran)
        self.stats.record_success(done - start, queued - start)
        if request.trace is not None:
            batch_ran(
                [(request.trace, start)], self.rules.model, self.stats.version, rows, rows,
                queued, infer_ns, ran, done,
            )  # fmt: skip
        return response
