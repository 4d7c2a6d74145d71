"""What both schedulers do around a backend run: wrap its failures, build the response."""

from __future__ import annotations

import numpy as np

from accel_base.errors import GatewayError, Internal
from gateway.core.inference import InferRequest, InferResponse, Tensor


def backend_failure(model: str, exc: Exception) -> GatewayError:
    """A backend's exception as the client sees it: its own message, never a stack trace."""
    if isinstance(exc, GatewayError):
        return exc
    return Internal(f"model '{model}' failed to run: {type(exc).__name__}: {exc}")


def build_response(
    request: InferRequest,
    version: str,
    output_names: list[str],
    output_datatypes: dict[str, str],
    outputs: dict[str, np.ndarray],
) -> InferResponse:
    if not outputs and request.stream is not None:  # answered through its stream
        return InferResponse(request.model_name, version, request.id, outputs=[])
    try:  # (output_names are the config's: only the backend's outputs can lack one)
        tensors = [Tensor(name, output_datatypes[name], outputs[name]) for name in output_names]
    except KeyError:
        missing = [name for name in output_names if name not in outputs]
        raise Internal(
            f"model '{request.model_name}': the backend returned no output {', '.join(missing)}"
        ) from None
    return InferResponse(
        model_name=request.model_name, model_version=version, id=request.id, outputs=tensors
    )
