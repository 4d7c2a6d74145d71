"""`accumulate`: a stateful model under the sequence batcher, a running sum per sequence.

An ONNX graph that reads the server's control inputs and its implicit state:

    ACC_OUT = OUTPUT = (START ? 0 : ACC_IN) + INPUT * READY
    CONTROLS = [START, END, READY]        (what the model saw, for tests)
    CORRID_OUT = CORRID

The client sends INPUT alone, with sequence_id, sequence_start and sequence_end; the
server fills START, END, READY, CORRID and ACC_IN (the sum so far). `accumulate` uses
the direct strategy; `accumulate_oldest` the oldest strategy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from models.config_text import write_config
from models.onnx_graphs import BATCH, make_model, save_model, tensor

NAME = "accumulate"
OLDEST = "accumulate_oldest"
MAX_BATCH_SIZE = 8
IDLE_US = 5_000_000
CONTROLS = ("START", "END", "READY")

_STRATEGIES = {
    NAME: "direct { }",
    OLDEST: "oldest { max_candidate_sequences: 16 preferred_batch_size: [ 4 ] "
    "max_queue_delay_microseconds: 2000 }",
}


def _graph(name: str):
    int32 = TensorProto.INT32
    row = [BATCH, 1]
    nodes = [
        helper.make_node("Greater", ["START", "zero"], ["starting"]),
        helper.make_node("Mul", ["ACC_IN", "zero"], ["zeros"]),
        helper.make_node("Where", ["starting", "zeros", "ACC_IN"], ["before"]),
        helper.make_node("Mul", ["INPUT", "READY"], ["added"]),
        helper.make_node("Add", ["before", "added"], ["OUTPUT"]),
        helper.make_node("Identity", ["OUTPUT"], ["ACC_OUT"]),
        helper.make_node("Concat", list(CONTROLS), ["CONTROLS"], axis=1),
        helper.make_node("Identity", ["CORRID"], ["CORRID_OUT"]),
    ]
    inputs = [tensor(n, int32, row) for n in ("INPUT", *CONTROLS, "ACC_IN")]
    inputs.append(tensor("CORRID", TensorProto.UINT64, row))
    outputs = [
        tensor("OUTPUT", int32, row),
        tensor("ACC_OUT", int32, row),
        tensor("CONTROLS", int32, [BATCH, len(CONTROLS)]),
        tensor("CORRID_OUT", TensorProto.UINT64, row),
    ]
    zero = numpy_helper.from_array(np.zeros((), np.int32), "zero")
    return helper.make_graph(nodes, name, inputs, outputs, initializer=[zero])


def _control(name: str, kind: str) -> str:
    return (
        f'{{ name: "{name}" control [ {{ kind: CONTROL_SEQUENCE_{kind} '
        "int32_false_true: [ 0, 1 ] } ] }"
    )


def config_text(name: str) -> str:
    controls = ",\n    ".join(_control(c, c) for c in CONTROLS)
    return f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {MAX_BATCH_SIZE}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "CONTROLS" data_type: TYPE_INT32 dims: [ 3 ] }},
  {{ name: "CORRID_OUT" data_type: TYPE_UINT64 dims: [ 1 ] }}
]
sequence_batching {{
  max_sequence_idle_microseconds: {IDLE_US}
  control_input [
    {controls},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }} ] }}
  ]
  state [
    {{ input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ]
      initial_state {{ name: "zero" data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }} }}
  ]
  {_STRATEGIES[name]}
}}
"""


def build(repo: Path, names: tuple[str, ...] = (NAME, OLDEST)) -> list[str]:
    for name in names:
        doc = "running sum per sequence (sequence batcher, implicit state)"
        save_model(make_model(_graph(name), doc=doc), repo / name)
        write_config(repo / name, config_text(name))
    return list(names)


TORCH = "accumulate_torch"
TORCHSCRIPT = "accumulate_torchscript"


def _torch_module():
    import torch

    class Accumulate(torch.nn.Module):
        def forward(
            self,
            INPUT: torch.Tensor,  # noqa: N803 (the config's names, as Triton's)
            START: torch.Tensor,  # noqa: N803
            END: torch.Tensor,  # noqa: N803
            READY: torch.Tensor,  # noqa: N803
            CORRID: torch.Tensor,  # noqa: N803
            ACC_IN: torch.Tensor,  # noqa: N803
        ) -> dict[str, torch.Tensor]:
            before = torch.where(START > 0, torch.zeros_like(ACC_IN), ACC_IN)
            total = before + INPUT * READY
            return {
                "OUTPUT": total,
                "ACC_OUT": total.clone(),
                "CONTROLS": torch.cat([START, END, READY], dim=1),
                "CORRID_OUT": CORRID.clone(),
            }

    return Accumulate()


def _torch_config(name: str, platform: str) -> str:
    text = config_text(NAME).replace(f'name: "{NAME}"', f'name: "{name}"')
    text = text.replace('platform: "onnxruntime_onnx"', f'platform: "{platform}"')
    return text.replace("TYPE_UINT64", "TYPE_INT64")  # torch: no uint64 arithmetic to speak of


def build_torchscript(repo: Path, name: str = TORCHSCRIPT) -> str:
    """The same running sum as TorchScript (`pytorch_libtorch`): its forward takes the
    controls and the state by the config's names."""
    import torch

    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(_torch_module()), str(repo / name / "1" / "model.pt"))
    write_config(repo / name, _torch_config(name, "pytorch_libtorch"))
    return name


def build_torch_export(repo: Path, name: str = TORCH) -> str:
    """The same running sum as a torch.export archive (`pytorch_export`). torch.export
    names inputs in lower case, so the config's inputs are `input`, `start`..."""
    import torch

    def row(dtype=torch.int32):  # a tensor each: export must not see the inputs alias
        return torch.zeros(2, 1, dtype=dtype)

    example = (row(), row(), row(), row(), row(torch.int64), row())
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH_SIZE)
    names = ("INPUT", "START", "END", "READY", "CORRID", "ACC_IN")
    program = torch.export.export(
        _torch_module(), example, dynamic_shapes={n: {0: batch} for n in names}
    )
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    torch.export.save(program, repo / name / "1" / "model.pt2")
    text = _torch_config(name, "pytorch_export")
    for upper in names:  # the program's input names, as torch.export wrote them
        text = text.replace(f'name: "{upper}"', f'name: "{upper.lower()}"')
        text = text.replace(f'input_name: "{upper}"', f'input_name: "{upper.lower()}"')
    write_config(repo / name, text)
    return name
