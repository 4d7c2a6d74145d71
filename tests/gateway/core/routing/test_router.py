"""A router forwards the request as it came, but for the model it names."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time

import numpy as np
from google.protobuf import text_format

from accel_base.errors import Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.core.routing.router import VARIANT_PARAMETER, RouterModel
from gateway.core.routing.table import Route


class Recorder:
    def __init__(self) -> None:
        self.seen: list[InferRequest] = []

    async def infer(self, request: InferRequest) -> InferResponse:
        self.seen.append(request)
        return InferResponse(request.model_name, "1")


def test_the_forwarded_request_keeps_every_field_but_the_model():
    variant = Recorder()

    async def resolve(model: str, version: str) -> Recorder:
        return variant

    config = text_format.Parse('name: "r" platform: "router"', mc.ModelConfig())
    router = RouterModel(config, 1, [Route("v", "2", 1.0)], [], resolve)
    request = InferRequest(
        "r", "", "id-1", {"priority": 1},
        [Tensor("x", "FP32", np.zeros((1, 2), np.float32))], [RequestedOutput("y")],
        client_gone=lambda: False, deadline=12.5, header=lambda key: None,
    )  # fmt: skip
    sent = {field.name: getattr(request, field.name) for field in dataclasses.fields(request)}
    response = asyncio.run(router.infer(request))
    (forwarded,) = variant.seen
    for name, value in sent.items():
        expected = {"model_name": "v", "model_version": "2"}.get(name, value)
        assert getattr(forwarded, name) == expected, name
    assert response.model_name == "r" and response.parameters[VARIANT_PARAMETER] == "v"


class Failing:
    async def infer(self, request: InferRequest) -> InferResponse:
        raise Unavailable("the variant is down")


def test_the_routers_own_statistics_are_its_variants_summed():
    variants = {"v": Recorder(), "w": Recorder(), "down": Failing()}

    async def resolve(model: str, version: str) -> object:
        return variants[model]

    config = text_format.Parse('name: "r" platform: "router"', mc.ModelConfig())
    routes = [Route("v", "", 1.0), Route("w", "", 1.0), Route("down", "", 1.0)]
    router = RouterModel(config, 3, routes, [], resolve)
    assert router.stats.success.count == 0 and router.stats.last_inference_ms == 0

    async def send(count: int) -> None:
        for _ in range(count):
            request = InferRequest("r", inputs=[Tensor("x", "FP32", np.zeros((1, 2), np.float32))])
            with contextlib.suppress(Unavailable):
                await router.infer(request)

    before_ms = time.time() * 1000
    asyncio.run(send(30))
    stats = router.stats
    assert (stats.name, stats.version) == ("r", "3")
    assert stats.success.count == 20 and stats.fail.count == 10
    assert stats.failure_reasons == {"OTHER": 10}
    rows = {r["model"]: r for r in router.variants()["variants"]}
    assert stats.success.ns == sum(router.variant_stats[route].success_ns for route in routes) > 0
    assert rows["down"]["failures"] == rows["down"]["requests"] == 10
    assert rows["v"]["latency_s"]["count"] == 10
    assert before_ms - 5 <= stats.last_inference_ms <= time.time() * 1000 + 5
    assert stats.execution_count == 0


def test_a_variant_not_ready_now_is_resolved_and_a_ready_one_looked_up():
    variant = Recorder()
    resolved: list[str] = []
    ready: set[str] = set()

    async def resolve(model: str, version: str) -> Recorder:
        resolved.append(model)  # on demand this would load it
        return variant

    def lookup(model: str, version: str) -> Recorder:
        if model not in ready:
            raise Unavailable(f"model '{model}' is not loaded; it loads on its first request")
        return variant

    config = text_format.Parse('name: "r" platform: "router"', mc.ModelConfig())
    router = RouterModel(config, 1, [Route("v", "", 1.0)], [], resolve, lookup)
    request = InferRequest("r", inputs=[Tensor("x", "FP32", np.zeros((1, 2), np.float32))])
    asyncio.run(router.infer(request))
    ready.add("v")
    asyncio.run(router.infer(request))
    assert resolved == ["v"] and len(variant.seen) == 2


class Slow:
    """Answers after `delays` seconds, one per request, in order."""

    def __init__(self, *delays: float) -> None:
        self.delays = list(delays)

    async def infer(self, request: InferRequest) -> InferResponse:
        await asyncio.sleep(self.delays.pop(0))
        if not self.delays and isinstance(self, Broken):
            raise ValueError("the backend broke")
        return InferResponse(request.model_name, "1")


class Broken(Slow):
    pass


def test_a_backends_own_error_counts_as_a_failure_and_last_use_never_goes_back():
    variants = {"slow": Slow(0.2, 0.0), "broken": Broken(0.0)}

    async def resolve(model: str, version: str) -> object:
        return variants[model]

    config = text_format.Parse('name: "r" platform: "router"', mc.ModelConfig())

    def request() -> InferRequest:
        return InferRequest("r", inputs=[Tensor("x", "FP32", np.zeros((1, 2), np.float32))])

    async def scenario() -> None:
        slow = RouterModel(config, 1, [Route("slow", "", 1.0)], [], resolve)
        first = asyncio.create_task(slow.infer(request()))
        await asyncio.sleep(0.05)
        second_sent = time.monotonic()
        await slow.infer(request())  # starts later, ends first
        await first
        assert slow.last_used >= second_sent  # the earlier request, ending last, not it
        broken = RouterModel(config, 1, [Route("broken", "", 1.0)], [], resolve)
        with contextlib.suppress(ValueError):
            await broken.infer(request())
        assert (broken.stats.fail.count, broken.pending) == (1, 0)

    asyncio.run(scenario())
