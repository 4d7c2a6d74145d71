"""Admission control: a request that could not start in time is refused at once.

Every model version, batched or not, keeps moving averages of how long one run (a
request, or a batch) holds an instance. A new request starts once an instance is free
and the rows queued before it have run: its predicted wait is the runs in progress
(when every instance is busy) plus the queued rows' time, shared among the instances.
The queued rows' time is the lesser of two readings of recent runs, each of which errs
long in its own case. By the row (a run's time over its rows): batches grow with the
queue, so counted in the short runs of a calm moment, a queue of full batches would be
predicted many times too short; but at a calm moment's cost a row, the backlog a short
hiccup leaves (which a few large batches clear) looks long enough to refuse. Fitted
(a fixed cost a run plus a cost a row, over the batches the rows make): right for that
backlog, but it counts a partial batch as a whole run, which is long under overload.
By the size (each batch size's own recent run time, kept while other sizes run): right
for a backlog of sizes that have run before, however long ago, such as a burst after a
busy hour; sizes never run are priced as the next larger size that has run, or beyond
the largest at its cost a row.
What a request may wait depends on what was asked for:
- an explicit budget (the model's `queue_budget_ms` parameter, else the server's
  `--queue-budget-ms`): a request predicted to wait longer is refused;
- none (the default, as Triton): a request is refused only while the backlog is measured
  to grow, arrivals outrunning service (growth.py), and then past the wait the backlog
  had before it grew, or a couple of runs. A closed loop's backlog stops at its
  concurrency and is queued however long its wait, and a burst on a load below capacity
  drains before the growth has lasted its horizon (a second); an open loop past
  saturation is shed after that second, and then keeps a short queue.
A refusal is a 503 (gRPC UNAVAILABLE) with a Retry-After straight away, instead of a
place in a queue the request would time out in. So under overload refusals are fast,
admitted requests wait little, and the server is idle soon after the load stops.

Neither refuses while fewer than EXEMPT_PER_INSTANCE requests an instance are ahead: a few
clients that each wait for their answer are queueing, not overloading, however slow the
model. The request's own deadline (`timeout` parameter, gRPC deadline) always applies,
and `max_queue_size` bounds the count. Pure: time comes in as arguments.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field

from accel_base.errors import InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from backends.parameters import string_parameter
from gateway.core.inference import InferRequest
from gateway.core.scheduling.growth import MIN_WINDOW_S, WINDOW_RUNS, Growth

# Below this many requests ahead an instance the budget does not refuse: a closed loop of
# up to 8 clients an instance is never refused, whatever the model's speed or batch size.
# More would let an unbatched model's queue grow past 10x its unloaded latency (issue
# 12's goal) whatever its budget; clients past it that retry at once, without heeding
# Retry-After, spin on refusals.
EXEMPT_PER_INSTANCE = 8
# While a growing backlog is shed, a request may still wait this many runs: a full batch
# queued behind the one running keeps the instances busy with full batches.
SHED_FLOOR_RUNS = 2.0


WEIGHT = 0.1  # of the newest run in the moving averages
MIN_ROWS_VARIANCE = 1.0  # runs' sizes must vary this much (rows²) before a line is fitted


class Overloaded(Unavailable):
    """Refused by admission control; `retry_after_s` is a hint for the client."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(slots=True)
class Admission:
    model: str
    instances: int
    budget_ms: float | None  # None: shed only a growing backlog (growth.py)
    max_batch: int = 1  # rows one run may take
    # Moving mean of a run's rows (0: none observed yet) and seconds on an instance,
    # variance of its rows and their covariance: a least-squares line through recent
    # runs, seconds = fixed + rows * per row.
    mean_rows: float = 0.0
    mean_s: float = 0.0
    var_rows: float = 0.0
    cov: float = 0.0
    # The (instance, batch size) pairs that have run. The first run at a size is slow for
    # reasons that say nothing of the next: a TorchScript model on a GPU compiled fused
    # kernels for ~1 s at each of its first batch sizes, then ran that size in 4 ms, and
    # one such run in the averages refused requests for seconds.
    sizes_seen: set[tuple[int, int]] = field(default_factory=set)
    # Moving mean seconds of a run by its rows, each size on its own (at most max_batch
    # entries), and the sizes in order.
    by_size: dict[int, float] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)
    growth: Growth = field(default_factory=Growth)

    def observe(self, seconds: float, rows: int = 1, size: tuple[int, int] | None = None) -> None:
        """One more run of `rows` rows finished after holding an instance for `seconds`.
        A run whose `size` (an id of the instance, the batch size it ran) is new is left
        out."""
        rows = rows if rows > 1 else 1  # (not max(): every run)
        self.growth.served += rows  # (Growth.serve, inline: once a run)
        if size is not None and size not in self.sizes_seen:
            self.sizes_seen.add(size)
            return
        known = self.by_size.get(rows)
        if known is None:
            self.by_size[rows] = seconds
            self.sizes.insert(bisect_left(self.sizes, rows), rows)
        else:
            self.by_size[rows] = known + WEIGHT * (seconds - known)
        if not self.mean_rows:
            self.mean_rows, self.mean_s = float(rows), seconds
            return
        d_rows, d_s = rows - self.mean_rows, seconds - self.mean_s
        self.mean_s += WEIGHT * d_s
        if d_rows or self.var_rows or self.cov:  # (else every run so far had these rows:
            self.mean_rows += WEIGHT * d_rows  # the updates below would leave all three)
            self.var_rows = (1 - WEIGHT) * (self.var_rows + WEIGHT * d_rows * d_rows)
            self.cov = (1 - WEIGHT) * (self.cov + WEIGHT * d_rows * d_s)

    def cost(self) -> tuple[float, float]:
        """(seconds a run, seconds a row) fitted to recent runs. While their sizes hardly
        varied, or the fit says rows cost nothing (timing noise), all of it is counted
        by the row."""
        per_row = self.mean_s / self.mean_rows if self.mean_rows else 0.0
        slope = self.cov / self.var_rows if self.var_rows >= MIN_ROWS_VARIANCE else 0.0
        if slope <= 0.0:
            return 0.0, per_row
        slope = min(slope, per_row)  # steeper than the average would make fixed < 0
        return self.mean_s - slope * self.mean_rows, slope

    def wait_s(self, running: int, queued_rows: int) -> float:
        """Predicted wait before a request gets an instance, with `running` runs in
        progress and `queued_rows` rows queued before it."""
        if not self.mean_rows or (not queued_rows and running < self.instances):
            return 0.0  # nothing has run yet, or an instance is free and nobody ahead
        busy = max(running - self.instances + 1, 0) * self.mean_s  # until one is free
        by_row = queued_rows * self.mean_s / self.mean_rows
        fixed, per_row = self.cost()
        # As full batches: requests that cannot share a batch make more, each with its
        # fixed cost, so the fit errs short by those.
        fitted = math.ceil(queued_rows / self.max_batch) * fixed + queued_rows * per_row
        return (busy + min(by_row, fitted, self.by_sizes(queued_rows))) / self.instances

    def by_sizes(self, rows: int) -> float:
        """Seconds to run `rows` queued rows as full batches and a remainder, each priced
        by its own size's recent runs."""
        full, rest = divmod(rows, self.max_batch)
        seconds = full * self.size_cost(self.max_batch) if full else 0.0
        return seconds + self.size_cost(rest) if rest else seconds

    def size_cost(self, rows: int) -> float:
        """A run of `rows` rows: its own recent runs, else the next larger size's (a batch
        costs no more than a larger one), else the largest size's cost a row."""
        known = self.by_size.get(rows)
        if known is not None:
            return known
        at = bisect_left(self.sizes, rows)
        if at < len(self.sizes):
            return self.by_size[self.sizes[at]]
        largest = self.sizes[-1]
        return self.by_size[largest] * rows / largest

    def check(
        self,
        running: int,
        queued_rows: int,
        requests_ahead: int,
        now: float,
        deadline: float | None = None,
        rows: int = 1,
    ) -> None:
        """Raise Overloaded if a request of `rows` rows arriving now could not start in
        time."""
        window_s = WINDOW_RUNS * self.mean_s  # (conditionals, not max(): every request)
        if window_s < MIN_WINDOW_S:
            window_s = MIN_WINDOW_S
        shedding = self.growth.arrive(now, queued_rows, rows if rows > 1 else 1, window_s)
        exempt = requests_ahead < EXEMPT_PER_INSTANCE * self.instances
        if deadline is None and (exempt or (self.budget_ms is None and not shedding)):
            return  # nothing limits its wait: no wait to predict (a closed loop's queue)
        wait = self.wait_s(running, queued_rows)
        if wait == 0.0:
            return
        limit, why = math.inf, ""
        if self.budget_ms is not None:
            limit, why = self.budget_ms / 1e3, "its queue budget"
        elif shedding:
            limit, why = self.shed_limit_s(), "what it admits while arrivals outrun service"
        if exempt:
            limit = math.inf
        if deadline is not None and deadline - now < limit:
            limit, why = max(deadline - now, 0.0), "the request's deadline"
        if wait > limit:
            raise Overloaded(
                f"model '{self.model}' is overloaded: a request now would wait about "
                f"{wait * 1e3:.1f} ms to start, past {why} ({limit * 1e3:.1f} ms); retry later",
                retry_after_s=max(1, math.ceil(wait)),
            )

    def shed_limit_s(self) -> float:
        """The longest wait admitted while a growing backlog is shed: what the backlog
        before the growth made a request wait, or SHED_FLOOR_RUNS runs."""
        before = self.wait_s(self.instances, self.growth.base_rows)
        return max(before, SHED_FLOOR_RUNS * self.mean_s / self.instances)


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
    if "timeout" not in request.parameters:  # (most requests: no call for it)
        return request.deadline
    timeout_us = int_parameter(request, "timeout")
    deadline = request.deadline
    if timeout_us:
        own = now + timeout_us / 1e6
        deadline = own if deadline is None else min(deadline, own)
    return deadline


def queue_budget(config: mc.ModelConfig, default_ms: float | None) -> float | None:
    """The model's `queue_budget_ms` parameter, else the server's default (None: no
    fixed budget, a growing backlog is shed)."""
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
