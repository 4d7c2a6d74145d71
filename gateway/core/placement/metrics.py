"""Prometheus families of the memory manager: budgets and bookings per device, each
loaded version's predicted and measured bytes, loads, cache hits and misses, evictions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.core.placement.manager import MemoryManager
from gateway.operation.histogram import render_histogram

Family = Callable[[str, str, str, list[tuple[dict, Any]]], str]


def memory_families(memory: MemoryManager, models: list, family: Family, labels) -> list[str]:
    ledger, stats = memory.ledger, memory.stats
    devices = list(ledger.devices.values())
    predicted, measured = [], []
    for model in models:
        for footprint in model.footprints:
            where = {"model": model.name, "version": str(model.version),
                     "device": str(footprint.device)}  # fmt: skip
            predicted.append((where, footprint.predicted))
            if footprint.measured is not None:
                measured.append((where, footprint.measured))
    return [
        family("accel_gateway_memory_budget_bytes",
               "Bytes model instances may book on the device (budget less reserve)", "gauge",
               [({"device": str(d.device)}, d.budget_bytes) for d in devices]),
        family("accel_gateway_memory_booked_bytes",
               "Bytes booked by loaded model instances on the device", "gauge",
               [({"device": str(d.device)}, ledger.used(d.device)) for d in devices]),
        family("accel_gateway_model_memory_predicted_bytes",
               "An instance's bytes predicted before it loaded", "gauge", predicted),
        family("accel_gateway_model_memory_measured_bytes",
               "An instance's bytes measured after its warm-up batch", "gauge", measured),
        family("accel_gateway_model_loads", "Model version loads that succeeded", "counter",
               [({}, stats.loads)]),
        family("accel_gateway_model_load_failures", "Model version loads that failed",
               "counter", [({}, stats.load_failures)]),
        render_histogram("accel_gateway_model_load_duration_seconds",
                         "Seconds a model version took to place, load and warm up",
                         [({}, stats.load_seconds)], labels),
        render_histogram("accel_gateway_model_warmup_duration_seconds",
                         "Seconds a version's model_warmup samples took on all its instances",
                         [({}, stats.warmup_seconds)], labels),
        family("accel_gateway_model_cache_hits",
               "Requests whose model was loaded when they came", "counter",
               [({}, stats.hits)]),
        family("accel_gateway_model_cache_misses",
               "Requests that waited for their model to load (on demand)", "counter",
               [({}, stats.misses)]),
        family("accel_gateway_model_load_wait_seconds",
               "Seconds requests spent waiting for their model to load, in all", "counter",
               [({}, round(stats.wait_s, 6))]),
        family("accel_gateway_model_evictions", "Models evicted to make room", "counter",
               [({}, stats.evictions)]),
        render_histogram("accel_gateway_model_eviction_age_seconds",
                         "Seconds an evicted model had been loaded",
                         [({}, stats.eviction_ages)], labels),
    ]  # fmt: skip
