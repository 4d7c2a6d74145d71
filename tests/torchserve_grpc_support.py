"""TorchServe's gRPC APIs for tests: its own .proto files, read from the jar of the installed
`ts` package, client stubs generated from them at test time (what TorchServe's users call
with), and a gateway serving those APIs.

The stubs register TorchServe's messages in protobuf's default pool; the gateway's own
(accel_base.proto.torchserve) are in accel_base.proto.POOL, so both load in one process.
The files keep their contents; TorchServe's two service files go into a package of their
own (ts_grpc_client) so that their modules' names clash with nothing installed (proto-plus
owns the top-level `proto`).
"""

from __future__ import annotations

import importlib
import importlib.resources
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import grpc
import httpx
from google.protobuf import descriptor_pb2

from gateway.launch import GatewayProcess, free_ports

# A path in TorchServe's jar -> where it goes under the include directory.
FILES = {
    "proto/inference.proto": "ts_grpc_client/inference.proto",
    "proto/management.proto": "ts_grpc_client/management.proto",
    "google/rpc/status.proto": "google/rpc/status.proto",
    "google/rpc/error_details.proto": "google/rpc/error_details.proto",
}


def jar() -> Path:
    import ts

    return Path(ts.__file__).parent / "frontend" / "model-server.jar"


def extract(directory: Path) -> Path:
    """TorchServe's .proto files under `directory` (the include directory it returns)."""
    with zipfile.ZipFile(jar()) as archive:
        for inside, target in FILES.items():
            path = directory / target
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(archive.read(inside))
    return directory


def _protoc(include: Path, *args: str) -> None:
    # In a process of its own: protoc's C++ protobuf and TensorFlow's, once TensorFlow is
    # imported by an earlier test, crash when they meet in one process.
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    command = [sys.executable, "-m", "grpc_tools.protoc", f"-I{include}", f"-I{well_known}",
               *args, *FILES.values()]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"protoc failed on TorchServe's protos: {command}: {done.stderr}")


def descriptors(directory: Path) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """TorchServe's files as protoc parses them, by their names under the include directory."""
    include = extract(directory / "src")
    out = directory / "descriptors.pb"
    _protoc(include, f"--descriptor_set_out={out}")
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    return {file.name: file for file in files.file}


def stubs(directory: Path) -> SimpleNamespace:
    """The generated modules: inference, inference_grpc, management, management_grpc and
    error_details (google.rpc's, for StreamPredictions2's ErrorInfo)."""
    if "ts_grpc_client.inference_pb2" not in sys.modules:  # once a process: one pool
        include = extract(directory / "src")
        out = directory / "stubs"
        out.mkdir()
        _protoc(include, f"--python_out={out}", f"--grpc_python_out={out}")
        # Appended: googleapis-common-protos' google.rpc, where installed, is the same file.
        sys.path.append(str(out))
    names = {
        "inference": "ts_grpc_client.inference_pb2",
        "inference_grpc": "ts_grpc_client.inference_pb2_grpc",
        "management": "ts_grpc_client.management_pb2",
        "management_grpc": "ts_grpc_client.management_pb2_grpc",
        "error_details": "google.rpc.error_details_pb2",
    }
    return SimpleNamespace(**{k: importlib.import_module(v) for k, v in names.items()})


# `accel-gateway serve` has no flags for TorchServe's gRPC ports and keys: the gateway runs
# from its ServerOptions, in a process of its own, as `serve` runs it. With keys, they are
# written to key_file.json in the log's directory.
LAUNCHER = """
import json, sys
from pathlib import Path
from gateway.protocols.torchserve.keys import Keys
from gateway.protocols.torchserve.options import TorchServeOptions
from gateway.run import run_gateway
from gateway.server import ServerOptions
given = json.loads(sys.argv[1])
keys_directory = given.pop("keys")
keys = Keys(Path(keys_directory)) if keys_directory else None
torchserve = TorchServeOptions(
    model_store=Path(given.pop("store")), keys=keys, **given.pop("torchserve")
)
repository = Path(given.pop("repository"))
sys.exit(run_gateway(ServerOptions(repository, torchserve=torchserve, **given)))
"""


class Gateway(SimpleNamespace):
    server: GatewayProcess
    inference: object  # TorchServe's InferenceAPIsServiceStub
    management: object  # its ManagementAPIsServiceStub
    rest: httpx.Client
    # The call metadata that carries each API's key (key_file.json's); () without keys.
    inference_key: tuple
    management_key: tuple


def launch(
    ts: SimpleNamespace, repository: Path, store: Path, log: Path, models: list[str],
    keys: bool = False, model_api: bool = False,
) -> Gateway:  # fmt: skip
    """A gateway on free ports serving TorchServe's APIs (gRPC, and REST inference) from
    `repository` with `models` loaded, registrations from `store` when `model_api`, token
    authorization when `keys`; ready when this returns, its log at `log`."""
    http, grpc_port, metrics, rest, inference, management = free_ports(6)
    given = {
        "repository": str(repository), "store": str(store), "http_port": http,
        "grpc_port": grpc_port, "metrics_port": metrics, "model_control_mode": "explicit",
        "load_models": models,
        "torchserve": {
            "inference_port": rest, "grpc_inference_port": inference,
            "grpc_management_port": management, "model_api": model_api,
        },
        "keys": str(log.parent) if keys else None,
    }  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, json.dumps(given)], stdout=out, stderr=out
        )
    server = GatewayProcess(process, http, grpc_port, metrics, log)
    deadline = time.monotonic() + 180
    while True:  # ready: V2's readiness, once the startup models are loaded
        assert process.poll() is None, server.log()
        try:
            if httpx.get(f"http://127.0.0.1:{http}/v2/health/ready", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise AssertionError(f"the gateway was not ready in 180 s:\n{server.log()}")
        time.sleep(0.2)
    return Gateway(
        server=server,
        inference=ts.inference_grpc.InferenceAPIsServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{inference}")
        ),
        management=ts.management_grpc.ManagementAPIsServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{management}")
        ),
        rest=httpx.Client(base_url=f"http://127.0.0.1:{rest}", timeout=60),
        inference_key=_bearer(log.parent, "inference") if keys else (),
        management_key=_bearer(log.parent, "management") if keys else (),
    )


def _bearer(directory: Path, kind: str) -> tuple:
    key = json.loads((directory / "key_file.json").read_text())[kind]["key"]
    return (("authorization", f"Bearer {key}"),)
