"""Backends that answer each request of a batch on their own (`run_requests`): Triton's
Python backend and TorchServe's handlers. Their tensors are the config's, and a plain
`run` (a warm-up) is one request of every row."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from accel_base.datatypes import v2_datatype
from backends.base import Backend, TensorSpec

# (rows, requested output names, parameters, request id, correlation id, stream token,
# cancel token) of one request (gateway/core/scheduling/per_request.py); the stream token
# is a decoupled request's (gateway/core/decoupled.py), else ""; is_cancelled() asks the
# gateway by the cancel token.
RequestInfo = tuple[int, tuple[str, ...], dict[str, Any], str, Any, str, str]
Failure = tuple[int, str, str]  # (request index, gateway error class name, message)
ALL = -1  # a failure's request index when every request of the batch failed alike


class PerRequestBackend(Backend):
    def inputs(self) -> list[TensorSpec]:
        return self._specs(self.config.input)

    def outputs(self) -> list[TensorSpec]:
        return self._specs(self.config.output)

    def _specs(self, tensors: Any) -> list[TensorSpec]:
        batch = (-1,) if self.config.max_batch_size > 0 else ()
        return [
            TensorSpec(t.name, v2_datatype(t.data_type), batch + tuple(t.dims)) for t in tensors
        ]

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        """All of `inputs` as one request."""
        batched = self.config.max_batch_size > 0
        rows = len(next(iter(inputs.values()))) if batched and inputs else 1
        outputs, failures = self.run_requests(
            inputs, output_names, [(rows, tuple(output_names), {}, "", 0, "", "")]
        )
        if failures:
            raise RuntimeError(failures[0][2])
        return {key.split(":", 1)[1]: value for key, value in outputs.items()}

    @abstractmethod
    def run_requests(
        self, inputs: dict[str, np.ndarray], output_names: list[str], infos: list[RequestInfo]
    ) -> tuple[dict[str, np.ndarray], list[Failure]]:
        """Each request's outputs under "<index>:<name>", and the requests that failed."""
