"""`accel-gateway torchserve`: TorchServe's command line, served by the gateway.

    accel-gateway torchserve --start [--foreground] [--ncs] --model-store STORE
        [--models all | NAME=FILE.mar ... | FILE.mar ...] [--ts-config config.properties]
        [--disable-token-auth] [--enable-model-api]
    accel-gateway torchserve --stop

A start script changes `torchserve` to `accel-gateway torchserve` and nothing else. The
archives named (`--models`, else config.properties' `load_models`) are unpacked from the
model store into a private repository (gateway/tools/torchserve/store.py), served over
TorchServe's inference API on `inference_address` and over V2 on `v2_http_port` /
`v2_grpc_port` (8000 / 8001), with Prometheus metrics on `metrics_address`'s port. As in
TorchServe 0.12, token authorization is on unless disabled: the keys are written to
key_file.json in the working directory, and inference calls need
`Authorization: Bearer <inference key>`. Without `--foreground` the server runs in the
background and the command returns once it answers /ping; `--stop` ends it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from backends.torchserve.archive import inside
from backends.torchserve.store import Defaults, Overrides, add_archive
from gateway.arguments import distinct_ports
from gateway.protocols.torchserve.keys import KEY_FILE, Keys
from gateway.protocols.torchserve.options import TorchServeOptions
from gateway.tools.torchserve.properties import Properties, PropertiesError, read

PID_FILE = Path(tempfile.gettempdir()) / f".accel-gateway-torchserve-{os.getuid()}.pid"
START_TIMEOUT_S = 300.0
# TorchServe flags that take a value and that this gateway does not serve: refused by name.
UNSUPPORTED = {
    "--workflow-store": "TorchServe workflows are not served",
    "--log-config": "logging is set with accel-gateway's --log-format and --log-levels",
    "--cpp-log-config": "TorchServe's C++ backend is not served",
    "--plugins-path": "TorchServe's Java plug-ins cannot run here",
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "torchserve", help="serve a TorchServe model store with TorchServe's own command line",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )  # fmt: skip
    parser.add_argument("--start", action="store_true", help="start the server")
    parser.add_argument("--stop", action="store_true", help="stop the running server")
    parser.add_argument("--foreground", action="store_true", help="stay in the foreground")
    parser.add_argument("--model-store", type=Path, help="the directory of .mar archives")
    parser.add_argument(
        "--models", nargs="+", default=[],
        help="all, NAME=FILE.mar or FILE.mar (inside the model store)",
    )  # fmt: skip
    parser.add_argument("--ts-config", type=Path, help="a config.properties file")
    parser.add_argument("--disable-token-auth", action="store_true",
                        help="serve without token authorization (no key_file.json)")  # fmt: skip
    parser.add_argument("--enable-model-api", action="store_true",
                        help="let the management API register and unregister models")  # fmt: skip
    parser.add_argument("--ncs", "--no-config-snapshots", action="store_true", dest="ncs",
                        help="accepted: this gateway writes no config snapshots")  # fmt: skip
    for flag, reason in UNSUPPORTED.items():
        parser.add_argument(flag, help=f"refused: {reason}")


def _models(entries: list[str], store: Path) -> list[tuple[str | None, Path]]:
    """(name or None, archive path) for each --models / load_models entry; none named,
    none loaded (as TorchServe: registration may add them)."""
    if entries == ["all"]:
        return [(None, path) for path in sorted(store.iterdir())
                if path.suffix in (".mar", ".tgz") or path.name.endswith(".tar.gz")
                or (path / "MAR-INF").is_dir()]  # fmt: skip
    chosen = []
    for entry in entries:
        name, _, file = entry.rpartition("=")
        if "://" in file:
            raise PropertiesError(
                f"--models {entry}: archives are not fetched by URL; put it in the model store"
            )
        path = inside(store, file)
        if path is None or not path.exists():
            raise PropertiesError(f"--models {entry}: no archive {file} in {store}")
        chosen.append((name or None, path))
    return chosen


def _overrides(props: Properties) -> Callable[[str, str], Overrides]:
    """What config.properties' `models` sets for a model's version, over its archive's
    model-config.yaml (TorchServe's precedence)."""

    def of(name: str, version: str) -> Overrides:
        settings = props.models.get(name, {}).get(version, {})
        return Overrides(
            batch_size=settings.get("batchSize"),
            max_batch_delay_ms=settings.get("maxBatchDelay"),
            workers=settings.get("minWorkers"),
            response_timeout_s=settings.get("responseTimeout"),
        )

    return of


def _default_versions(props: Properties) -> dict[str, str]:
    """The versions config.properties' `models` marks defaultVersion."""
    chosen = {}
    for name, versions in props.models.items():
        for version, settings in versions.items():
            if settings.get("defaultVersion"):
                chosen[name] = version
    return chosen


def _serve(args: argparse.Namespace, props: Properties) -> int:
    from gateway.operation.log_settings import LogSettings
    from gateway.run import run_gateway
    from gateway.server import ServerOptions

    store = args.model_store or props.model_store
    if store is None or not store.is_dir():
        raise PropertiesError("--model-store: give the directory that holds the archives")
    work = Path(tempfile.mkdtemp(prefix="accel-gateway-torchserve-"))
    try:
        defaults = Defaults(
            workers=props.default_workers_per_model, job_queue_size=props.job_queue_size,
            response_timeout_s=props.default_response_timeout, envelope=props.service_envelope,
            install_dependencies=props.install_py_dep_per_model, gpus=props.number_of_gpu,
        )  # fmt: skip
        startup: dict[str, dict[str, str]] = {}
        for name, archive in _models(args.models or props.load_models, store):
            stored = add_archive(archive, work, defaults, name, _overrides(props))
            startup.setdefault(stored.name, {})[stored.version] = archive.name
            print(f"accel-gateway torchserve: model {stored.name} {stored.version} from "
                  f"{archive.name}", file=sys.stderr)  # fmt: skip
        keys = None
        if props.token_authorization and not args.disable_token_auth:
            keys = Keys(Path.cwd(), props.token_expiration_min)
            print(f"accel-gateway torchserve: token authorization on; keys in {KEY_FILE}",
                  file=sys.stderr)  # fmt: skip
        distinct_ports({
            "inference_address": props.inference_port,
            "management_address": props.management_port,
            "metrics_address": props.metrics_port,
            "grpc_inference_port": props.grpc_inference_port,
            "grpc_management_port": props.grpc_management_port,
            "v2_http_port": props.v2_http_port, "v2_grpc_port": props.v2_grpc_port,
        })  # fmt: skip
        torchserve = TorchServeOptions(
            inference_port=props.inference_port, management_port=props.management_port,
            grpc_inference_port=props.grpc_inference_port,
            grpc_management_port=props.grpc_management_port,
            inference_host=props.host, management_host=props.management_host,
            keys=keys,
            model_store=store, allowed_urls=tuple(props.allowed_urls),
            model_api=props.model_api, defaults=defaults, startup=startup,
            default_versions=_default_versions(props),
        )  # fmt: skip
        # V2 has no token authorization: on loopback, unless config.properties names its
        # host (v2_address), so that the inference key cannot be gone around. Models are
        # under explicit control: the management API loads and unloads them.
        options = ServerOptions(
            model_repository=work, host=props.v2_host, http_port=props.v2_http_port,
            grpc_port=props.v2_grpc_port, metrics_port=props.metrics_port,
            model_control_mode="explicit", load_models=sorted(startup),
            torchserve=torchserve, max_body_bytes=props.max_request_size, log=LogSettings(),
        )  # fmt: skip
        return run_gateway(options, "accel-gateway torchserve")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if PID_FILE.exists() and PID_FILE.read_text().strip() == str(os.getpid()):
            PID_FILE.unlink(missing_ok=True)


def _running_pid() -> int | None:
    """The pid in the pid file when that process is ours and alive; a stale file goes."""
    try:
        pid = int(PID_FILE.read_text())
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        PID_FILE.unlink(missing_ok=True)
        return None
    if b"gateway\0torchserve" not in command:  # the pid went to another process
        PID_FILE.unlink(missing_ok=True)
        return None
    return pid


def _start_in_background(argv: list[str], props: Properties) -> int:
    running = _running_pid()
    if running is not None:
        raise PropertiesError(
            f"a server started by accel-gateway torchserve is running (pid {running}); "
            "stop it with --stop"
        )
    try:  # claimed before the child starts: two starts at once cannot both run
        claim = os.open(PID_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise PropertiesError(f"another start holds {PID_FILE}; try again") from None
    log_path = Path(tempfile.gettempdir()) / "accel-gateway-torchserve.log"
    with open(log_path, "ab") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "gateway", "torchserve", *argv, "--foreground"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    with os.fdopen(claim, "w") as file:
        file.write(str(child.pid))
    url = f"http://{props.host}:{props.inference_port}/ping"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if child.poll() is not None:
            PID_FILE.unlink(missing_ok=True)
            print(f"accel-gateway torchserve: the server exited; its log: {log_path}",
                  file=sys.stderr)  # fmt: skip
            return 1
        try:
            request = urllib.request.Request(url, headers=_bearer(Path.cwd() / KEY_FILE))
            with urllib.request.urlopen(request, timeout=1) as reply:
                if reply.status == 200:
                    print(f"accel-gateway torchserve: started (pid {child.pid}, log {log_path})")
                    return 0
        except OSError:
            pass
        time.sleep(0.2)
    print(f"accel-gateway torchserve: not answering {url} after {START_TIMEOUT_S:g} s; "
          f"its log: {log_path}", file=sys.stderr)  # fmt: skip
    return 1


def _bearer(key_file: Path) -> dict[str, str]:
    """The inference key of the server starting, once it has written its key file (the
    file of an earlier start holds a key that no longer works: /ping then says 400)."""
    try:
        key = json.loads(key_file.read_text())["inference"]["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {"Authorization": f"Bearer {key}"}


def _stop() -> int:
    pid = _running_pid()
    if pid is None:
        print("accel-gateway torchserve: no server started by it is running", file=sys.stderr)
        return 1
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            PID_FILE.unlink(missing_ok=True)
            print("accel-gateway torchserve: stopped")
            return 0
        time.sleep(0.2)
    print(f"accel-gateway torchserve: pid {pid} still runs 60 s after SIGTERM", file=sys.stderr)
    return 1


def run(args: argparse.Namespace, argv: list[str]) -> int:
    """`argv`: this command's own arguments (the background start repeats them)."""
    for flag in UNSUPPORTED:
        if getattr(args, flag.lstrip("-").replace("-", "_")) is not None:
            print(f"accel-gateway torchserve: {flag}: {UNSUPPORTED[flag]}", file=sys.stderr)
            return 2
    if args.stop:
        return _stop()
    if not args.start:
        print("accel-gateway torchserve: give --start (or --stop)", file=sys.stderr)
        return 2
    try:
        config = args.ts_config or (Path(os.environ["TS_CONFIG_FILE"])
                                    if "TS_CONFIG_FILE" in os.environ else None)  # fmt: skip
        props = read(config, os.environ)
        if args.enable_model_api:
            props.model_api = True
        if args.foreground:
            return _serve(args, props)
        return _start_in_background([a for a in argv if a != "--foreground"], props)
    except (PropertiesError, ValueError) as exc:
        print(f"accel-gateway torchserve: {exc}", file=sys.stderr)
        return 2
