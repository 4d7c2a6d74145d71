"""Batches for a per-request backend (Triton's Python backend, whose execute() takes a
list of requests): the rows of a batch stay merged on their way to the worker, but the
worker is told whose rows are whose, and answers each request on its own, under keys
"<index>:<name>", with the requests that failed apart (backends/python/backend.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from accel_base import errors
from gateway.core.inference import InferRequest

Failures = dict[int, errors.GatewayError]
ALL = -1  # backends.per_request.ALL: the index of a failure of the whole batch


def request_info(request: InferRequest, rows: int, output_names: list[str]) -> tuple:
    """What the worker's execute() sees of one request (workers/protocol.py); a decoupled
    request's output names and stream token come with its stream (gateway/core/decoupled.py)."""
    parameters = request.parameters
    token = ""
    if request.stream is not None:
        token, asked = request.stream
        output_names = asked
    return (
        rows,
        tuple(output_names),
        parameters,
        request.id,
        parameters.get("sequence_id", 0),
        token,
    )


async def run_requests(
    instance: Any,
    merged: dict[str, np.ndarray],
    output_names: list[str],
    infos: list[tuple],
    model: str,
) -> tuple[list[dict[str, np.ndarray]], int, Failures]:
    """Each request's outputs, the run's ns, and the failed requests' errors by index."""
    outputs, run_ns, failed = await instance.run_requests(merged, output_names, infos)
    parts: list[dict[str, np.ndarray]] = [{} for _ in infos]
    for key, array in outputs.items():
        index, _, name = key.partition(":")
        parts[int(index)][name] = array
    failures = {}
    for index, kind, message in failed:
        error = failure_error(model, kind, message)
        if index == ALL:  # execute() itself failed: every request of the batch with it
            failures = dict.fromkeys(range(len(infos)), error)
            break
        failures[index] = error
    return parts, run_ns, failures


def failure_error(model: str, kind: str, message: str) -> errors.GatewayError:
    """A failure a worker reported for a request, as the client sees it. A kind
    "HandlerFailed:<status>" carries the status the model's code chose."""
    kind, _, status = kind.partition(":")
    if kind == "HandlerFailed" and status.isdigit():
        return errors.HandlerFailed(f"model '{model}': {message}", int(status), message)
    cls = errors.by_name(kind)
    if cls is not None and cls is not errors.Internal:
        return cls(f"model '{model}': {message}")
    return errors.Internal(f"model '{model}' failed to run this request: {message}")
