"""Bundles: a front's requests for one batching model, gathered in one turn of its event
loop and sent to the model host as one request of many rows.

The model host is one process for every front, so its cost per request bounds what N
fronts serve together (benchmarks/model_host.py). A bundle of K requests costs the host
one decode, one validation, one place in the batcher's queue and one answer; the front
merges the inputs and splits the outputs, work that grows with the fronts. Only requests
that could not tell the difference are bundled: same model, version, inputs (names,
datatypes, trailing shapes), requested outputs and no parameters of their own beyond
FRONT_PARAMETERS, no deadline, no trace context. The host runs a bundle only
for a model whose dynamic batcher would merge the requests anyway, and otherwise answers
"unbundle": the front then sends the members one by one, each answered as it would have
been (its own errors included).
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from gateway.core.inference import InferRequest, InferResponse, Tensor

# Request parameters a bundle's members may carry: what only the front reads (how the
# HTTP front encodes the answer), and what only a decoupled model's stream reads (which
# takes no bundles; tritonclient's and perf_analyzer's gRPC calls all carry it).
FRONT_PARAMETERS = frozenset({"binary_data_output", "triton_enable_empty_final_response"})


def bundle_key(request: InferRequest) -> Hashable | None:
    """What requests must share to travel as one bundle, or None when this one cannot
    (its parameters, deadline, trace context or tensors are its own)."""
    if request.deadline is not None or request.stream is not None or request.trace is not None:
        return None
    if request.parameters and not FRONT_PARAMETERS.issuperset(request.parameters):
        return None
    header = request.header
    if header is not None and header("traceparent") is not None:
        return None
    if not request.inputs:
        return None
    rows = -1
    inputs = []
    for tensor in request.inputs:
        data = tensor.data
        if tensor.parameters or data.ndim == 0 or data.dtype.kind == "O":
            return None
        if rows != data.shape[0]:
            if rows != -1:
                return None  # inputs of different row counts: the batcher says why
            rows = data.shape[0]
        inputs.append((tensor.name, tensor.datatype, data.dtype.str, data.shape[1:]))
    if rows < 1:  # alone it is refused (batch size 0); in a bundle it would pass
        return None
    if any("shared_memory_region" in o.parameters for o in request.outputs):
        return None  # its rows go to its own region
    try:
        outputs = tuple((o.name, tuple(sorted(o.parameters.items()))) for o in request.outputs)
        key = (request.model_name, request.model_version, tuple(inputs), outputs)
        hash(key)
    except TypeError:  # a parameter value that cannot be a key (a list)
        return None
    return key


def rows_of(request: InferRequest) -> int:
    return request.inputs[0].data.shape[0]


def chunks(members: list[InferRequest], max_rows: int) -> list[list[InferRequest]]:
    """Members in arrival order, in runs of at most `max_rows` rows (a request that alone
    has more is a run of its own: the host refuses it, as it would alone)."""
    runs: list[list[InferRequest]] = []
    current: list[InferRequest] = []
    rows = 0
    for member in members:
        count = rows_of(member)
        if current and rows + count > max_rows:
            runs.append(current)
            current, rows = [], 0
        current.append(member)
        rows += count
    if current:
        runs.append(current)
    return runs


def merged(members: list[InferRequest]) -> InferRequest:
    """One request holding every member's rows, in order."""
    first = members[0]
    inputs = [
        Tensor(t.name, t.datatype, np.concatenate([m.inputs[i].data for m in members]))
        for i, t in enumerate(first.inputs)
    ]
    return InferRequest(first.model_name, first.model_version, "", {}, inputs, first.outputs)


def split(response: InferResponse, members: list[InferRequest]) -> list[InferResponse]:
    """Each member's answer: its rows of every output, its own id. ValueError when an
    output does not have the bundle's rows."""
    total = sum(rows_of(m) for m in members)
    for tensor in response.outputs:
        if tensor.data.ndim == 0 or tensor.data.shape[0] != total:
            raise ValueError(
                f"output '{tensor.name}' has shape {list(tensor.data.shape)} for a bundle "
                f"of {total} rows"
            )
    answers, start = [], 0
    for member in members:
        end = start + rows_of(member)
        outputs = [
            Tensor(t.name, t.datatype, t.data[start:end], t.parameters) for t in response.outputs
        ]
        answers.append(
            InferResponse(
                response.model_name,
                response.model_version,
                member.id,
                dict(response.parameters),
                outputs,
            )  # fmt: skip
        )
        start = end
    return answers
