"""Loading a router: its routing section checked, every variant loaded (as Triton loads
an ensemble's models), and their signatures compared."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.routing.config import router_config, routes_and_shadows, signature_differences
from gateway.core.routing.router import Lookup, Resolve, RouterModel

# (router name, variant name, version) -> the variant's ready model, loaded if need be.
LoadVariant = Callable[[str, str, str], Awaitable[Any]]


async def load_router(
    config: mc.ModelConfig,
    version: int,
    load_variant: LoadVariant,
    resolve: Resolve,
    lookup: Lookup | None = None,
) -> RouterModel:
    routes, shadows = routes_and_shadows(config)  # a bad section fails before any load
    wanted = [(r.model, r.version) for r in routes] + [(s.model, s.version) for s in shadows]
    models = [await load_variant(config.name, name, number) for name, number in wanted]
    reference = models[0].config
    differences = [d for m in models[1:] for d in signature_differences(reference, m.config)]
    if differences:
        raise InvalidArgument(
            f"router '{config.name}': its variants must take and give the same tensors: "
            + "; ".join(differences)
        )
    completed = router_config(config, reference)
    return RouterModel(completed, version, routes, shadows, resolve, lookup)
