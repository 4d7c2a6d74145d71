"""The sequence batcher (`sequence_batching`), Triton's semantics: every request carries a
correlation id (`sequence_id`) and START/END flags; a sequence keeps one instance for
its life, and its requests run one at a time, in order. A batch takes at most one
request of each sequence:
- `direct`: each sequence holds a row (slot) of its instance's batches; a batch is as
  long as its highest busy slot, and idle slots go with READY false.
- `oldest`: the instance's sequences with a request waiting, oldest first, up to
  max_batch_size; a smaller batch waits up to max_queue_delay_microseconds for a
  preferred size.
The server fills the control inputs and the implicit state (controls.py). A sequence
unseen for max_sequence_idle_microseconds (default 1 s, as Triton's) is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from accel_base import batch as batching
from accel_base.errors import GatewayError, InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.inference import InferRequest, InferResponse
from gateway.core.scheduling.per_request import request_info, run_requests
from gateway.core.scheduling.pool import InstancePool
from gateway.core.scheduling.responses import backend_failure, build_response
from gateway.core.scheduling.sequence.controls import (
    CORRID,
    EMPTY_ROW,
    RowFlags,
    control_feed,
    controls_of,
    initial_state,
    states_of,
)
from gateway.core.scheduling.sequence.registry import Queued, Registry, Sequence, correlation_id
from gateway.core.statistics import ModelStatistics
from gateway.core.validation import RequestRules, check_request
from gateway.operation.tracing.tracer import batch_ran

DEFAULT_IDLE_S = 1.0  # Triton's default max_sequence_idle_microseconds


class SequenceBatcher:
    def __init__(
        self,
        pool: InstancePool,
        rules: RequestRules,
        output_datatypes: dict[str, str],
        stats: ModelStatistics,
        config: mc.ModelConfig,
        max_queue_size: int,
        clock: Callable[[], float] = time.monotonic,
        per_request: bool = False,
    ) -> None:
        """`per_request`: the backend answers each request on its own (a Python model:
        scheduling/per_request.py)."""
        settings = config.sequence_batching
        self.pool = pool
        self.rules = rules
        self.output_datatypes = output_datatypes
        self.stats = stats
        self.clock = clock
        self.controls = controls_of(config)
        self.states = states_of(config)
        self.batched = config.max_batch_size > 0
        self.per_request = per_request
        self.oldest = settings.HasField("oldest")
        strategy = settings.oldest if self.oldest else settings.direct
        self.max_delay_s = strategy.max_queue_delay_microseconds / 1e6
        self.preferred = max(settings.oldest.preferred_batch_size, default=0)
        self.slots = max(config.max_batch_size, 1)
        limit = settings.oldest.max_candidate_sequences or max_queue_size
        self.registry = Registry(
            rules.model, len(pool.instances), self.slots, not self.oldest, limit
        )
        self.idle_s = settings.max_sequence_idle_microseconds / 1e6 or DEFAULT_IDLE_S
        self.max_queue_size = max_queue_size
        self.pending = 0  # requests accepted and not yet answered
        self._wake = [asyncio.Event() for _ in pool.instances]
        self._drivers: list[asyncio.Task] = []

    # ---- the request side ------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse:
        start_ns = time.perf_counter_ns()
        try:
            sequence_id, start, end = correlation_id(request, self.rules.model)
            self._check_corrid(sequence_id)
            feed, output_names, rows = check_request(request, self.rules)
            if self.batched and rows != 1:
                raise InvalidArgument(
                    f"a request of a sequence to model '{self.rules.model}' is one row; "
                    f"got a batch of {rows}"
                )
            if self.pending >= self.max_queue_size:
                raise Unavailable(
                    f"model '{self.rules.model}' has {self.pending} requests pending, its "
                    "limit (max_queue_size); retry later"
                )
            now = self.clock()
            sequence = self.registry.sequence_for(sequence_id, start, now)
        except GatewayError:
            self.stats.record_failure(time.perf_counter_ns() - start_ns, "REJECTED")
            raise
        queued = Queued(request, feed, output_names, start, end, now, start_ns)
        queued.future = asyncio.get_running_loop().create_future()
        # Pending until answered, even if its caller goes: it still runs, in its turn.
        queued.future.add_done_callback(self._answered)
        sequence.waiting.append(queued)
        self.pending += 1
        self._ensure_drivers()
        self._wake[sequence.instance].set()
        try:
            outputs = await asyncio.shield(queued.future)  # a batch answers it either way
        except asyncio.CancelledError:  # its caller left: a Python model's is_cancelled()
            request.cancelled = True
            raise
        return build_response(
            request, self.stats.version, output_names, self.output_datatypes, outputs
        )

    def _answered(self, _: asyncio.Future) -> None:
        self.pending -= 1

    def _check_corrid(self, sequence_id: int | str) -> None:
        """A correlation id the model's CORRID control can carry, or a 400 now (not a
        failed batch later)."""
        for control in self.controls:
            if control.kind != CORRID or control.dtype.hasobject:
                continue
            if isinstance(sequence_id, str):
                raise InvalidArgument(
                    f"model '{self.rules.model}' takes numeric correlation ids (its CORRID "
                    f"control is {control.dtype}); got the string '{sequence_id}'"
                )
            limits = np.iinfo(control.dtype)
            if not limits.min <= sequence_id <= limits.max:
                raise InvalidArgument(
                    f"correlation id {sequence_id} does not fit model '{self.rules.model}''s "
                    f"CORRID control ({control.dtype})"
                )

    # ---- the drivers: one per instance, one batch at a time --------------------------

    def _ensure_drivers(self) -> None:
        if not self._drivers:
            loop = asyncio.get_running_loop()
            # Contexts of their own: they serve every sequence, not the request whose task
            # started them (its context variables: the request id logs carry).
            self._drivers = [
                loop.create_task(self._drive(i), context=contextvars.Context())
                for i in range(len(self._wake))
            ]

    async def _drive(self, index: int) -> None:
        instance, wake = self.pool.instances[index], self._wake[index]
        swept = self.clock()
        while True:
            if self.clock() - swept >= self.idle_s / 4:  # under load too
                self._release_idle()
                swept = self.clock()
            chosen, wait_s = self._choose(index)
            if not chosen:
                wake.clear()
                timeout = self.idle_s / 4 if wait_s is None else wait_s
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout)
                continue
            await self._run(instance, chosen)

    def _choose(self, index: int) -> tuple[list[Sequence], float | None]:
        """The sequences whose next requests make this instance's next batch (one shape
        only: rows are merged), or none and how long to wait for more."""
        ready = [
            s
            for s in self.registry.live.values()
            if s.instance == index and s.waiting and not s.running
        ]
        if not ready:
            return [], None
        ready.sort(key=lambda s: s.waiting[0].arrived)
        key = batching.merge_key(ready[0].waiting[0].feed)
        same = [s for s in ready if batching.merge_key(s.waiting[0].feed) == key]
        same = same[: self.slots]  # (the direct strategy never has more)
        if self.oldest:
            waited = self.clock() - same[0].waiting[0].arrived
            want = min(self.preferred or self.slots, self.slots)
            if len(same) < want and waited < self.max_delay_s:
                return [], self.max_delay_s - waited
        return same, None

    async def _run(self, instance: Any, chosen: list[Sequence]) -> None:
        requests = [s.waiting.popleft() for s in chosen]
        for sequence, queued in zip(chosen, requests, strict=True):
            sequence.running = True
            if queued.start:  # a START begins afresh, even for a live id
                sequence.state = {}
        rows = self._rows(chosen)
        began = time.perf_counter_ns()
        try:
            feed = self._feed(chosen, requests, rows)
            names = sorted({n for q in requests for n in q.output_names})
            states = [s.output for s in self.states if s.output not in names]
            wanted = names + states
            if self.per_request:  # a Python model: each request answered on its own
                infos = [request_info(q.request, 1, q.output_names + states) for q in requests]
                parts, infer_ns, failures = await run_requests(
                    instance, feed, wanted, infos, self.rules.model, [q.request for q in requests]
                )
                ran = time.perf_counter_ns()
                self._answer_each(chosen, requests, parts, failures)
            else:
                failures = {}
                outputs, infer_ns = await instance.run(feed, wanted)
                ran = time.perf_counter_ns()
                self._answer(chosen, requests, rows, outputs, names)
        except Exception as exc:  # the batch fails its own requests; the sequences go on
            error = backend_failure(self.rules.model, exc)
            for queued in requests:
                self.stats.record_failure(time.perf_counter_ns() - queued.start_ns, "BACKEND")
                if not queued.future.done():
                    queued.future.set_exception(error)
            return
        except BaseException:  # cancelled by an unload: the batch's requests are answered
            gone = Unavailable(f"model '{self.rules.model}' was unloaded while this ran")
            for queued in requests:
                if not queued.future.done():
                    queued.future.set_exception(gone)
            raise
        finally:
            for sequence, queued in zip(chosen, requests, strict=True):
                sequence.running = False
                sequence.last_seen = self.clock()
                if queued.end and not sequence.waiting:
                    self.registry.release(sequence)
        done = time.perf_counter_ns()
        self.stats.record_execution(
            len(rows), len(requests), 0, infer_ns, done - ran, rows=len(requests)
        )
        for index, queued in enumerate(requests):
            if index not in failures:  # those are counted as failures already
                self.stats.record_success(done - queued.start_ns, began - queued.start_ns)
        batch_ran(
            ((q.request.trace, q.start_ns) for q in requests), self.rules.model,
            self.stats.version, len(requests), len(rows), began, infer_ns, ran, done,
        )  # fmt: skip

    def _rows(self, chosen: list[Sequence]) -> list[Sequence | None]:
        """Each row of the batch: its sequence, or None for an idle direct slot (none for
        a Python model, whose execute() gets the requests themselves)."""
        if self.oldest or not self.batched or self.per_request:
            return list(chosen)
        rows: list[Sequence | None] = [None] * (max(s.slot for s in chosen) + 1)
        for sequence in chosen:
            rows[sequence.slot] = sequence
        return rows

    def _feed(
        self, chosen: list[Sequence], requests: list[Queued], rows: list[Sequence | None]
    ) -> dict[str, np.ndarray]:
        by_sequence = {id(s): q for s, q in zip(chosen, requests, strict=True)}
        template = requests[0].feed
        feed = {}
        for name, first in template.items():
            parts = [
                by_sequence[id(s)].feed[name] if s is not None else np.zeros_like(first)
                for s in rows
            ]
            feed[name] = np.concatenate(parts) if self.batched else parts[0]
        flags = [
            RowFlags(q.start, q.end, True, s.id) if s is not None else EMPTY_ROW
            for s, q in ((s, by_sequence.get(id(s))) for s in rows)
        ]
        feed.update(control_feed(self.controls, flags, self.batched))
        for state in self.states:
            values = [
                s.state.get(state.input, initial_state(state)) if s is not None
                else initial_state(state)
                for s in rows
            ]  # fmt: skip
            feed[state.input] = np.stack(values) if self.batched else values[0]
        return feed

    def _answer(self, chosen, requests, rows, outputs, names) -> None:
        missing = [n for n in names + [s.output for s in self.states] if n not in outputs]
        if missing:
            raise batching.BatchShapeError(f"the backend returned no output {missing}")
        index = {id(s): i for i, s in enumerate(rows) if s is not None}
        for sequence, queued in zip(chosen, requests, strict=True):
            row = index[id(sequence)]
            part = {
                n: outputs[n][row : row + 1] if self.batched else outputs[n]
                for n in queued.output_names
            }
            for state in self.states:  # kept past this batch: a copy, not a view
                value = outputs[state.output]
                sequence.state[state.input] = np.array(value[row] if self.batched else value)
            if not queued.future.done():
                queued.future.set_result({n: np.array(v) for n, v in part.items()})

    def _answer_each(self, chosen, requests, parts, failures) -> None:
        """A per-request backend's answers: each request's own outputs, or its failure."""
        for index, (sequence, queued) in enumerate(zip(chosen, requests, strict=True)):
            failure = failures.get(index)
            if failure is None:
                part = parts[index]
                for state in self.states:
                    value = part.get(state.output)
                    if value is not None:  # kept past this batch: a copy, not a view
                        sequence.state[state.input] = np.array(value[0] if self.batched else value)
                result: Any = {n: np.array(part[n]) for n in queued.output_names if n in part}
            if queued.future.done():
                continue
            if failure is not None:
                self.stats.record_failure(time.perf_counter_ns() - queued.start_ns, "BACKEND")
                queued.future.set_exception(failure)
            else:
                queued.future.set_result(result)

    def _release_idle(self) -> None:
        for sequence in self.registry.idle(self.clock(), self.idle_s):
            self.registry.release(sequence)

    async def close(self) -> None:
        for task in self._drivers:
            task.cancel()
        await asyncio.gather(*self._drivers, return_exceptions=True)
        error = Unavailable(f"model '{self.rules.model}' was unloaded")
        for sequence in list(self.registry.live.values()):
            while sequence.waiting:
                queued = sequence.waiting.popleft()
                if not queued.future.done():
                    queued.future.set_exception(error)
