"""The transport-free request and response that both fronts decode into and encode from.

Nothing here knows HTTP or gRPC. Tensors are numpy arrays in their in-memory form
(see accel_base.datatypes); `datatype` keeps the V2 name because BF16 and BYTES are
not recoverable from the numpy dtype alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Parameters = dict[str, Any]


@dataclass(slots=True)
class Tensor:
    name: str
    datatype: str
    data: np.ndarray
    parameters: Parameters = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape


@dataclass(slots=True)
class RequestedOutput:
    name: str
    parameters: Parameters = field(default_factory=dict)


@dataclass(slots=True)
class InferRequest:
    model_name: str
    model_version: str = ""
    id: str = ""
    parameters: Parameters = field(default_factory=dict)
    inputs: list[Tensor] = field(default_factory=list)
    # Empty means "every output of the model".
    outputs: list[RequestedOutput] = field(default_factory=list)
    # Set by a front that can tell when its client has gone away (HTTP disconnect);
    # schedulers then drop the request instead of running it.
    client_gone: Callable[[], bool] | None = None
    # When the caller stops waiting (time.monotonic() seconds), e.g. a gRPC deadline;
    # the request's own `timeout` parameter may make it earlier (admission.deadline_of).
    deadline: float | None = None
    # Looks up an HTTP header or gRPC metadata value by its lower-case name (a router's
    # sticky key may come that way); None where the front gives none.
    header: Callable[[str], str | None] | None = None
    # For a decoupled model: (the stream token its responses go to, the output names it
    # asked for); set by gateway/core/decoupled.py.
    stream: tuple[str, list[str]] | None = None
    # A sampled request's spans (gateway/operation/tracing/spans.py RequestTrace); None, the rule.
    trace: Any = None
    # The client requests this one stands for: a front's bundle of them (its rows in
    # order, gateway/front_processes/bundles.py), counted as that many in statistics.
    count: int = 1
    # Its caller left while it ran (a gRPC cancel): a Python model's is_cancelled() says
    # so (scheduling/per_request.py).
    cancelled: bool = False


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    id: str = ""
    parameters: Parameters = field(default_factory=dict)
    outputs: list[Tensor] = field(default_factory=list)
