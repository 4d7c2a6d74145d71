"""The digits classifier trained in PyTorch and written four ways from the one trained net.

- ``digits_torchscript`` (pytorch_libtorch): ``1/model.pt``, ``torch.jit.script``. TorchScript
  carries no tensor names or shapes, so its config lists them.
- ``digits_torch_export`` (pytorch_export): ``1/model.pt2``, ``torch.export`` with a dynamic batch
  dimension; forward returns ``{"probabilities": ...}`` so the output name is in the artifact.
- ``digits_torch_compile``: the same .pt2, served through torch.compile per batch bucket.
- ``digits_torch_onnx`` (onnxruntime_onnx): ``1/model.onnx`` from ``torch.onnx.export``.

This module imports torch at the top; :mod:`models.build` imports it only when torch is there.
"""

from __future__ import annotations

import contextlib
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from models import digits_training as dt
from models import torch_onnx
from models.accuracy import builder_accuracy
from models.config_text import DynamicBatching, TensorConfig, model_config_text, write_config

TORCHSCRIPT = "digits_torchscript"
EXPORT = "digits_torch_export"
COMPILE = "digits_torch_compile"
ONNX = "digits_torch_onnx"
NAMES = (TORCHSCRIPT, EXPORT, COMPILE, ONNX)

LIBTORCH_PLATFORM = "pytorch_libtorch"
EXPORT_PLATFORM = "pytorch_export"
ONNX_PLATFORM = "onnxruntime_onnx"
# The batch sizes digits_torch_compile compiles for; requests are padded up to one of them.
COMPILE_BUCKETS = (1, 8, 64)


@contextlib.contextmanager
def torchscript_allowed() -> Iterator[None]:
    """Recent torch releases flag every torch.jit call as deprecated; writing and reading
    TorchScript is the point of a pytorch_libtorch model (Triton's format), so only those
    warnings are silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`torch\.jit\.", DeprecationWarning)
        yield


class DigitsNet(nn.Module):
    """Scale by 1/16, Linear 64 + ReLU, Linear 10, softmax; ``forward`` gives probabilities."""

    def __init__(self, weights: dt.Weights) -> None:
        super().__init__()
        self.hidden = nn.Linear(dt.N_PIXELS, dt.HIDDEN)
        self.out = nn.Linear(dt.HIDDEN, dt.N_CLASSES)
        with torch.no_grad():
            # Linear computes x @ weight.T, so the shared [in, out] matrices go in transposed.
            self.hidden.weight.copy_(torch.from_numpy(weights["w1"].T))
            self.hidden.bias.copy_(torch.from_numpy(weights["b1"]))
            self.out.weight.copy_(torch.from_numpy(weights["w2"].T))
            self.out.bias.copy_(torch.from_numpy(weights["b2"]))

    def logits(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.hidden(pixels * dt.PIXEL_SCALE)))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(pixels), dim=-1)


class NamedOutput(nn.Module):
    """``{"probabilities": net(pixels)}``: torch.export records the argument name and the dict
    key, so a server reads both tensor names from the .pt2 itself."""

    def __init__(self, net: DigitsNet) -> None:
        super().__init__()
        self.net = net

    def forward(self, pixels: torch.Tensor) -> dict[str, torch.Tensor]:
        return {dt.OUTPUT: self.net(pixels)}


def train() -> DigitsNet:
    """Full-batch momentum SGD from the shared initial weights (see
    :mod:`models.digits_training`)."""
    torch.manual_seed(dt.SEED)  # nothing here draws random numbers; this only makes sure of it
    x, y = (torch.from_numpy(a) for a in dt.training_data())
    net = DigitsNet(dt.initial_weights())
    optimizer = torch.optim.SGD(net.parameters(), lr=dt.LEARNING_RATE, momentum=dt.MOMENTUM)
    # One intra-op thread: the matrices are tiny, and on a busy machine threads that wait
    # for each other made the 300 steps take seconds instead of ~0.4 s; nor do the weights
    # then depend on the machine's core count.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(dt.STEPS):
            optimizer.zero_grad()
            F.cross_entropy(net.logits(x), y).backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return net.eval()


def _example() -> torch.Tensor:
    # More than one row, so that nothing specialises on a batch of 1.
    return torch.from_numpy(dt.held_out()[0][:2])


def export_program(
    net: nn.Module, max_batch_size: int = dt.MAX_BATCH_SIZE
) -> torch.export.ExportedProgram:
    """``torch.export`` of ``NamedOutput(net)`` with the batch dimension dynamic (1..max)."""
    batch = torch.export.Dim("batch", min=1, max=max_batch_size)
    return torch.export.export(
        NamedOutput(net), (_example(),), dynamic_shapes={dt.INPUT: {0: batch}}
    )


def _artifact(model_dir: Path, file_name: str) -> Path:
    path = model_dir / "1" / file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_torchscript(net: DigitsNet, repo: Path) -> Path:
    model_dir = repo / TORCHSCRIPT
    with torchscript_allowed():
        torch.jit.save(torch.jit.script(net), _artifact(model_dir, "model.pt"))
    text = model_config_text(
        TORCHSCRIPT,
        dt.MAX_BATCH_SIZE,
        [TensorConfig(dt.INPUT, "TYPE_FP32", (dt.N_PIXELS,))],
        [TensorConfig(dt.OUTPUT, "TYPE_FP32", (dt.N_CLASSES,))],
        platform=LIBTORCH_PLATFORM,
    )
    write_config(model_dir, text)
    return model_dir


def write_export(net: DigitsNet, repo: Path) -> tuple[Path, Path]:
    """``digits_torch_export`` and ``digits_torch_compile``: one .pt2, two configs."""
    export_dir, compile_dir = repo / EXPORT, repo / COMPILE
    pt2 = _artifact(export_dir, "model.pt2")
    torch.export.save(export_program(net), pt2)
    shutil.copyfile(pt2, _artifact(compile_dir, "model.pt2"))
    write_config(export_dir, model_config_text(EXPORT, dt.MAX_BATCH_SIZE, platform=EXPORT_PLATFORM))
    text = model_config_text(
        COMPILE,
        dt.MAX_BATCH_SIZE,
        platform=EXPORT_PLATFORM,
        dynamic_batching=DynamicBatching(max_queue_delay_us=0),
        parameters={
            "compile_mode": "default",
            "batch_buckets": ",".join(str(b) for b in COMPILE_BUCKETS),
        },
    )
    write_config(compile_dir, text)
    return export_dir, compile_dir


def write_onnx(net: DigitsNet, repo: Path) -> Path:
    model_dir = repo / ONNX
    batch = torch.export.Dim("batch", min=1, max=dt.MAX_BATCH_SIZE)
    torch_onnx.export(
        net,
        (_example(),),
        _artifact(model_dir, "model.onnx"),
        input_names=[dt.INPUT],
        output_names=[dt.OUTPUT],
        dynamic_shapes={dt.INPUT: {0: batch}},
    )
    write_config(model_dir, model_config_text(ONNX, dt.MAX_BATCH_SIZE, platform=ONNX_PLATFORM))
    return model_dir


def predict(model_dir: Path, pixels: np.ndarray) -> np.ndarray:
    """Probabilities from the TorchScript or torch.export artifact in ``<model_dir>/1``,
    re-loaded from disk (torch.jit.load / torch.export.load), in batches of at most
    max_batch_size as a server would run them."""
    version_dir = Path(model_dir) / "1"
    x = np.ascontiguousarray(pixels, dtype=np.float32)
    if (version_dir / "model.pt2").is_file():
        module = torch.export.load(version_dir / "model.pt2").module()

        def run(batch: np.ndarray) -> np.ndarray:
            return module(torch.from_numpy(batch))[dt.OUTPUT].numpy()

    else:
        with torchscript_allowed():
            script = torch.jit.load(version_dir / "model.pt", map_location="cpu")

        def run(batch: np.ndarray) -> np.ndarray:
            return script(torch.from_numpy(batch)).numpy()

    with torch.inference_mode():
        return dt.in_batches(run, x)


def build(repo: Path) -> dict[str, float]:
    """Train once, write all four models; returns each one's held-out accuracy, measured on the
    artifact as re-loaded from disk by its own runtime (onnxruntime for the ONNX one)."""
    repo = Path(repo)
    net = train()
    model_dirs = [write_torchscript(net, repo), *write_export(net, repo), write_onnx(net, repo)]
    return {d.name: builder_accuracy(d) for d in model_dirs}
