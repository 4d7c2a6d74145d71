"""Checks an InferRequest against its model's config before it is queued.

Every message names the model, the tensor and what was expected, so a client
can fix its request without reading the server's logs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accel_base.datatypes import v2_datatype
from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.inference import InferRequest


@dataclass(frozen=True, slots=True)
class TensorRule:
    name: str
    datatype: str
    dims: tuple[int, ...]  # without the batch dimension; -1 matches any size
    reshape: tuple[int, ...] | None  # shape the backend sees instead of dims
    optional: bool = False


@dataclass(frozen=True, slots=True)
class RequestRules:
    """What a model accepts, precomputed once per load so checks are cheap."""

    model: str
    max_batch_size: int
    inputs: dict[str, TensorRule]
    outputs: tuple[str, ...]

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> RequestRules:
        def rule(tensor) -> TensorRule:
            reshape = tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None
            return TensorRule(
                tensor.name,
                v2_datatype(tensor.data_type),
                tuple(tensor.dims),
                reshape,
                getattr(tensor, "optional", False),
            )

        return cls(
            model=config.name,
            max_batch_size=config.max_batch_size,
            inputs={tensor.name: rule(tensor) for tensor in config.input},
            outputs=tuple(tensor.name for tensor in config.output),
        )


def _dims_match(expected: tuple[int, ...], actual: tuple[int, ...]) -> bool:
    if expected == actual:  # the common case, decided in one comparison
        return True
    return len(expected) == len(actual) and all(
        e == -1 or e == a for e, a in zip(expected, actual, strict=True)
    )


def _show(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _missing_inputs(model: str, rules: RequestRules, got: list[str], missing: list[str]) -> str:
    """Triton's words for inputs the request lacks (clients match on them)."""
    required = sum(not rule.optional for rule in rules.inputs.values())
    total = len(rules.inputs)
    expected = (
        f"{required}" if required == total else f"number of inputs between {required} and {total}"
    )
    return (
        f"expected {expected} inputs but got {len(got)} inputs for model '{model}'. Got "
        f"input(s) {_names(got)}, but missing required input(s) {_names(missing)}. Please "
        "provide all required input(s)."
    )


def _names(names: list[str]) -> str:
    return "[" + ",".join(f"'{name}'" for name in names) + "]"


def check_request(
    request: InferRequest, rules: RequestRules
) -> tuple[dict[str, np.ndarray], list[str], int]:
    """Validated backend inputs, the output names to compute, and the batch size (0 if none)."""
    model = rules.model
    feed: dict[str, np.ndarray] = {}
    batch_size: int | None = None
    for tensor in request.inputs:
        rule = rules.inputs.get(tensor.name)
        if rule is None:
            raise InvalidArgument(
                f"model '{model}' has no input '{tensor.name}'; its inputs are: "
                f"{', '.join(rules.inputs)}"
            )
        if tensor.name in feed:
            raise InvalidArgument(f"input '{tensor.name}' of model '{model}' is given twice")
        if tensor.datatype != rule.datatype:
            raise InvalidArgument(
                f"input '{tensor.name}' of model '{model}': expected datatype {rule.datatype}, "
                f"got {tensor.datatype}"
            )
        shape = tensor.data.shape
        if rules.max_batch_size > 0:
            if len(shape) == 0 or not _dims_match(rule.dims, shape[1:]):
                raise InvalidArgument(  # Triton's words first: clients match on them
                    f"unexpected shape for input '{tensor.name}' for model '{model}'. "
                    f"Expected {_show((-1, *rule.dims))}, got {_show(shape)} (the first "
                    "dimension is the batch)"
                )
            if not 1 <= shape[0] <= rules.max_batch_size:
                raise InvalidArgument(
                    f"input '{tensor.name}' of model '{model}': batch size {shape[0]} is outside "
                    f"1..{rules.max_batch_size} (the model's max_batch_size)"
                )
            if batch_size is None:
                batch_size = shape[0]
            elif shape[0] != batch_size:
                raise InvalidArgument(
                    f"input '{tensor.name}' of model '{model}': batch size {shape[0]} differs "
                    f"from the other inputs' {batch_size}"
                )
        elif not _dims_match(rule.dims, shape):
            raise InvalidArgument(
                f"unexpected shape for input '{tensor.name}' for model '{model}'. "
                f"Expected {_show(rule.dims)}, got {_show(shape)}"
            )
        data = tensor.data
        if rule.reshape is not None:
            leading = shape[:1] if rules.max_batch_size > 0 else ()
            try:
                data = data.reshape(leading + rule.reshape)
            except ValueError:
                raise InvalidArgument(
                    f"input '{tensor.name}' of model '{model}': shape {_show(shape)} cannot be "
                    f"reshaped to the config's reshape {_show(rule.reshape)}"
                ) from None
        feed[tensor.name] = data
    if len(feed) < len(rules.inputs):  # (every name in feed is one of them: checked above)
        missing = [
            name for name, rule in rules.inputs.items() if name not in feed and not rule.optional
        ]
        if missing:
            raise InvalidArgument(_missing_inputs(model, rules, list(feed), missing))
    if request.outputs:
        names = []
        for output in request.outputs:
            if output.name not in rules.outputs:
                raise InvalidArgument(
                    f"model '{model}' has no output '{output.name}'; its outputs are: "
                    f"{', '.join(rules.outputs)}"
                )
            names.append(output.name)
    else:
        names = list(rules.outputs)
    return feed, names, batch_size or 0
