"""Copies of a model version held by other processes (the front processes): which versions
may have them, and the calls the repository makes so that the copies follow its loads.

A model whose every instance is a thread on the CPU, batched or not, holds no state a
request could see between calls and no device memory: N processes may each hold a copy
and serve it on their own, so that no one process carries every request
(docs/design.md, "Processes"). Everything else keeps its one owner: GPU instances
(device memory), worker processes (one crash domain, one allocator), Python models,
sequence and decoupled models (state across requests), routers and ensembles (they run
their members where those are).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from backends import platform_info
from gateway.core.model import ModelVersion
from gateway.core.model_config import platform_of, read_config
from gateway.core.model_entry import ModelEntry
from gateway.core.scheduling import DirectScheduler, DynamicBatcher, Instance
from gateway.core.statistics import ModelStatistics, merged


class Copies(Protocol):
    """What the repository tells whoever holds copies (gateway/front_processes/replicas.py)."""

    async def copy(self, model: ModelVersion, model_dir: Path) -> None:
        """A version was loaded: copy it where copies go, before it is published. A copy
        that fails raises, and the version does not load."""

    async def drop(self, model: ModelVersion) -> None:
        """A version is about to be unloaded: its copies stop taking requests, finish
        those they hold, and close."""

    def routes_changed(self, name: str, entry: ModelEntry) -> None:
        """The model's ready versions changed: requests go to other copies now."""

    async def gather(self) -> None:
        """Bring every copy's counters up to date (before statistics are read)."""


def copyable(model: object) -> bool:
    """Whether `model` may be served by copies in other processes (see the module's
    docstring)."""
    if not isinstance(model, ModelVersion) or model.decoupled or model.streams:
        return False
    if model.cache is not None:  # one response cache, the host's (not N, each missing once)
        return False
    if any(i.limit is not None for i in model.pool.instances):  # one rate limiter, the host's
        return False
    if not isinstance(model.scheduler, DirectScheduler | DynamicBatcher):
        return False  # a SequenceBatcher holds its sequences' state
    if model.scheduler.per_request:  # a Python model: the user's code, in its own process
        return False
    return all(type(i) is Instance and i.backend.device.kind == "cpu" for i in model.pool.instances)


def streaming_model(root: Path) -> str | None:
    """The first model in the repository `root` whose answers come over a stream
    (decoupled, or a backend that streams), which front processes cannot serve yet: a
    front hands a stream's request to the host as one call. None when there is none."""
    for config_path in sorted(root.glob("*/config.pbtxt")):
        try:
            config = read_config(config_path.parent)
            streams = platform_info(platform_of(config)).streams
        except Exception:  # noqa: BLE001 - a bad config is reported when it loads
            continue
        if config.model_transaction_policy.decoupled or streams:
            return config_path.parent.name
    return None


def routes(entry: ModelEntry) -> dict[str, int]:
    """Which copy a request for each version of the model goes to, by the version string
    a request names ('' for the latest ready one); versions without copies are left out,
    and their requests go to the model's owner."""
    found: dict[str, int] = {}
    ready = entry.ready_versions()
    for version in ready:
        copy_id = getattr(entry.versions[version].model, "copy_id", None)  # a router: none
        if copy_id is not None:
            found[str(version)] = copy_id
    if ready and str(ready[-1]) in found:
        found[""] = found[str(ready[-1])]
    return found


def statistics_of(model: Any) -> ModelStatistics:
    """The counters of a model version (a router and an ensemble too) summed over its
    owner and its copies."""
    copies = getattr(model, "copy_stats", None)
    if not copies:
        return model.stats
    return merged([model.stats, *copies.values()])
