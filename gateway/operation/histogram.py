"""A Prometheus histogram: counts per bucket and their sum, and its text exposition."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable


class Histogram:
    """Counts of observations per bucket (upper bounds; one more for the rest) and their sum."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.sum += value
        self.counts[bisect_left(self.bounds, value)] += 1  # the first bound >= value

    @property
    def count(self) -> int:
        return sum(self.counts)


def render_histogram(
    name: str,
    documentation: str,
    series: list[tuple[dict[str, str], Histogram]],
    labels: Callable[[dict[str, str]], str],
) -> str:
    """One histogram family: a series per (labels, histogram), cumulative buckets."""
    lines = [f"# HELP {name} {documentation}", f"# TYPE {name} histogram"]
    for where, histogram in series:
        running = 0
        for bound, count in zip(histogram.bounds, histogram.counts, strict=False):
            running += count
            lines.append(f"{name}_bucket{labels({**where, 'le': f'{bound:g}'})} {running}")
        lines.append(f"{name}_bucket{labels({**where, 'le': '+Inf'})} {histogram.count}")
        lines.append(f"{name}_sum{labels(where)} {histogram.sum:.6f}")
        lines.append(f"{name}_count{labels(where)} {histogram.count}")
    return "\n".join(lines)
