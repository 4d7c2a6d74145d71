"""A TorchServe handler, run as TorchServe runs it, on batches from the gateway's batcher.

The version directory is an unpacked archive (backends/torchserve/archive.py). TorchServe's
own loader (`ts.model_loader`) imports the handler by the manifest's rules (a module,
`module:function`, a built-in handler's name; a class's `initialize(context)` or a
function called once with `(None, context)`), and it runs as `ts.service.Service.predict`
runs it, with TorchServe's `Context`: each request's body and headers go in as `ts`'s
reader would hand them on, and its answer comes out as `ts`'s writer would encode it
(predict.py). It always runs in a worker process of its own: a handler is a user's code.

Tensors: the input "body" (BYTES, one element a request: the request's body) and the
outputs "response" (BYTES: the answer's bytes) and "response_info" (BYTES: JSON with the
status, reason, content type and headers the handler set). A request's parameters may
carry "content_type" (the body's Content-Type, whole: a form's boundary is in it) and
"request_headers" (JSON, a list of [name, value]; tritonclient reserves "headers").
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from accel_base.ids import uuid4_text
from accel_base.proto import model_config_pb2 as mc
from backends.base import BackendUnavailable, Device
from backends.per_request import Failure, PerRequestBackend, RequestInfo
from backends.torchserve import BODY, HANDLER, PACKAGES, RESPONSE, RESPONSE_INFO, otf
from backends.torchserve.archive import read_manifest
from backends.torchserve.forms import body_inputs
from backends.torchserve.predict import predict, ts_batch
from backends.torchserve.streaming import NOT_ON_A_STREAM, Intermediate, column, info_json

MAX_MESSAGE_CHARS = 512  # a handler's message, per request: the reply must fit a message


def _quiet_ts_logging() -> None:
    """`ts`'s metric lines ([METRICS], which TorchServe's frontend parses; the gateway
    keeps its own metrics), two a batch, would flood the gateway's log. Warnings and
    errors (a handler's failure) still come through."""
    for name in ("ts.metrics.caching_metric", "ts.service"):
        logging.getLogger(name).setLevel(logging.WARNING)


class TorchServeBackend(PerRequestBackend):
    def __init__(self, artifact: Path, config: mc.ModelConfig, device: Device) -> None:
        super().__init__(artifact, config, device)
        try:
            from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl
            from ts.model_loader import ModelLoaderFactory
        except ImportError as exc:
            raise BackendUnavailable(
                f"model '{config.name}' is a TorchServe archive: install TorchServe's Python "
                f"package (pip install 'accel-gateway[torchserve]'): {exc}"
            ) from None
        _quiet_ts_logging()
        artifact = artifact.resolve()  # the working directory changes below
        self.manifest = read_manifest(artifact)
        # As TorchServe's worker: the archive's directory first on the path (the handler
        # imports its neighbours) and the working directory (handlers open files there).
        sys.path.insert(0, str(artifact))
        if (artifact / PACKAGES).is_dir():  # its requirementsFile's (store.py installed it)
            sys.path.insert(1, str(artifact / PACKAGES))
        os.chdir(artifact)
        import ts

        metrics = MetricsCacheYamlImpl(
            config_file_path=str(Path(ts.__file__).parent / "configs" / "metrics.yaml")
        )
        metrics.initialize_cache()
        metrics.model_name = config.name
        # A registration may name another handler than the manifest's (its `handler`).
        handlers = config.parameters[HANDLER].string_value if HANDLER in config.parameters else ""
        handler = json.loads(handlers or "{}").get(artifact.name, "")  # by version directory
        self.service = ModelLoaderFactory.get_model_loader().load(
            config.name,
            str(artifact),
            handler or self.manifest.handler,
            device.index if device.kind == "gpu" else None,
            max(config.max_batch_size, 1),
            config.parameters["envelope"].string_value or None
            if "envelope" in config.parameters
            else None,
            True,
            metrics,
        )

    def unload(self) -> None:
        # TorchServe has no unload call for handlers: its worker process ends, as ours does.
        self.service = None

    def run_requests(
        self, inputs: dict[str, np.ndarray], output_names: list[str], infos: list[RequestInfo]
    ) -> tuple[dict[str, np.ndarray], list[Failure]]:
        """Each row of "body" is one TorchServe request; each gateway request gets its
        rows' answers back under "<index>:<name>"."""
        bodies = inputs[BODY].reshape(-1)
        requests: list[otf.TsRequest] = []
        served: list[tuple[int, int]] = []  # (request index, rows) of those handed on
        failures: list[Failure] = []
        tokens: dict[str, str] = {}  # a request on a stream: its TorchServe id -> token
        taken: set[str] = set()  # ids already in the batch: a repeated one is made unique
        at = 0
        for index, (rows, _names, parameters, request_id, _sequence, token, *_) in enumerate(infos):
            try:
                mine = [_request(bodies[at + row], parameters, request_id, row)
                        for row in range(rows)]  # fmt: skip
            except _BadRequest as exc:  # this request fails; the batch's others run
                failures.append((index, "InvalidArgument", str(exc)))
            else:
                for ts_request in mine:
                    if ts_request.request_id in taken:  # (two V2 requests of one id)
                        ts_request.request_id += f"#{index}"
                    taken.add(ts_request.request_id)
                requests += mine
                served.append((index, rows))
                if token and rows == 1:
                    tokens[mine[0].request_id] = token
            at += rows
        if not requests:
            return {}, failures
        early = Intermediate(tokens)  # where the handler's intermediate responses go
        self.service.set_cl_socket(early)
        code, message, answers = predict(self.service, ts_batch(requests))
        if code != 200:
            kind, message = f"HandlerFailed:{code}", message[:MAX_MESSAGE_CHARS]
            return {}, failures + [(index, kind, message) for index, _ in served]
        early.finish(answers)
        outputs: dict[str, np.ndarray] = {}
        at = 0
        for index, rows in served:
            names = infos[index][1]
            answered = answers[at : at + rows]
            at += rows
            if any(a.request_id in early.refused for a in answered):
                failures.append((index, "HandlerFailed:501", NOT_ON_A_STREAM))
                continue
            if answered and answered[0].request_id in early.sent:
                continue  # answered through its stream
            if RESPONSE in names:
                outputs[f"{index}:{RESPONSE}"] = column([a.body for a in answered])
            if RESPONSE_INFO in names:
                outputs[f"{index}:{RESPONSE_INFO}"] = column([info_json(a) for a in answered])
        return outputs, failures


MAX_CACHED_HEADERS = 8192  # the TorchServe front's limit; a V2 client may send more
_NOT_HEADERS = 'parameter "request_headers" must be JSON: a list of [name, value] strings'


def _request_headers(text: Any) -> list[tuple[str, str]]:
    """A request's headers from their JSON (its "request_headers" parameter), read once
    for each text up to MAX_CACHED_HEADERS characters: a client sends the same ones
    request after request. A longer text is read anew, and kept by nothing after."""
    if not isinstance(text, (str, bytes)):
        raise ValueError(_NOT_HEADERS)
    return list((_headers if len(text) <= MAX_CACHED_HEADERS else _headers.__wrapped__)(text))


@functools.lru_cache(maxsize=64)
def _headers(text: str | bytes) -> tuple[tuple[str, str], ...]:
    # (A text that fails raises each time: nothing is cached of it.)
    headers = orjson.loads(text)
    if not isinstance(headers, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)
        for pair in headers
    ):
        raise ValueError(_NOT_HEADERS)
    for name, value in headers:  # as ts_batch encodes them (orjson refuses lone surrogates)
        (name + value).encode()
    return tuple((name, value) for name, value in headers)


def _request(body: Any, parameters: dict[str, Any], request_id: str, row: int) -> otf.TsRequest:
    value = body if isinstance(body, bytes) else str(body).encode()
    try:
        pairs = _request_headers(parameters.get("request_headers", "[]"))
        inputs = body_inputs(value, str(parameters.get("content_type", "")))
        # As ts_batch encodes them, and TorchServe's frontend: a bad one fails here (a
        # form field's name may hold bytes that are no UTF-8).
        for name, kind, _ in inputs:
            (name + kind).encode()
    except (ValueError, TypeError, UnicodeError) as exc:
        raise _BadRequest(
            f"the request's headers or body cannot be handed to the handler: {exc}"
        ) from None
    name = request_id or uuid4_text()
    return otf.TsRequest(
        request_id=name if row == 0 else f"{name}-{row}", headers=pairs, inputs=inputs
    )


class _BadRequest(ValueError):
    """A request whose parameters or body cannot be handed to a handler."""
