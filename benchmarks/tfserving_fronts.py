"""One SavedModel through TF Serving's APIs and through V2 on the same gateway, one run.

    .venv/bin/python -m benchmarks.tfserving_fronts [--seconds 5] [--rounds 5]
        [--concurrency 1 8 64]

The digits MLP (models/tfserving, version 1: `pixels` f32[None, 64] in, `probabilities`
f32[None, 10] out) is served by `accel-gateway tensorflow-model-server` with
`--enable_batching` (max_batch_size 32, batch_timeout_micros 2000), the server pinned
to one core (`--server-core`). Closed loops of one-row requests on kept-alive
connections (benchmarks/open_loop.py; gRPC framed by hand, benchmarks/grpc_open_loop.py)
run on another core, the fronts taking turns and each keeping its median of the rounds,
against five fronts of the same model and batcher: TF Serving's
REST (row format) and gRPC Predict, and V2 over HTTP (JSON and binary) and gRPC. The
floor is the signature called in this process, one row a call, on the server's core.
Goal (issue 40): TF Serving's gRPC Predict at least 0.8x V2's gRPC at every point, its
REST row format at least 0.5x V2's JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from accel_base.proto import grpc_service_pb2 as v2
from accel_base.proto.tfserving.tensorflow_serving.apis import predict_pb2
from benchmarks.grpc_open_loop import GrpcConnection, grpc_call
from benchmarks.open_loop import (
    binary_infer_request,
    closed_loop_latencies,
    http_request,
    run_generator,
    wait_for_model,
)
from benchmarks.perf import pin_to
from gateway.launch import free_ports
from models.digits import held_out


def _requests(rest: int, http: int, row: np.ndarray) -> dict[str, tuple[bytes, bool]]:
    """Each front's request for one row: (bytes, whether it is gRPC)."""
    pixels = row.reshape(1, 64).astype(np.float32)
    predict = predict_pb2.PredictRequest()
    predict.model_spec.name = "digits"
    tensor = predict.inputs["pixels"]
    tensor.dtype = 1  # DT_FLOAT
    tensor.tensor_shape.dim.add().size = 1
    tensor.tensor_shape.dim.add().size = 64
    tensor.tensor_content = pixels.tobytes()
    infer = v2.ModelInferRequest(model_name="digits")
    infer.inputs.add(name="pixels", datatype="FP32", shape=[1, 64])
    infer.raw_input_contents.append(pixels.tobytes())
    v2_json = {"inputs": [{"name": "pixels", "datatype": "FP32", "shape": [1, 64],
                           "data": pixels.reshape(-1).tolist()}]}  # fmt: skip
    json_type = {"Content-Type": "application/json"}
    return {
        "TF Serving REST (row)": (http_request(
            "127.0.0.1", rest, "/v1/models/digits:predict",
            json.dumps({"instances": pixels.tolist()}).encode(), json_type), False),
        "V2 HTTP JSON": (http_request(
            "127.0.0.1", http, "/v2/models/digits/infer", json.dumps(v2_json).encode(),
            json_type), False),
        "V2 HTTP binary": (binary_infer_request(http, "digits", (1, 64), "pixels",
                                                "probabilities"), False),
        "TF Serving gRPC Predict": (grpc_call(
            "/tensorflow.serving.PredictionService/Predict", predict.SerializeToString()), True),
        "V2 gRPC": (grpc_call(
            "/inference.GRPCInferenceService/ModelInfer", infer.SerializeToString()), True),
    }  # fmt: skip


def _floor(base: Path, row: np.ndarray, core: int, seconds: float) -> float:
    """Calls a second of the signature in a process of its own on the server's core."""
    np.save(base / "row.npy", row.reshape(1, 64).astype(np.float32))
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.tfserving_fronts", "--floor-of",
         str(base / "digits" / "1"), str(base / "row.npy"), str(seconds)],
        capture_output=True, text=True, check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
    )  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])


def _signature_rate(version_dir: str, row_file: str, seconds: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    signature = tf.saved_model.load(version_dir).signatures["serving_default"]
    pixels = tf.constant(np.load(row_file))
    for _ in range(50):
        signature(pixels=pixels)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < float(seconds):
        signature(pixels=pixels)["probabilities"].numpy()
        count += 1
    print(count / (time.perf_counter() - start))


def main() -> None:
    if sys.argv[1:2] == ["--floor-of"]:  # the floor's own process
        _signature_rate(*sys.argv[2:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per front and round")
    parser.add_argument("--rounds", type=int, default=5, help="turns of the five fronts")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    args = parser.parse_args()
    from models.tfserving.savedmodels import build_digits

    work = Path(tempfile.mkdtemp())
    build_digits(work / "digits", versions=(1,))
    (work / "batching.config").write_text(
        "max_batch_size { value: 32 } batch_timeout_micros { value: 2000 }"
    )
    row = held_out()[0][0]
    floor = _floor(work, row, args.server_core, args.seconds)
    grpc_port, rest, http, v2_grpc, metrics = free_ports(5)
    core = args.server_core
    with open(work / "server.log", "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "gateway", "tensorflow-model-server", f"--port={grpc_port}",
             f"--rest_api_port={rest}", f"--v2_http_port={http}", f"--v2_grpc_port={v2_grpc}",
             f"--v2_metrics_port={metrics}", "--model_name=digits",
             f"--model_base_path={work / 'digits'}", "--enable_batching",
             f"--batching_parameters_file={work / 'batching.config'}"],
            stdout=log, stderr=subprocess.STDOUT, cwd=work,
            env={**os.environ, "TMPDIR": str(work)},
            preexec_fn=lambda: os.sched_setaffinity(0, {core}),
        )  # fmt: skip
    pin_to(args.client_core)
    try:
        requests = _requests(rest, http, row)
        wait_for_model(rest, requests["TF Serving REST (row)"][0], process=server)
        rates: dict[tuple[str, int], float] = {}
        for concurrency in args.concurrency:
            # The fronts take turns, `--rounds` times, and each keeps its median: at low
            # concurrency one window of batching can differ from the next by 30%.
            measured: dict[str, list[float]] = {name: [] for name in requests}
            for _ in range(args.rounds):
                for name, (request, is_grpc) in requests.items():
                    port = (grpc_port if "TF" in name else v2_grpc) if is_grpc else (
                        rest if "TF" in name else http)  # fmt: skip
                    kinds = {"connection": GrpcConnection} if is_grpc else {}
                    loop = closed_loop_latencies(
                        "127.0.0.1", port, request, concurrency, args.seconds, **kinds)  # fmt: skip
                    measured[name].append(run_generator(loop)[0])
            for name, runs in measured.items():
                rate = rates[(name, concurrency)] = statistics.median(runs)
                each = ", ".join(f"{r:,.0f}" for r in runs)
                print(f"  {name:26s} c={concurrency:3d}: {rate:8,.0f}/s "
                      f"({rate / floor:.2f}x the floor; rounds {each})", flush=True)  # fmt: skip
    finally:
        server.terminate()
        server.wait(60)
    print(f"\nfloor (the signature in process, one row a call): {floor:,.0f}/s")
    print("concurrency  TF gRPC / V2 gRPC (goal >= 0.8)  TF REST / V2 JSON (goal >= 0.5)")
    for c in args.concurrency:
        grpc_ratio = rates[("TF Serving gRPC Predict", c)] / rates[("V2 gRPC", c)]
        rest_ratio = rates[("TF Serving REST (row)", c)] / rates[("V2 HTTP JSON", c)]
        print(f"{c:11d}  {grpc_ratio:31.2f}  {rest_ratio:31.2f}")


if __name__ == "__main__":
    main()
