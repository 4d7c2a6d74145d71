"""Loading an ensemble: its steps checked, every member loaded (as Triton loads an
ensemble's models with it), and each step's map checked against its member's config."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.ensemble.model import EnsembleModel, Resolve
from gateway.core.ensemble.plan import check_members, plan_steps

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
    if config.response_cache.enable:  # its answer is its members': cacheable if theirs are
        for member in members:
            stateful = member.config.HasField("sequence_batching")
            if getattr(member, "decoupled", False) or stateful:
                raise InvalidArgument(
                    f"ensemble '{config.name}': response_cache cannot be enabled: its member "
                    f"'{member.name}' answers by more than the request (decoupled or a "
                    "sequence model); remove it"
                )
    return EnsembleModel(config, version, steps, datatypes, resolve, lookup)
