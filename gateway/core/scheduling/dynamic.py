"""The dynamic batcher: one driver task per model version turns queued requests into batches.

Whenever an instance is free, the driver asks the planner what to do, sends the
batch it gets to that instance, and waits for the next arrival or the end of the
batch window otherwise. Requests that carry several rows are merged whole; every
input's trailing dimensions are checked before merging (batch.merge_key).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accel_base import batch as batching
from accel_base.errors import Cancelled, GatewayError, InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.inference import InferRequest, InferResponse
from gateway.core.scheduling.admission import Admission, Overloaded, deadline_of, int_parameter
from gateway.core.scheduling.per_request import Failures, request_info, run_requests
from gateway.core.scheduling.planner import BatchingRules, Send, plan
from gateway.core.scheduling.pool import InstancePool
from gateway.core.scheduling.queue import Pending, RequestQueue
from gateway.core.scheduling.responses import backend_failure, build_response
from gateway.core.scheduling.window import ArrivalRate
from gateway.core.statistics import ModelStatistics
from gateway.core.validation import RequestRules, check_request
from gateway.operation.tracing.tracer import batch_ran

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Context:
    request: InferRequest
    start_ns: int
    # When the queue took it: its queue time starts here, as Triton's does, after the
    # checks (validation and admission cost 15-20 us of a lone request's 30 on one core).
    queued_ns: int
    deadline: float | None = None  # when the caller stops waiting (clock seconds)


class DynamicBatcher:
    def __init__(
        self,
        pool: InstancePool,
        rules: RequestRules,
        output_datatypes: dict[str, str],
        stats: ModelStatistics,
        config: mc.ModelDynamicBatching,
        max_batch_size: int,
        max_queue_size: int,
        queue_budget_ms: float | None,  # None: shed only a growing backlog
        allowed_batch_sizes: tuple[int, ...] | None = None,
        clock: Callable[[], float] = time.monotonic,
        adaptive_window: bool = True,
        per_request: bool = False,
    ) -> None:
        self.pool = pool
        self.rules = rules
        self.output_datatypes = output_datatypes
        self.stats = stats
        self.queue = RequestQueue.from_config(config, max_queue_size)
        self.batching = BatchingRules(
            max_batch_size=max_batch_size,
            preferred_sizes=tuple(config.preferred_batch_size),
            max_queue_delay_s=config.max_queue_delay_microseconds / 1e6,
            adaptive=adaptive_window,
        )
        self.arrivals = ArrivalRate()
        self.preserve_ordering = config.preserve_ordering
        self.per_request = per_request  # the backend answers each request on its own
        self.allowed_batch_sizes = allowed_batch_sizes
        self.clock = clock
        # A backlog runs as batches of max_batch_size rows (the planner sends a full batch
        # before it looks at preferred sizes), each with a run's fixed cost.
        self.admission = Admission(
            rules.model, len(pool.instances), queue_budget_ms, max_batch=max(max_batch_size, 1)
        )
        self._arrival = asyncio.Event()
        self._last_done: asyncio.Future | None = None  # preserve_ordering chain
        self._driver: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()
        self._traced = 0  # traced requests queued or running: their batches make spans

    @property
    def pending(self) -> int:
        """Requests accepted and not yet answered (queued or running)."""
        return self.arrivals.pending

    # ---- the request side ------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        start = time.perf_counter_ns()
        try:
            feed, output_names, rows = check_request(request, self.rules)
            now = self.clock()
            # (No call for a parameter the request does not have, nor min() or max():
            # every request pays these.)
            parameters = request.parameters
            priority = int_parameter(request, "priority") if "priority" in parameters else None
            timeout_us = int_parameter(request, "timeout") if "timeout" in parameters else None
            rows = rows if rows > 1 else 1  # a model without batching: one row
            level = self.queue.level_for(priority)
            # Under a DELAY queue policy the timeout parameter only moves the request to
            # the back of the queue; its front's deadline (gRPC) still holds.
            if self.queue.policies[level].delay_on_timeout:
                deadline = request.deadline
            else:
                deadline = deadline_of(request, now)
            self.admission.check(
                len(self._running), self.queue.rows, self.pending, now, deadline, rows
            )
            pending = self.queue.push(
                feed, output_names, rows, batching.merge_key(feed), now, priority, timeout_us,
                request.count,
            )  # fmt: skip
        except GatewayError as exc:
            # A front's bundle refused as malformed comes again as its members, each
            # counted then (gateway/front_processes/host.py).
            if request.count == 1 or not isinstance(exc, InvalidArgument):
                elapsed = time.perf_counter_ns() - start
                self.stats.record_failure(elapsed, "REJECTED", request.count)
            if isinstance(exc, Unavailable) and not isinstance(exc, Overloaded):
                raise Unavailable(f"model '{self.rules.model}': {exc.message}") from None
            raise
        loop = asyncio.get_running_loop()
        pending.future = loop.create_future()
        pending.context = _Context(request, start, time.perf_counter_ns(), deadline)
        traced = request.trace is not None
        if traced:
            self._traced += 1
        previous, done = self._last_done, None
        if self.preserve_ordering:
            done = self._last_done = loop.create_future()
        self.arrivals.arrived(now, request.count)
        self._ensure_driver()
        self._arrival.set()
        try:
            outputs = await pending.future
            if previous is not None:
                await asyncio.shield(previous)  # answer in arrival order
        except asyncio.CancelledError:
            if self.queue.remove(pending):  # still queued: it never runs
                elapsed = time.perf_counter_ns() - start
                self.stats.record_failure(elapsed, "CANCELED", request.count)
            else:  # running: a Python model may ask is_cancelled() and stop early
                request.cancelled = True
            raise
        finally:
            self.arrivals.answered(self.clock(), request.count)
            if traced:
                self._traced -= 1
            if done is not None:
                done.set_result(None)
        return build_response(
            request, self.stats.version, output_names, self.output_datatypes, outputs
        )

    # ---- the driver ------------------------------------------------------------------

    def _ensure_driver(self) -> None:
        if self._driver is None or self._driver.done():
            # A context of its own: the driver serves every request, not the one whose
            # task started it (its context variables: the request id logs carry).
            loop = asyncio.get_running_loop()
            self._driver = loop.create_task(self._drive(), context=contextvars.Context())

    async def _drive(self) -> None:
        while True:
            try:
                instance = self.pool.try_acquire() or await self._acquire()
            except GatewayError as exc:  # no instance left (its worker stopped restarting)
                self._fail_queued(exc)
                self._arrival.clear()
                await self._arrival.wait()
                continue
            try:
                send = await self._next_batch()
            except asyncio.CancelledError:
                self.pool.release(instance)
                raise
            except Exception as exc:  # a bug here must fail the queued requests, not hang them
                self.pool.release(instance)
                log.exception("model '%s': the batcher failed", self.rules.model)
                self._fail_queued(backend_failure(self.rules.model, exc))
                self._arrival.clear()
                await self._arrival.wait()  # try again with the next request, not in a spin
                continue
            # The queue time ends here, where the batch is formed: the hand-off to the
            # instance (a task's turn of the loop, a thread's wake-up) is compute input.
            sent_ns = time.perf_counter_ns()
            for queued in send.requests:
                self.queue.remove(queued)
            if instance.runs_inline:
                # The run holds the event loop either way: run it here, without a task
                # of its own and the turn of the loop it cost (and the driver's waking
                # again once it ended). An instance that says it runs inline never
                # suspends in run(), so nothing here waits on anything.
                try:
                    await self._execute(instance, send, sent_ns)
                except Exception:  # the batch's own failures are answered in _execute
                    log.exception("model '%s': a batch failed", self.rules.model)
                del send, instance, queued
                if self.queue.rows:  # more may go at once: let the loop turn first, so
                    await asyncio.sleep(0)  # callers are answered and sockets read
                continue
            task = asyncio.get_running_loop().create_task(self._execute(instance, send, sent_ns))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
            # Waiting for the next instance must not keep this batch's tensors alive.
            del send, task, instance, queued

    async def _acquire(self) -> Any:
        """Wait for an instance (a worker may be restarting), rejecting queued requests
        whose queue timeout passes meanwhile."""
        if not self.queue.can_time_out:  # nothing to reject meanwhile: the cheap wait
            return await self.pool.acquire()
        acquire = asyncio.ensure_future(self.pool.acquire())
        try:
            while True:
                deadline = self.queue.next_deadline()
                # A request that arrives meanwhile may bring an earlier deadline: look again.
                timeout = 0.05 if deadline is None else min(max(deadline - self.clock(), 0), 0.05)
                done, _ = await asyncio.wait({acquire}, timeout=timeout)
                if done:
                    return acquire.result()
                for pending in self.queue.expire(self.clock()):
                    self._reject_timed_out(pending)
        except BaseException:  # cancelled: an instance handed over meanwhile goes back
            if not acquire.done():
                acquire.cancel()
            elif not acquire.cancelled() and acquire.exception() is None:
                self.pool.release(acquire.result())
            raise

    async def _next_batch(self) -> Send:
        while True:
            if not self.queue.rows:  # nothing queued (every request has a row): no plan
                self._arrival.clear()
                await self._arrival.wait()
                continue
            now = self.clock()
            for pending in self.queue.expire(now):
                self._reject_timed_out(pending)
            decision = plan(self.queue, now, self.batching, self.arrivals.per_second(now))
            if isinstance(decision, Send):
                return decision
            wake = decision.time
            deadline = self.queue.next_deadline()
            if deadline is not None:
                wake = deadline if wake is None else min(wake, deadline)
            self._arrival.clear()
            if wake is None:  # an empty queue waits for news alone, without a timer
                await self._arrival.wait()
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrival.wait(), max(wake - self.clock(), 0.0))

    def _fail_queued(self, error: GatewayError) -> None:
        for pending in list(self.queue.in_order()):
            self.queue.remove(pending)
            if pending.future is not None and not pending.future.done():
                pending.future.set_exception(error)

    def _reject_timed_out(self, pending: Pending) -> None:
        context: _Context = pending.context
        elapsed = time.perf_counter_ns() - context.start_ns
        self.stats.record_failure(elapsed, "REJECTED", context.request.count)
        if pending.future is not None and not pending.future.done():
            pending.future.set_exception(
                Unavailable(
                    f"request to model '{self.rules.model}' timed out in the queue "
                    "(its queue policy's timeout; timeout_action REJECT)"
                )
            )

    async def _execute(self, instance: Any, send: Send, sent_ns: int) -> None:
        now = self.clock()
        try:
            requests = [p for p in send.requests if not self._dropped(p, now)]
            if requests:
                await self._run_batch(instance, requests, sent_ns)
        finally:
            self.pool.release(instance)
            self._arrival.set()  # a free instance is news for the driver too

    def _dropped(self, pending: Pending, now: float) -> bool:
        """Whether a request's client is gone or its deadline passed: it leaves unrun."""
        if pending.future.done():  # cancelled by its caller (a gRPC cancel)
            return True
        context: _Context = pending.context
        elapsed = time.perf_counter_ns() - context.start_ns
        count = context.request.count
        if context.deadline is not None and now >= context.deadline:
            self.stats.record_failure(elapsed, "REJECTED", count)
            pending.future.set_exception(
                Unavailable(
                    f"request to model '{self.rules.model}' reached its deadline before it ran"
                )
            )
            return True
        client_gone = context.request.client_gone
        if client_gone is None or not client_gone():
            return False
        self.stats.record_failure(elapsed, "CANCELED", count)
        pending.future.set_exception(Cancelled("the client disconnected before the request ran"))
        return True

    async def _run_batch(self, instance: Any, requests: list[Pending], start: int) -> None:
        output_names = sorted({name for p in requests for name in p.output_names})
        row_counts = [p.rows for p in requests]
        rows = sum(row_counts)
        try:
            padded_rows = batching.padded_size(rows, self.allowed_batch_sizes)
            merged = batching.merge_padded(
                [p.feed for p in requests], rows, padded_rows, instance.allocator()
            )
            failures: Failures = {}
            if self.per_request:  # answered request by request (scheduling/per_request.py)
                infos = [request_info(p.context.request, p.rows, p.output_names) for p in requests]
                parts, infer_ns, failures = await run_requests(
                    instance, merged, output_names, infos, self.rules.model,
                    [p.context.request for p in requests],
                )  # fmt: skip
            else:
                outputs, infer_ns = await instance.run(merged, output_names)
            # The backend's time, not the loop's.
            self.admission.observe(infer_ns / 1e9, rows, (id(instance), padded_rows))
            ran = time.perf_counter_ns()
            if not self.per_request:
                missing = [name for name in output_names if name not in outputs]
                if missing:
                    raise batching.BatchShapeError(f"the backend returned no output {missing}")
                parts = batching.split(outputs, row_counts, padded_rows)
        except Exception as exc:  # the batch fails only its own requests
            error = backend_failure(self.rules.model, exc)
            for pending in requests:
                context: _Context = pending.context
                elapsed = time.perf_counter_ns() - context.start_ns
                self.stats.record_failure(elapsed, "BACKEND", context.request.count)
                if not pending.future.done():
                    pending.future.set_exception(error)
            return
        done = time.perf_counter_ns()
        # Merging, padding and the hand-off to the instance count as compute input.
        served = sum(p.context.request.count for p in requests)  # a bundle: its requests
        self.stats.record_execution(
            padded_rows, served, (ran - start) - infer_ns, infer_ns, done - ran, rows=rows
        )
        for index, (pending, part) in enumerate(zip(requests, parts, strict=True)):
            context = pending.context
            if pending.future.done():
                continue
            failure = failures.get(index) if failures else None
            if failure is not None:  # this request alone failed (a per-request backend)
                self.stats.record_failure(done - context.start_ns, "BACKEND", pending.count)
                pending.future.set_exception(failure)
            else:
                pending.future.set_result(part)
                queue_ns = start - context.queued_ns
                self.stats.record_success(done - context.start_ns, queue_ns, context.request.count)
        if self._traced:
            batch_ran(
                ((p.context.request.trace, p.context.queued_ns) for p in requests),
                self.rules.model, self.stats.version, rows, padded_rows, start, infer_ns,
                ran, done,
            )  # fmt: skip

    async def close(self) -> None:
        if self._driver is not None:
            self._driver.cancel()
            await asyncio.gather(self._driver, return_exceptions=True)
        # Whatever the drain left queued (a worker restarting past it) is answered now.
        self._fail_queued(Unavailable(f"model '{self.rules.model}' was unloaded"))
        await asyncio.gather(*self._running, return_exceptions=True)
