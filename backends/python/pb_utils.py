"""`triton_python_backend_utils` as Triton documents it, for models written for Triton's
Python backend: the worker makes this module importable under that name before it
imports a model's `model.py` (backends/python/backend.py).

Tensors are numpy arrays on the CPU (BYTES as object arrays of bytes); DLPack goes in
and out through numpy's own support.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import numpy as np

from accel_base.datatypes import NUMPY_DTYPES, datatype_of
from accel_base.proto import model_config_pb2 as mc

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2


class TritonModelException(Exception):
    """Raised by this module's calls that a model used wrongly."""


class TritonError(Exception):
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, msg: str, code: int = INTERNAL) -> None:
        super().__init__(msg)
        self._message = msg
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class _Capsule:
    """A bare DLPack capsule (what `to_dlpack` of torch and others hands out) wrapped in
    the protocol numpy's from_dlpack asks for."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU


class Tensor:
    def __init__(self, name: str, data: Any) -> None:
        if not isinstance(data, np.ndarray):
            raise TritonModelException(
                f"Tensor '{name}': expected a numpy array, got {type(data).__name__} "
                "(use Tensor.from_dlpack for framework tensors)"
            )
        if data.dtype.kind in ("U", "S"):  # strings become BYTES elements
            data = np.array([_as_bytes(v) for v in data.reshape(-1)], np.object_).reshape(
                data.shape
            )
        self._name = name
        self._array = data

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int:
        return mc.DataType.Value(_config_name(datatype_of(self._array)))

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        if self._array.dtype.hasobject:
            raise TritonModelException(f"Tensor '{self._name}': BYTES tensors have no DLPack form")
        array = self._array
        if not array.flags.writeable:  # DLPack's capsule cannot say "read-only"
            array = array.copy()
        return array.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, dlpack: Any) -> Tensor:
        source = dlpack if hasattr(dlpack, "__dlpack__") else _Capsule(dlpack)
        try:
            return Tensor(name, np.from_dlpack(source))
        except (BufferError, RuntimeError, TypeError) as exc:
            raise TritonModelException(
                f"Tensor '{name}': not a CPU DLPack tensor numpy can read ({exc}); move it "
                "to the CPU first"
            ) from None

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._array.dtype}, {list(self._array.shape)})"


def _as_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _config_name(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


class InferenceResponse:
    def __init__(
        self,
        output_tensors: list[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        self._outputs = list(output_tensors or [])
        self._error = error
        if isinstance(parameters, str):
            parameters = json.loads(parameters or "{}")
        self._parameters = dict(parameters or {})

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return json.dumps(self._parameters)


class InferenceRequest:
    """A request this model received (made by the worker), or one it makes to call
    another model of the gateway (`exec`, `async_exec`)."""

    def __init__(
        self,
        model_name: str = "",
        requested_output_names: list[str] | None = None,
        inputs: list[Tensor] | None = None,
        request_id: str = "",
        correlation_id: int | str = 0,
        flags: int = 0,
        timeout: int = 0,
        model_version: int = -1,
        parameters: dict[str, Any] | str | None = None,
        **_: Any,  # preferred_memory, trace: nothing to do with them here
    ) -> None:
        self._model_name = model_name
        self._outputs = list(requested_output_names or [])
        self._inputs = list(inputs or [])
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        self._timeout = timeout
        self._model_version = model_version
        if isinstance(parameters, str):
            parameters = json.loads(parameters or "{}")
        self._parameters = dict(parameters or {})
        self._sender: Any = None  # a decoupled model's (backends/python/sender.py)
        self._token = ""  # the gateway's for this request: is_cancelled() asks with it

    def get_response_sender(self) -> Any:
        if self._sender is None:
            raise TritonModelException(
                "get_response_sender() is for decoupled models "
                "(model_transaction_policy { decoupled: true })"
            )
        return self._sender

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._outputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def parameters(self) -> str:
        return json.dumps(self._parameters)

    def is_cancelled(self) -> bool:
        """Whether the request's caller left (Triton's request cancellation): asked of the
        gateway, a round trip of its socket each time."""
        if not self._token:
            return False
        from backends.python.model_calls import cancelled  # the worker's socket

        return cancelled(self._token)

    def exec(self, decoupled: bool = False) -> InferenceResponse:
        """Run the request on the named model of this gateway, through its scheduler."""
        if decoupled:
            raise TritonModelException("decoupled model calls are not supported by this server")
        from backends.python.model_calls import call  # the worker's socket, made on first use

        return call(self)

    async def async_exec(self, decoupled: bool = False) -> InferenceResponse:
        return await asyncio.to_thread(self.exec, decoupled)


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict | None:
    return next((t for t in model_config.get("input", []) if t.get("name") == name), None)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict | None:
    return next((t for t in model_config.get("output", []) if t.get("name") == name), None)


def triton_string_to_numpy(triton_type_string: str) -> type:
    """ "TYPE_FP32" -> numpy.float32 (TYPE_STRING -> numpy.object_)."""
    name = triton_type_string.removeprefix("TYPE_")
    name = "BYTES" if name == "STRING" else name
    try:
        return NUMPY_DTYPES[name].type
    except KeyError:
        raise TritonModelException(f"unknown Triton type '{triton_type_string}'") from None


def triton_to_numpy_type(data_type: int) -> type:
    return triton_string_to_numpy(mc.DataType.Name(data_type))


def numpy_to_triton_type(data_type: Any) -> int:
    return mc.DataType.Value(_config_name(datatype_of(np.empty(0, data_type))))


class Logger:
    """Triton's logger for models: lines go to the worker's log with the model's name."""

    _log = logging.getLogger("accel_gateway.python_model")

    @classmethod
    def log_info(cls, message: str) -> None:
        cls._log.info(message)

    @classmethod
    def log_warn(cls, message: str) -> None:
        cls._log.warning(message)

    @classmethod
    def log_error(cls, message: str) -> None:
        cls._log.error(message)

    @classmethod
    def log_verbose(cls, message: str) -> None:
        cls._log.debug(message)
