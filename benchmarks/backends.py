"""Each framework backend in-process against the same backend through the gateway.

    .venv/bin/python -m benchmarks.backends [--models digits_jax ...] [--measurement-ms 3000]

The digits classifier as every installed backend serves it (ONNX Runtime, TorchScript,
torch.export eager and compiled, SavedModel, jax.export), at batch 1 and batch 32.
The floor is the backend object called in-process on the server's core at the same
batch size; the gateway figure is perf_analyzer (HTTP, binary tensors, concurrency 4,
on the other core) against one gateway serving all of them. The ratio says what
serving costs on top of the framework.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from pathlib import Path

import numpy as np

from backends import Device, backend_class
from benchmarks.perf import add_run_arguments, perf_analyzer, pin_to, rate
from gateway.core.model import artifact_path
from gateway.core.model_config import platform_of, read_config
from gateway.launch import start_gateway
from models.build import ensure_example_repository

# Model -> the import its backend needs.
MODELS = {
    "digits_torch_onnx": "onnxruntime",
    "digits_torchscript": "torch",
    "digits_torch_export": "torch",
    "digits_torch_compile": "torch",
    "digits_savedmodel": "tensorflow",
    "digits_jax": "jax",
}
BATCH_SIZES = (1, 32)
CONCURRENCY = 4


def in_process_rows_per_s(model_dir: Path, batch: int) -> float:
    config = read_config(model_dir)
    backend_type = backend_class(platform_of(config))
    backend = backend_type(artifact_path(model_dir, 1, config, backend_type), config, Device())
    feed = {"pixels": np.random.default_rng(0).random((batch, 64), dtype=np.float32) * 16}
    calls = rate(lambda: backend.run(feed, ["probabilities"]), seconds=2.0)
    backend.unload()
    return batch * calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    installed = [m for m, module in MODELS.items() if importlib.util.find_spec(module)]
    parser.add_argument("--models", nargs="+", default=installed, choices=list(MODELS))
    add_run_arguments(parser)
    args = parser.parse_args()

    repository = ensure_example_repository()
    pin_to(args.server_core)
    floors = {
        (model, batch): in_process_rows_per_s(repository / model, batch)
        for model in args.models
        for batch in BATCH_SIZES
    }
    pin_to(args.client_core)  # this process only waits from here on
    served: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        load = [arg for model in args.models for arg in ("--load-model", model)]
        server = start_gateway(
            repository, "--model-control-mode", "explicit", *load, "--log-level", "warning",
            log_path=Path(tmp) / "gateway.log", cpu_cores={args.server_core}, timeout_s=300,
        )  # fmt: skip
        try:
            for model in args.models:
                for batch in BATCH_SIZES:
                    measured = perf_analyzer(
                        model, server.http_url, "http", CONCURRENCY, args.client_core,
                        f"{model} b={batch}", ("-b", str(batch)), args.measurement_ms,
                    )  # fmt: skip
                    # perf_analyzer counts every row of a batched request as an inference.
                    served[model, batch] = measured.throughput
        finally:
            server.stop()

    print(
        f"\nDigits classifier, rows/s; in-process on core {args.server_core}, gateway via "
        f"perf_analyzer (HTTP binary, c={CONCURRENCY}) on core {args.client_core}"
    )
    print(f"{'model':<24}{'batch':>6}{'in-process':>12}{'gateway':>10}{'gateway/in-process':>20}")
    for model in args.models:
        for batch in BATCH_SIZES:
            floor, through = floors[model, batch], served[model, batch]
            print(f"{model:<24}{batch:>6}{floor:>12,.0f}{through:>10,.0f}{through / floor:>20.3f}")


if __name__ == "__main__":
    main()
