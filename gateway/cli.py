"""The `accel-gateway` command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from accel_base.cpu import DEFAULT_BACKEND_NICE, MAX_NICE
from accel_base.errors import InvalidArgument
from gateway import SERVER_NAME, __version__
from gateway.arguments import (
    auto_fronts,
    port,
    positive_float,
    positive_int,
    positive_seconds,
    workers_count,
)
from gateway.core.placement import options as memory_options
from gateway.core.repository import CONTROL_MODES
from gateway.core.response_cache import cache_setting
from gateway.core.scheduling.admission import EXEMPT_PER_INSTANCE
from gateway.core.scheduling.rate_limiter import MODES as RATE_LIMIT_MODES
from gateway.core.scheduling.rate_limiter import parse_resource
from gateway.operation import health_command
from gateway.operation.drain import DEFAULT_DRAIN_SECONDS
from gateway.operation.limits import ConnectionLimits
from gateway.operation.log_settings import FORMATS, LogSettings, parse_levels
from gateway.operation.security import (
    ConfigError,
    TLSFiles,
    check_management_exposure,
    management_enabled,
    tls_files,
)
from gateway.operation.tracing.tracer import Tracing, parse_trace_config
from gateway.protocols.grpc.listener import GRPC_SERVERS
from gateway.protocols.tfserving.options import TfServingOptions
from gateway.protocols.torchserve.options import TorchServeOptions
from gateway.run import run_gateway
from gateway.server import ServerOptions
from gateway.tools import compile_command, loadtest_command
from gateway.tools.compare import command as compare_command
from gateway.tools.ray import command as ray_command
from gateway.tools.tfserving import command as tfserving_command
from gateway.tools.torchserve import command as torchserve_command

T = TypeVar("T")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accel-gateway", description="KServe V2 / Triton-protocol inference gateway"
    )
    parser.add_argument("--version", action="version", version=f"accel-gateway {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve a model repository over HTTP and gRPC")
    serve.add_argument(
        "--model-repository",
        type=Path,
        help="Triton-layout model repository (default: the example repository, built on first use)",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default %(default)s)"
    )
    serve.add_argument("--http-port", type=port, default=8000, help="default %(default)s")
    serve.add_argument("--grpc-port", type=port, default=8001, help="default %(default)s")
    serve.add_argument("--metrics-port", type=port, default=8002, help="default %(default)s")
    serve.add_argument(
        "--model-control-mode",
        choices=CONTROL_MODES,
        default="none",
        help="none: load all, no load/unload calls; explicit: load what --load-model names, "
        "load/unload calls allowed; poll: load all and follow changes; on-demand: load each "
        "model on its first request, evicting the least recently used idle ones when memory "
        "runs short, load/unload calls allowed (default %(default)s)",
    )
    serve.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="model to load at start in explicit and on-demand modes ('*' for all); repeatable",
    )
    serve.add_argument(
        "--repository-poll-secs",
        type=positive_seconds,
        default=15.0,
        help="seconds between repository scans in poll mode (default %(default)s)",
    )
    serve.add_argument(
        "--max-queue-size",
        type=positive_int,
        default=1024,
        help="requests one model version may hold pending before answering 503 "
        "(default %(default)s)",
    )
    serve.add_argument(
        "--queue-budget-ms",
        type=positive_float,
        default=None,
        metavar="MS",
        help="refuse at once, with 503 and Retry-After, a request that could not start "
        "within this long, unless fewer than "
        f"{EXEMPT_PER_INSTANCE} requests an instance are ahead of it; a model's "
        "queue_budget_ms parameter overrides it. Default: no fixed budget, as Triton: a "
        "closed loop's backlog (perf_analyzer, Locust) is queued however long its wait, "
        "and requests are refused only while the backlog is measured to grow (arrivals "
        "outrunning service), past the wait it had before it grew. Request deadlines "
        "and --max-queue-size apply either way",
    )
    serve.add_argument(
        "--rate-limit",
        choices=RATE_LIMIT_MODES,
        default="off",
        help="execution_count: an instance runs only while the resources its group's "
        "rate_limiter names are free (Triton's flag; default %(default)s)",
    )
    serve.add_argument(
        "--rate-limit-resource",
        type=checked(parse_resource),
        action="append",
        default=[],
        metavar="NAME:COUNT[:DEVICE]",
        help="units of a rate-limit resource, on GPU DEVICE or on every device (default: "
        "the most any loaded instance needs); repeatable",
    )
    serve.add_argument(
        "--cache-config",
        type=checked(cache_setting),
        action="append",
        default=[],
        metavar="local,size=BYTES",
        help="a response cache of BYTES for the models whose config says response_cache "
        "{ enable: true } (Triton's flag)",
    )
    serve.add_argument(
        "--backend-nice",
        type=int,
        choices=range(MAX_NICE + 1),
        metavar=f"0..{MAX_NICE}",
        default=DEFAULT_BACKEND_NICE,
        help="run model instances (their threads and worker processes) this many nice "
        "steps below the HTTP and gRPC fronts, so that an overloaded core still reads and "
        "refuses requests promptly; 0: the same priority (default %(default)s)",
    )
    serve.add_argument(
        "--read-timeout",
        type=positive_seconds,
        default=ConnectionLimits.read_timeout_s,
        help="an HTTP request (headers and body) must arrive whole within this many seconds "
        "of its first byte, else 408 (default %(default)s)",
    )
    serve.add_argument(
        "--max-connections",
        type=positive_int,
        default=ConnectionLimits.max_connections,
        help="HTTP connections open at once before requests get 503; gRPC calls at once "
        "before RESOURCE_EXHAUSTED, and gRPC connections (default %(default)s)",
    )
    serve.add_argument(
        "--front-processes",
        "--workers",  # its first name, kept: it is not about model worker processes
        dest="workers",
        type=workers_count,
        default="auto",
        help="front processes serving HTTP and gRPC on the same ports, each with its own "
        "copies of the CPU models (--front-copies), in front of one model host; 'auto' (the "
        "default): one per usable core from 4 cores, else 1; 1: this process serves them "
        "itself (--workers is the same option, the name it had first)",
    )
    serve.add_argument(
        "--front-copies",
        choices=("on", "off"),
        default="on",
        help="with front processes: 'on', each front holds its own copy of every model whose "
        "instances are CPU threads and serves it itself; 'off', every request goes to the "
        "one process holding the models (default %(default)s)",
    )
    serve.add_argument(
        "--grpc-server",
        choices=GRPC_SERVERS,
        default="gateway",
        help="what serves gRPC: 'gateway', the gateway's own HTTP/2 server (about twice "
        "grpc.aio's calls a second on one core), or 'grpcio', grpc.aio "
        "(default %(default)s)",
    )
    serve.add_argument(
        "--shed-lag-ms",
        type=float,
        default=0.0,
        help="hold waits near this many milliseconds by refusing new inference requests "
        "early (503 / UNAVAILABLE): a share of them while the event loop runs later turn "
        "after turn, and any past as many admitted at once as were answered in four "
        "times this long; for open-loop traffic on a saturated core (default 0: off)",
    )
    serve.add_argument(
        "--drain-seconds",
        type=positive_seconds,
        default=DEFAULT_DRAIN_SECONDS,
        help="on SIGTERM or SIGINT, how long requests in flight get to finish before the "
        "server stops anyway; and on an unload or reload, how long the old version's "
        "requests do before those still unfinished fail with 503 (default %(default)s)",
    )
    serve.add_argument(
        "--max-request-bytes",
        type=positive_int,
        default=64 * 1024 * 1024,
        help="largest request body, HTTP or gRPC (default %(default)s)",
    )
    serve.add_argument(
        "--server-name",
        default=SERVER_NAME,
        help="the name server metadata reports, for clients that check it "
        "(default %(default)s; Triton's is 'triton')",
    )
    serve.add_argument(
        "--admin-token",
        help="token that management calls (load, unload, shared-memory register and "
        "unregister) must present as 'Authorization: Bearer <token>'",
    )
    serve.add_argument(
        "--allow-unauthenticated-management",
        action="store_true",
        help="allow management calls without --admin-token on a --host other than loopback "
        "(refused by default, since anyone who reaches the port could load models)",
    )
    serve.add_argument(
        "--tls-cert",
        type=Path,
        metavar="FILE",
        help="PEM server certificate (chain first); serves HTTPS, gRPC over TLS and "
        "metrics over HTTPS (needs --tls-key)",
    )
    serve.add_argument("--tls-key", type=Path, metavar="FILE", help="PEM key of --tls-cert")
    serve.add_argument(
        "--tls-client-ca",
        type=Path,
        metavar="FILE",
        help="PEM CA certificate(s): require client certificates issued by them on every TLS port",
    )
    serve.add_argument(
        "--allow-shared-memory",
        action="store_true",
        help="let clients register system shared-memory regions (POSIX shm objects in "
        "/dev/shm) and pass tensors through them; off by default, since a registered region "
        "is read and written by the server",
    )
    serve.add_argument(
        "--sagemaker",
        action="store_true",
        help="also serve SageMaker's container contract (GET /ping, POST /invocations with "
        "the X-Amzn-SageMaker-Target-Model header) on --sagemaker-port",
    )
    serve.add_argument("--sagemaker-port", type=port, default=8080, help="default %(default)s")
    serve.add_argument(
        "--torchserve-port",
        type=port,
        help="serve TorchServe's inference API (GET /ping, POST /predictions/{model}) on "
        "this port too, for TorchServe archives in the repository (accel-gateway torchserve "
        "does it all with TorchServe's own flags)",
    )
    serve.add_argument(
        "--torchserve-management-port",
        type=port,
        help="serve TorchServe's management API (/models: describe, scale, and with "
        "--torchserve-model-store register and unregister) on this port too; needs "
        "--model-control-mode explicit",
    )
    serve.add_argument(
        "--torchserve-model-store",
        type=Path,
        help="the directory TorchServe's management API registers archives from (a `url` "
        "inside it); the archives unpack into the model repository",
    )
    serve.add_argument(
        "--tfserving-port",
        type=port,
        help="serve TF Serving's gRPC API (PredictionService, ModelService) on this port too, "
        "every model of the repository as its one signature (accel-gateway "
        "tensorflow-model-server serves TF Serving's own base paths and flags)",
    )
    serve.add_argument(
        "--tfserving-rest-port", type=port, help="serve TF Serving's REST API (/v1/models) too"
    )
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--log-format", default="default", choices=FORMATS,
                       help="text with local time (default), text with UTC ISO 8601 time, or "
                       "one JSON object a line")  # fmt: skip
    serve.add_argument("--log-levels", type=log_levels, default={}, metavar="COMPONENT=LEVEL,...",
                       help="levels of parts of the server, e.g. gateway.protocols.http=debug,"
                       "backends=warning (over --log-level)")  # fmt: skip
    serve.add_argument("--access-log", action="store_true",
                       help="log every inference request: model, status, duration")  # fmt: skip
    serve.add_argument("--trace-config", action="append", default=[], metavar="[MODE,]KEY=VALUE",
                       help="OpenTelemetry tracing, as Triton's: level=TIMESTAMPS, rate=100 "
                       "(1 of 100 requests), count=-1, opentelemetry,url=HOST:4318/v1/traces, "
                       "opentelemetry,resource=KEY=VALUE; off by default")  # fmt: skip
    memory_options.add_arguments(serve)
    compile_command.add_parser(commands)
    compare_command.add_parser(commands)
    loadtest_command.add_parser(commands)
    health_command.add_parser(commands)
    ray_command.add_parser(commands)
    torchserve_command.add_parser(commands)
    tfserving_command.add_parser(commands)
    return parser


def log_levels(text: str) -> dict[str, str]:
    try:
        return parse_levels(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _default_repository() -> Path:
    from models.build import ensure_example_repository

    return ensure_example_repository(log=lambda line: print(line, file=sys.stderr, flush=True))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "info").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "compile":
        return compile_command.run(args)
    if args.command == "compare":
        return compare_command.run(args)
    if args.command == "loadtest":
        return loadtest_command.run(args)
    if args.command == "health":
        return health_command.run(args, build_parser().parse_args)
    if args.command == "ray":
        return ray_command.run(args)
    if args.command == "tensorflow-model-server":
        return tfserving_command.run(args)
    if args.command == "torchserve":
        given = sys.argv[1:] if argv is None else argv
        return torchserve_command.run(args, given[given.index("torchserve") + 1 :])
    try:
        # Checked before the example repository is built, so a mistake costs no wait.
        tls = tls_files(args.tls_cert, args.tls_key, args.tls_client_ca)
        tracing = Tracing(*parse_trace_config(args.trace_config))
        check_management_exposure(
            args.host,
            args.admin_token,
            management_enabled(args.model_control_mode, args.allow_shared_memory),
            args.allow_unauthenticated_management,
        )
    except (ConfigError, ValueError) as exc:
        print(f"accel-gateway: {exc}", file=sys.stderr)
        return 2
    repository = args.model_repository or _default_repository()
    if not repository.is_dir():
        print(f"accel-gateway: model repository {repository} is not a directory", file=sys.stderr)
        return 2
    return run_gateway(_options(args, repository, tls, tracing))


def checked(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An option's type from a parser that raises InvalidArgument: the value is read once,
    as argparse reads it, and a bad one is refused with the parser's message."""

    def read(value: str) -> T:
        try:
            return parse(value)
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(exc.message) from None

    return read


def _torchserve_options(args: argparse.Namespace) -> TorchServeOptions | None:
    """TorchServe's fronts as `serve` turns them on (`accel-gateway torchserve` has its own)."""
    if args.torchserve_port is None and args.torchserve_management_port is None:
        return None
    return TorchServeOptions(
        inference_port=args.torchserve_port,
        management_port=args.torchserve_management_port,
        model_store=args.torchserve_model_store,
        model_api=args.torchserve_model_store is not None,
    )


def _options(
    args: argparse.Namespace, repository: Path, tls: TLSFiles | None, tracing: Tracing
) -> ServerOptions:
    return ServerOptions(
        model_repository=repository,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        model_control_mode=args.model_control_mode,
        load_models=args.load_model,
        poll_interval_s=args.repository_poll_secs,
        max_queue_size=args.max_queue_size,
        queue_budget_ms=args.queue_budget_ms,
        backend_nice=args.backend_nice,
        drain_seconds=args.drain_seconds,
        shed_lag_ms=max(args.shed_lag_ms, 0.0),
        limits=ConnectionLimits(
            max_connections=args.max_connections, read_timeout_s=args.read_timeout
        ),
        max_body_bytes=args.max_request_bytes,
        admin_token=args.admin_token,
        server_name=args.server_name,
        allow_shared_memory=args.allow_shared_memory,
        cache_bytes=args.cache_config[-1] if args.cache_config else None,  # the last holds
        rate_limit=args.rate_limit,
        rate_limit_resources=args.rate_limit_resource,
        sagemaker_port=args.sagemaker_port if args.sagemaker else None,
        torchserve=_torchserve_options(args),
        tfserving=TfServingOptions.for_repository(args.tfserving_port, args.tfserving_rest_port),
        tls=tls,
        allow_unauthenticated_management=args.allow_unauthenticated_management,
        memory=memory_options.from_args(args),
        workers=args.workers or auto_fronts((args.http_port, args.grpc_port), None, repository),
        front_copies=args.front_copies == "on",
        log=LogSettings(args.log_level, args.log_format, args.log_levels),
        access_log=args.access_log,
        tracing=tracing,
        grpc_server=args.grpc_server,
    )


if __name__ == "__main__":
    sys.exit(main())
