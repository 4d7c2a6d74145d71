"""Process instances: a model instance whose backend runs in a worker process.

The batch goes to the worker through shared memory (workers.client); the event loop
either waits for the reply right there, for runs short enough that a round trip
through the loop would cost more than it saves (the same rule as a thread instance's
inline runs), or goes on serving and takes the reply when the socket is readable.

When the worker dies (a crash, `kill -9`, out of memory) or hangs past the run
timeout (it is killed then), only the batch it was running fails. The instance stays
out of the pool while a new worker starts, after a backoff that doubles with each
crash in a row; after `max_restarts` crashes in a row it retires for good, with the
reason, and the model answers 503 until it is loaded again. A request waits for the
restart at most `restart_wait_s` (scheduling/restarts.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np

from accel_base import errors
from accel_base.batch import Allocator
from gateway.core.scheduling.execution import WorkerSettings
from gateway.core.scheduling.instances import inline_limit_ns, moving_average
from gateway.core.scheduling.rate_limiter import Needs, RateLimiter, run_limited
from gateway.core.scheduling.restarts import restarting_error, seconds_left
from workers.client import LoadedModel, Reply, WorkerError, WorkerGone, WorkerProcess

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 10.0


def _as_gateway_error(model: str, exc: WorkerError) -> errors.GatewayError:
    """A failure the worker reported, with the class it had there when it is one of ours."""
    cls = errors.by_name(exc.kind)
    if cls is not None:
        return cls(exc.message)
    return errors.Internal(f"model '{model}' failed to run: {exc.kind}: {exc.message}")


class ProcessInstance:
    # Never run by the batcher's driver itself: short runs' replies are waited for on
    # the loop inside run() (see the module's docstring), which may still suspend.
    runs_inline = False

    def __init__(
        self,
        name: str,
        model: str,
        spawn: Callable[[Callable[[WorkerProcess], None]], tuple[WorkerProcess, LoadedModel]],
        settings: WorkerSettings,
        single_core: bool,
        waits_inline: bool = True,
    ) -> None:
        """Start the worker and load the model (blocking: call from a worker thread).
        `waits_inline=False` never blocks the event loop for a reply: a Python model's
        run may wait on the loop itself (its calls to other models)."""
        self.name = name
        self.model = model
        self._spawn = spawn
        self.settings = settings
        self._inline_limit_ns = inline_limit_ns(single_core) if waits_inline else 0
        self._starting: WorkerProcess | None = None  # a worker still loading (close kills it)
        self._closed = False
        self.worker: WorkerProcess | None
        began = time.monotonic()
        self.worker, self.loaded = self._spawn_unless_closed()
        self.start_s = time.monotonic() - began  # a restart's estimate: the last start's time
        self.back_at: float | None = None  # while restarting: when it is expected back
        self.recent_run_ns: float | None = None
        # Not done while a run goes on or a new worker starts (the pool waits for it).
        self.running: asyncio.Future | None = None
        self.retired = False
        self.down_reason: str | None = None  # why the instance cannot run now
        self.crashes = 0  # in a row, without a successful batch between
        self.deaths = 0  # every worker that ended unasked (the restarts metric)
        self._reply: asyncio.Future | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kill_reason: str | None = None
        # Run on each new worker after a crash, before it serves: the model's warm-up
        # samples (gateway/core/warmup.py's warm_worker), where it has any.
        self.rewarm: Callable[[WorkerProcess, tuple[int, ...] | None], None] | None = None
        # With Triton's rate limiter on: the server's limiter and what a run takes.
        self.limit: tuple[RateLimiter, Needs] | None = None

    # ---- running a batch -------------------------------------------------------------

    @property
    def allowed_batch_sizes(self) -> tuple[int, ...] | None:
        return self.loaded.allowed_batch_sizes

    def allocator(self) -> Allocator | None:
        """Arrays in the worker's input arena, for the batcher to merge a batch into."""
        return self.worker.stage if self.worker is not None else None

    async def run(
        self, inputs: dict[str, np.ndarray], output_names: list[str]
    ) -> tuple[dict[str, np.ndarray], int]:
        """The outputs (views into shared memory, valid while referenced) and run ns."""
        outputs, run_ns, _ = await self.run_requests(inputs, output_names, None)
        return outputs, run_ns

    def run_requests(
        self, inputs: dict[str, np.ndarray], output_names: list[str], requests: list | None
    ) -> Coroutine[Any, Any, Reply]:
        """run(), for a per-request backend given which rows are whose (`requests`, as
        workers/protocol.py has them); its failed requests come back apart. To be
        awaited (no coroutine of its own: every run passes here)."""
        if self.limit is not None:  # rate_limiter.py: its resources first
            return run_limited(self, lambda: self._run_requests(inputs, output_names, requests))
        return self._run_requests(inputs, output_names, requests)

    async def _run_requests(
        self, inputs: dict[str, np.ndarray], output_names: list[str], requests: list | None
    ) -> Reply:
        worker = self.worker
        while worker is None:  # it died while the batcher held it: wait for the new one
            recovery = self.running
            if self.retired or self._closed or recovery is None or recovery.done():
                raise errors.Unavailable(f"model '{self.model}': {self.down_reason}")
            try:  # within the bound that the pool keeps for its waiters too
                await asyncio.wait_for(asyncio.shield(recovery), self.restart_wait_s)
            except TimeoutError:
                raise restarting_error(
                    self.model, [self], self.restart_wait_s, seconds_left([self])
                ) from None
            worker = self.worker
        loop = asyncio.get_running_loop()
        self._watch(loop, worker)
        try:
            worker.send_run(inputs, output_names, requests)
        except ValueError as exc:  # the batch's per-request metadata is over one message
            raise errors.InvalidArgument(
                f"model '{self.model}': this batch's request ids and parameters are too large "
                f"to send to its worker ({exc}); send smaller ones"
            ) from None
        except OSError:  # the worker died since its last batch; its reader will see it
            raise errors.Unavailable(
                f"model '{self.model}': the worker process of instance {self.name} is gone; "
                "it is restarting, retry shortly"
            ) from None
        recent = self.recent_run_ns
        if recent is not None and recent < self._inline_limit_ns:
            # Short runs: wait here (bounded), as a thread instance runs them inline.
            try:
                result = worker.reply_within(4 * recent / 1e9)
            except WorkerError as exc:
                raise _as_gateway_error(self.model, exc) from None
            except WorkerGone:
                result = None  # the reader callback sees the end of the socket too
            if result is not None:
                return self._ran(result)
        self._reply = reply = loop.create_future()
        self.running = reply
        # The timeout belongs to the batch, not to its caller, who may be cancelled first.
        timer = loop.call_later(self.settings.run_timeout_s, self._timed_out, worker)
        reply.add_done_callback(lambda _: timer.cancel())
        # shield: a cancelled caller must not lose track of a batch still running.
        return self._ran(await asyncio.shield(reply))

    def _ran(self, result: Reply) -> Reply:
        run_ns = result[1]
        self.recent_run_ns = moving_average(self.recent_run_ns, run_ns)
        self.crashes = 0
        return result

    def attach(self) -> None:
        """Watch the worker's socket from now on (on the event loop), so that a worker that
        dies between batches is noticed and restarted at once."""
        if self.worker is not None:
            self._watch(asyncio.get_running_loop(), self.worker)

    def _watch(self, loop: asyncio.AbstractEventLoop, worker: WorkerProcess) -> None:
        if self._loop is None:
            self._loop = loop
            loop.add_reader(worker.fileno(), self._readable, worker)

    def _readable(self, worker: WorkerProcess) -> None:
        try:
            result = worker.take_reply()
        except BlockingIOError:  # nothing to read after all (run() took the reply itself)
            return
        except WorkerGone:
            self._worker_ended(worker)  # fails the batch in flight, if any
            return
        except WorkerError as exc:
            reply, self._reply = self._reply, None
            if reply is not None and not reply.done():
                reply.set_exception(_as_gateway_error(self.model, exc))
            return
        except Exception as exc:  # e.g. no memory to map a grown arena: never lose the batch
            self._kill_reason = f"sent a reply the gateway could not take ({exc}) and was killed"
            worker.kill()  # its socket closes: the next callback restarts it
            return
        reply, self._reply = self._reply, None
        if reply is not None and not reply.done():
            reply.set_result(result)

    def _timed_out(self, worker: WorkerProcess) -> None:
        if self.worker is worker and self._reply is not None:
            self._kill_reason = (
                f"did not finish a batch within the run timeout ({self.settings.run_timeout_s:g}"
                " s, parameter worker_run_timeout_s) and was killed"
            )
            worker.kill()  # its socket closes: _readable sees it

    # ---- death and restart -----------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.worker.pid if self.worker is not None else None

    @property
    def restarting(self) -> bool:
        return self.worker is None and not self.retired and not self._closed

    @property
    def restart_wait_s(self) -> float:
        return self.settings.restart_wait_s

    def _worker_ended(self, worker: WorkerProcess) -> None:
        assert self._loop is not None
        self._loop.remove_reader(worker.fileno())
        self._loop = None
        self.worker = None
        self.deaths += 1
        self.down_reason = f"the worker process of instance {self.name} died; restarting"
        reply, self._reply = self._reply, None
        self.running = asyncio.ensure_future(self._recover(worker, reply))

    async def _recover(self, worker: WorkerProcess, reply: asyncio.Future | None) -> None:
        message = f"the worker process of instance {self.name} died"
        try:
            reason, self._kill_reason = self._kill_reason, None
            if reason is None and worker.process.poll() is not None:  # ended: no thread
                reason = worker.exit_description()
            if reason is None:  # its socket closed first: wait for its end off the loop
                reason = await asyncio.to_thread(worker.exit_description)
            message = f"the worker process of instance {self.name} {reason}"
            log.error("model '%s': %s", self.model, message)
        finally:  # even when an unload cancels the recovery
            worker.kill()
            worker.close()  # the process has ended: reaping it does not block
            if reply is not None and not reply.done():
                reply.set_exception(
                    errors.Internal(f"model '{self.model}' failed to run this batch: {message}")
                )
        self.crashes += 1
        while not self._closed:
            if self.crashes > self.settings.max_restarts:
                self.retired = True
                self.back_at = None
                self.down_reason = (
                    f"{message}; it crashed {self.crashes} times in a row and is not restarted "
                    "(load the model again to retry)"
                )
                log.error("model '%s': %s", self.model, self.down_reason)
                return
            delay = min(self.settings.first_backoff_s * 2 ** (self.crashes - 1), MAX_BACKOFF_S)
            self.back_at = time.monotonic() + delay + self.start_s
            self.down_reason = (
                f"{message}; restarting in {delay:g} s "
                f"(restart {self.crashes} of at most {self.settings.max_restarts})"
            )
            await asyncio.sleep(delay)
            self.down_reason = (
                f"{message}; starting a new worker (restart {self.crashes} of at most "
                f"{self.settings.max_restarts})"
            )
            began = time.monotonic()
            try:
                # The thread sets self.worker itself: if an unload cancels this task while
                # the thread finishes, close() still finds the new worker and stops it.
                await asyncio.to_thread(self._restart_worker)
            except Exception as exc:  # a failed start counts as one more crash
                message = f"the worker process of instance {self.name} failed to restart: {exc}"
                log.error("model '%s': %s", self.model, message)
                self.crashes += 1
                continue
            self.start_s = time.monotonic() - began
            self.back_at = None
            self.down_reason = None
            self.attach()
            log.info("model '%s': instance %s has a new worker process", self.model, self.name)
            return

    def _restart_worker(self) -> None:
        self.worker, self.loaded = self._spawn_unless_closed(self.rewarm)

    def _spawn_unless_closed(
        self, warm: Callable[[WorkerProcess, tuple[int, ...] | None], None] | None = None
    ) -> tuple[WorkerProcess, LoadedModel]:
        # Runs on a thread that goes on even if the restart is cancelled by an unload:
        # close() kills a worker that is still loading, and one that finished loading
        # for a closed instance is stopped right here, never orphaned.
        def started(worker: WorkerProcess) -> None:
            self._starting = worker
            if self._closed:
                worker.kill()

        try:
            worker, loaded = self._spawn(started)
            if warm is not None:  # while close() can still find it as the one starting
                try:
                    warm(worker, loaded.allowed_batch_sizes)
                except BaseException:
                    worker.kill()
                    worker.close()
                    raise
        finally:
            self._starting = None
        if self._closed:
            worker.unload(timeout_s=5.0)
            raise RuntimeError("the instance was closed while its worker started")
        return worker, loaded

    # ---- the end ---------------------------------------------------------------------

    def detach(self) -> None:
        """Let go of the event loop's side (on the loop, before close()): the batch in
        flight fails with a 503, and a worker still running it is killed, not waited for."""
        self._closed = True
        worker = self.worker
        if self._loop is not None and worker is not None:
            self._loop.remove_reader(worker.fileno())
            self._loop = None
        reply, self._reply = self._reply, None
        if reply is not None and not reply.done():
            if worker is not None:
                worker.kill()
            reply.set_exception(
                errors.Unavailable(f"model '{self.model}' was unloaded while this batch ran")
            )
        if isinstance(self.running, asyncio.Task):
            self.running.cancel()
        starting = self._starting
        if starting is not None:
            starting.kill()

    def close(self) -> None:
        """Unload the model and stop the worker (blocking)."""
        self._closed = True
        starting = self._starting
        if starting is not None:
            starting.kill()
        worker, self.worker = self.worker, None
        if worker is not None:
            with contextlib.suppress(Exception):  # a dying worker is killed regardless
                worker.unload(timeout_s=30.0)
