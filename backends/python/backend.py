"""Triton's Python backend: `<version>/model.py` defines `TritonPythonModel` with
`initialize(args)`, `execute(requests)` and `finalize()`, and optionally the static
`auto_complete_config(auto_complete_model_config)`.

It runs in a worker process of its own (gateway/core/scheduling/execution.py), so a model's
crash or `sys.exit` fails only the requests it was running. The batcher hands it the
requests of a batch with their rows merged; `run_requests` gives each back to
`execute` as a request of its own and returns each response's tensors under the key
"<index>:<name>" (responses need not agree in shape), with per-request failures apart.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from accel_base.config_json import config_to_json
from accel_base.datatypes import datatype_of, v2_datatype
from accel_base.proto import model_config_pb2 as mc
from backends.base import BackendUnavailable, Device
from backends.per_request import ALL, Failure, PerRequestBackend, RequestInfo
from backends.python import model_calls, pb_utils
from backends.python.auto_complete import ModelConfig
from backends.python.sender import ERROR_CLASSES, ResponseSender

MAX_MESSAGE_CHARS = 512  # per failed request: the reply must fit one worker message


def _capped(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "..."


def output_key(index: int, name: str) -> str:
    return f"{index}:{name}"


class PythonBackend(PerRequestBackend):
    def __init__(self, artifact: Path, config: mc.ModelConfig, device: Device) -> None:
        super().__init__(artifact, config, device)
        sys.modules.setdefault("triton_python_backend_utils", pb_utils)
        model_class = _model_class(artifact, config.name)
        self.completed = False
        if hasattr(model_class, "auto_complete_config"):
            model_class.auto_complete_config(ModelConfig(config))
            self.completed = True
        # The config's or the model's own (auto_complete_config): responses through
        # each request's sender, not execute()'s return.
        self._decoupled = config.model_transaction_policy.decoupled
        self._batched = config.max_batch_size > 0
        self._output_types = {t.name: v2_datatype(t.data_type) for t in config.output}
        self._loop: asyncio.AbstractEventLoop | None = None  # for an `async def execute`
        self.model = model_class()
        if hasattr(self.model, "initialize"):
            self.model.initialize(
                {
                    "model_config": json.dumps(config_to_json(config)),
                    "model_instance_kind": "GPU" if device.kind == "gpu" else "CPU",
                    "model_instance_name": f"{config.name}_0",
                    "model_instance_device_id": str(device.index),
                    "model_repository": str(artifact.parent.parent),
                    "model_version": artifact.parent.name,
                    "model_name": config.name,
                }
            )

    def completed_config(self) -> mc.ModelConfig | None:
        return self.config if self.completed else None

    def run_requests(
        self, inputs: dict[str, np.ndarray], output_names: list[str], infos: list[RequestInfo]
    ) -> tuple[dict[str, np.ndarray], list[Failure]]:
        requests, offset = [], 0
        for rows, names, parameters, request_id, correlation_id, *rest in infos:
            tensors = [
                pb_utils.Tensor(name, array[offset : offset + rows] if self._batched else array)
                for name, array in inputs.items()
            ]
            offset += rows
            request = pb_utils.InferenceRequest(
                self.config.name, list(names), tensors, request_id, correlation_id,
                parameters=parameters,
            )  # fmt: skip
            request._token = str(rest[1]) if len(rest) > 1 else ""  # its cancel token
            requests.append(request)
        if self._decoupled:
            return self._run_decoupled(requests, infos)
        try:
            responses = self._execute(requests)
        except Exception as exc:  # the model's own failure fails every request it had
            return {}, [(ALL, "Internal", _capped(f"{type(exc).__name__}: {exc}"))]
        if not isinstance(responses, list | tuple) or len(responses) != len(requests):
            got = (
                len(responses) if isinstance(responses, list | tuple) else type(responses).__name__
            )
            message = f"execute returned {got} responses for {len(requests)} requests"
            return {}, [(ALL, "Internal", message)]
        outputs: dict[str, np.ndarray] = {}
        failures: list[Failure] = []
        for index, (info, response) in enumerate(zip(infos, responses, strict=True)):
            try:
                for name, array in self._response_outputs(info, response).items():
                    outputs[output_key(index, name)] = array
            except _RequestFailed as failed:
                failures.append((index, failed.kind, _capped(failed.message)))
        return outputs, failures

    def _run_decoupled(
        self, requests: list[pb_utils.InferenceRequest], infos: list[RequestInfo]
    ) -> tuple[dict[str, np.ndarray], list[Failure]]:
        for request, info in zip(requests, infos, strict=True):
            token = info[5] if len(info) > 5 else None
            if not token:
                message = f"model '{self.config.name}' is decoupled: call it over a gRPC stream"
                return {}, [(ALL, "InvalidArgument", message)]
            request._sender = ResponseSender(token, tuple(info[1]), model_calls.send_frame)
        try:
            result = self._execute(requests)
        except Exception as exc:  # no response will come: the requests fail here
            return {}, [(ALL, "Internal", _capped(f"{type(exc).__name__}: {exc}"))]
        if result is not None:
            message = "a decoupled model's execute must return None (responses go by sender)"
            return {}, [(ALL, "Internal", message)]
        return {}, []

    def _execute(self, requests: list[pb_utils.InferenceRequest]) -> Any:
        result = self.model.execute(requests)
        if inspect.isawaitable(result):
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            result = self._loop.run_until_complete(result)
        return result

    def _response_outputs(self, info: RequestInfo, response: Any) -> dict[str, np.ndarray]:
        if not isinstance(response, pb_utils.InferenceResponse):
            kind = type(response).__name__
            raise _RequestFailed("Internal", f"execute returned a {kind}, not InferenceResponse")
        if response.has_error():
            error = response.error()
            if not isinstance(error, pb_utils.TritonError):
                raise _RequestFailed(
                    "Internal", f"the response's error is a {type(error).__name__}"
                )
            raise _RequestFailed(ERROR_CLASSES.get(error.code(), "Internal"), error.message())
        produced = {t.name(): t.as_numpy() for t in response.output_tensors()}
        rows, names = info[0], info[1]
        missing = [name for name in names if name not in produced]
        if missing:
            raise _RequestFailed("Internal", f"the response has no output {', '.join(missing)}")
        chosen = {}
        for name in names:
            array = produced[name]
            declared = self._output_types.get(name)
            if (
                declared is not None
                and datatype_of(array) != declared
                and not (declared == "BF16" and array.dtype == np.uint16)
            ):
                message = f"output '{name}' is {datatype_of(array)}, the config says {declared}"
                raise _RequestFailed("Internal", message)
            if self._batched and (array.ndim == 0 or array.shape[0] != rows):
                message = f"output '{name}' has shape {list(array.shape)}, not {rows} rows"
                raise _RequestFailed("Internal", message)
            chosen[name] = array
        return chosen

    def unload(self) -> None:
        try:
            if hasattr(self.model, "finalize"):
                self.model.finalize()
        finally:
            if self._loop is not None:
                self._loop.close()


class _RequestFailed(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _model_class(artifact: Path, name: str) -> type:
    if not artifact.is_file():
        raise BackendUnavailable(f"model '{name}': no {artifact.name} in {artifact.parent}")
    # The version directory comes first on the path, so model.py may import its neighbours.
    sys.path.insert(0, str(artifact.parent))
    spec = importlib.util.spec_from_file_location(f"triton_model_{name}", artifact)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model_class = getattr(module, "TritonPythonModel", None)
    if not isinstance(model_class, type):
        raise BackendUnavailable(
            f"model '{name}': {artifact.name} defines no class TritonPythonModel"
        )
    return model_class
