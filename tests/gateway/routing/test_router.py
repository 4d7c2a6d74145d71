"""A router forwards the request as it came, but for the model it names."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
from google.protobuf import text_format

from accel_base.errors import Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.routing.router import VARIANT_PARAMETER, RouterModel
from gateway.routing.table import Route


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
    response = asyncio.run(router.infer(request))
    (forwarded,) = variant.seen
    for field in dataclasses.fields(InferRequest):
        expected = {"model_name": "v", "model_version": "2"}.get(field.name)
        value = getattr(forwarded, field.name)
        assert value == (expected if expected else getattr(request, field.name)), field.name
    assert response.model_name == "r" and response.parameters[VARIANT_PARAMETER] == "v"


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
