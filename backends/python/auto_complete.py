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
        if current not in (0, max_batch_size):
            raise TritonModelException(
                f"auto_complete_config sets max_batch_size {max_batch_size}, but the config "
                f"says {current}"
            )
        self.config.max_batch_size = max_batch_size

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
        if any(t.name == name for t in declared):
            raise TritonModelException(
                f"add_{kind}: {kind} '{name}' is already in the config (check as_dict() first)"
            )
        _parse(tensor, declared.add(), f"{kind} '{name}'")


def _parse(data: dict[str, Any], message: Any, where: str) -> None:
    try:
        json_format.ParseDict(data, message)
    except json_format.ParseError as exc:
        raise TritonModelException(f"auto_complete_config: {where}: {exc}") from None
