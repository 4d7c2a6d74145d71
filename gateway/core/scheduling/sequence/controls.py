"""The sequence batcher's control inputs and implicit state, as the config declares them:
tensors the server fills in for every row of a batch, so the client never sends them.

Control inputs (`control_input`): CONTROL_SEQUENCE_START, _END, _READY (each with its
false/true values as int32, fp32 or bool) and CONTROL_SEQUENCE_CORRID (the correlation
id, as the configured datatype). A row is [1] per control; empty rows of a direct
batch are READY false, everything else false or zero.

Implicit state (`state`): a tensor the model reads as `input_name` and writes as
`output_name`, kept per sequence by the server, zeros at the sequence's start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from accel_base.datatypes import NUMPY_DTYPES, v2_datatype
from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc

Kind = mc.ModelSequenceBatching.Control.Kind
START, READY, END, CORRID = (
    Kind.CONTROL_SEQUENCE_START,
    Kind.CONTROL_SEQUENCE_READY,
    Kind.CONTROL_SEQUENCE_END,
    Kind.CONTROL_SEQUENCE_CORRID,
)


@dataclass(frozen=True, slots=True)
class Control:
    input: str  # the model's input that carries it
    kind: int
    dtype: np.dtype
    values: tuple[Any, Any]  # (false, true); for CORRID unused


@dataclass(frozen=True, slots=True)
class State:
    input: str
    output: str
    dtype: np.dtype
    dims: tuple[int, ...]  # of one row


@dataclass(frozen=True, slots=True)
class RowFlags:
    """What the controls say of one row of a batch."""

    start: bool = False
    end: bool = False
    ready: bool = False
    corrid: int | str = 0


EMPTY_ROW = RowFlags()


def controls_of(config: mc.ModelConfig) -> list[Control]:
    where = f"model '{config.name}': sequence_batching"
    found = []
    for control_input in config.sequence_batching.control_input:
        for control in control_input.control:
            if control.kind == CORRID:
                if control.data_type == mc.TYPE_INVALID:
                    raise InvalidArgument(f"{where}: CORRID control '{control_input.name}' "
                                          "needs a data_type")  # fmt: skip
                datatype = v2_datatype(control.data_type)
                found.append(Control(control_input.name, CORRID, NUMPY_DTYPES[datatype], (0, 0)))
                continue
            pairs = (
                (control.int32_false_true, np.int32),
                (control.fp32_false_true, np.float32),
                (control.bool_false_true, np.bool_),
            )
            given = [(list(values), dtype) for values, dtype in pairs if len(values)]
            if len(given) != 1 or len(given[0][0]) != 2:
                raise InvalidArgument(
                    f"{where}: control '{control_input.name}' needs exactly one of "
                    "int32_false_true, fp32_false_true, bool_false_true, with two values"
                )
            values, dtype = given[0]
            found.append(Control(control_input.name, control.kind, np.dtype(dtype), tuple(values)))
    return found


def states_of(config: mc.ModelConfig) -> list[State]:
    found = []
    for state in config.sequence_batching.state:
        dims = tuple(state.dims)
        if any(d < 0 for d in dims):
            initial = [tuple(i.dims) for i in state.initial_state if i.dims]
            if not initial or any(d < 0 for d in initial[0]):
                raise InvalidArgument(
                    f"model '{config.name}': state '{state.input_name}' has dims "
                    f"{list(dims)}; give fixed dims (or an initial_state with them)"
                )
            dims = initial[0]
        datatype = v2_datatype(state.data_type)
        found.append(State(state.input_name, state.output_name, NUMPY_DTYPES[datatype], dims))
    return found


def control_feed(controls: list[Control], rows: list[RowFlags], batched: bool) -> dict:
    """The control tensors of a batch whose rows say `rows` ([rows, 1], or [1] unbatched)."""
    feed: dict[str, np.ndarray] = {}
    for control in controls:
        if control.kind == CORRID:
            if control.dtype.hasobject:
                column = [str(r.corrid).encode() if r.ready else b"" for r in rows]
            else:
                column = [r.corrid if isinstance(r.corrid, int) else 0 for r in rows]
            values = np.array(column, dtype=control.dtype)
        else:
            flag = {START: "start", END: "end", READY: "ready"}[control.kind]
            false, true = control.values
            values = np.array([true if getattr(r, flag) else false for r in rows], control.dtype)
        feed[control.input] = values.reshape(len(rows), 1) if batched else values.reshape(1)
    return feed


def initial_state(state: State) -> np.ndarray:
    if state.dtype.hasobject:
        return np.full(state.dims, b"", dtype=object)
    return np.zeros(state.dims, dtype=state.dtype)


def server_filled(config: mc.ModelConfig) -> set[str]:
    """The model inputs the server fills in: controls and state."""
    names = {c.name for c in config.sequence_batching.control_input}
    return names | {s.input_name for s in config.sequence_batching.state}


def state_outputs(config: mc.ModelConfig) -> set[str]:
    """The model outputs the server keeps as state rather than answers."""
    return {s.output_name for s in config.sequence_batching.state}


def sequence_of_one(config: mc.ModelConfig, rows: int, batched: bool) -> dict[str, np.ndarray]:
    """The control and state inputs of a batch of `rows` sequences of one request each
    (start, end and ready; correlation id 0; initial state), for a run outside the
    sequence batcher (a warm-up); empty for a model without sequence batching."""
    if not config.HasField("sequence_batching"):
        return {}
    flags = [RowFlags(start=True, end=True, ready=True)] * rows
    feed = control_feed(controls_of(config), flags, batched)
    for state in states_of(config):
        initial = initial_state(state)
        feed[state.input] = np.stack([initial] * rows) if batched else initial
    return feed
