"""Admission control: a request that could not start within its budget is refused at once.

Every model version, batched or not, keeps a moving average of how long one job (a
request, or a batch) holds an instance. A new request would start after the jobs ahead
of it: `ahead - instances + 1` of them must finish first, `instances` at a time. When
that predicted wait is longer than the model's queue budget, or than what is left of
the request's own deadline, the request gets a 503 (gRPC UNAVAILABLE) with a
Retry-After straight away, instead of joining a queue it would time out in. So under
overload refusals are fast, admitted requests wait at most about the budget, and the
server is idle soon after the load stops (no backlog of requests whose callers gave up).

The budget is a model's `queue_budget_ms` parameter, else the server's default, and
never less than a few jobs' worth of the model's own service time (see `budget_s`).
Pure: time comes in as arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accel_base.errors import InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from backends.parameters import string_parameter
from gateway.inference import InferRequest

# A budget shorter than this many jobs refuses requests that would start soon anyway.
MIN_JOBS_IN_BUDGET = 16  # a closed loop of up to 16 clients is never refused
DEFAULT_QUEUE_BUDGET_MS = 100.0  # the server's --queue-budget-ms


class Overloaded(Unavailable):
    """Refused by admission control; `retry_after_s` is a hint for the client."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(slots=True)
class Admission:
    model: str
    instances: int
    budget_ms: float  # the configured budget; see budget_s
    job_s: float | None = None  # moving average of one job's time on an instance

    def observe(self, seconds: float) -> None:
        """One more job finished after holding an instance for `seconds`."""
        self.job_s = seconds if self.job_s is None else 0.9 * self.job_s + 0.1 * seconds

    def budget_s(self) -> float:
        job = self.job_s or 0.0
        return max(self.budget_ms / 1e3, MIN_JOBS_IN_BUDGET * job)

    def wait_s(self, ahead: int) -> float:
        """Predicted wait before a job with `ahead` jobs in front of it (running or queued)
        gets an instance."""
        if self.job_s is None or ahead < self.instances:
            return 0.0
        return (ahead - self.instances + 1) / self.instances * self.job_s

    def check(self, ahead: int, now: float, deadline: float | None = None) -> None:
        """Raise Overloaded if a request arriving now could not start in time."""
        wait = self.wait_s(ahead)
        if wait == 0.0:
            return
        limit, why = self.budget_s(), "its queue budget"
        if deadline is not None and deadline - now < limit:
            limit, why = max(deadline - now, 0.0), "the request's deadline"
        if wait > limit:
            raise Overloaded(
                f"model '{self.model}' is overloaded: a request now would wait about "
                f"{wait * 1e3:.1f} ms to start, past {why} ({limit * 1e3:.1f} ms); retry later",
                retry_after_s=max(1, math.ceil(wait)),
            )


def int_parameter(request: InferRequest, key: str) -> int | None:
    """A request parameter that must be a non-negative integer (priority, timeout)."""
    value = request.parameters.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(
            f"request parameter '{key}' must be a non-negative integer, got {value!r}"
        )
    return value


def deadline_of(request: InferRequest, now: float) -> float | None:
    """When the caller stops waiting: its front's deadline, or its `timeout` parameter
    (microseconds, as in Triton) if that is sooner; None if neither is set."""
    timeout_us = int_parameter(request, "timeout")
    deadline = request.deadline
    if timeout_us:
        own = now + timeout_us / 1e6
        deadline = own if deadline is None else min(deadline, own)
    return deadline


def queue_budget(config: mc.ModelConfig, default_ms: float) -> float:
    """The model's `queue_budget_ms` parameter, else the server's default."""
    text = string_parameter(config, "queue_budget_ms")
    if text is None:
        return default_ms
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise InvalidArgument(
            f"model '{config.name}': parameter queue_budget_ms must be a positive number of "
            f"milliseconds, not {text!r}"
        )
    return value
