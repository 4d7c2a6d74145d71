"""What the memory manager counts: loads, cache hits and misses, evictions."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.operation.histogram import Histogram

# Upper bounds of the load-duration and eviction-age histograms, in seconds.
LOAD_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
AGE_SECONDS_BUCKETS = (1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0)


@dataclass(slots=True)
class CacheStats:
    loads: int = 0
    load_failures: int = 0
    hits: int = 0  # requests that found their model loaded
    misses: int = 0  # requests that waited for a load
    wait_s: float = 0.0  # their time waiting, in all
    evictions: int = 0
    load_seconds: Histogram = field(default_factory=lambda: Histogram(LOAD_SECONDS_BUCKETS))
    # Of the loads of a version with model_warmup samples: their runs on every instance.
    warmup_seconds: Histogram = field(default_factory=lambda: Histogram(LOAD_SECONDS_BUCKETS))
    # Seconds since the evicted model loaded.
    eviction_ages: Histogram = field(default_factory=lambda: Histogram(AGE_SECONDS_BUCKETS))
