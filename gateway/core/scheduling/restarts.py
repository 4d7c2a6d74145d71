"""How long a request waits for a model whose every worker process is restarting.

A restart takes what the worker's last start took (an interpreter, a framework's import, a
load; a compiling backend compiles again), after a backoff. A request waits for it at most
the model's `worker_restart_wait_s`; one that would wait longer, by the estimate or because
an earlier request already waited that long in vain, gets a 503 with Retry-After at once,
never its client's timeout.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

from accel_base.errors import Unavailable


def restart_wait_s(instances: Iterable[Any]) -> float | None:
    """The bound on waiting for a restart when every live instance is restarting (and one
    is), else None: a live worker, busy or not, is plain queueing."""
    bound = None
    for instance in instances:
        if instance.retired:
            continue
        if not getattr(instance, "restarting", False):
            return None
        wait = instance.restart_wait_s
        bound = wait if bound is None else min(bound, wait)
    return bound


def seconds_left(instances: Iterable[Any]) -> float | None:
    """Until the first restarting instance is expected back, by its last start; None
    where no estimate is known yet (its death is being handled)."""
    now = time.monotonic()
    expected = [i.back_at for i in instances if getattr(i, "back_at", None) is not None]
    return min(expected) - now if expected else None


def restart_refusal(model: str, instances: Sequence[Any], overdue: bool) -> Unavailable | None:
    """The 503 for a request arriving while every worker restarts, when it should not wait
    (see the module's text), else None."""
    bound = restart_wait_s(instances)
    if bound is None:
        return None
    left = seconds_left(instances)
    if overdue or bound == 0 or (left is not None and left > bound):
        return restarting_error(model, instances, bound, left)
    return None


def restarting_error(
    model: str, instances: Sequence[Any], bound: float, left: float | None
) -> Unavailable:
    """A 503 that says why, how long a request waits, and when to retry (Retry-After)."""
    reasons = "; ".join(i.down_reason for i in instances if i.down_reason)
    if left is not None and left > bound:
        when = f"it is expected back in about {math.ceil(left)} s, longer than"
    else:
        when = "its restart is taking longer than"
    error = Unavailable(
        f"model '{model}' cannot run requests while its worker process restarts ({reasons}); "
        f"{when} the {bound:g} s a request waits for a restart (parameter "
        "worker_restart_wait_s): retry later"
    )
    error.retry_after_s = max(1, math.ceil(left)) if left is not None and left > 0 else 1
    return error
