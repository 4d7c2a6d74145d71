"""ResNet-50 (He et al., 2015: bottleneck blocks 3, 4, 6, 3) as a TorchScript model, with
weights drawn from a fixed seed: a real network of real size (25.6 M parameters, 98 MiB
in FP32) for the GPU benchmarks, built from torch alone, with nothing fetched from a hub.

    .venv/bin/python -m models.resnet REPOSITORY [--copies 8]

Untrained: the benchmarks measure memory and speed, not accuracy. Each copy has its own
seed, so the copies are different networks of the same shape.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch
from torch import nn

from models.config_text import DynamicBatching, TensorConfig, model_config_text, write_config

INPUT, OUTPUT = "INPUT__0", "OUTPUT__0"
IMAGE = (3, 224, 224)
CLASSES = 1000
MAX_BATCH_SIZE = 16
STAGES = ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2))  # (width, blocks, stride)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * self.expansion
        self.body = nn.Sequential(
            nn.Conv2d(inplanes, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(True),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(True),
            nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out),
        )  # fmt: skip
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inplanes != out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inplanes, out, 1, stride, bias=False), nn.BatchNorm2d(out)
            )
        self.relu = nn.ReLU(True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet50(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(True),
            nn.MaxPool2d(3, 2, 1),
        ]  # fmt: skip
        inplanes = 64
        for width, blocks, stride in STAGES:
            for block in range(blocks):
                layers.append(Bottleneck(inplanes, width, stride if block == 0 else 1))
                inplanes = width * Bottleneck.expansion
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(inplanes, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def write_resnet50(
    repository: Path, name: str, seed: int, *, max_queue_delay_us: int = 500
) -> Path:
    """`<repository>/<name>/config.pbtxt` and `1/model.pt` (traced at batch 1 on the CPU;
    the batch dimension stays free). Returns the model's directory."""
    torch.manual_seed(seed)
    net = ResNet50().eval()
    model_dir = Path(repository) / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`torch\.jit\.", DeprecationWarning)
        traced = torch.jit.trace(net, torch.zeros(1, *IMAGE))
        torch.jit.save(traced, model_dir / "1" / "model.pt")
    text = model_config_text(
        name,
        MAX_BATCH_SIZE,
        [TensorConfig(INPUT, "TYPE_FP32", IMAGE)],
        [TensorConfig(OUTPUT, "TYPE_FP32", (CLASSES,))],
        platform="pytorch_libtorch",
        dynamic_batching=DynamicBatching(max_queue_delay_us),
        # TorchScript's optimizing executor compiles for ~1 s at each new batch size.
        parameters={"DISABLE_OPTIMIZED_EXECUTION": "true"},
    )
    write_config(model_dir, text)
    return model_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", type=Path)
    parser.add_argument("--copies", type=int, default=1)
    args = parser.parse_args(argv)
    for seed in range(args.copies):
        print(write_resnet50(args.repository, f"resnet50_{seed:02}", seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
