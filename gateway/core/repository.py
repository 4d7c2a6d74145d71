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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel_base.cpu import DEFAULT_BACKEND_NICE
from accel_base.errors import GatewayError, InvalidArgument, NotFound, PermissionDenied, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.composites import dependents_to_unload, find_cycle, members
from gateway.core.ensemble.loading import load_ensemble
from gateway.core.ensemble.plan import is_ensemble
from gateway.core.model import ModelVersion
from gateway.core.model_calls import ModelCalls
from gateway.core.model_config import (
    check_config,
    infer_platform,
    parse_config_dict,
    platform_of,
    read_config,
)
from gateway.core.model_dirs import available_versions, fingerprint, versions_to_load
from gateway.core.on_demand import OnDemand, is_pinned
from gateway.core.placement.inventory import read_inventory
from gateway.core.placement.ledger import NoRoom
from gateway.core.placement.manager import MemoryManager
from gateway.core.repository_index import index_rows
from gateway.core.routing.config import is_router
from gateway.core.routing.loading import load_router
from gateway.core.routing.router import RouterModel
from gateway.core.scheduling.admission import queue_budget
from gateway.core.scheduling.execution import process_only
from gateway.core.scheduling.instances import usable_cores
from gateway.core.scheduling.spares import SpareWorkers
from gateway.core.scheduling.window import adaptive_window
from gateway.core.sealing import (
    check_config_paths,
    check_links,
    model_directory,
    relative_to_repository,
    repository_prefixes,
)
from gateway.operation import heap
from gateway.operation.drain import DEFAULT_DRAIN_SECONDS

log = logging.getLogger(__name__)

CONTROL_MODES = ("none", "explicit", "poll", "on-demand")
MANAGED_MODES = ("explicit", "on-demand")  # where load and unload calls are allowed
SETTLE_EVERY_S = 2.0  # on demand: the heap settles at most this often


@dataclass(slots=True)
class VersionState:
    state: str  # READY, LOADING, UNLOADING, UNAVAILABLE
    reason: str = ""
    model: ModelVersion | None = None


@dataclass(slots=True)
class ModelEntry:
    name: str
    versions: dict[int, VersionState] = field(default_factory=dict)
    fingerprint: tuple = ()  # what the files looked like when last loaded (poll mode)
    error: str = ""  # why the model as a whole (its config) could not load
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Loads and unloads that hold or wait for the lock, counted before they wait: a
    # lock just released may still have a woken waiter, and eviction never waits.
    users: int = 0
    failed_at: float | None = None  # on demand: when its last load failed (clock seconds)
    # The config override of its last load call, which an on-demand reload keeps.
    override: dict[str, Any] | None = None
    pinned: bool = False  # never evicted (its config's `pinned` parameter, or --pin-model)

    def ready_versions(self) -> list[int]:
        return sorted(v for v, s in self.versions.items() if s.state == "READY")


def _ready(state: VersionState | None) -> bool:
    return state is not None and state.state == "READY"


class ModelRepository:
    def __init__(
        self,
        root: Path,
        control_mode: str = "none",
        max_queue_size: int = 1024,
        queue_budget_ms: float | None = None,  # None: shed only a growing backlog
        backend_nice: int = DEFAULT_BACKEND_NICE,
        memory: MemoryManager | None = None,
        drain_s: float = DEFAULT_DRAIN_SECONDS,
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
        on_demand = control_mode == "on-demand"
        self.memory = memory or MemoryManager(read_inventory(), evicts=on_demand)
        # On demand, GPU workers start ahead with their framework imported.
        self.spares = SpareWorkers(self.memory.load_concurrency) if on_demand else None
        self._settling: asyncio.TimerHandle | None = None
        # Set by the core: the socket Python models call other models on.
        self.model_calls: ModelCalls | None = None
        self.on_demand = OnDemand(self)

    # ---- queries -------------------------------------------------------------------

    def model_names_on_disk(self) -> list[str]:
        """The repository's model directories, and the names given to others inside it."""
        names = {p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")}
        return sorted(names | set(self.aliases))

    def exists(self, name: str) -> bool:
        return name in self.aliases or (model_name_ok(name) and (self.root / name).is_dir())

    def model_dir(self, name: str) -> Path:
        """Where the model's files are: `root/name`, or the directory inside the
        repository that a SageMaker load gave that name."""
        alias = self.aliases.get(name)
        if alias is None:
            return model_directory(self.root, name)
        if not alias.resolve().is_relative_to(self.root.resolve()):
            raise InvalidArgument(
                f"model '{name}': its directory leads outside the model repository"
            )
        return alias

    def get(self, name: str, version: str = "") -> ModelVersion:
        """The READY model version a request asks for ('' means the latest ready one)."""
        entry = self.models.get(name)
        if version == "" and entry is not None and len(entry.versions) == 1:
            # The common case first, without checks or sorting: one version, ready.
            (state,) = entry.versions.values()
            if state.state == "READY":
                return state.model  # type: ignore[return-value]
        _check_version(version)
        if entry is None or not entry.versions:
            if self.control_mode == "on-demand" and self.exists(name):
                raise Unavailable(f"model '{name}' is not loaded; it loads on its first request")
            # Triton's words first: clients match on them.
            raise NotFound(
                f"Request for unknown model: '{name}' is not found" + self._loaded_hint()
            )
        if version == "":
            ready = entry.ready_versions()
            if not ready:
                states = ", ".join(
                    f"{v}: {s.state} {s.reason}".strip() for v, s in entry.versions.items()
                )
                raise Unavailable(
                    f"Request for unknown model: '{name}' has no available versions ({states})"
                )
            return entry.versions[ready[-1]].model  # type: ignore[return-value]
        number = int(version)
        state = entry.versions.get(number)
        if state is None:
            raise NotFound(
                f"Request for unknown model: '{name}' version {number} is not found; "
                "loaded versions: "
                f"{sorted(entry.versions) or 'none'}"
            )
        if state.state != "READY":
            detail = f"{state.state} {state.reason}".strip()
            raise Unavailable(f"model '{name}' version {number} is not ready: {detail}")
        return state.model  # type: ignore[return-value]

    def _loaded_hint(self) -> str:
        ready = [name for name, e in self.models.items() if e.ready_versions()]
        return f"; ready models: {', '.join(ready)}" if ready else "; no model is ready"

    def is_ready(self, name: str, version: str = "") -> bool:
        """Whether it is ready; an unknown model or version is not, a malformed version is
        an InvalidArgument."""
        _check_version(version)
        try:
            model = self.get(name, version)
        except GatewayError:
            return False
        # Requests still queue while a worker restarts, but the model is not ready.
        return model.unavailable_reason is None

    def ready_models(self) -> list[ModelVersion]:
        return [
            state.model
            for entry in self.models.values()
            for state in entry.versions.values()
            if state.model is not None and state.state == "READY"
        ]

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return index_rows(self, ready_only)

    async def get_on_demand(self, name: str, version: str, missing: GatewayError) -> ModelVersion:
        return await self.on_demand.get(name, version, missing)

    async def serving(self, name: str, version: str = "") -> ModelVersion:
        """The ready model version a request goes to; on demand, loaded first if need be."""
        try:
            return self.get(name, version)
        except (NotFound, Unavailable) as missing:
            return await self.get_on_demand(name, version, missing)

    async def _load_variant(self, router: str, name: str, version: str) -> ModelVersion:
        """A router's variant, loaded now if it is not (as its last load left it)."""
        if not self.exists(name):
            raise InvalidArgument(
                f"router '{router}': variant '{name}' is not in the model repository"
            )
        entry = self.models.get(name)
        if (entry is None or not entry.ready_versions()) and is_router(
            read_config(self.model_dir(name))
        ):
            raise InvalidArgument(
                f"router '{router}': variant '{name}' is a router; variants must be models"
            )
        model = await self._load_member(name, version)
        if isinstance(model, RouterModel):
            raise InvalidArgument(
                f"router '{router}': variant '{name}' is a router; variants must be models"
            )
        return model

    async def _load_step_model(self, ensemble: str, name: str, version: str) -> Any:
        """An ensemble step's model, loaded now if it is not (as Triton loads an ensemble's
        models with it)."""
        if not self.exists(name):
            raise InvalidArgument(
                f"ensemble '{ensemble}': step model '{name}' is not in the model repository"
            )
        return await self._load_member(name, version)

    async def _load_member(self, name: str, version: str) -> Any:
        entry = self.models.get(name)
        if entry is None or not entry.ready_versions():
            await self.load(name, entry.override if entry else None, if_unloaded=True)
        return self.get(name, version)

    # ---- loading -------------------------------------------------------------------

    async def load_startup_models(self, names: list[str]) -> None:
        """Load what the control mode says to load at start (all models, or the named ones)."""
        if self.control_mode == "explicit":
            targets = self.model_names_on_disk() if "*" in names else names
        elif self.control_mode == "on-demand":  # pinned and named; the rest wait for requests
            targets = [
                n for n in self.model_names_on_disk()
                if n in names or "*" in names or self.on_demand.pinned_on_disk(n)
            ]  # fmt: skip
        else:
            targets = self.model_names_on_disk()
        # Several at once: most of a load is a worker process importing its framework.
        slots = asyncio.Semaphore(max(2, usable_cores()))

        async def load(name: str) -> None:
            async with slots:
                try:
                    await self.load(name)
                except GatewayError as exc:
                    log.error("model '%s' did not load: %s", name, exc.message)

        # Models first, then ensembles, then routers: each finds what it is made of
        # loaded (or failed, with the reason).
        kinds = {name: self._kind_on_disk(name) for name in targets}
        for kind in ("model", "ensemble", "router"):
            await asyncio.gather(*(load(name) for name in targets if kinds[name] == kind))

    def _config_on_disk(self, name: str) -> mc.ModelConfig | None:
        try:
            return read_config(self.model_dir(name)) if self.exists(name) else None
        except GatewayError:
            return None  # its own load says what is wrong

    def _kind_on_disk(self, name: str) -> str:
        try:
            config = read_config(self.model_dir(name))
        except GatewayError:
            return "model"  # its own load says what is wrong
        return "router" if is_router(config) else "ensemble" if is_ensemble(config) else "model"

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
        loading.add_done_callback(_retrieved)  # a failure after its caller went away
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
            wanted = versions_to_load(config, available_versions(model_dir))
            if not wanted and (is_router(config) or is_ensemble(config)):
                wanted = [1]  # runs nothing of its own: needs no version directory
            if not wanted:
                raise InvalidArgument(f"model '{name}' has no version directory")
            pinned = name in self.memory.pinned or is_pinned(config)
        except GatewayError as exc:
            entry.error = self._relative(exc.message)  # the index shows why
            raise
        entry.error = ""
        entry.override = config_json
        entry.fingerprint = fingerprint(model_dir)
        old = entry.versions
        entry.versions = {
            **old,
            **{v: VersionState("LOADING") for v in wanted if not _ready(old.get(v))},
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
                new[version] = previous if _ready(previous) else VersionState("UNAVAILABLE", reason)
            else:
                new[version] = VersionState("READY", model=model)
        entry.versions = new
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
            return await load_ensemble(
                config, version, self._load_step_model, self.serving, self.get
            )
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

        return await self.memory.load(
            name, version, plan.slots, load, self.on_demand.candidates, self.on_demand.evict
        )

    def _config(
        self, name: str, model_dir: Path, config_json: dict[str, Any] | None
    ) -> mc.ModelConfig:
        if config_json is None:
            config = read_config(model_dir)
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

    async def unload(self, name: str, dependents: bool = False) -> None:
        """Unload a model's versions; with `dependents`, then the models it is made of that
        no other loaded model uses (Triton's `unload_dependents`), composites first."""
        names = [name]
        if dependents:
            names += dependents_to_unload(name, self._in_use(), self._members_of)
        before = [self._loaded(n) for n in names]
        # Shielded like a load: a cancelled caller must not leave versions UNLOADING.
        unloading = asyncio.ensure_future(self._unload_in_order(names))
        unloading.add_done_callback(_retrieved)
        try:
            await asyncio.shield(unloading)
        finally:
            if [self._loaded(n) for n in names] != before:
                self._settle()

    async def _unload_in_order(self, names: list[str]) -> None:
        """The model, then its members; each member asked again at its turn whether a
        model in use still needs it (a load during the drain may have taken it up)."""
        failure = None
        for index, name in enumerate(names):
            if index and any(name in self._members_of(n) for n in self._in_use() if n != name):
                continue
            try:
                await self._unload(name)
            except Exception as exc:  # the members after it are unloaded all the same
                failure = failure or exc
        if failure is not None:
            raise failure

    def _in_use(self) -> list[str]:
        """Models with a version ready or loading."""
        return [
            n for n, e in self.models.items()
            if any(s.state in ("READY", "LOADING") for s in e.versions.values())
        ]  # fmt: skip

    def _members_of(self, name: str) -> list[str]:
        """What a model in use is made of: its loaded versions' configs, or, while none has
        loaded yet, its config on disk."""
        entry = self.models.get(name)
        states = entry.versions.values() if entry is not None else []
        found: list[str] = []
        for state in states:
            if state.model is not None:
                found += [m for m in members(state.model.config) if m not in found]
        if not found and any(s.state == "LOADING" for s in states):
            config = self._config_on_disk(name)
            found = members(config) if config is not None else []
        return found

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

    async def _unload(self, name: str, reason: str = "unloaded") -> None:
        entry = self.models.get(name)
        if entry is None:
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        entry.users += 1
        try:
            async with entry.lock:
                await self.close_all(entry, reason)
        finally:
            entry.users -= 1

    async def close_all(self, entry: ModelEntry, reason: str) -> None:
        """Unload every version of a model whose lock the caller holds."""
        old = entry.versions
        for state in old.values():
            state.state = "UNLOADING"
        try:
            await self._close_versions(list(old.values()))
        finally:  # whatever a close raised, no version stays UNLOADING
            entry.versions = {v: VersionState("UNAVAILABLE", reason) for v in old}

    async def _close_versions(self, states: list[VersionState]) -> None:
        failure = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_s  # one drain for all of them, not one each
        for state in states:
            if state.model is not None:
                model, state.model = state.model, None
                try:
                    await _drain(model, max(deadline - loop.time(), 0.0))
                    await model.close()
                except Exception as exc:  # the other versions are closed all the same
                    failure = failure or exc
                finally:  # its bytes are not booked forever, whatever happened
                    self.memory.released(model.footprints)
        if failure is not None:
            raise failure

    async def unload_all(self, drain_s: float | None = None) -> None:
        """Unload every model; `drain_s`, when given, bounds the wait for their requests
        (what is left of a stopping server's own drain, which waited for them already)."""
        if drain_s is not None:
            self.drain_s = drain_s  # the server is stopping: no load comes after this
        # All at once: each unload mostly waits for a worker process to end.
        names = list(self.models)
        if self.spares is not None:
            await asyncio.to_thread(self.spares.close)
        results = await asyncio.gather(*map(self._unload, names), return_exceptions=True)
        for name, result in zip(names, results, strict=True):
            if isinstance(result, Exception):
                log.error("model '%s' did not unload cleanly: %s", name, result)

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


def model_name_ok(name: str) -> bool:
    """A name that can only mean a directory directly under the repository."""
    return bool(name) and "/" not in name and not name.startswith(".")


def _check_version(version: str) -> None:
    """A model version as the protocol writes it: '' (the latest) or decimal digits. int()
    alone would also take ' 1', '+1', '1_0' and '-1'."""
    if version and not (version.isascii() and version.isdigit()):
        raise InvalidArgument(f"model version must be a non-negative integer, got '{version[:60]}'")


def _retrieved(task: asyncio.Future) -> None:
    """Mark a shielded task's failure as seen: its caller may have gone away."""
    if not task.cancelled():
        task.exception()


async def _drain(model: ModelVersion, timeout_s: float) -> None:
    """Let requests already accepted finish before the instances go away."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while model.pending and loop.time() < deadline:
        await asyncio.sleep(0.01)
