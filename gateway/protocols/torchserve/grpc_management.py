"""TorchServe's ManagementAPIsService: each call's message as the parameters of the
Management operation the HTTP API calls too (management.py), its answer as TorchServe's
ManagementResponse: `msg` is the status line for register, scale, set-default and
unregister, and the JSON TorchServe's HTTP API answers for describe and list.

proto3 cannot tell a field left out from one set to 0 or "": as TorchServe's, a number
counts as given when above 0, a string when not empty, and `synchronous` is always
given (false unless set: TorchServe's gRPC default, unlike its HTTP API's true for
registration).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from accel_base.proto.torchserve import management_pb2 as pb
from accel_base.proto.torchserve import management_pb2_grpc as pb_grpc
from gateway.protocols.torchserve.grpc_common import Auth, management_failure, token_refusal
from gateway.protocols.torchserve.management import Management, Reply
from gateway.protocols.torchserve.replies import TsError


def message_params(
    request: Any, numbers: tuple[str, ...], texts: tuple[str, ...]
) -> dict[str, str]:
    """The fields of `request` a client gave, as the HTTP API's parameters (strings)."""
    params = {name: str(getattr(request, name)) for name in numbers if getattr(request, name) > 0}
    params |= {name: getattr(request, name) for name in texts if getattr(request, name)}
    params["synchronous"] = "true" if request.synchronous else "false"
    return params


def response(reply: Reply) -> pb.ManagementResponse:
    _, answer = reply
    if isinstance(answer, dict) and set(answer) == {"status"}:
        return pb.ManagementResponse(msg=answer["status"])
    # As TorchServe's (Gson's pretty printing): indented 2, no newline after.
    return pb.ManagementResponse(msg=orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode())


class ManagementServicer(pb_grpc.ManagementAPIsServiceServicer):
    def __init__(self, management: Management, auth: Auth) -> None:
        self.management, self.auth = management, auth

    async def _call(self, context: Any, operation: Callable[[], Awaitable[Reply]]) -> Any:
        """`operation`'s reply, once the call's key is right; else its failure as
        TorchServe's status."""
        failure = token_refusal(context.invocation_metadata(), self.auth, "management")
        if failure is None:
            try:
                return response(await operation())
            except Exception as exc:
                failure = management_failure(exc)
        await context.abort(failure.code, failure.details)

    async def DescribeModel(self, request: pb.DescribeModelRequest, context: Any) -> Any:
        name, version = request.model_name, request.model_version
        return await self._call(
            context, lambda: self.management.describe(name, version, request.customized)
        )

    async def ListModels(self, request: pb.ListModelsRequest, context: Any) -> Any:
        # 0 (or less): the defaults, 100 a page from the first.
        limit = str(request.limit) if request.limit > 0 else None
        start = str(request.next_page_token) if request.next_page_token > 0 else None
        return await self._call(context, lambda: self.management.list(limit, start))

    async def RegisterModel(self, request: pb.RegisterModelRequest, context: Any) -> Any:
        params = message_params(
            request,
            ("batch_size", "initial_workers", "max_batch_delay", "response_timeout",
             "startup_timeout"),
            ("handler", "model_name", "runtime", "url"),
        )  # fmt: skip
        if request.s3_sse_kms:
            params["s3_sse_kms"] = "true"
        return await self._call(context, lambda: self.management.register(params))

    async def ScaleWorker(self, request: pb.ScaleWorkerRequest, context: Any) -> Any:
        params = message_params(request, ("min_worker", "max_worker", "number_gpu"), ())
        if request.timeout:  # -1 (wait for ever) is a value too
            params["timeout"] = str(request.timeout)
        name, version = request.model_name, request.model_version
        return await self._call(context, lambda: self.management.scale(name, version, params))

    async def SetDefault(self, request: pb.SetDefaultRequest, context: Any) -> Any:
        name, version = request.model_name, request.model_version
        return await self._call(context, lambda: self.management.set_default(name, version))

    async def UnregisterModel(self, request: pb.UnregisterModelRequest, context: Any) -> Any:
        return await self._call(context, lambda: self._unregister(request))

    async def _unregister(self, request: pb.UnregisterModelRequest) -> Reply:
        if not request.model_name:
            raise TsError(400, "Parameter model_name is required.")
        return await self.management.unregister(request.model_name, request.model_version)
