"""One replica of one model's Ray Serve deployment: a repository of its own that holds
that model alone (with an ensemble's or a router's members), one instance of it, and the
gateway's own scheduler in front, so dynamic batching stays the gateway's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from accel_base.config_json import config_to_json
from accel_base.errors import GatewayError, Unavailable
from gateway.core.inference import InferRequest, InferResponse
from gateway.core.model_config import read_config
from gateway.core.repository import ModelRepository
from gateway.core.service import InferenceCore
from gateway.tools.ray.board import REPORT_S, Post, find_board

log = logging.getLogger(__name__)

# What the ingress may ask a replica's core, besides infer.
QUESTIONS = frozenset({"model_ready", "check_model_ready", "model_metadata", "model_config"})


def one_instance(config_json: dict[str, Any]) -> dict[str, Any]:
    """The config with one instance: the replica is the unit Ray Serve multiplies, so
    each holds one (on a GPU when any group asks for one, as its deployment reserves
    one; pinned GPUs dropped: Ray gives the replica its GPU)."""
    kinds = [g.get("kind", "KIND_AUTO") for g in config_json.get("instance_group") or [{}]]
    kind = "KIND_GPU" if "KIND_GPU" in kinds else kinds[0]
    return {**config_json, "instance_group": [{"count": 1, "kind": kind}]}


class ModelReplica:
    """The body of each model deployment (deployments.py wraps it with serve.deployment)."""

    async def __init__(self, repository: str, model: str) -> None:
        import ray
        from ray import serve

        self.model = model
        self.repository = ModelRepository(Path(repository), "explicit")
        self.core = InferenceCore(self.repository)
        # A model that fails to load answers 503 with the reason, as in one gateway, and
        # does not take the other models' deployments down with it.
        self.failure: str | None = None
        try:
            config = read_config(Path(repository) / model)
            await self.repository.load(model, one_instance(config_to_json(config)))
        except GatewayError as exc:
            prefix = f"failed to load '{model}'"
            self.failure = (
                exc.message if exc.message.startswith(prefix) else f"{prefix}: {exc.message}"
            )
            log.error("%s", self.failure)
        self.core.started = True
        self._replica = serve.get_replica_context().replica_id.unique_id
        self._board = find_board(ray)
        self._reporting = asyncio.ensure_future(self._report())

    async def _report(self) -> None:
        while True:
            models = self.repository.ready_models()
            post = Post(
                self.model,
                [m.stats for m in models],
                {(m.name, str(m.version)): m.pending for m in models},
                self.failure,
            )
            with contextlib.suppress(Exception):  # a board restarting: post next time
                await self._board.post.remote(self._replica, post)
            await asyncio.sleep(REPORT_S)

    async def infer(self, request: InferRequest, wait_s: float | None) -> InferResponse:
        """`wait_s`: what is left of the caller's deadline (monotonic clocks differ
        between nodes, so the deadline itself does not travel)."""
        if self.failure is not None:
            raise Unavailable(self.failure)
        if wait_s is not None:
            request.deadline = time.monotonic() + wait_s
        return await self.core.infer(request)

    async def ask(self, question: str, *arguments: Any) -> Any:
        """One of the core's questions about this model (model_config comes back as
        bytes, for the protobuf message does not travel)."""
        if question not in QUESTIONS:
            raise ValueError(f"a replica is not asked {question!r}")
        if self.failure is not None:
            if question == "model_ready":
                return False
            raise Unavailable(self.failure)
        answer = await getattr(self.core, question)(*arguments)
        return answer.SerializeToString() if question == "model_config" else answer

    def check_health(self) -> None:
        """Serve restarts a replica whose model stopped serving (every worker down)."""
        if self.failure is not None:
            return  # it answers 503 with the reason; a restart would fail the same way
        model = self.repository.get(self.model)
        if model.unavailable_reason is not None:
            raise Unavailable(model.unavailable_reason)

    async def __del__(self) -> None:
        """Serve's shutdown of the replica: worker processes end with the model."""
        self._reporting.cancel()
        await self.repository.unload_all()
