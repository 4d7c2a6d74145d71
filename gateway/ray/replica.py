"""One replica of one model's Ray Serve deployment: a repository of its own that holds
that model alone (with an ensemble's or a router's members), one instance of it, and the
gateway's own scheduler in front, so dynamic batching stays the gateway's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from accel_base.config_json import config_to_json
from accel_base.errors import Unavailable
from gateway.core import InferenceCore
from gateway.inference import InferRequest, InferResponse
from gateway.model_config import read_config
from gateway.ray.board import REPORT_S, Post, find_board
from gateway.repository import ModelRepository

log = logging.getLogger(__name__)

# What the ingress may ask a replica's core, besides infer.
QUESTIONS = frozenset({"model_ready", "check_model_ready", "model_metadata", "model_config"})


def one_instance(config_json: dict[str, Any]) -> dict[str, Any]:
    """The config with one instance: the replica is the unit Ray Serve multiplies, so
    each holds one (its kind kept, pinned GPUs dropped: Ray gives the replica its GPU)."""
    groups = config_json.get("instance_group") or [{}]
    kind = groups[0].get("kind", "KIND_AUTO")
    return {**config_json, "instance_group": [{"count": 1, "kind": kind}]}


class ModelReplica:
    """The body of each model deployment (deployments.py wraps it with serve.deployment)."""

    async def __init__(self, repository: str, model: str) -> None:
        import ray
        from ray import serve

        self.model = model
        self.repository = ModelRepository(Path(repository), "explicit")
        self.core = InferenceCore(self.repository)
        config = read_config(Path(repository) / model)
        await self.repository.load(model, one_instance(config_to_json(config)))
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
            )
            with contextlib.suppress(Exception):  # a board restarting: post next time
                await self._board.post.remote(self._replica, post)
            await asyncio.sleep(REPORT_S)

    async def infer(self, request: InferRequest) -> InferResponse:
        return await self.core.infer(request)

    async def ask(self, question: str, *arguments: Any) -> Any:
        """One of the core's questions about this model (model_config comes back as
        bytes, for the protobuf message does not travel)."""
        if question not in QUESTIONS:
            raise ValueError(f"a replica is not asked {question!r}")
        answer = await getattr(self.core, question)(*arguments)
        return answer.SerializeToString() if question == "model_config" else answer

    def check_health(self) -> None:
        """Serve restarts a replica whose model stopped serving (every worker down)."""
        model = self.repository.get(self.model)
        if model.unavailable_reason is not None:
            raise Unavailable(model.unavailable_reason)

    async def __del__(self) -> None:
        """Serve's shutdown of the replica: worker processes end with the model."""
        self._reporting.cancel()
        await self.repository.unload_all()
