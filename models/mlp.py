"""``mlp`` and ``mlp_wide``: untrained FP32 MLPs with fixed-seed random weights, for load tests.

784 -> hidden -> Relu -> hidden -> Relu -> 10, all Gemm. ``mlp`` (hidden 1024, ~7.5 MB of weights)
is part of the example repository with dynamic batching on; ``mlp_wide`` (hidden 8192, ~294 MB)
is built only on request (``python -m models.mlp DEST --wide``) because it is too big to rebuild
in every test session.

The weights depend only on ``hidden`` and ``seed``, never on the model name, so a copy written
under another name (say with a different batching config) holds byte-identical weights and must
give the same outputs row for row.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from onnx import GraphProto, TensorProto, helper, numpy_helper

from models.config_text import DynamicBatching, TensorConfig, model_config_text, write_config
from models.onnx_graphs import (
    BATCH,
    check_file,
    make_model,
    model_file,
    save_model,
    tensor,
)

NAME = "mlp"
WIDE_NAME = "mlp_wide"
HIDDEN = 1024
WIDE_HIDDEN = 8192
INPUT = "INPUT0"
OUTPUT = "OUTPUT0"
N_FEATURES = 784  # a flattened 28x28 image
N_CLASSES = 10
MAX_BATCH_SIZE = 64
MAX_QUEUE_DELAY_US = 2000
SEED = 0


def _add_layer(
    graph: GraphProto, rng: np.random.Generator, fan_in: int, fan_out: int, index: int
) -> None:
    # He scaling (std sqrt(2 / fan_in)) keeps the activations' scale roughly constant through the
    # Relu layers, so outputs stay O(1) and finite at any width. Drawn directly as float32 and
    # scaled in place: no float64 temporary, which matters for the 8192x8192 layer (256 MiB).
    w = rng.standard_normal((fan_in, fan_out), dtype=np.float32)
    w *= np.float32(np.sqrt(2.0 / fan_in))
    # Small non-zero biases so that the broadcast over the batch is exercised too.
    b = rng.standard_normal(fan_out, dtype=np.float32)
    b *= np.float32(0.01)
    for name, value in ((f"w{index}", w), (f"b{index}", b)):
        # add().CopyFrom is a plain memory copy; make_graph's initializer.extend (and append)
        # go through a far slower path in upb: ~3 s instead of ~0.1 s for the 256 MiB matrix.
        graph.initializer.add().CopyFrom(numpy_helper.from_array(value, name))


def _graph(hidden: int, seed: int) -> GraphProto:
    nodes = [
        helper.make_node("Gemm", [INPUT, "w1", "b1"], ["h1_pre"]),
        helper.make_node("Relu", ["h1_pre"], ["h1"]),
        helper.make_node("Gemm", ["h1", "w2", "b2"], ["h2_pre"]),
        helper.make_node("Relu", ["h2_pre"], ["h2"]),
        helper.make_node("Gemm", ["h2", "w3", "b3"], [OUTPUT]),
    ]
    # The graph name comes from the shape, not the model name, to keep the file name-independent.
    graph = helper.make_graph(
        nodes,
        f"mlp_{hidden}",
        [tensor(INPUT, TensorProto.FLOAT, [BATCH, N_FEATURES])],
        [tensor(OUTPUT, TensorProto.FLOAT, [BATCH, N_CLASSES])],
    )
    rng = np.random.default_rng(seed)
    sizes = [N_FEATURES, hidden, hidden, N_CLASSES]
    # One layer at a time, so only one layer's numpy arrays and temporaries are alive at once.
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True), start=1):
        _add_layer(graph, rng, fan_in, fan_out, i)
    return graph


def write_mlp(
    repository: Path,
    name: str,
    hidden: int,
    *,
    dynamic_batching: bool,
    max_batch_size: int = MAX_BATCH_SIZE,
    max_queue_delay_us: int = MAX_QUEUE_DELAY_US,
    preferred_batch_sizes: tuple[int, ...] = (),
    intra_op_threads: int | None = None,
    seed: int = SEED,
    adaptive_window: bool = True,
) -> None:
    """Write ``<repository>/<name>/config.pbtxt`` and ``<repository>/<name>/1/model.onnx``."""
    model_dir = Path(repository) / name
    doc = f"untrained MLP {N_FEATURES}->{hidden}->{hidden}->{N_CLASSES}, relu, seed {seed}"
    check_file(save_model(make_model(_graph(hidden, seed), doc=doc, check=False), model_dir))

    batching = None
    if dynamic_batching:
        batching = DynamicBatching(
            max_queue_delay_us, tuple(preferred_batch_sizes), adaptive=adaptive_window
        )
    # Triton's onnxruntime backend reads this as the session's intra-op thread count.
    parameters = None
    if intra_op_threads is not None:
        parameters = {"intra_op_thread_count": str(intra_op_threads)}
    text = model_config_text(
        name,
        max_batch_size,
        [TensorConfig(INPUT, "TYPE_FP32", (N_FEATURES,))],
        [TensorConfig(OUTPUT, "TYPE_FP32", (N_CLASSES,))],
        dynamic_batching=batching,
        parameters=parameters,
    )
    write_config(model_dir, text)


def build(repo: Path) -> str:
    """Write ``<repo>/mlp`` as served by the example repository; returns the model name."""
    write_mlp(repo, NAME, HIDDEN, dynamic_batching=True)
    return NAME


def build_wide(repo: Path, *, dynamic_batching: bool = True) -> str:
    """Write ``<repo>/mlp_wide`` (~294 MB; not part of the example repository)."""
    write_mlp(repo, WIDE_NAME, WIDE_HIDDEN, dynamic_batching=dynamic_batching)
    return WIDE_NAME


def reference_outputs(model_path: Path, inputs: np.ndarray) -> np.ndarray:
    """``OUTPUT0`` for ``inputs`` (N x 784, cast to float32), run in onnxruntime on the CPU.

    ``model_path`` is the model.onnx file or the model's directory in the repository.
    """
    import onnxruntime as ort

    path = model_file(model_path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (outputs,) = session.run([OUTPUT], {INPUT: np.ascontiguousarray(inputs, dtype=np.float32)})
    return outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m models.mlp", description="Write one MLP model into a repository."
    )
    parser.add_argument("repository", type=Path, help="model repository to write into")
    parser.add_argument(
        "--wide", action="store_true", help=f"{WIDE_NAME}: hidden {WIDE_HIDDEN} (~294 MB)"
    )
    parser.add_argument("--name", help=f"model name (default {NAME}, or {WIDE_NAME} with --wide)")
    parser.add_argument("--hidden", type=int, help=f"hidden width (default {HIDDEN})")
    parser.add_argument("--no-dynamic-batching", action="store_true")
    parser.add_argument("--max-batch-size", type=int, default=MAX_BATCH_SIZE)
    parser.add_argument("--max-queue-delay-us", type=int, default=MAX_QUEUE_DELAY_US)
    parser.add_argument(
        "--preferred-batch-size", type=int, action="append", default=[], metavar="N"
    )
    parser.add_argument("--intra-op-threads", type=int)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)

    name = args.name or (WIDE_NAME if args.wide else NAME)
    hidden = args.hidden or (WIDE_HIDDEN if args.wide else HIDDEN)
    started = time.perf_counter()
    write_mlp(
        args.repository,
        name,
        hidden,
        dynamic_batching=not args.no_dynamic_batching,
        max_batch_size=args.max_batch_size,
        max_queue_delay_us=args.max_queue_delay_us,
        preferred_batch_sizes=tuple(args.preferred_batch_size),
        intra_op_threads=args.intra_op_threads,
        seed=args.seed,
    )
    elapsed = time.perf_counter() - started
    print(f"wrote {args.repository / name} (hidden {hidden}) in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
