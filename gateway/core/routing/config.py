"""The `routing` section of a router model's config, checked, and the variants'
signatures compared: errors name the field or the tensor that is wrong."""

from __future__ import annotations

import math

from accel_base.datatypes import v2_datatype
from accel_base.errors import InvalidArgument
from accel_base.proto import model_config_pb2 as mc
from gateway.core.routing.agreement import DEFAULT_ATOL, DEFAULT_RTOL
from gateway.core.routing.shadow import DEFAULT_MAX_IN_FLIGHT, Shadow
from gateway.core.routing.table import Route

ROUTER_PLATFORM = "router"


def is_router(config: mc.ModelConfig) -> bool:
    return (config.platform or config.backend) == ROUTER_PLATFORM


def routes_and_shadows(config: mc.ModelConfig) -> tuple[list[Route], list[Shadow]]:
    """The routing section as routes (primaries) and shadows, or InvalidArgument."""
    where = f"router '{config.name}'"
    routing = config.routing
    if not routing.variant:
        raise InvalidArgument(
            f'{where}: routing names no variant; add routing {{ variant {{ model: "..." '
            "weight: 1 }} }}"
        )
    if config.input or config.output or config.max_batch_size or config.instance_group:
        raise InvalidArgument(
            f"{where}: a router takes its inputs, outputs and batch size from its variants "
            "and runs no instances; remove input, output, max_batch_size and instance_group"
        )
    routes, shadows, seen = [], [], set()
    for variant in routing.variant:
        name = variant.model
        if not name:
            raise InvalidArgument(f"{where}: a variant has no model name")
        if name == config.name:
            raise InvalidArgument(f"{where}: a router cannot route to itself")
        if variant.version and not (variant.version.isascii() and variant.version.isdigit()):
            raise InvalidArgument(
                f"{where}: variant '{name}' version must be digits or empty, "
                f"got '{variant.version}'"
            )
        if (name, variant.version) in seen:
            raise InvalidArgument(f"{where}: variant '{name}' is named twice")
        seen.add((name, variant.version))
        if variant.HasField("shadow"):
            shadows.append(_shadow(where, variant))
            continue
        if not math.isfinite(variant.weight) or variant.weight < 0:
            raise InvalidArgument(
                f"{where}: variant '{name}' weight must be a number >= 0, got {variant.weight}"
            )
        routes.append(Route(name, variant.version, variant.weight))
    if not any(route.weight > 0 for route in routes):
        raise InvalidArgument(
            f"{where}: no variant takes traffic; give at least one non-shadow variant a "
            "weight above 0"
        )
    if routing.max_shadow_in_flight < 0:
        raise InvalidArgument(
            f"{where}: max_shadow_in_flight must be >= 0 (0: {DEFAULT_MAX_IN_FLIGHT}), "
            f"got {routing.max_shadow_in_flight}"
        )
    return routes, shadows


def _shadow(where: str, variant: mc.ModelRouting.Variant) -> Shadow:
    shadow = variant.shadow
    rate, rtol, atol = shadow.sample_rate, shadow.rtol, shadow.atol
    if not 0 <= rate <= 1:
        raise InvalidArgument(
            f"{where}: shadow '{variant.model}' sample_rate must be in [0, 1], got {rate}"
        )
    if not (math.isfinite(rtol) and math.isfinite(atol)) or rtol < 0 or atol < 0:
        raise InvalidArgument(
            f"{where}: shadow '{variant.model}' rtol and atol must be >= 0, got {rtol}, {atol}"
        )
    if rtol == 0 and atol == 0:
        rtol, atol = DEFAULT_RTOL, DEFAULT_ATOL
    return Shadow(variant.model, variant.version, rate, rtol, atol)


def signature(config: mc.ModelConfig) -> dict[str, object]:
    """What a client sees of a model's interface: batching, and each tensor's name,
    datatype and shape."""

    def tensors(declared) -> dict[str, tuple[str, list[int]]]:
        return {t.name: (v2_datatype(t.data_type), list(t.dims)) for t in declared}

    return {
        "batching": config.max_batch_size > 0,
        "inputs": tensors(config.input),
        "outputs": tensors(config.output),
    }


def signature_differences(reference: mc.ModelConfig, other: mc.ModelConfig) -> list[str]:
    """How `other`'s signature differs from `reference`'s, one phrase per difference."""
    a, b = signature(reference), signature(other)
    found = []
    if a["batching"] != b["batching"]:
        found.append(
            f"'{reference.name}' {'batches' if a['batching'] else 'does not batch'} "
            f"(max_batch_size {reference.max_batch_size}), '{other.name}' "
            f"{'does' if b['batching'] else 'does not'} (max_batch_size {other.max_batch_size})"
        )
    for kind in ("inputs", "outputs"):
        mine, theirs = a[kind], b[kind]
        assert isinstance(mine, dict) and isinstance(theirs, dict)
        for name in sorted(mine.keys() - theirs.keys()):
            found.append(f"{kind[:-1]} '{name}' is missing from '{other.name}'")
        for name in sorted(theirs.keys() - mine.keys()):
            found.append(f"{kind[:-1]} '{name}' of '{other.name}' is not in '{reference.name}'")
        for name in sorted(mine.keys() & theirs.keys()):
            if mine[name] != theirs[name]:
                (dt_a, shape_a), (dt_b, shape_b) = mine[name], theirs[name]
                found.append(
                    f"{kind[:-1]} '{name}': {dt_a} {shape_a} in '{reference.name}', "
                    f"{dt_b} {shape_b} in '{other.name}'"
                )
    return found


def router_config(config: mc.ModelConfig, reference: mc.ModelConfig) -> mc.ModelConfig:
    """The router's config as clients see it: its own, with the variants' inputs,
    outputs and batch size."""
    completed = mc.ModelConfig()
    completed.CopyFrom(config)
    completed.max_batch_size = reference.max_batch_size
    completed.input.extend(reference.input)
    completed.output.extend(reference.output)
    return completed
