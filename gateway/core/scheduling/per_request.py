"""Batches for a per-request backend (Triton's Python backend, whose execute() takes a
list of requests): the rows of a batch stay merged on their way to the worker, but the
worker is told whose rows are whose, and answers each request on its own, under keys
"<index>:<name>", with the requests that failed apart (backends/python/backend.py)."""

from __future__ import annotations

import asyncio
import functools
import itertools
from typing import Any

import numpy as np

from accel_base import errors
from gateway.core.inference import InferRequest
from gateway.core.scheduling.instance_api import after_run

Failures = dict[int, errors.GatewayError]
ALL = -1  # backends.per_request.ALL: the index of a failure of the whole batch
# Requests in a running per-request batch by their token, for a model's is_cancelled()
# (asked over the model-call socket, gateway/core/model_calls.py).
RUNNING: dict[str, InferRequest] = {}
_tokens = itertools.count(1)


def request_info(request: InferRequest, rows: int, output_names: list[str]) -> tuple:
    """What the worker's execute() sees of one request (workers/protocol.py); a decoupled
    request's output names and stream token come with its stream (gateway/core/decoupled.py)."""
    parameters = request.parameters
    token = ""
    if request.stream is not None:
        token, asked = request.stream
        output_names = asked
    # What is_cancelled() asks by: the stream's token ("s..."), else one of its own.
    cancel = token or f"r{next(_tokens)}"
    return (
        rows,
        tuple(output_names),
        parameters,
        request.id,
        parameters.get("sequence_id", 0),
        token,
        cancel,
    )


async def run_requests(
    instance: Any,
    merged: dict[str, np.ndarray],
    output_names: list[str],
    infos: list[tuple],
    model: str,
    requests: list[InferRequest] | None = None,
) -> tuple[list[dict[str, np.ndarray]], int, Failures]:
    """Each request's outputs, the run's ns, and the failed requests' errors by index.
    `requests` (each info's): whether each is cancelled can be asked while it runs."""
    tokens = [info[6] for info in infos] if requests else []
    for token, request in zip(tokens, requests or (), strict=True):
        RUNNING[token] = request
    try:
        outputs, run_ns, failed = await instance.run_requests(merged, output_names, infos)
    except asyncio.CancelledError:  # its caller left (a run alone): the worker goes on
        for request in requests or ():
            request.cancelled = True
        after_run(instance, functools.partial(_forget, tokens))  # asked until it ends
        tokens = []
        raise
    finally:
        _forget(tokens)
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


def _forget(tokens: list[str]) -> None:
    for token in tokens:
        RUNNING.pop(token, None)


def cancelled(token: str) -> bool:
    """Whether the request of a running batch with this token was cancelled: its caller
    left (a gRPC cancel) or its HTTP client disconnected."""
    request = RUNNING.get(token)
    if request is None:
        return False
    return request.cancelled or (request.client_gone is not None and request.client_gone())


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
