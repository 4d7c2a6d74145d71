"""`accel-gateway tensorflow-model-server`: TF Serving's command line, served by the gateway.

    accel-gateway tensorflow-model-server --port=8500 --rest_api_port=8501 \\
        --model_name=NAME --model_base_path=/models/NAME
    accel-gateway tensorflow-model-server --model_config_file=models.config ...

A start script or a container's command changes `tensorflow_model_server` to
`accel-gateway tensorflow-model-server` and nothing else. Each model's base path
(`<base_path>/<version>/saved_model.pb`) is served where it is (a mount: nothing is
copied), with its version policy and labels, over TF Serving's REST API on
`--rest_api_port` (off unless given, as TF Serving's) and over V2 on loopback
(`--v2_http_port` / `--v2_grpc_port`, 8000 / 8001). As in TF Serving's container image,
MODEL_NAME and MODEL_BASE_PATH stand in for `--model_name` and `--model_base_path`.
Flags that tune TF Serving's own C++ internals are accepted and named once at start as
ignored; an unknown flag is refused by name (flags.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from gateway.arguments import distinct_ports
from gateway.operation.log_settings import LogSettings
from gateway.protocols.tfserving.options import TfServingOptions
from gateway.protocols.tfserving.served import Batching, TfServing
from gateway.tools.tfserving.flags import IGNORED, add_flags
from gateway.tools.tfserving.model_config import ConfigFileError, read_batching, read_models

log = logging.getLogger("accel_gateway")


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "tensorflow-model-server",
        help="serve TF Serving's models with TF Serving's own command line",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    add_flags(parser)


def _options(args: argparse.Namespace, environ: dict[str, str]) -> TfServingOptions:
    name = args.model_name or environ.get("MODEL_NAME") or "default"
    base_path = args.model_base_path or environ.get("MODEL_BASE_PATH", "")
    if args.model_config_file:
        if args.model_base_path:
            raise ConfigFileError("give --model_config_file or --model_base_path, not both")
        models = read_models(Path(args.model_config_file))
    elif base_path:
        if not args.model_base_path and "MODEL_NAME" in environ:
            base_path = str(Path(base_path) / name)  # the container image's layout
        models = read_models(None, name, Path(base_path))
    else:
        raise ConfigFileError("give --model_base_path (or MODEL_BASE_PATH) or --model_config_file")
    if args.batching_parameters_file and not args.enable_batching:
        raise ConfigFileError("--batching_parameters_file is set without --enable_batching")
    batching = None
    if args.enable_batching:
        path = args.batching_parameters_file
        batching = read_batching(Path(path)) if path else Batching()
    labels = args.allow_version_labels_for_unavailable_models
    serving = TfServing(models, batching=batching, labels_for_unavailable=labels)
    serving.signatures.update(serving.discover_signatures())
    return TfServingOptions(serving, args.port or None, args.rest_api_port or None)


# Flags of TF Serving's that change what it serves, which are not served here yet:
# refused by name rather than ignored.
NOT_YET = {
    "monitoring_config_file": "TF Serving's Prometheus path is not served yet; the "
    "gateway's metrics are on --v2_metrics_port",
    "ssl_config_file": "TLS from an SSLConfig is not served yet",
    "model_config_file_poll_wait_seconds": "re-reading the model config file is not "
    "served yet; restart the server with the new file",
}


def run(args: argparse.Namespace) -> int:
    from gateway.run import run_gateway
    from gateway.server import ServerOptions

    if args.version:
        print("accel-gateway tensorflow-model-server (TF Serving's APIs)")
        return 0
    for flag, why in NOT_YET.items():
        if getattr(args, flag):
            print(f"accel-gateway tensorflow-model-server: --{flag}: {why}", file=sys.stderr)
            return 2
    if args.grpc_socket_path:
        print("accel-gateway tensorflow-model-server: --grpc_socket_path: gRPC on a Unix "
              "socket is not served; gRPC is on --port", file=sys.stderr)  # fmt: skip
    ignored = [f"--{flag}" for flag in IGNORED if getattr(args, flag) is not None]
    if ignored:
        print("accel-gateway tensorflow-model-server: these flags tune TF Serving's own "
              f"internals and are ignored here: {', '.join(ignored)}", file=sys.stderr)  # fmt: skip
    try:
        tfs = _options(args, dict(os.environ))
        distinct_ports({**tfs.ports(), "--v2_http_port": args.v2_http_port,
                        "--v2_grpc_port": args.v2_grpc_port})  # fmt: skip
    except (ConfigFileError, ValueError) as exc:
        print(f"accel-gateway tensorflow-model-server: {exc}", file=sys.stderr)
        return 2
    repository = Path(os.environ.get("TMPDIR", "/tmp")) / f".accel-gateway-tfs-{os.getpid()}"
    repository.mkdir(mode=0o700, exist_ok=True)  # holds nothing: every model is a mount
    options = ServerOptions(
        model_repository=repository, host="127.0.0.1", http_port=args.v2_http_port,
        grpc_port=args.v2_grpc_port, metrics_port=args.v2_metrics_port,
        model_control_mode="explicit", load_models=sorted(tfs.serving.models),
        tfserving=tfs, side_host="0.0.0.0", max_body_bytes=args.max_body_bytes,
        log=LogSettings(),
    )  # fmt: skip
    try:
        return run_gateway(options, "accel-gateway tensorflow-model-server")
    finally:
        repository.rmdir()
