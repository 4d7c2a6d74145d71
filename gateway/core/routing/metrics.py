"""Prometheus families of the routers: per variant requests, failures and latency, and
per shadow copies, drops, agreement and error magnitudes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.core.routing.router import RouterModel
from gateway.operation.histogram import render_histogram

Family = Callable[[str, str, str, list[tuple[dict, Any]]], str]


def routing_families(models: list, family: Family, labels: Callable) -> list[str]:
    routers = [m for m in models if isinstance(m, RouterModel)]
    if not routers:
        return []
    primaries, shadows = [], []
    for router in routers:
        for route, stats in router.variant_stats.items():
            where = {"router": router.name, "variant": route.model,
                     "variant_version": route.version}  # fmt: skip
            primaries.append((where, stats))
        for shadow in router.shadows.shadows:
            where = {"router": router.name, "variant": shadow.model,
                     "variant_version": shadow.version}  # fmt: skip
            shadows.append((where, shadow.stats))

    def counter(name: str, documentation: str, rows: list, field: str) -> str:
        return family(name, documentation, "counter", [(w, getattr(s, field)) for w, s in rows])

    def gauge(name: str, documentation: str, rows: list, field: str) -> str:
        return family(name, documentation, "gauge", [(w, getattr(s, field)) for w, s in rows])

    found = [
        counter("accel_gateway_router_requests", "Requests a router sent to the variant",
                primaries, "requests"),
        counter("accel_gateway_router_failures", "Of those, the ones that failed",
                primaries, "failures"),
        render_histogram("accel_gateway_router_latency_seconds",
                         "Seconds the variant took to answer the router's requests",
                         [(w, s.latency) for w, s in primaries], labels),
    ]  # fmt: skip
    if shadows:
        found += [
            counter("accel_gateway_shadow_copies", "Request copies the shadow ran, "
                    "answered or failed", shadows, "requests"),
            counter("accel_gateway_shadow_failures", "Copies the shadow failed", shadows,
                    "failures"),
            counter("accel_gateway_shadow_dropped", "Copies not sent: the router had "
                    "max_shadow_in_flight copies running", shadows, "dropped"),
            counter("accel_gateway_shadow_compared", "Copies whose outputs were compared "
                    "with the primary's", shadows, "compared"),
            counter("accel_gateway_shadow_within_tolerance", "Compared copies whose every "
                    "output was within rtol and atol", shadows, "within_tolerance"),
            counter("accel_gateway_shadow_top1_compared", "Compared copies with a class "
                    "output (argmax over the last axis)", shadows, "top1_compared"),
            counter("accel_gateway_shadow_top1_agreed", "Of those, the ones whose top-1 "
                    "classes all matched", shadows, "top1_agreed"),
            counter("accel_gateway_shadow_incomparable", "Copies with an output missing or "
                    "shaped differently", shadows, "incomparable"),
            gauge("accel_gateway_shadow_max_abs_error", "Largest absolute output "
                  "difference seen", shadows, "max_abs_error"),
            gauge("accel_gateway_shadow_max_rel_error", "Largest relative output "
                  "difference seen", shadows, "max_rel_error"),
            render_histogram("accel_gateway_shadow_abs_error",
                             "Each comparison's largest absolute output difference",
                             [(w, s.abs_errors) for w, s in shadows], labels),
            render_histogram("accel_gateway_shadow_latency_seconds",
                             "Seconds the shadow took to answer a copy",
                             [(w, s.latency) for w, s in shadows], labels),
        ]  # fmt: skip
    return found
