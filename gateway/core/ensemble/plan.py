"""An ensemble's `ensemble_scheduling` section, checked and put in an order that runs:
each step after the steps whose outputs it reads. Errors name the step and the tensor."""

from __future__ import annotations

from dataclasses import dataclass

from accel_base.datatypes import v2_datatype
from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc

ENSEMBLE_PLATFORM = "ensemble"


def is_ensemble(config: mc.ModelConfig) -> bool:
    return (config.platform or config.backend) == ENSEMBLE_PLATFORM


@dataclass(frozen=True, slots=True)
class Step:
    index: int  # its place in the config, as errors name it
    model: str
    version: str  # "" for the latest ready version (Triton's -1)
    inputs: dict[str, str]  # the model's input name -> the ensemble tensor it reads
    outputs: dict[str, str]  # the model's output name -> the ensemble tensor it writes

    @property
    def label(self) -> str:
        return f"step {self.index} (model '{self.model}')"


def plan_steps(config: mc.ModelConfig) -> list[Step]:
    """The steps in an order where every tensor is written before it is read."""
    where = f"ensemble '{config.name}'"
    if not config.ensemble_scheduling.step:
        raise InvalidArgument(f"{where}: ensemble_scheduling has no step")
    if not config.input or not config.output:
        raise InvalidArgument(f"{where}: an ensemble declares its input and output tensors")
    steps = [
        _step(config.name, index, step)
        for index, step in enumerate(config.ensemble_scheduling.step)
    ]
    available = {tensor.name for tensor in config.input}
    writers: dict[str, Step] = {}
    for step in steps:
        for tensor in step.outputs.values():
            if tensor in available or tensor in writers:
                raise InvalidArgument(f"{where}: tensor '{tensor}' is written twice ({step.label})")
            writers[tensor] = step
    for step in steps:
        for tensor in step.inputs.values():
            if tensor not in available and tensor not in writers:
                raise InvalidArgument(
                    f"{where}: {step.label} reads '{tensor}', which is neither an ensemble "
                    "input nor any step's output"
                )
    for tensor in config.output:
        if tensor.name not in writers:
            raise InvalidArgument(f"{where}: no step writes the ensemble output '{tensor.name}'")
    ordered: list[Step] = []
    left = list(steps)
    while left:
        ready = [s for s in left if all(t in available for t in s.inputs.values())]
        if not ready:
            names = ", ".join(s.label for s in left)
            raise InvalidArgument(
                f"{where}: the steps read each other's outputs in a cycle: {names}"
            )
        for step in ready:
            ordered.append(step)
            available.update(step.outputs.values())
            left.remove(step)
    return ordered


def _step(ensemble: str, index: int, step: mc.ModelEnsembling.Step) -> Step:
    where = f"ensemble '{ensemble}'"
    if not step.model_name:
        raise InvalidArgument(f"{where}: step {index} names no model (model_name)")
    if step.model_name == ensemble:
        raise InvalidArgument(f"{where}: step {index} names the ensemble itself")
    if not step.output_map:
        raise InvalidArgument(
            f"{where}: step {index} (model '{step.model_name}') has no output_map"
        )
    version = "" if step.model_version <= 0 else str(step.model_version)  # -1: the latest
    return Step(index, step.model_name, version, dict(step.input_map), dict(step.output_map))


def check_members(
    config: mc.ModelConfig, steps: list[Step], members: list[mc.ModelConfig]
) -> dict[str, str]:
    """Each step's map against its model's own tensors, and every tensor's datatype the
    same where it is written and where it is read; the V2 datatype of every tensor."""
    where = f"ensemble '{config.name}'"
    datatypes = {t.name: v2_datatype(t.data_type) for t in config.input}
    for step, member in zip(steps, members, strict=True):
        outputs = {t.name: v2_datatype(t.data_type) for t in member.output}
        for name, tensor in step.outputs.items():
            if name not in outputs:
                raise InvalidArgument(
                    f"{where}: {step.label} maps output '{name}', but the model's outputs are "
                    f"{', '.join(outputs) or 'none'}"
                )
            datatypes[tensor] = outputs[name]
    for step, member in zip(steps, members, strict=True):
        inputs = {t.name: v2_datatype(t.data_type) for t in member.input}
        needed = [t.name for t in member.input if not t.optional]
        for name in needed:
            if name not in step.inputs:
                raise InvalidArgument(
                    f"{where}: {step.label} does not feed the model's input '{name}'"
                )
        for name, tensor in step.inputs.items():
            if name not in inputs:
                raise InvalidArgument(
                    f"{where}: {step.label} maps input '{name}', but the model's inputs are "
                    f"{', '.join(inputs) or 'none'}"
                )
            if datatypes[tensor] != inputs[name]:
                raise InvalidArgument(
                    f"{where}: {step.label} input '{name}' is {inputs[name]}, but tensor "
                    f"'{tensor}' is {datatypes[tensor]}"
                )
    for tensor in config.output:
        declared = v2_datatype(tensor.data_type)
        if datatypes[tensor.name] != declared:
            raise InvalidArgument(
                f"{where}: output '{tensor.name}' is declared {declared}, but its step writes "
                f"{datatypes[tensor.name]}"
            )
    return datatypes
