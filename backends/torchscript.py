"""`pytorch_libtorch`: a TorchScript archive (`model.pt`, written by torch.jit.save).

TorchScript keeps neither tensor shapes nor output names, so the config declares every
input and output, as Triton's PyTorch backend requires. Inputs reach `forward` by
argument name when the config's names match it, else by the `NAME__<index>` suffix
Triton uses, else in config order; a tuple result maps to outputs the same way.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch

from accel_base.errors import Internal
from accel_base.proto import model_config_pb2 as mc
from backends.base import Backend, BackendUnavailable, Device, TensorSpec
from backends.parameters import bool_parameter
from backends.torch_common import (
    V2_TO_TORCH,
    apply_thread_parameters,
    config_specs,
    positions,
    sequence_specs,
    to_numpy,
    to_torch,
    torch_device,
)

log = logging.getLogger(__name__)


class TorchScriptBackend(Backend):
    def __init__(self, artifact: Path, config: mc.ModelConfig, device: Device) -> None:
        super().__init__(artifact, config, device)
        if len(config.input) == 0 or len(config.output) == 0:
            raise BackendUnavailable(
                f"model '{config.name}': a TorchScript file records no tensor names or shapes; "
                "declare every input and output in config.pbtxt"
            )
        self._device = torch_device(device, config.name)
        apply_thread_parameters(config)
        # Triton's parameter: the profiling executor fuses and compiles kernels for each of
        # the first batch sizes it meets (about 1 s each for ResNet-50 on an H100, against
        # 4 ms a run after), which a dynamic batcher's varying sizes keep meeting.
        self._optimized = not bool_parameter(config, "DISABLE_OPTIMIZED_EXECUTION", False)
        try:
            # The TorchScript loader reads only TorchScript's own format, never a Python pickle.
            module = torch.jit.load(str(artifact), map_location=self._device)
        except RuntimeError as exc:
            reason = str(exc).strip().splitlines()[0]
            raise BackendUnavailable(
                f"model '{config.name}': {artifact.name} is not a TorchScript archive "
                f"(write it with torch.jit.save; pickled modules are refused because loading "
                f"them runs code): {reason}"
            ) from None
        self._module = module.eval()
        # A stateful model's controls and state come from its sequence_batching section.
        filled, kept = sequence_specs(config)
        self._inputs = config_specs(config, config.input) + filled
        self._outputs = config_specs(config, config.output) + kept
        forward_args = [arg.name for arg in module.forward.schema.arguments[1:]]
        if len(forward_args) != len(self._inputs):
            raise BackendUnavailable(
                f"model '{config.name}': forward takes {len(forward_args)} tensors "
                f"({', '.join(forward_args)}) but the config declares {len(self._inputs)} inputs"
            )
        input_positions = positions([s.name for s in self._inputs], forward_args)
        self._input_order = sorted(input_positions, key=input_positions.__getitem__)
        self._output_position = positions([s.name for s in self._outputs])
        self._datatypes = {s.name: s.datatype for s in self._inputs}
        self._output_dtypes = {s.name: V2_TO_TORCH[s.datatype] for s in self._outputs}
        log.info("model '%s' (TorchScript) on %s", config.name, self._device)

    @classmethod
    def gpu_capable(cls) -> bool:
        return torch.cuda.is_available()

    @classmethod
    def inline_capable(cls) -> bool:
        return True  # a scripted module may be called from any thread

    def inputs(self) -> list[TensorSpec]:
        return list(self._inputs)

    def outputs(self) -> list[TensorSpec]:
        return list(self._outputs)

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> dict[str, np.ndarray]:
        args = [to_torch(inputs[n], self._datatypes[n], self._device) for n in self._input_order]
        with torch.inference_mode(), torch.jit.optimized_execution(self._optimized):
            result = self._module(*args)
        return {name: to_numpy(self._pick(result, name)) for name in output_names}

    def _pick(self, result, name: str) -> torch.Tensor:
        model = self.config.name
        if isinstance(result, dict):
            if name not in result:
                raise Internal(f"model '{model}' returned outputs {sorted(result)}, not '{name}'")
            tensor = result[name]
        else:
            if isinstance(result, torch.Tensor):
                result = (result,)
            position = self._output_position[name]
            if position >= len(result):
                raise Internal(
                    f"model '{model}' returned {len(result)} tensors, so it has no output "
                    f"'{name}' (position {position})"
                )
            tensor = result[position]
        # The config states the datatype clients get: a mismatch would be sent reinterpreted.
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != self._output_dtypes[name]:
            found = tensor.dtype if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise Internal(
                f"model '{model}': output '{name}' is {found} but the config declares "
                f"{self._output_dtypes[name]}"
            )
        return tensor

    def memory_bytes(self) -> int:
        tensors = [*self._module.parameters(), *self._module.buffers()]
        return sum(t.numel() * t.element_size() for t in tensors)

    def unload(self) -> None:
        del self._module
        if self._device.type == "cuda":
            torch.cuda.empty_cache()
