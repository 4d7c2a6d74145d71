"""The idle instances of one model version, handed out first come, first served.

An instance is busy while its `running` future is not done: a run whose caller was
cancelled, or a worker process that is restarting. It comes back to the pool when
that future ends; an instance that has `retired` (its worker stopped restarting)
never does, and once every instance has, callers get a 503 instead of waiting.
While every live instance is restarting its worker, a caller waits for it within a bound
or gets a 503 at once (scheduling/restarts.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from typing import Any

from accel_base.errors import Unavailable
from gateway.core.scheduling.instance_api import ModelInstance
from gateway.core.scheduling.restarts import (
    restart_refusal,
    restart_wait_s,
    restarting_error,
    seconds_left,
)


class InstancePool:
    """Idle instances handed out first come, first served."""

    def __init__(self, instances: Sequence[ModelInstance], model: str = "") -> None:
        if not instances:
            raise ValueError("an instance pool needs at least one instance")
        self.instances = instances
        self.model = model
        self._idle: deque[Any] = deque(instances)
        self._waiters: deque[asyncio.Future] = deque()
        # Waiters for a restart -> when they stop waiting (loop time), in that order.
        self._bounds: dict[asyncio.Future, float] = {}
        self._bound_timer: asyncio.TimerHandle | None = None
        self._overdue = False  # a wait for this restart ran out: refuse the next at once

    def _retired_error(self) -> Unavailable:
        reasons = "; ".join(i.down_reason for i in self.instances if i.down_reason)
        return Unavailable(f"model '{self.model}' has no instance left to run it: {reasons}")

    def try_acquire(self) -> Any | None:
        """An idle instance at once, or None (then await acquire())."""
        while self._idle and not self._waiters:
            instance = self._idle.popleft()
            if instance.running is None and not instance.retired:  # the common case, at once
                self._overdue = False
                return instance
            if self._usable(instance):
                return instance
        return None

    async def acquire(self) -> Any:
        instance = self.try_acquire()
        if instance is not None:
            return instance
        # Under a closed loop's load every request waits here (each release hands the
        # instance to the oldest waiter): the checks for instances that are down run only
        # while one is (a loop, not all(), and no call otherwise).
        down = False
        for each in self.instances:
            if each.retired or each.down_reason is not None:  # restarting sets a reason
                down = True
                break
        if down:
            if all(i.retired for i in self.instances):
                raise self._retired_error()
            refusal = restart_refusal(self.model, self.instances, self._overdue)
            if refusal is not None:
                raise refusal
        waiter: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if down:
            self._bound_waits()
        try:
            return await waiter
        except asyncio.CancelledError:
            # A waiter cancelled after it was handed an instance must pass it on.
            if waiter.done() and not waiter.cancelled():
                self.release(waiter.result())
            else:
                with contextlib.suppress(ValueError):  # release() may have dropped it already
                    self._waiters.remove(waiter)
            raise
        finally:
            self._bounds.pop(waiter, None)

    def _usable(self, instance: Any) -> bool:
        """Whether an instance can run now; if it is busy, it comes back when it is not."""
        if instance.retired:
            if all(i.retired for i in self.instances):
                self.fail_waiters(self._retired_error())
            return False
        if instance.running is not None and not instance.running.done():
            # A cancelled caller's run, or a restart: free only when that ends.
            instance.running.add_done_callback(lambda _: self.release(instance))
            self._bound_waits()  # the last live instance may have gone down just now
            return False
        self._overdue = False
        return True

    def release(self, instance: Any) -> None:
        # The common case, with waiters or without: _usable's checks, inline.
        if instance.running is None and not instance.retired:
            self._overdue = False
        elif not self._usable(instance):
            return
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(instance)
                return
        self._idle.append(instance)

    # ---- waiting for a restart -------------------------------------------------------

    def _bound_waits(self) -> None:
        """While every live instance restarts, give each waiter without one its bound."""
        bound = restart_wait_s(self.instances)
        if bound is None or not self._waiters:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + bound
        for waiter in self._waiters:
            self._bounds.setdefault(waiter, until)  # insertion order is deadline order
        if self._bound_timer is None:
            first = next(iter(self._bounds.values()))
            self._bound_timer = loop.call_at(first, self._end_waits)

    def _end_waits(self) -> None:
        """Answer the waiters whose bound has passed with a 503, if no instance is back."""
        self._bound_timer = None
        bound = restart_wait_s(self.instances)
        if bound is None:  # a worker is back: waiting for it is plain queueing again
            self._bounds.clear()
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        expired: list[asyncio.Future] = []
        while self._bounds:
            waiter, until = next(iter(self._bounds.items()))
            if not waiter.done() and until > now:
                self._bound_timer = loop.call_at(until, self._end_waits)
                break
            del self._bounds[waiter]
            if not waiter.done():
                expired.append(waiter)
        if not expired:
            return
        self._overdue = True
        gone = set(expired)  # one pass over the waiters, however many expire at once
        self._waiters = deque(w for w in self._waiters if w not in gone)
        error = restarting_error(self.model, self.instances, bound, seconds_left(self.instances))
        for waiter in expired:
            waiter.set_exception(error)

    def fail_waiters(self, error: Exception) -> None:
        """Answer everyone still waiting for an instance (the model is going away)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(error)

    def close(self) -> None:
        """Close every instance, even when one fails to unload; then raise the first error."""
        errors: list[BaseException] = []
        for instance in self.instances:
            try:
                instance.close()
            except Exception as exc:  # a backend's unload may raise anything
                errors.append(exc)
        if errors:
            raise errors[0]


def instance_state(instance: ModelInstance) -> dict[str, Any]:
    """What a management API shows of one instance (its worker's pid, if it has one)."""
    if instance.retired:
        state = "RETIRED"
    elif instance.down_reason is not None:
        state = "RESTARTING"
    elif instance.running is not None and not instance.running.done():
        state = "BUSY"
    else:
        state = "READY"
    return {"name": instance.name, "pid": instance.pid, "state": state}
