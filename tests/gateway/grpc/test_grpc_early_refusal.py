"""ModelInfer on the gateway's HTTP/2 server takes the message's bytes, so that a call the
shedder refuses ends with UNAVAILABLE and retry pushback before its message is parsed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import pytest

from gateway.grpc.h2.calls import STATUS
from gateway.grpc.service import InferenceService
from gateway.shedding import LoopShedder

NOT_A_MESSAGE = b"\xff\xff\xff"  # would fail to parse


class Context:
    """What the handler asks of the gateway's own call context."""

    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self.trailing: tuple = ()

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    def set_trailing_metadata(self, metadata: tuple) -> None:
        self.trailing = metadata

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        self.code, self.details = code, details
        raise grpc.aio.AbortError()

    def invocation_metadata(self) -> tuple:
        return ()


def service(share: float) -> InferenceService:
    shedder = LoopShedder(target_lag_s=0.004, draw=lambda: 0.5)
    shedder.share, shedder.pending = share, 1
    return InferenceService(SimpleNamespace(shedder=shedder), max_calls=10)  # type: ignore[arg-type]


def test_a_refused_call_is_answered_unavailable_without_parsing():
    context = Context()
    answer = asyncio.run(service(1.0).model_infer_bytes(NOT_A_MESSAGE, context))
    assert answer is None and context.code == grpc.StatusCode.UNAVAILABLE
    assert "overloaded" in context.details
    assert context.trailing == (("grpc-retry-pushback-ms", "1000"),)
    assert STATUS[context.code] == 14


def test_an_admitted_call_is_parsed():
    context = Context()
    with pytest.raises(grpc.aio.AbortError):
        asyncio.run(service(0.0).model_infer_bytes(NOT_A_MESSAGE, context))
    assert context.code == grpc.StatusCode.INTERNAL and "did not parse" in context.details
