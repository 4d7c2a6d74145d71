"""The shared-memory extension's calls and the admin token check, for the cores the
fronts talk to (the server's InferenceCore, a front process's RemoteCore): both keep a
`shared_memory` registry and an `admin_token`."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

from accel_base.errors import GatewayError, InvalidArgument, PermissionDenied
from gateway.core.inference import InferRequest, InferResponse
from gateway.core.shared_memory import REGION, SharedMemoryRegistry

NO_CUDA = (
    "CUDA shared memory is not supported by this server; use system shared memory "
    "(--allow-shared-memory)"
)


class Unimplemented(GatewayError):
    """A part of the protocol this server does not serve (CUDA shared memory)."""

    http_status = 501
    grpc_status = "UNIMPLEMENTED"


async def with_output_regions(
    registry: SharedMemoryRegistry,
    request: InferRequest,
    run: Callable[[InferRequest], Awaitable[InferResponse]],
) -> InferResponse:
    """`run(request)`, with the outputs it asks for in shared memory written there. The
    regions are checked before it runs, so a bad one costs no compute."""
    targets = registry.output_targets(request.outputs) if request.outputs else None
    if not targets:
        return await run(request)
    try:
        response = await run(request)
        registry.write_outputs(targets, response)
    finally:
        registry.release_targets(targets)
    return response


def run_with_regions(
    registry: SharedMemoryRegistry,
    request: InferRequest,
    run: Callable[[InferRequest], Awaitable[InferResponse]],
) -> Awaitable[InferResponse]:
    """What answers `request`, to be awaited: `run(request)` itself, or through
    with_output_regions when an output names a region (decided without a coroutine of its
    own: every request asks)."""
    for output in request.outputs:
        if REGION in output.parameters:
            return with_output_regions(registry, request, run)
    return run(request)


class SharedMemoryCalls:
    shared_memory: SharedMemoryRegistry
    admin_token: str | None

    def check_token(self, token: str | None) -> None:
        """Calls that change the server need the admin token when one is configured."""
        if self.admin_token and not hmac.compare_digest(
            (token or "").encode(), self.admin_token.encode()
        ):
            raise PermissionDenied(
                "this call needs the admin token: send 'Authorization: Bearer <token>' "
                "(gRPC metadata 'authorization')"
            )

    # ---- system shared memory --------------------------------------------------------

    async def register_system_shared_memory(
        self, name: Any, key: Any, offset: Any, byte_size: Any, token: str | None
    ) -> None:
        if self.shared_memory.enabled:  # when off, the registry says so, token or not
            self.check_token(token)
        self.shared_memory.register(name, key, offset, byte_size)

    async def unregister_system_shared_memory(self, name: str, token: str | None) -> None:
        self.check_token(token)
        self.shared_memory.unregister(name)

    def system_shared_memory_status(self, name: str = "") -> list[dict[str, Any]]:
        return self.shared_memory.status(name)

    # CUDA regions cannot be registered here. Unregister and status still answer, truthfully
    # (there are none), because perf_analyzer unregisters CUDA regions whenever it uses any
    # shared memory and gives up if that call fails.

    def register_cuda_shared_memory(self) -> None:
        raise Unimplemented(NO_CUDA)

    def unregister_cuda_shared_memory(self, token: str | None) -> None:
        self.check_token(token)

    def cuda_shared_memory_status(self, name: str = "") -> list[dict[str, Any]]:
        if name:
            raise InvalidArgument(f"no CUDA shared memory region '{name}' is registered")
        return []
