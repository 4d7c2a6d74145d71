"""The object a Python model's `auto_complete_config(auto_complete_model_config)` receives
(Triton's names): it completes the model's config before the model is loaded."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from accel_base.config_json import config_to_json
from accel_base.proto import model_config_pb2 as mc
from backends.python.pb_utils import TritonModelException


class ModelConfig:
    def __init__(self, config: mc.ModelConfig) -> None:
        self.config = config

    def as_dict(self) -> dict[str, Any]:
        return config_to_json(self.config)

    def max_batch_size(self) -> int:
        return self.config.max_batch_size

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = self.config.max_batch_size
        if current == 0 or current == max_batch_size:
            self.config.max_batch_size = max_batch_size
        elif max_batch_size < current:  # the config asks more than the model can take
            raise TritonModelException(
                f"auto_complete_config sets max_batch_size {max_batch_size}, below the "
                f"config's {current}"
            )  # (a larger value leaves the config's own, smaller one)

    def set_dynamic_batching(self) -> None:
        if not self.config.HasField("sequence_batching"):
            self.config.dynamic_batching.SetInParent()

    def set_model_transaction_policy(self, policy: dict[str, Any]) -> None:
        _parse(policy, self.config.model_transaction_policy, "model_transaction_policy")

    def add_input(self, tensor: dict[str, Any]) -> None:
        self._add("input", self.config.input, tensor)

    def add_output(self, tensor: dict[str, Any]) -> None:
        self._add("output", self.config.output, tensor)

    def _add(self, kind: str, declared: Any, tensor: dict[str, Any]) -> None:
        name = tensor.get("name") if isinstance(tensor, dict) else None
        if not name:
            raise TritonModelException(f"add_{kind} needs a dict with a 'name'")
        wanted = mc.ModelInput() if kind == "input" else mc.ModelOutput()
        _parse(tensor, wanted, f"{kind} '{name}'")
        existing = next((t for t in declared if t.name == name), None)
        if existing is None:
            declared.add().CopyFrom(wanted)
            return
        # Already declared (by the config, or by an earlier call): it must agree.
        if wanted.data_type and existing.data_type and wanted.data_type != existing.data_type:
            raise TritonModelException(
                f"add_{kind}: {kind} '{name}' is {mc.DataType.Name(wanted.data_type)} here "
                f"but {mc.DataType.Name(existing.data_type)} in the config"
            )
        if wanted.dims and existing.dims and list(wanted.dims) != list(existing.dims):
            raise TritonModelException(
                f"add_{kind}: {kind} '{name}' has dims {list(wanted.dims)} here but "
                f"{list(existing.dims)} in the config"
            )


def _parse(data: dict[str, Any], message: Any, where: str) -> None:
    try:
        json_format.ParseDict(data, message)
    except json_format.ParseError as exc:
        raise TritonModelException(f"auto_complete_config: {where}: {exc}") from None
