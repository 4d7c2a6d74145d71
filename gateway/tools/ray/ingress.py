"""The Ray ingress: the gateway's HTTP and gRPC fronts (and /metrics) in a Serve
replica, answering the V2 protocol with every model call handed to the model's own
deployment. Several ingress replicas on one node share the ports (SO_REUSEPORT).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accel_base.errors import GatewayError, Internal, NotFound, PermissionDenied, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway import SERVER_NAME, __version__
from gateway.core.inference import InferRequest, InferResponse
from gateway.core.interface import Mounted
from gateway.core.shared_memory import SharedMemoryRegistry
from gateway.core.shared_memory_calls import SharedMemoryCalls, Unimplemented
from gateway.listeners import Listeners, listen, uvicorn_server
from gateway.operation.drain import InFlight
from gateway.operation.limits import ConnectionLimits
from gateway.operation.log_settings import LogSettings, LogSettingsCalls
from gateway.operation.metrics import CONTENT_TYPE, counter_families, family
from gateway.operation.shedding import LoopShedder
from gateway.operation.tracing.tracer import Tracing
from gateway.server import ServerOptions
from gateway.tools.ray.board import find_board

log = logging.getLogger(__name__)

# "logging" is left out: a change would reach the one ingress replica that took the call.
EXTENSIONS = ("binary_tensor_data", "statistics", "model_configuration", "parameters")
# Longest waits on a deployment: an infer without a deadline of its own (the replica's
# admission refuses what cannot start in time, so this bounds a replica that hangs),
# and a question (ready, metadata, config).
INFER_WAIT_S = 300.0
ASK_WAIT_S = 30.0


@dataclass(frozen=True)
class Headers:
    """A request's headers as InferRequest.header, in a form that travels to a replica."""

    values: dict[str, str]

    def __call__(self, name: str) -> str | None:
        return self.values.get(name.lower())


@dataclass(slots=True)
class ModelView:
    """A model version as the metrics see it: its counters summed over its replicas."""

    name: str
    version: str
    stats: Any
    pending: int


class RayCore(SharedMemoryCalls, LogSettingsCalls):
    """The InferenceCore the fronts call, with the models in their deployments. Its log
    settings are the ingress replica's own (each model replica keeps its own)."""

    def __init__(self, handles: dict[str, Any], board: Any, admin_token: str | None) -> None:
        self.handles = handles
        self.board = board
        self.admin_token = admin_token
        self.started = True
        self.stopping = False
        self.in_flight = InFlight()
        self.shedder = LoopShedder(0.0, busy=lambda: False)
        self.shared_memory = SharedMemoryRegistry(enabled=False)
        self.log_settings = LogSettings()
        self.tracing = Tracing()  # off: not served through the ingress (see trace_settings_dict)

    def _handle(self, name: str) -> Any:
        handle = self.handles.get(name)
        if handle is None:
            raise NotFound(
                f"Request for unknown model: '{name}' is not found; the deployed models are: "
                f"{', '.join(sorted(self.handles)) or 'none'}"
            )
        return handle

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return self.started and not self.stopping

    def server_metadata(self) -> dict[str, Any]:
        return {"name": SERVER_NAME, "version": __version__, "extensions": list(EXTENSIONS)}

    async def trace_settings_dict(self, model: str = "") -> dict[str, Any]:
        raise Unimplemented(
            "tracing is not served through the Ray ingress: its requests run in model "
            "replicas that keep no trace settings; serve with `accel-gateway serve` to trace"
        )

    async def update_trace_settings(self, changes: Any, model: str, token: Any) -> Any:
        return await self.trace_settings_dict(model)

    async def _wait(self, name: str, call: Any, wait_s: float) -> Any:
        """A deployment's answer, with Ray's own failures as the client's 503s and the
        replica's errors as they were raised there."""
        import ray.exceptions
        import ray.serve.exceptions

        try:
            return await asyncio.wait_for(call, wait_s)
        except TimeoutError:
            raise Unavailable(
                f"model '{name}': no answer from its replicas in {wait_s:g} s"
            ) from None
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, GatewayError):
                raise cause from None
            raise Internal(f"model '{name}' failed in its replica: {cause or exc}") from None
        except (ray.exceptions.RayError, ray.serve.exceptions.RayServeException) as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise Unavailable(
                f"model '{name}': its Ray Serve deployment cannot take the call now ({reason})"
            ) from None

    async def infer(self, request: InferRequest) -> InferResponse:
        if self.stopping:
            raise Unavailable("the server is shutting down; send the request elsewhere")
        handle = self._handle(request.model_name)
        header = request.header
        request.client_gone = None  # the caller's connection stays here
        if header is not None and hasattr(header, "items"):
            request.header = Headers({k.lower(): v for k, v in header.items()})
        elif header is not None:
            request.header = None  # a front without a header list: no sticky header
        # Monotonic clocks differ between nodes: what is left of the deadline travels.
        wait_s = None if request.deadline is None else request.deadline - time.monotonic()
        request.deadline = None
        call = handle.infer.remote(request, wait_s)
        wait = INFER_WAIT_S if wait_s is None else max(wait_s, 0.001)
        return await self.in_flight.serve(
            request.model_name, self._wait(request.model_name, call, wait)
        )

    async def infer_stream(self, request: InferRequest):
        """One response per request: a decoupled model's stream is not served through
        Ray (its replica refuses it, saying so)."""
        yield await self.infer(request)

    async def _ask(self, name: str, question: str, *arguments: Any) -> Any:
        call = self._handle(name).ask.remote(question, name, *arguments)
        return await self._wait(name, call, ASK_WAIT_S)

    async def _board(self, method: str) -> Any:
        """Ask the board, within ASK_WAIT_S; looked up again once if it was restarted."""
        import ray
        import ray.exceptions

        for attempt in (1, 2):
            try:
                return await asyncio.wait_for(getattr(self.board, method).remote(), ASK_WAIT_S)
            except TimeoutError:
                raise Unavailable(
                    f"the statistics board did not answer in {ASK_WAIT_S:g} s"
                ) from None
            except ray.exceptions.RayError as exc:
                if attempt == 2:
                    raise Unavailable(f"the statistics board is not reachable: {exc}") from None
                try:
                    self.board = find_board(ray)
                except ValueError:  # gone: `ray shutdown` removed it
                    raise Unavailable("the statistics board is gone") from None

    async def model_ready(self, name: str, version: str = "") -> bool:
        if name not in self.handles:
            return False
        return await self._ask(name, "model_ready", version)

    async def check_model_ready(self, name: str, version: str = "") -> None:
        await self._ask(name, "check_model_ready", version)

    async def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return await self._ask(name, "model_metadata", version)

    async def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        return mc.ModelConfig.FromString(await self._ask(name, "model_config", version))

    async def views(self) -> list[ModelView]:
        """The deployed models' counters (not those of members that a replica runs
        inside an ensemble or a router, nor of models deployed before)."""
        rows = await self._board("statistics")
        return [
            ModelView(s.name, s.version, s, pending)
            for s, pending in rows
            if s.name in self.handles
        ]

    async def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        if name:
            self._handle(name)
        rows = [
            view.stats.as_dict()
            for view in await self.views()
            if (not name or view.name == name) and (not version or view.version == version)
        ]
        if name and not rows:
            raise NotFound(f"model '{name}' has no statistics yet: no replica has reported")
        return rows

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """A row per version the replicas report (the versions their statistics carry),
        or one without a version for a model none reports yet, as the in-process index
        has (the gRPC index's rows need a version)."""
        replicas = await self._board("replicas")
        versions: dict[str, list[str]] = {}
        for view in await self.views():
            versions.setdefault(view.name, []).append(view.version)
        rows = []
        for name in sorted(self.handles):
            count, failure = replicas.get(name, (0, None))
            ready = count > 0
            if ready_only and not ready:
                continue
            reason = (
                f"{count} replica(s) reporting" if count else (failure or "no replica has reported")
            )
            state = "READY" if ready else "UNAVAILABLE"
            reported = sorted(versions.get(name, [])) if ready else []
            for version in reported or [""]:
                rows.append({"name": name, "version": version, "state": state, "reason": reason})
        return rows

    def check_admin(self, token: str | None) -> None:
        raise PermissionDenied(
            "models served through Ray Serve are loaded and unloaded by deploying: run "
            "accel-gateway ray serve again with the repository as it should be"
        )

    async def load_model(self, name: str, token: str | None, parameters: Any = None) -> None:
        self.check_admin(token)

    async def unload_model(self, name: str, token: str | None, parameters: Any = None) -> None:
        self.check_admin(token)

    async def load_model_directory(self, name: str, url: str, token: str | None) -> None:
        self.check_admin(token)

    async def unload_model_directory(self, name: str, token: str | None) -> None:
        self.check_admin(token)

    async def model_directories(self) -> dict[str, str]:
        return {}  # every model is a deployment of the repository's

    async def model_instances(self, name: str, version: str = "") -> list[dict[str, Any]]:
        """A deployment's replicas are Ray's to list (`ray status`), not the ingress's."""
        await self.model_config(name, version)  # NotFound as the other cores
        return []

    async def loaded_models(self) -> list[str]:
        return sorted({row["name"] for row in await self.repository_index(ready_only=True)})

    async def load_on_first_use(self, name: str) -> None:
        """Every deployed model is loaded; one not deployed is not in the repository."""
        if not await self.model_ready(name):
            raise NotFound(f"model '{name}' is not deployed")

    async def set_mounts(self, mounts: dict[str, Mounted | None]) -> None:
        """Ray's deployments are made from the repository by `ray serve`, not mounted."""
        raise Unavailable(
            "the Ray ingress serves the deployments `ray serve` made; it mounts no "
            "directories (serve TF Serving's models without Ray)"
        )


class Ingress:
    """The body of the ingress deployment (deployments.py wraps it)."""

    async def __init__(self, handles: dict[str, Any], options: dict[str, Any]) -> None:
        import ray

        self.core = RayCore(handles, find_board(ray), options.get("admin_token"))
        self.options = ServerOptions(
            Path(options["model_repository"]), host=options["host"],
            http_port=options["http_port"], grpc_port=options["grpc_port"],
            metrics_port=options["metrics_port"], admin_token=options.get("admin_token"),
        )  # fmt: skip
        self.listeners = Listeners(self.core, self.options, reuse_port=True)
        self.listeners.bind()
        await self.listeners.start(None)
        await self.listeners.set_serving(True)
        self._metrics = self._start_metrics()

    def _start_metrics(self) -> asyncio.Task:
        from starlette.applications import Starlette
        from starlette.responses import PlainTextResponse
        from starlette.routing import Route

        async def metrics(_request):
            families = counter_families(await self.core.views())
            families.append(await self._replica_family())
            return PlainTextResponse("\n".join(families) + "\n", media_type=CONTENT_TYPE)

        options = self.options
        sock = listen(options.host, options.metrics_port, "metrics", reuse_port=True)
        server = uvicorn_server(Starlette(routes=[Route("/metrics", metrics)]), ConnectionLimits())
        return asyncio.ensure_future(server.serve(sockets=[sock]))

    async def _replica_family(self) -> str:
        rows = await self.core._board("replica_requests")
        samples = [({"model": m, "replica": r}, count) for m, r, count in rows]
        return family(
            "accel_gateway_ray_replica_requests",
            "Requests each Ray Serve replica answered for its deployment's model",
            "counter",
            samples,
        )

    def check_health(self) -> None:
        if self.listeners.http is None or self._metrics.done():
            raise Unavailable("the ingress's listeners have stopped")

    async def __del__(self) -> None:
        self.core.stopping = True
        await self.listeners.set_serving(False)
        await self.core.in_flight.wait_idle(5.0)
        await self.listeners.stop(1.0)
        self._metrics.cancel()
