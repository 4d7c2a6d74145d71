"""Loading an ensemble: its steps checked, every member loaded (as Triton loads an
ensemble's models with it), and each step's map checked against its member's config."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.ensemble.model import EnsembleModel, Resolve
from gateway.core.ensemble.plan import check_members, plan_steps
from gateway.core.routing.config import is_router

# (ensemble name, member name, version) -> the member's ready model, loaded if need be.
LoadMember = Callable[[str, str, str], Awaitable[Any]]


async def load_ensemble(
    config: mc.ModelConfig,
    version: int,
    load_member: LoadMember,
    resolve: Resolve,
    lookup: Callable[[str, str], Any] | None = None,
) -> EnsembleModel:
    steps = plan_steps(config)  # a bad section fails before any load
    members = [await load_member(config.name, step.model, step.version) for step in steps]
    datatypes = check_members(config, steps, [member.config for member in members])
    ensemble = EnsembleModel(config, version, steps, datatypes, resolve, lookup)
    stateful = [member.name for member in members if not answers_by_request(member)]
    ensemble.answers_by_request = not stateful
    if config.response_cache.enable and stateful:
        raise InvalidArgument(
            f"ensemble '{config.name}': response_cache cannot be enabled: its member "
            f"'{stateful[0]}' answers by more than the request (a decoupled or sequence "
            "model, or a router drawing variants); remove it"
        )
    return ensemble


def answers_by_request(member: Any) -> bool:
    """Whether a member's answer is its request's alone (an ensemble's: all of its own)."""
    if isinstance(member, EnsembleModel):
        return member.answers_by_request
    if is_router(member.config) or getattr(member, "decoupled", False):
        return False
    return not member.config.HasField("sequence_batching")
