"""A loaded router model: each request goes to one variant chosen by weight (or by its
sticky key), answers under the router's name with the variant named, and may be copied
to the router's shadows. Toward the repository, the core and the metrics it has the
face of a ModelVersion, with no instances and no bytes of its own."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from accel_base.errors import GatewayError, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.inference import InferRequest, InferResponse
from gateway.core.model import model_metadata
from gateway.core.routing.shadow import DEFAULT_MAX_IN_FLIGHT, Shadow, Shadows
from gateway.core.routing.stats import VariantStats
from gateway.core.routing.table import Route, RouteTable
from gateway.core.statistics import ModelStatistics

# The response parameter, and the HTTP header, that name the variant which answered.
VARIANT_PARAMETER = "variant"
VARIANT_HEADER = b"accel-variant"

Resolve = Callable[[str, str], Awaitable[Any]]  # (model, version) -> a ready model
Lookup = Callable[[str, str], Any]  # the same when it is ready now, else GatewayError


def _never_ready(model: str, version: str) -> Any:
    raise Unavailable(f"model '{model}' is resolved on each request")


class RouterModel:
    instances: tuple = ()  # it runs nothing itself
    decoupled = False  # its variants answer one response per request
    streams = False  # nor do they send responses before it (gateway/core/streamed.py)

    def __init__(
        self,
        config: mc.ModelConfig,
        version: int,
        routes: list[Route],
        shadows: list[Shadow],
        resolve: Resolve,
        lookup: Lookup | None = None,
    ) -> None:
        """`config`: the router's own, completed with its variants' signature
        (routing.config.router_config); `routes` and `shadows` from its routing section;
        `resolve` gives a variant's ready model, loading it on demand; `lookup`, where
        given, the same without a coroutine when it is ready (most requests)."""
        self.config = config
        self.name = config.name
        self.version = version
        self._version_text = str(version)
        self._loaded_ns = time.monotonic_ns()
        self.footprints: list[Any] = []
        self.resolve = resolve
        self.lookup = lookup or _never_ready
        self.routes = routes
        self.table = RouteTable(routes)
        # One route needs no choice; the common A/B with no shadow takes no copies.
        self._choosing = len(self.table.routes) > 1
        self._only = self.table.routes[0]
        self.sticky_key = config.routing.sticky_key
        self.variant_stats = {route: VariantStats() for route in routes}
        limit = config.routing.max_shadow_in_flight or DEFAULT_MAX_IN_FLIGHT
        self.shadows = Shadows(shadows, limit, resolve)
        self._shadowing = bool(shadows)
        self._pending = 0

    @property
    def pending(self) -> int:
        """Requests routed and not yet answered (unload waits for them)."""
        return self._pending

    @property
    def last_used(self) -> float:
        """time.monotonic() of the latest routed request (or of the load), for eviction."""
        latest = max((s.last_ns for s in self.variant_stats.values()), default=0)
        return max(latest, self._loaded_ns) / 1e9

    @last_used.setter
    def last_used(self, value: float) -> None:
        self._loaded_ns = int(value * 1e9)

    @property
    def unavailable_reason(self) -> str | None:
        return None  # each request finds out whether its variant is ready

    @property
    def stats(self) -> ModelStatistics:
        """The statistics extension's counters for the router itself: its variants'
        requests, summed (a router runs nothing, so it has no executions)."""
        stats = ModelStatistics(self.name, self._version_text)
        for variant in self.variant_stats.values():
            stats.success.add(variant.success_ns, variant.requests - variant.failures)
            stats.fail.add(variant.failure_ns, variant.failures)
            stats.durations = [
                a + b + c
                for a, b, c in zip(stats.durations, variant.counts, variant.failure_counts,
                                   strict=True)
            ]  # fmt: skip
        stats.queue.add(0, stats.success.count)  # a router queues nothing itself
        if stats.fail.count:
            stats.failure_reasons["OTHER"] = stats.fail.count
        if stats.success.count or stats.fail.count:
            ago_s = time.monotonic() - self.last_used
            stats.last_inference_ms = int((time.time() - ago_s) * 1000)
        return stats

    def _sticky_value(self, request: InferRequest) -> str | None:
        key = self.sticky_key
        if not key:
            return None
        value = request.parameters.get(key)
        if value is not None:
            return str(value)
        return request.header(key) if request.header is not None else None

    async def infer(self, request: InferRequest) -> InferResponse:
        # Every step here is paid by every routed request: the figures in the comments
        # are what the alternatives cost on one core (benchmarks.routing, issue 14).
        route = self.table.choose(self._sticky_value(request)) if self._choosing else self._only
        stats = self.variant_stats[route]
        copies = self.shadows.take(request) if self._shadowing else None
        # Renamed in place: the caller's request serves no one after it is answered, and
        # a copy costs 0.16 us.
        request.model_name = route.model
        request.model_version = route.version
        self._pending += 1
        start = time.monotonic_ns()  # also the router's last use: one clock read
        response = None
        try:
            try:
                model = self.lookup(route.model, route.version)
            except GatewayError:  # not ready now: resolve says why, or loads it
                model = await self.resolve(route.model, route.version)
            response = await model.infer(request)
        except BaseException:  # a backend's own error or a cancelled call counts too
            stats.record_failure(start, time.monotonic_ns())
            raise
        finally:
            self._pending -= 1
            if copies:
                self.shadows.send(copies, response)
        # The router's own statistics are summed from its variants' when asked for
        # (`stats`): a second record per request cost 0.2 us.
        stats.record_success(start, time.monotonic_ns())
        response.parameters[VARIANT_PARAMETER] = route.model
        response.model_name = self.name
        response.model_version = self._version_text
        return response

    def metadata(self, versions: list[int]) -> dict[str, Any]:
        return model_metadata(self.config, versions)

    def variants(self) -> dict[str, Any]:
        """Per-variant figures for the statistics extension's answer."""
        rows = [
            {"model": r.model, "version": r.version, "weight": r.weight, **s.as_dict()}
            for r, s in self.variant_stats.items()
        ]
        for shadow in self.shadows.shadows:
            rows.append(
                {"model": shadow.model, "version": shadow.version, "shadow": True,
                 "sample_rate": shadow.sample_rate, **shadow.stats.as_dict()}
            )  # fmt: skip
        return {"variants": rows}

    async def close(self) -> None:
        await self.shadows.close()
