"""The model repository: which models exist on disk, which versions are loaded, and why not.

Triton's layout (`<root>/<model>/config.pbtxt`, `<root>/<model>/<version>/<artifact>`)
and Triton's control modes:
- none: load everything at start; load/unload calls are refused.
- explicit: load what `--load-model` names at start; load/unload calls allowed.
- poll: load everything at start and follow changes on disk; load/unload refused.
- on-demand: every model is known and unloaded until its first request (or a metadata
  or config call) loads it; when a load needs room, the least recently used idle models
  are evicted (gateway/core/placement). Pinned models load at start and stay. Load and
  unload calls are allowed.
In every mode a load is placed by bytes within the devices' memory budgets, and fails
with the sizes when it cannot fit. A model that fails to load is recorded with its
reason; it never stops the server.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from pathlib import Path
from typing import Any

from accel_base.cpu import DEFAULT_BACKEND_NICE
from accel_base.errors import GatewayError, InvalidArgument, NotFound, PermissionDenied, Unavailable
from accel_base.proto import model_config_pb2 as mc
from accel_base.version_dirs import available_versions
from gateway.core.composites import find_cycle
from gateway.core.config_fields import check_fields
from gateway.core.copies import Copies
from gateway.core.ensemble.loading import load_ensemble
from gateway.core.ensemble.plan import is_ensemble
from gateway.core.lookups import Lookups
from gateway.core.member_loads import MemberLoads
from gateway.core.model import ModelVersion
from gateway.core.model_calls import ModelCalls
from gateway.core.model_config import (
    check_config,
    infer_platform,
    parse_config_dict,
    platform_of,
)
from gateway.core.model_dirs import fingerprint, versions_to_load
from gateway.core.model_entry import (
    ModelEntry,
    VersionState,
    is_ready_state,
    retrieved,
)
from gateway.core.mounts import Mount, Mounted
from gateway.core.on_demand import OnDemand, is_pinned
from gateway.core.placement.inventory import read_inventory
from gateway.core.placement.ledger import NoRoom
from gateway.core.placement.manager import MemoryManager
from gateway.core.response_cache import ResponseCache, check_cacheable, model_cache
from gateway.core.routing.config import is_router
from gateway.core.routing.loading import load_router
from gateway.core.scheduling.admission import queue_budget
from gateway.core.scheduling.execution import process_only
from gateway.core.scheduling.rate_limiter import RateLimiter, apply_limits
from gateway.core.scheduling.spares import SpareWorkers
from gateway.core.scheduling.window import adaptive_window
from gateway.core.sealing import (
    check_config_paths,
    check_links,
    relative_to_repository,
    repository_prefixes,
)
from gateway.core.unloading import Unloading
from gateway.operation import heap
from gateway.operation.drain import DEFAULT_DRAIN_SECONDS

log = logging.getLogger(__name__)

CONTROL_MODES = ("none", "explicit", "poll", "on-demand")
MANAGED_MODES = ("explicit", "on-demand")  # where load and unload calls are allowed
SETTLE_EVERY_S = 2.0  # on demand: the heap settles at most this often


class ModelRepository(Lookups, MemberLoads, Unloading):
    def __init__(
        self,
        root: Path,
        control_mode: str = "none",
        max_queue_size: int = 1024,
        queue_budget_ms: float | None = None,  # None: shed only a growing backlog
        backend_nice: int = DEFAULT_BACKEND_NICE,
        memory: MemoryManager | None = None,
        drain_s: float = DEFAULT_DRAIN_SECONDS,
        mounts: dict[str, Mount] | None = None,
    ) -> None:
        if control_mode not in CONTROL_MODES:
            raise ValueError(
                f"model control mode must be one of {CONTROL_MODES}, not {control_mode}"
            )
        self.root = root
        self._prefixes = repository_prefixes(root)  # taken out of messages to clients
        self.control_mode = control_mode
        self.max_queue_size = max_queue_size
        self.queue_budget_ms = queue_budget_ms  # unless a model's config sets its own
        self.backend_nice = backend_nice
        self.drain_s = drain_s  # how long an unloaded version's requests get to finish
        self.models: dict[str, ModelEntry] = {}
        # Names given to model directories elsewhere in the repository (SageMaker's
        # multi-model loads: gateway/protocols/http/sagemaker_models.py).
        self.aliases: dict[str, Path] = {}
        # Models whose directories the server's start named elsewhere (gateway/core/mounts.py).
        self.mounts: dict[str, Mount] = dict(mounts or {})
        on_demand = control_mode == "on-demand"
        self.memory = memory or MemoryManager(read_inventory(), evicts=on_demand)
        # On demand, GPU workers start ahead with their framework imported.
        self.spares = SpareWorkers(self.memory.load_concurrency) if on_demand else None
        self._settling: asyncio.TimerHandle | None = None
        # Set by the core: the socket Python models call other models on.
        self.model_calls: ModelCalls | None = None
        self.on_demand = OnDemand(self)
        # Set by the server with front processes: who holds copies (gateway/core/copies.py).
        self.copies: Copies | None = None
        # Set by the server with --cache-config (gateway/core/response_cache.py).
        self.response_cache: ResponseCache | None = None
        # Set by the server with --rate-limit execution_count (scheduling/rate_limiter.py).
        self.rate_limiter: RateLimiter | None = None

    def set_mounts(self, mounts: dict[str, Mounted | None]) -> None:
        """Mount each directory under its name, or (None) unmount it; loads nothing."""
        for name, mounted in mounts.items():
            if mounted is None:
                self.mounts.pop(name, None)
            else:
                self.mounts[name] = Mount(*mounted)

    async def get_on_demand(self, name: str, version: str, missing: GatewayError) -> ModelVersion:
        return await self.on_demand.get(name, version, missing)

    async def serving(self, name: str, version: str = "") -> ModelVersion:
        """The ready model version a request goes to; on demand, loaded first if need be."""
        try:
            return self.get(name, version)
        except (NotFound, Unavailable) as missing:
            return await self.get_on_demand(name, version, missing)

    # ---- loading -------------------------------------------------------------------

    def _config_on_disk(self, name: str) -> mc.ModelConfig | None:
        try:
            return self.config_on_disk(name) if self.exists(name) else None
        except GatewayError:
            return None  # its own load says what is wrong

    def check_management_allowed(self) -> None:
        if self.control_mode not in MANAGED_MODES:
            raise PermissionDenied(
                f"explicit model load / unload is not allowed in model control mode "
                f"'{self.control_mode}'; start the server with --model-control-mode explicit "
                "(or on-demand)"
            )

    async def load(
        self, name: str, config_json: dict[str, Any] | None = None, if_unloaded: bool = False
    ) -> None:
        """Load (or reload) a model's versions.

        Versions already serving go on serving while their replacements load, and
        keep serving if a replacement fails (as in Triton).
        """
        before = self._loaded(name)
        # Shielded: a caller that goes away (a cancelled gRPC call) must not stop a load
        # half way, with instances built and their bytes no longer booked.
        # A context of its own: a load serves whoever waits for it, not only the request
        # (and its id, which log lines carry) that started it.
        loading = asyncio.get_running_loop().create_task(
            self._load(name, config_json, if_unloaded), context=contextvars.Context()
        )
        loading.add_done_callback(retrieved)  # a failure after its caller went away
        try:
            await asyncio.shield(loading)
        except GatewayError as exc:  # messages leave the server without its paths
            message = self._relative(exc.message)
            prefix = f"failed to load '{name}'"  # Triton's words first: clients match them
            if not message.startswith(prefix):
                message = f"{prefix}: {message}"
            raise type(exc)(message) from None
        finally:
            if self._loaded(name) != before:  # a refused or failed load frees nothing
                self._settle()

    def _relative(self, message: str) -> str:
        return relative_to_repository(message, self._prefixes)

    async def _load(
        self, name: str, config_json: dict[str, Any] | None, if_unloaded: bool = False
    ) -> None:
        if not self.exists(name):
            raise NotFound(f"model '{name}' is not in the model repository")
        entry = self.models.setdefault(name, ModelEntry(name))
        entry.users += 1
        try:
            async with entry.lock:
                if if_unloaded and entry.ready_versions():
                    return  # another load got there first
                await self._load_locked(name, entry, config_json)
        finally:
            entry.users -= 1

    async def _load_locked(
        self, name: str, entry: ModelEntry, config_json: dict[str, Any] | None
    ) -> None:
        """Load the versions of a model whose lock the caller holds."""
        try:
            model_dir = self.model_dir(name)
            config = self._config(name, model_dir, config_json)
            check_config_paths(config, model_dir)
            await asyncio.to_thread(check_links, model_dir, name)  # may walk a big tree
            queue_budget(config, self.queue_budget_ms)  # a bad value: 400 before loading
            adaptive_window(config)  # the same
            check_cacheable(config)  # the same
            check_fields(config)  # a field the gateway cannot honour: refused, named
            mount = self.mounts.get(name)
            if mount is not None and mount.versions is not None:  # its front chose them
                wanted = [v for v in available_versions(model_dir) if v in mount.versions]
            else:
                wanted = versions_to_load(config, available_versions(model_dir))
            if not wanted and (is_router(config) or is_ensemble(config)):
                wanted = [1]  # runs nothing of its own: needs no version directory
            if not wanted:
                raise InvalidArgument(f"model '{name}' has no version directory")
            pinned = name in self.memory.pinned or is_pinned(config)
        except GatewayError as exc:
            entry.error = self._relative(exc.message)  # the index shows why
            raise
        except OSError as exc:  # its directory gone or unreadable while it was read
            entry.error = f"model '{name}': cannot read its directory: {exc.strerror or exc}"
            raise Unavailable(entry.error) from None
        entry.error = ""
        entry.override = config_json
        entry.fingerprint = fingerprint(model_dir)
        old = entry.versions
        entry.versions = {
            **old,
            **{v: VersionState("LOADING") for v in wanted if not is_ready_state(old.get(v))},
        }
        entry.pinned = pinned
        new: dict[int, VersionState] = {}
        errors = []
        no_room = True  # every failure was for want of memory (SageMaker answers 507)
        for version in wanted:
            try:
                model = await self._load_version(name, model_dir, version, config)
            except Exception as exc:  # any backend failure only fails this model
                reason = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                reason = self._relative(reason)
                log.error("model '%s' version %d failed to load: %s", name, version, reason)
                errors.append(reason)
                no_room = no_room and isinstance(exc, NoRoom)
                previous = old.get(version)
                new[version] = (
                    previous if is_ready_state(previous) else VersionState("UNAVAILABLE", reason)
                )
            else:
                new[version] = VersionState("READY", model=model)
        if errors:  # as Triton and TF Serving: a failed load keeps what was serving
            new.update({v: s for v, s in old.items() if v not in new and is_ready_state(s)})
        entry.versions = new
        if self.copies is not None:
            self.copies.routes_changed(name, entry)
        await self._close_versions([s for v, s in old.items() if s.model and new.get(v) is not s])
        if errors:
            failure = NoRoom if no_room else Unavailable
            raise failure(f"failed to load '{name}': {'; '.join(errors)}")

    async def _load_version(
        self, name: str, model_dir: Path, version: int, config: mc.ModelConfig
    ) -> ModelVersion:
        """Placed, loaded, warmed up and measured (gateway/core/placement/manager.py); a
        router has its variants loaded instead (gateway/core/routing)."""
        if is_router(config) or is_ensemble(config):
            # Each load of a model made of others would wait for the other's: refuse.
            cycle = find_cycle(config, self._config_on_disk)
            if cycle:
                raise InvalidArgument(
                    f"'{name}' is part of itself: {' -> '.join(cycle)}; ensembles and routers "
                    "must not form a cycle"
                )
            if is_router(config):
                return await load_router(
                    config, version, self._load_variant, self.serving, self.get
                )
            ensemble = await load_ensemble(
                config, version, self._load_step_model, self.serving, self.get
            )
            ensemble.cache = model_cache(config, self.response_cache)
            return ensemble
        plan = await asyncio.to_thread(ModelVersion.plan, model_dir, version, config)
        calls = None  # where a Python model calls other models (gateway/core/model_calls.py)
        if process_only(plan.platform) and self.model_calls is not None:
            calls = await self.model_calls.start()

        def load(devices: list) -> ModelVersion:
            return ModelVersion.load(
                plan,
                devices,
                self.max_queue_size,
                self.queue_budget_ms,
                self.backend_nice,
                self.spares,
                calls,
            )

        model = await self.memory.load(
            name, version, plan.slots, load, self.on_demand.candidates, self.on_demand.evict
        )
        try:
            # Its instances may need more rate-limit units than the server declares.
            apply_limits(model, self.rate_limiter)
            model.cache = model_cache(config, self.response_cache)
            if self.copies is not None:  # a copy that fails fails the version everywhere
                await self.copies.copy(model, model_dir)
        except BaseException:
            try:
                await model.close()
            finally:
                self.memory.released(model.footprints)
            raise
        return model

    def _config(
        self, name: str, model_dir: Path, config_json: dict[str, Any] | None
    ) -> mc.ModelConfig:
        if config_json is None:
            config = self.config_on_disk(name)
            config.name = name  # under another name when SageMaker loaded it so
            return config
        config = parse_config_dict(config_json, f"config override for '{name}'")
        if not platform_of(config):  # as Triton completes it: from the artifact
            config.platform = infer_platform(model_dir)
        if config.name and config.name != name:
            raise InvalidArgument(
                f"config override names the model '{config.name}', but it is loaded as '{name}'"
            )
        config.name = name
        check_config(config)
        return config

    def _settle(self) -> None:
        """Collect and freeze the heap (gateway/operation/heap.py) after what is loaded changed: at
        once, or on demand, where loads and evictions may come many a second, once a
        SETTLE_EVERY_S at most (a full collection holds the event loop for tens of ms)."""
        if self.control_mode != "on-demand":
            heap.settle()
        elif self._settling is None:
            self._settling = asyncio.get_running_loop().call_later(SETTLE_EVERY_S, self._settle_now)

    def _settle_now(self) -> None:
        self._settling = None
        heap.settle()

    def _loaded(self, name: str) -> list[int]:
        """Identities of the model's loaded versions: a load or unload that changes them
        leaves garbage to collect (heap.settle)."""
        entry = self.models.get(name)
        states = entry.versions.values() if entry is not None else []
        return [id(s.model) for s in states if s.model is not None]

    async def poll(self) -> None:
        """One pass of poll mode: load new or changed models, unload removed ones."""
        on_disk = set(self.model_names_on_disk())
        for name in sorted(on_disk):
            entry = self.models.get(name)
            if entry is None or entry.fingerprint != fingerprint(self.model_dir(name)):
                try:
                    await self.load(name)
                except GatewayError as exc:
                    log.error("model '%s' did not load: %s", name, exc.message)
        for name in sorted(set(self.models) - on_disk):
            if self.models[name].versions:
                await self.unload(name)
                del self.models[name]
