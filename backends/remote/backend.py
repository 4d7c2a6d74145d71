"""`backend: "remote"`: each batch goes to another V2 server, which runs it.

The model's inputs and outputs are the remote model's (its metadata), so its config
may leave them out. With `max_batch_size` above 0 the gateway's own dynamic batcher
merges requests in front of the remote, which must batch too, at least as far.
`instance_group` count sets how many batches are out at once (each instance is a
thread that waits on its call).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from accel_base.datatypes import v2_datatype
from accel_base.errors import GatewayError
from accel_base.proto import model_config_pb2 as mc
from backends.base import Backend, BackendUnavailable, Device, TensorSpec
from backends.remote.endpoints import EndpointPool, release, shared_pool
from backends.remote.failures import Lost, NotSent
from backends.remote.settings import read_settings


def _specs(declared: Any, where: str) -> list[TensorSpec]:
    try:
        return [TensorSpec(t["name"], t["datatype"], tuple(t["shape"])) for t in declared]
    except (KeyError, TypeError) as exc:
        raise BackendUnavailable(f"{where}: its metadata is malformed ({exc})") from None


class RemoteBackend(Backend):
    def __init__(self, artifact: Path, config: mc.ModelConfig, device: Device) -> None:
        super().__init__(artifact, config, device)
        self.settings = read_settings(config)
        self.pool = shared_pool(config.name, self.settings)
        try:
            self._inputs, self._outputs = self._signature(self.pool)
            self._check_batching(self.pool)
        except BaseException:
            release(config.name, self.settings)
            raise
        self._datatypes = {spec.name: spec.datatype for spec in self._inputs}

    def _first_answer(self, pool: EndpointPool, ask: str) -> Any:
        """What the first endpoint that answers says to `ask` (a client method)."""
        reasons = []
        for endpoint in pool.endpoints:
            try:
                return getattr(endpoint.client, ask)()
            except (NotSent, Lost, GatewayError) as exc:
                pool.mark_down(endpoint, str(exc))
                reasons.append(str(exc))
        raise BackendUnavailable(
            f"model '{self.config.name}': no remote endpoint answered for model "
            f"'{self.settings.model}': {'; '.join(reasons)}"
        )

    def _signature(self, pool: EndpointPool) -> tuple[list[TensorSpec], list[TensorSpec]]:
        """The remote's inputs and outputs; where no endpoint is up, the config's own
        (when it declares them all), so that the model serves once one comes up."""
        try:
            metadata = self._first_answer(pool, "metadata")
        except BackendUnavailable:
            if not (self.config.input and self.config.output):
                raise
            return self._declared(self.config.input), self._declared(self.config.output)
        where = f"model '{self.config.name}': remote model '{self.settings.model}'"
        if not isinstance(metadata, dict):
            raise BackendUnavailable(f"{where}: its metadata is not an object")
        return _specs(metadata.get("inputs"), where), _specs(metadata.get("outputs"), where)

    def _declared(self, tensors: Any) -> list[TensorSpec]:
        batch = (-1,) if self.config.max_batch_size > 0 else ()
        return [
            TensorSpec(t.name, v2_datatype(t.data_type), batch + tuple(t.dims)) for t in tensors
        ]

    def _check_batching(self, pool: EndpointPool) -> None:
        ours = self.config.max_batch_size
        if ours <= 0:
            return
        where = f"model '{self.config.name}' has max_batch_size {ours}, but remote model " + (
            f"'{self.settings.model}'"
        )
        unbatched = [
            s.name for s in self._inputs + self._outputs if not s.shape or s.shape[0] != -1
        ]
        if unbatched:
            raise BackendUnavailable(
                f"{where} has no batch dimension on {', '.join(unbatched)}; set max_batch_size "
                "to 0 to send requests as they are"
            )
        if any(e.down_reason is None for e in pool.endpoints):
            theirs = self._first_answer(pool, "max_batch_size")
            if theirs is not None and theirs < ours:
                raise BackendUnavailable(
                    f"{where} batches at most {theirs}; lower max_batch_size to {theirs}"
                )

    def inputs(self) -> list[TensorSpec]:
        return list(self._inputs)

    def outputs(self) -> list[TensorSpec]:
        return list(self._outputs)

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        datatypes = self._datatypes
        return self.pool.call(lambda client: client.infer(inputs, datatypes, output_names))

    def unload(self) -> None:
        release(self.config.name, self.settings)
