"""One loaded model version: its config, instances, scheduler and statistics."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accel_base.datatypes import v2_datatype
from accel_base.errors import GatewayError, InvalidArgument, Unavailable
from accel_base.proto import model_config_pb2 as mc
from accel_base.version_dirs import version_dir
from backends import BackendUnavailable, Device, backend_class, platform_info
from gateway.core.inference import InferRequest, InferResponse
from gateway.core.model_config import complete_config, platform_of
from gateway.core.model_plan import (  # (artifact_path, model_metadata: imported from here too)
    LoadPlan,
    Slot,
    artifact_path,
    instance_devices,
    model_metadata,
)
from gateway.core.placement import footprint
from gateway.core.placement.warm_up import warm_up_inputs
from gateway.core.response_cache import ResponseCache, answer_cached, next_generation
from gateway.core.scheduling import DirectScheduler, DynamicBatcher, Instance, InstancePool
from gateway.core.scheduling.admission import Overloaded, queue_budget
from gateway.core.scheduling.execution import (
    execution_mode,
    gpu_capable,
    spawn_worker,
    worker_settings,
)
from gateway.core.scheduling.instances import usable_cores
from gateway.core.scheduling.process_instance import ProcessInstance
from gateway.core.scheduling.sequence.batcher import SequenceBatcher
from gateway.core.scheduling.spares import SpareWorkers
from gateway.core.scheduling.window import adaptive_window
from gateway.core.sealing import relative_to_repository, repository_prefixes
from gateway.core.statistics import ModelStatistics
from gateway.core.validation import RequestRules
from gateway.core.warmup import (
    ZEROS_TIMEOUT_S,
    Sample,
    read_samples,
    run_samples,
    warm_worker,
)
from gateway.operation.gpu import gpu_count

log = logging.getLogger(__name__)


class ModelVersion:
    def __init__(
        self,
        config: mc.ModelConfig,
        version: int,
        instances: list[Any],
        max_queue_size: int,
        queue_budget_ms: float | None,  # None: shed only a growing backlog
        root: Path | None = None,
        samples: list[Sample] | None = None,  # model_warmup's (gateway/core/warmup.py)
    ) -> None:
        self.config = config
        self.samples = samples or []
        self.cache: ResponseCache | None = None  # set by the repository (response_cache)
        self.places: list[tuple[int, str]] = []  # each instance's group index and device
        self.generation = next_generation()  # this load's, in cache keys
        # The repository's path, taken out of messages that leave the server.
        self._prefixes = repository_prefixes(root) if root is not None else []
        self.name = config.name
        self.version = version
        self.stats = ModelStatistics(config.name, str(version))
        # Copies in other processes (gateway/core/copies.py): this version's number among
        # them, and their counters as each last reported them, by process.
        self.copy_id: int | None = None
        self.copy_stats: dict[tuple[int, int], ModelStatistics] = {}
        self.copy_pending: dict[int, int] = {}  # requests each front's copy holds
        self.pool = InstancePool(instances, config.name)
        self.last_used = time.monotonic()  # for eviction: least recently used goes first
        self.footprints: list[Any] = []  # placement.manager.Footprint of each instance
        # On demand: called when the last request in flight is answered, since a load
        # waiting for room may evict this model now (gateway/core/placement/room.py).
        self.on_idle: Callable[[], None] | None = None
        self._metadata: tuple[tuple[int, ...], dict[str, Any]] | None = None  # metadata()'s
        info = platform_info(platform_of(config))
        self._warms_up = info.warm_up
        self._per_request = info.per_request
        if self.samples:  # a restarted worker runs them too, before it serves
            rewarm = functools.partial(
                warm_worker, self.name, self.samples, [t.name for t in config.output],
                info.per_request,
            )  # fmt: skip
            for instance in instances:
                if isinstance(instance, ProcessInstance):
                    instance.rewarm = rewarm
        self.streams = info.streams  # answers may come after responses (core/streamed.py)
        # How long a stream may wait between two responses: read once, not per request.
        self.stream_idle_s = worker_settings(config).run_timeout_s
        rules = RequestRules.from_config(config)
        # A decoupled model answers through its stream (gateway/core/decoupled.py): the batch
        # itself answers nothing.
        self.decoupled = config.model_transaction_policy.decoupled
        if self.decoupled:
            if not info.per_request:
                raise BackendUnavailable(
                    f"model '{config.name}': only Python models can be decoupled "
                    "(model_transaction_policy { decoupled: true })"
                )
            rules = dataclasses.replace(rules, outputs=())
        output_datatypes = {t.name: v2_datatype(t.data_type) for t in config.output}
        budget_ms = queue_budget(config, queue_budget_ms)
        self.scheduler: DirectScheduler | DynamicBatcher | SequenceBatcher
        if config.HasField("sequence_batching"):
            self.scheduler = SequenceBatcher(
                self.pool, rules, output_datatypes, self.stats, config, max_queue_size,
                per_request=info.per_request,
            )  # fmt: skip
        elif config.HasField("dynamic_batching") and config.max_batch_size > 0:
            self.scheduler = DynamicBatcher(
                self.pool, rules, output_datatypes, self.stats, config.dynamic_batching,
                config.max_batch_size, max_queue_size, budget_ms, instances[0].allowed_batch_sizes,
                adaptive_window=adaptive_window(config), per_request=info.per_request,
            )  # fmt: skip
        else:
            self.scheduler = DirectScheduler(
                self.pool, rules, output_datatypes, self.stats, max_queue_size, budget_ms,
                info.per_request,
            )  # fmt: skip

    @classmethod
    def plan(cls, model_dir: Path, version: int, config: mc.ModelConfig) -> LoadPlan:
        """What loading this version takes: its artifact and the instances to place
        (blocking: it may ask a probe process about the GPUs)."""
        config = mc.ModelConfig.FromString(config.SerializeToString())  # ours to complete
        platform = platform_of(config)
        info = platform_info(platform)
        artifact = artifact_path(model_dir, version, config, info.artifact)
        optional = [t.name for t in config.input if t.optional]
        if optional and not info.optional_inputs:
            raise BackendUnavailable(
                f"model '{config.name}': platform {platform} needs every input, "
                f"but the config marks {', '.join(optional)} optional"
            )
        slots = []
        for group, allowed in instance_devices(config, gpu_capable(config, platform, gpu_count())):
            in_worker = execution_mode(config, platform, allowed[0]) == "process"
            size = footprint.predict(
                config, platform, version_dir(model_dir, version), allowed[0], in_worker
            )
            slots.append(Slot(allowed, in_worker, size, group))
        return LoadPlan(config, platform, model_dir, artifact, version, slots)

    @classmethod
    def load(
        cls,
        plan: LoadPlan,
        devices: list[Device],
        max_queue_size: int,
        queue_budget_ms: float | None,  # None: shed only a growing backlog
        backend_nice: int = 0,
        spares: SpareWorkers | None = None,
        model_calls: str | None = None,
    ) -> ModelVersion:
        """Load one instance on each of `devices` (blocking: call from a worker thread).
        Backends run `backend_nice` steps below the gateway's priority (accel_base/cpu.py);
        workers come from `spares` where given, and call other models at `model_calls`
        (a Python model's socket: gateway/core/model_calls.py)."""
        config, platform, version = plan.config, plan.platform, plan.version
        settings = dataclasses.replace(
            worker_settings(config), nice=backend_nice, spares=spares, model_calls=model_calls
        )
        waits_inline = not platform_info(platform).per_request  # its runs may call models
        single_core = usable_cores() == 1
        instances: list[Any] = []
        try:
            for index, (device, slot) in enumerate(zip(devices, plan.slots, strict=True)):
                name = f"{config.name}-{version}-{index}"
                if slot.in_worker:
                    spawn = functools.partial(
                        spawn_worker, name, platform, plan.artifact, config, device, settings,
                        os.getpid(),
                    )  # fmt: skip
                    instance = ProcessInstance(
                        name, config.name, spawn, settings, single_core, waits_inline
                    )
                    specs = instance.loaded.inputs, instance.loaded.outputs
                    completed = instance.loaded.completed_config  # by the model's own code
                    if completed is not None and len(instances) == 0:
                        config.CopyFrom(completed)
                else:
                    make = functools.partial(backend_class(platform), plan.artifact, config, device)
                    instance = Instance.load(make, name, backend_nice)
                    specs = instance.backend.inputs(), instance.backend.outputs()
                instances.append(instance)
                if len(instances) == 1:
                    complete_config(config, *specs)
        except BaseException:
            for instance in instances:
                instance.close()
            raise
        kinds = sorted({type(i).__name__ for i in instances})
        log.info(
            "loaded model '%s' version %d (%d instance(s): %s)",
            config.name, version, len(instances), ", ".join(kinds),
        )  # fmt: skip
        try:
            samples = read_samples(config, plan.model_dir)  # checked against the completed config
            model = cls(
                config, version, instances, max_queue_size, queue_budget_ms, plan.model_dir.parent,
                samples,
            )  # fmt: skip
            # Each instance's group and device (its rate_limiter: scheduling/rate_limiter.py).
            model.places = [
                (slot.group, str(device)) for slot, device in zip(plan.slots, devices, strict=True)
            ]
            return model
        except BaseException:
            for instance in instances:
                instance.close()
            raise

    async def warm_up(self) -> None:
        """Before the version serves: its model_warmup samples on every instance (a failure
        fails the load), else one batch of the largest size (zeros, empty strings) so that
        what the backend allocates on its first run counts in its footprint (a failure
        there is only logged: the model may still serve)."""
        names = [t.name for t in self.config.output]
        instances = self.pool.instances
        try:
            if self.samples:
                await run_samples(self.name, instances, self.samples, names, self._per_request)
            elif self._warms_up:  # not a user's code, which zeros may upset (a Python model)
                feed = warm_up_inputs(self.config, instances[0].allowed_batch_sizes)
                try:
                    async with asyncio.timeout(ZEROS_TIMEOUT_S):
                        for instance in instances:
                            await instance.run(feed, names)
                except Exception as exc:  # measured without it
                    log.warning(
                        "model '%s': the warm-up batch failed (%s: %s); its footprint is "
                        "measured without it", self.name, type(exc).__name__, exc,
                    )  # fmt: skip
        finally:
            for instance in instances:
                # A warm-up batch says nothing of a request's run time, which decides
                # whether runs go inline (scheduling/instances.py): the first requests
                # measure it afresh.
                instance.recent_run_ns = None

    def attach(self) -> None:
        """Start watching worker processes (on the event loop, once loaded)."""
        for instance in self.pool.instances:
            instance.attach()

    @property
    def unavailable_reason(self) -> str | None:
        """Why the model cannot run now (every instance's worker down), or None."""
        reasons = [i.down_reason for i in self.pool.instances if i.down_reason]
        if len(reasons) < len(self.pool.instances):
            return None
        return self._relative("; ".join(reasons))

    async def infer(self, request: InferRequest) -> InferResponse:
        if self.decoupled and request.stream is None:
            raise InvalidArgument(
                f"model '{self.name}' is decoupled: its responses come over a gRPC stream "
                "(ModelStreamInfer), not as the answer to one call"
            )
        self.last_used = time.monotonic()
        try:
            if self.cache is not None:  # gateway/core/response_cache.py
                return await answer_cached(
                    self.cache, self.stats, self.generation, request, self.scheduler.infer
                )
            return await self.scheduler.infer(request)
        except Overloaded:  # our own words, and refusals must stay cheap
            raise
        except GatewayError as exc:  # may carry a backend's or a worker's own words
            exc.message = self._relative(exc.message)
            exc.args = (exc.message,)
            raise
        finally:
            if self.on_idle is not None and not self.scheduler.pending:
                self.on_idle()

    def _relative(self, message: str) -> str:
        return relative_to_repository(message, self._prefixes)

    def metadata(self, versions: list[int]) -> dict[str, Any]:
        """The V2 metadata, made once per set of ready versions (a front may ask it on
        every request); callers read it and never change it."""
        key = tuple(versions)
        if self._metadata is None or self._metadata[0] != key:
            self._metadata = (key, model_metadata(self.config, versions))
        return self._metadata[1]

    @property
    def pending(self) -> int:
        """Requests accepted by the scheduler and not yet answered."""
        return self.scheduler.pending

    @property
    def instances(self) -> list[Any]:
        return self.pool.instances

    async def close(self) -> None:
        """Stop the scheduler, then free the instances (on a worker thread)."""
        if isinstance(self.scheduler, DynamicBatcher | SequenceBatcher):
            await self.scheduler.close()
        for instance in self.pool.instances:
            instance.detach()
        self.pool.fail_waiters(Unavailable(f"model '{self.name}' was unloaded"))
        await asyncio.to_thread(self.pool.close)
        for instance in self.pool.instances:  # their resources are no longer needed
            if instance.limit is not None:
                instance.limit[0].unregister(instance.limit[1])
        if self.cache is not None:  # its answers' room (a reload's keys differ anyway)
            self.cache.drop(self.generation)
