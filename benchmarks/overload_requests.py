"""The requests benchmarks/overload.py offers: one infer call to `simple` or `mlp`, as
whole HTTP/1.1 request bytes (binary tensor extension) or as a gRPC call's frames."""

from __future__ import annotations

import json

import numpy as np

from accel_base.proto import grpc_service_pb2 as pb
from benchmarks.grpc_open_loop import grpc_call
from benchmarks.open_loop import http_request

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def _tensors(model: str) -> tuple[list[tuple[str, str, list[int], bytes]], list[str]]:
    """(inputs as (name, datatype, shape, raw bytes), output names) of one row."""
    rng = np.random.default_rng(0)
    if model == "simple":
        data = rng.integers(0, 100, (1, 16), dtype=np.int32).tobytes()
        inputs = [("INPUT0", "INT32", [1, 16], data), ("INPUT1", "INT32", [1, 16], data)]
        return inputs, ["OUTPUT0", "OUTPUT1"]
    data = rng.random((1, 784), dtype=np.float32).tobytes()
    return [("INPUT0", "FP32", [1, 784], data)], ["OUTPUT0"]


def http_infer(port: int, model: str) -> bytes:
    inputs, outputs = _tensors(model)
    header = json.dumps({
        "inputs": [{"name": n, "datatype": t, "shape": s,
                    "parameters": {"binary_data_size": len(d)}} for n, t, s, d in inputs],
        "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in outputs],
    }).encode()  # fmt: skip
    return http_request(
        "127.0.0.1", port, f"/v2/models/{model}/infer", header + b"".join(d for *_, d in inputs),
        {"Inference-Header-Content-Length": str(len(header)),
         "Content-Type": "application/octet-stream"},
    )  # fmt: skip


def grpc_infer(model: str) -> tuple[bytes, bytes]:
    inputs, _ = _tensors(model)
    request = pb.ModelInferRequest(model_name=model)
    for name, datatype, shape, data in inputs:
        request.inputs.add(name=name, datatype=datatype, shape=shape)
        request.raw_input_contents.append(data)
    return grpc_call(MODEL_INFER, request.SerializeToString())
