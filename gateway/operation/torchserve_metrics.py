"""TorchServe's frontend metrics, by its names and labels, for the models that are
TorchServe archives (backends/torchserve/store.py), beside the gateway's own on the same
/metrics: a dashboard or alert written for TorchServe keeps working.

They are read from the same statistics as Triton's names (gateway/operation/metrics.py).
TorchServe labels a request by the version it named ("default" when it named none);
the statistics count by the version that served it, so `model_version` here is always
the archive's version ("1.0").
"""

from __future__ import annotations

import socket
from typing import Any

from backends.torchserve.store import versions_of

# (name, its HELP line as TorchServe's: the unit is what a dashboard reads there)
_FAMILIES = (
    ("ts_inference_requests_total", "Torchserve prometheus counter metric with unit: Count"),
    ("ts_inference_latency_microseconds",
     "Torchserve prometheus counter metric with unit: Microseconds"),
    ("ts_queue_latency_microseconds",
     "Torchserve prometheus counter metric with unit: Microseconds"),
)  # fmt: skip


def torchserve_families(models: list[Any], family: Any, hostname: str = "") -> list[str]:
    """`models`: ready model versions (ModelVersion); `family`: metrics.family."""
    hostname = hostname or socket.gethostname()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {n: [] for n, _ in _FAMILIES}
    for model in models:
        versions = versions_of(model.config)
        if versions is None:
            continue
        names = {number: name for name, number in versions.items()}
        labels = {"model_name": model.name, "model_version": names.get(str(model.version), ""),
                  "hostname": hostname}  # fmt: skip
        stats = model.stats
        values = (
            stats.success.count + stats.fail.count,
            (stats.success.ns + stats.fail.ns) / 1000,
            stats.queue.ns / 1000,
        )
        for (name, _), value in zip(_FAMILIES, values, strict=True):
            samples[name].append((labels, float(value)))
    if not any(samples.values()):
        return []
    return [family(name, doc, "counter", samples[name]) for name, doc in _FAMILIES]
