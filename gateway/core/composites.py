"""Models made of other models (routers and ensembles): what each is made of, and whether
they contain each other, as their configs on disk say. A load that would wait for its
own load is refused before it starts."""

from __future__ import annotations

from collections.abc import Callable

from accel_base.proto import model_config_pb2 as mc
from gateway.core.ensemble.plan import is_ensemble
from gateway.core.routing.config import is_router


def members(config: mc.ModelConfig) -> list[str]:
    if is_ensemble(config):
        return [step.model_name for step in config.ensemble_scheduling.step]
    if is_router(config):
        return [variant.model for variant in config.routing.variant]
    return []


def find_cycle(
    config: mc.ModelConfig, config_of: Callable[[str], mc.ModelConfig | None]
) -> list[str] | None:
    """The chain of model names that leads from `config`'s model back to it, or None.
    `config_of` reads another model's config (None when it has none to read)."""
    start = config.name
    seen: set[str] = set()

    def visit(name: str, made_of: list[str], path: list[str]) -> list[str] | None:
        for member in made_of:
            if member == start:
                return [*path, member]
            if member in seen:
                continue
            seen.add(member)
            other = config_of(member)
            if other is not None:
                found = visit(member, members(other), [*path, member])
                if found:
                    return found
        return None

    return visit(start, members(config), [start])


def dependents_to_unload(
    name: str, in_use: list[str], members_of: Callable[[str], list[str]]
) -> list[str]:
    """What `unload_dependents` takes down with `name`: the models it is made of that are
    in use (loaded or loading), through every level, less those a model in use outside
    the unload still uses (its other users would break). In unload order: every member
    after each of its users in the set (a reverse post-order of the walk), so that no
    composite still serving loses a member under it. `members_of` says what a model in
    use is made of."""
    reached = {name}
    queue = [name]
    while queue:
        for member in members_of(queue.pop(0)):
            if member not in reached and member in in_use:
                reached.add(member)
                queue.append(member)
    # A member kept for another user keeps its own members too: repeat until none changes.
    kept = True
    while kept:
        kept = False
        for member in sorted(reached - {name}):
            if any(m not in reached and member in members_of(m) for m in in_use):
                reached.discard(member)
                kept = True
    order: list[str] = []
    seen: set[str] = set()

    def visit(model: str) -> None:
        seen.add(model)
        for member in members_of(model):
            if member in reached and member not in seen:
                visit(member)
        order.append(model)

    visit(name)
    return [m for m in reversed(order) if m != name]
