"""Per-variant counters of a router: what each variant served, and how its shadows agreed."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from gateway.core.routing.agreement import Agreement
from gateway.core.statistics import REQUEST_BUCKETS
from gateway.operation.histogram import Histogram

# Seconds; the same bounds for every variant so that their histograms compare, and as
# every model's request durations, so that a router's own are its variants' summed.
LATENCY_BUCKETS = REQUEST_BUCKETS
# A comparison's largest absolute difference, decade by decade.
ERROR_BUCKETS = (0.0, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)


# The same bounds in nanoseconds: a request is counted into its bucket without a float.
_LATENCY_BOUNDS_NS = tuple(round(bound * 1e9) for bound in LATENCY_BUCKETS)


@dataclass(slots=True)
class VariantStats:
    """Requests a variant served for its router (primaries), or copies it ran (shadows).
    Recording is paid by every routed request, so it only counts: the histogram is
    built when asked for."""

    requests: int = 0
    failures: int = 0
    success_ns: int = 0  # the answered requests' durations, summed
    failure_ns: int = 0  # the failed ones'
    last_ns: int = 0  # time.monotonic_ns() when the latest request started
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    # The failed requests' durations, in the same buckets (the router's own histogram
    # counts failures too; `latency` shows the answered ones).
    failure_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))

    def record_success(self, start_ns: int, end_ns: int) -> None:
        """An answered request, from time.monotonic_ns() at its start and end."""
        elapsed = end_ns - start_ns
        self.requests += 1
        self.success_ns += elapsed
        if start_ns > self.last_ns:  # requests overlap: an older one may end last
            self.last_ns = start_ns
        self.counts[bisect_left(_LATENCY_BOUNDS_NS, elapsed)] += 1

    def record_failure(self, start_ns: int, end_ns: int) -> None:
        elapsed = end_ns - start_ns
        self.requests += 1
        self.failures += 1
        self.failure_ns += elapsed
        self.failure_counts[bisect_left(_LATENCY_BOUNDS_NS, elapsed)] += 1
        if start_ns > self.last_ns:
            self.last_ns = start_ns

    @property
    def latency(self) -> Histogram:
        """The answered requests' seconds, as a histogram."""
        histogram = Histogram(LATENCY_BUCKETS)
        histogram.counts = list(self.counts)
        histogram.sum = self.success_ns * 1e-9
        return histogram

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "failures": self.failures,
            "latency_s": {
                "count": self.requests - self.failures,
                "sum": round(self.success_ns * 1e-9, 6),
            },
        }


@dataclass(slots=True)
class ShadowStats(VariantStats):
    """A shadow's copies (`requests`, `failures`, `latency` as for a primary) and how its
    outputs compared with the primary's."""

    dropped: int = 0  # copies not sent: the router's shadows had too many in flight
    compared: int = 0  # copies whose primary and shadow both answered
    within_tolerance: int = 0
    top1_compared: int = 0
    top1_agreed: int = 0
    incomparable: int = 0  # an output missing or shaped differently
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    abs_errors: Histogram = field(default_factory=lambda: Histogram(ERROR_BUCKETS))

    def record(self, agreement: Agreement) -> None:
        self.compared += 1
        self.within_tolerance += agreement.within_tolerance
        if agreement.top1 is not None:
            self.top1_compared += 1
            self.top1_agreed += agreement.top1
        if agreement.mismatch:
            self.incomparable += 1
            return  # an infinite error would say nothing more than the count
        self.max_abs_error = max(self.max_abs_error, agreement.max_abs_error)
        self.max_rel_error = max(self.max_rel_error, agreement.max_rel_error)
        self.abs_errors.observe(agreement.max_abs_error)

    def as_dict(self) -> dict[str, Any]:
        return {
            **VariantStats.as_dict(self),
            "dropped": self.dropped,
            "compared": self.compared,
            "within_tolerance": self.within_tolerance,
            "top1_compared": self.top1_compared,
            "top1_agreed": self.top1_agreed,
            "incomparable": self.incomparable,
            "max_abs_error": self.max_abs_error,
            "max_rel_error": self.max_rel_error,
        }
