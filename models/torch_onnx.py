"""``torch.onnx.export`` (the dynamo exporter) with our tensor names, quietly.

Shared by the PyTorch-trained digits and MiniLM. This module imports torch at the top; the
builders that use it are imported only when torch is there.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx
import torch

# The lowest opset the dynamo exporter translates to natively; asking for less (the 17 of our
# hand-written graphs) makes it down-convert through onnx's version converter, one more thing
# that can go wrong. onnxruntime has run opset 18 since 1.14.
OPSET = 18


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """The exporter prints progress to stdout, logs warnings about optional packages
    (torchvision) it does not need, warns when two inputs share a dynamic dimension's name, and
    trips a FutureWarning inside torch's own pytree code; keep the build log to our own lines.
    Errors still raise."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.onnx")
            yield
    finally:
        logger.setLevel(level)


def _name_outputs(graph: Any, names: Sequence[str]) -> None:
    """Give the graph outputs ``names``. The exporter's own ``output_names`` does not check for
    clashes: intermediate values are named after their aten op, so MiniLM's word-embedding
    lookup is already called "embedding", and naming the output that too breaks SSA form. Any
    intermediate holding a wanted name is renamed out of the way first."""
    intermediates = [value for node in graph for value in node.outputs]
    taken = {value.name for value in intermediates} | {v.name for v in graph.inputs}
    taken |= set(graph.initializers)
    for output, name in zip(graph.outputs, names, strict=True):
        if output.name == name:
            continue
        for value in intermediates:
            if value.name == name and value is not output:
                suffix = 1
                while f"{name}_{suffix}" in taken:
                    suffix += 1
                value.name = f"{name}_{suffix}"
                taken.add(value.name)
        output.name = name
        taken.add(name)


def export(
    module: torch.nn.Module,
    example: tuple[torch.Tensor, ...],
    path: Path,
    input_names: Sequence[str],
    output_names: Sequence[str],
    dynamic_shapes: Mapping[str, Mapping[int, Any]],
) -> Path:
    """Export ``module`` (returning a tensor or a tuple of them) to one self-contained
    ``path``, with the given tensor names and dynamic dimensions, and validate the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with quiet_exporter(), torch.no_grad():
        program = torch.onnx.export(
            module,
            example,
            input_names=list(input_names),
            dynamic_shapes=dict(dynamic_shapes),
            opset_version=OPSET,
            dynamo=True,
        )
    _name_outputs(program.model.graph, output_names)
    # One file, like our other ONNX models (MiniLM's ~90 MB is far under protobuf's 2 GB).
    program.save(path, external_data=False)
    onnx.checker.check_model(path, full_check=True)
    return path
