"""The one seam between the protocol fronts and whatever serves the models behind them.

Every front (the V2 HTTP routes, the V2 gRPC service, and the fronts to come) is written
against `Core` alone. Three implementations stand behind it, one per way of deploying:
- `gateway.core.service.InferenceCore`: the models in this process (`accel-gateway serve`);
- `gateway.front_processes.remote.RemoteCore`: a front process whose models live in the host
  process (`serve --front-processes N`);
- `gateway.tools.ray.ingress.RayCore`: the Ray Serve ingress, whose models are deployments.

A call a front makes exists in all three with the same signature, or the type checker
says which one lacks it (tests/typecheck/implementations.py, checked by mypy in the test
command); one route suite (tests/integration/route_suite.py) runs against a server of
each kind, and model control, which the suite's in-process and Ray servers refuse by
their modes, is tested through front processes on its own.

What a front may use and nothing more: the calls below, and five parts it drives itself.
A front asks `shedder` before it reads a request, counts its calls through `in_flight`,
reads `tracing` to start a request's span, resolves shared-memory tensors through
`shared_memory`, and refuses new inference while `stopping`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from accel_base.proto import model_config_pb2 as mc
from gateway.core.inference import InferRequest, InferResponse
from gateway.core.mounts import Mounted
from gateway.core.shared_memory import SharedMemoryRegistry
from gateway.operation.drain import InFlight
from gateway.operation.shedding import LoopShedder
from gateway.operation.tracing.tracer import Tracing

# The calls a front process forwards to the host by name (gateway/front_processes/host.py): every
# call of `Core` that is about models, whose answer must be the same whichever front asks.
MODEL_CALLS = frozenset(
    {
        "statistics", "model_instances", "repository_index", "model_ready", "check_model_ready",
        "model_metadata", "model_config", "load_model", "unload_model",
        "log_settings_dict", "update_log_settings", "trace_settings_dict",
        "update_trace_settings", "load_model_directory", "unload_model_directory",
        "model_directories", "load_on_first_use", "loaded_models", "set_mounts",
    }
)  # fmt: skip


class Core(Protocol):
    """What every protocol front may ask of the server (see the module's docstring)."""

    shedder: LoopShedder
    in_flight: InFlight
    tracing: Tracing
    shared_memory: SharedMemoryRegistry
    stopping: bool

    # ---- health and metadata ---------------------------------------------------------

    def live(self) -> bool: ...

    def ready(self) -> bool: ...

    def server_metadata(self) -> dict[str, Any]: ...

    async def model_ready(self, name: str, version: str = "") -> bool: ...

    async def check_model_ready(self, name: str, version: str = "") -> None:
        """NotFound for an unknown model or version, Unavailable for one not ready."""

    async def model_metadata(self, name: str, version: str = "") -> dict[str, Any]: ...

    async def model_config(self, name: str, version: str = "") -> mc.ModelConfig: ...

    async def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]: ...

    async def model_instances(self, name: str, version: str = "") -> list[dict[str, Any]]:
        """A loaded version's instances: {"name", "pid" (None for a thread),
        "state" ("READY", "BUSY", "RESTARTING" or "RETIRED")}; NotFound as model_config."""
        ...

    # ---- inference -------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResponse: ...

    def infer_stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """The responses of one request, in order (a decoupled model sends several)."""
        ...

    # ---- the repository (model control) ----------------------------------------------

    async def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]: ...

    async def load_model(
        self, name: str, token: str | None, parameters: dict[str, Any] | None = None
    ) -> None: ...

    async def unload_model(
        self, name: str, token: str | None, parameters: dict[str, Any] | None = None
    ) -> None: ...

    # ---- models chosen by directory or by their first request (SageMaker's contract) --

    async def load_model_directory(self, name: str, url: str, token: str | None) -> None:
        """Load the Triton model directory at `url` (inside the repository) as `name`:
        Conflict when the name is taken, InsufficientStorage when it cannot fit
        (gateway/core/directory_models.py)."""

    async def unload_model_directory(self, name: str, token: str | None) -> None:
        """Unload a model loaded by directory, and forget its name; NotFound if it is not
        loaded."""

    async def model_directories(self) -> dict[str, str]:
        """Models loaded by directory that a request can reach, each with the url it was
        loaded from: the loaded ones, and on demand those evicted since (a request
        reloads them)."""
        ...

    async def loaded_models(self) -> list[str]:
        """Models with a version loaded, in order, ready or not: one whose worker is
        restarting is loaded (its requests wait for it), as SageMaker counts models."""
        ...

    async def load_on_first_use(self, name: str) -> None:
        """Load a repository model that a request names, once, by its first request;
        NotFound when the repository has no such model."""

    async def set_mounts(self, mounts: dict[str, Mounted | None]) -> None:
        """Serve each directory as the repository model of that name, with that config
        (Triton's, as JSON) and those versions (None: as its version policy chooses),
        or, for None, no longer (gateway/core/mounts.py). Nothing loads or unloads here.
        Only the server's own fronts call it, with directories the server's start named
        (TF Serving's base paths and what its reloads may name)."""

    # ---- logging and trace settings (Triton's extensions) ----------------------------

    async def log_settings_dict(self) -> dict[str, Any]: ...

    async def update_log_settings(
        self, changes: dict[str, Any], token: str | None
    ) -> dict[str, Any]: ...

    async def trace_settings_dict(self, model: str = "") -> dict[str, Any]: ...

    async def update_trace_settings(
        self, changes: dict[str, Any], model: str, token: str | None
    ) -> dict[str, Any]: ...

    # ---- shared memory (Triton's extensions) -----------------------------------------

    async def register_system_shared_memory(
        self, name: Any, key: Any, offset: Any, byte_size: Any, token: str | None
    ) -> None: ...

    async def unregister_system_shared_memory(self, name: str, token: str | None) -> None: ...

    def system_shared_memory_status(self, name: str = "") -> list[dict[str, Any]]: ...

    def register_cuda_shared_memory(self) -> None: ...

    def unregister_cuda_shared_memory(self, token: str | None) -> None: ...

    def cuda_shared_memory_status(self, name: str = "") -> list[dict[str, Any]]: ...
