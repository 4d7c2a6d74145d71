"""`accel-gateway tensorflow-model-server`: TF Serving's command line, served by the gateway.

    accel-gateway tensorflow-model-server --port=8500 --rest_api_port=8501 \\
        --model_name=NAME --model_base_path=/models/NAME
    accel-gateway tensorflow-model-server --model_config_file=models.config ...

A start script or a container's command changes `tensorflow_model_server` to
`accel-gateway tensorflow-model-server` and nothing else. Each model's base path
(`<base_path>/<version>/saved_model.pb`) is served where it is (a mount: nothing is
copied), with its version policy and labels, over TF Serving's REST API on
`--rest_api_port` (off unless given, as TF Serving's) and over V2 on loopback
(`--v2_http_port` / `--v2_grpc_port`, 8000 / 8001). TF Serving's ports answer once the
models have loaded, as TF Serving's do. As in TF Serving's container image, with
neither flag MODEL_BASE_PATH (and MODEL_NAME, default `model`) name the model at
`$MODEL_BASE_PATH/$MODEL_NAME`.
Flags that tune TF Serving's own C++ internals are accepted and named once at start as
ignored; an unknown flag is refused by name (flags.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from accel_base.version_dirs import available_versions
from gateway import __version__
from gateway.arguments import distinct_ports
from gateway.operation.log_settings import LogSettings
from gateway.protocols.tfserving.monitoring import read_monitoring_config
from gateway.protocols.tfserving.options import TfServingOptions
from gateway.protocols.tfserving.reload import Polling
from gateway.protocols.tfserving.served import Batching, TfModel, TfServing
from gateway.tools.tfserving.flags import IGNORED, add_flags
from gateway.tools.tfserving.model_config import ConfigFileError, read_batching, read_models
from gateway.tools.tfserving.ssl_config import read_ssl_config

log = logging.getLogger("accel_gateway")


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "tensorflow-model-server",
        help="serve TF Serving's models with TF Serving's own command line",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    add_flags(parser)


def _models(args: argparse.Namespace, environ: dict[str, str]) -> dict[str, TfModel]:
    """The models: the config file's (which wins over --model_base_path, as in TF
    Serving), the flags' one, or, with neither, the container image's variables."""
    if args.model_config_file:
        return read_models(Path(args.model_config_file))
    if args.model_base_path:
        return read_models(None, args.model_name or "default", Path(args.model_base_path))
    if "MODEL_BASE_PATH" in environ:  # as TF Serving's image: <MODEL_BASE_PATH>/<MODEL_NAME>
        name = args.model_name or environ.get("MODEL_NAME") or "model"
        return read_models(None, name, Path(environ["MODEL_BASE_PATH"]) / name)
    raise ConfigFileError("give --model_base_path (or MODEL_BASE_PATH) or --model_config_file")


def _check_labels(serving: TfServing) -> None:
    """As TF Serving at start: a label names a version there is, unless
    --allow_version_labels_for_unavailable_models."""
    if serving.labels_for_unavailable:
        return
    for model in serving.models.values():
        present = set(available_versions(model.base_path)) if model.base_path.is_dir() else set()
        for label, version in model.labels.items():
            if version not in present:
                raise ConfigFileError(
                    f"Request to assign label to version {version} of model {model.name}, "
                    f"which is not currently available for inference (label '{label}'; "
                    "--allow_version_labels_for_unavailable_models allows it)"
                )


def _at_top(path: Path) -> bool:
    parent = path.absolute().parent
    return parent == Path(parent.anchor)


def _beside(base_path: Path) -> Path:
    """Where a reload may name base paths: the directory holding this one, or this one
    when that directory is the filesystem's root."""
    return base_path.absolute() if _at_top(base_path) else base_path.absolute().parent


def _options(args: argparse.Namespace, environ: dict[str, str]) -> TfServingOptions:
    models = _models(args, environ)
    if args.batching_parameters_file and not args.enable_batching:
        raise ConfigFileError("--batching_parameters_file is set without --enable_batching")
    batching = None
    if args.enable_batching:
        path = args.batching_parameters_file
        batching = read_batching(Path(path)) if path else Batching()
    labels = args.allow_version_labels_for_unavailable_models
    # A reload by request may name base paths beside the start's (reload.py), never
    # anywhere on the machine: a base path or config file at the top has no "beside".
    roots = {_beside(m.base_path) for m in models.values()}
    if args.model_config_file and not _at_top(Path(args.model_config_file)):
        roots.add(Path(args.model_config_file).absolute().parent)
    serving = TfServing(models, batching=batching, labels_for_unavailable=labels,
                        method_check=args.enable_signature_method_name_check,
                        reload_roots=tuple(sorted(roots)),
                        warmup_iterations=max(args.num_request_iterations_for_warmup, 1)
                        if args.enable_model_warmup else 0)  # fmt: skip
    _check_labels(serving)
    serving.signatures.update(serving.discover_signatures())
    if args.port == 0:
        raise ConfigFileError("--port=0: gRPC must have a port (a Unix socket is not served)")
    rest = args.rest_api_port or None
    if rest == args.port:
        log.warning("--rest_api_port is --port: the REST API is not served (as TF Serving)")
        rest = None
    config_file = Path(args.model_config_file) if args.model_config_file else None
    polling = Polling(
        versions_s=max(args.file_system_poll_wait_seconds, 0),
        config_s=max(args.model_config_file_poll_wait_seconds, 0) if config_file else 0,
        read_config=(lambda: read_models(config_file)) if config_file else None,
    )
    prometheus = None
    if args.monitoring_config_file:
        prometheus = read_monitoring_config(Path(args.monitoring_config_file))
        if prometheus and rest is None:  # as TF Serving: the page is the REST server's
            log.warning("--monitoring_config_file: the Prometheus page is served on the "
                        "REST port, and --rest_api_port is not given")  # fmt: skip
    return TfServingOptions(serving, args.port, rest, args.rest_api_timeout_in_ms / 1000,
                            polling, prometheus)  # fmt: skip


def _warn_unserved(args: argparse.Namespace, serving: TfServing) -> None:
    """What TF Serving would do that is not done here, said once at start."""
    if args.grpc_socket_path:
        log.warning("--grpc_socket_path: gRPC on a Unix socket is not served; it is on --port")
    if args.file_system_poll_wait_seconds < 0:
        log.warning("--file_system_poll_wait_seconds below 0: base paths are read at start "
                    "only (a missing model is not waited for)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from gateway.run import run_gateway
    from gateway.server import ServerOptions

    if args.version:
        print(f"TensorFlow ModelServer: accel-gateway {__version__}")
        return 0
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
    _warn_unserved(args, tfs.serving)
    # The repository holds nothing of its own: every model is a mount.
    repository = Path(tempfile.mkdtemp(prefix="accel-gateway-tfs-"))
    try:
        if args.ssl_config_file:  # (its PEM text written where only this server reads)
            tls = read_ssl_config(Path(args.ssl_config_file), repository.with_suffix(".tls"))
            tfs = replace(tfs, grpc_tls=tls)
    except ConfigFileError as exc:
        print(f"accel-gateway tensorflow-model-server: {exc}", file=sys.stderr)
        _remove(repository)
        return 2
    options = ServerOptions(
        model_repository=repository, host="127.0.0.1", http_port=args.v2_http_port,
        grpc_port=args.v2_grpc_port, metrics_port=args.v2_metrics_port,
        model_control_mode="explicit", load_models=sorted(tfs.serving.mounts()),
        tfserving=tfs, side_host="0.0.0.0", max_body_bytes=args.max_body_bytes,
        log=LogSettings(),
    )  # fmt: skip
    try:
        return run_gateway(options, "accel-gateway tensorflow-model-server")
    finally:
        _remove(repository)


def _remove(repository: Path) -> None:
    shutil.rmtree(repository, ignore_errors=True)
    shutil.rmtree(repository.with_suffix(".tls"), ignore_errors=True)
