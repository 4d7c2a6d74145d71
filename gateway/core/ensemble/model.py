"""A loaded ensemble: each request runs the steps of its DAG, each step a request to that
model through the model's own scheduler (so a batched member still batches), the arrays
of one step handed to the next as they are. Toward the repository and the core it has
the face of a ModelVersion, with no instances of its own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from accel_base.errors import GatewayError, Internal, InvalidArgument, NotFound, Unavailable
from accel_base.proto import model_config_pb2 as mc
from gateway.core.ensemble.plan import Step
from gateway.core.inference import InferRequest, InferResponse, RequestedOutput, Tensor
from gateway.core.model import model_metadata
from gateway.core.response_cache import ResponseCache, answer_cached, next_generation
from gateway.core.statistics import ModelStatistics
from gateway.core.validation import RequestRules, check_request

Resolve = Callable[[str, str], Awaitable[Any]]  # (model, version) -> its ready model


class EnsembleModel:
    instances: tuple = ()  # it runs nothing itself
    decoupled = False  # one response per request, from its last steps
    streams = False  # and none before it (gateway/core/streamed.py)

    def __init__(
        self,
        config: mc.ModelConfig,
        version: int,
        steps: list[Step],
        datatypes: dict[str, str],
        resolve: Resolve,
        lookup: Callable[[str, str], Any] | None = None,
    ) -> None:
        """`steps` in an order that runs (plan.plan_steps); `datatypes` of every tensor
        (plan.check_members); `resolve` gives a member's ready model, `lookup` the same
        without a coroutine, or raises why not (for readiness)."""
        self.config = config
        self.name = config.name
        self.version = version
        self.steps = steps
        self.resolve = resolve
        self.lookup = lookup
        self.footprints: list[Any] = []
        self.stats = ModelStatistics(config.name, str(version))
        self.last_used = time.monotonic()
        self._rules = RequestRules.from_config(config)
        self._datatypes = datatypes
        self._pending = 0
        self.cache: ResponseCache | None = None  # set by the repository (response_cache)
        self.generation = next_generation()  # this load's, in cache keys
        # Whether its answer is its request's alone (no member keeps state or draws a
        # variant): set by load_ensemble; only then may it cache.
        self.answers_by_request = True

    @property
    def pending(self) -> int:
        return self._pending

    @property
    def unavailable_reason(self) -> str | None:
        """Why the ensemble is not ready, or None: it is ready when its members are."""
        if self.lookup is None:
            return None
        for step in self.steps:
            try:
                reason = self.lookup(step.model, step.version).unavailable_reason
            except GatewayError as exc:
                reason = exc.message
            if reason:
                return f"{step.label} is not ready: {reason}"
        return None

    def infer(self, request: InferRequest) -> Awaitable[InferResponse]:
        """The answer to `request`: from the response cache where the config enables it
        (the ensemble's own, before any member runs), else by running its steps."""
        if self.cache is not None:
            self.last_used = time.monotonic()  # a hit is use too (on-demand eviction)
            return answer_cached(self.cache, self.stats, self.generations(), request, self._infer)
        return self._infer(request)

    def generations(self) -> tuple:
        """This load's number and its members' as they are now: a member reloaded makes
        keys of its own, so no answer of its last load is served."""
        found: list[Any] = [self.generation]
        for step in self.steps:
            try:
                member = self.lookup(step.model, step.version) if self.lookup else None
            except GatewayError:  # not ready: the run says so
                member = None
            inner = member.generations() if isinstance(member, EnsembleModel) else None
            found.append(inner or getattr(member, "generation", 0))
        return tuple(found)

    async def _infer(self, request: InferRequest) -> InferResponse:
        start = time.perf_counter_ns()
        self.last_used = time.monotonic()
        self._pending += 1
        try:
            try:  # the ensemble's own inputs are checked as any model's are
                feed, output_names, _ = check_request(request, self._rules)
            except GatewayError:
                self.stats.record_failure(time.perf_counter_ns() - start, "REJECTED")
                raise
            try:
                tensors = await self._run(request, dict(feed))
            except BaseException:
                self.stats.record_failure(time.perf_counter_ns() - start, "OTHER")
                raise
        finally:
            self._pending -= 1
        outputs = [Tensor(name, self._datatypes[name], tensors[name]) for name in output_names]
        self.stats.record_success(time.perf_counter_ns() - start, 0)
        return InferResponse(self.name, str(self.version), request.id, {}, outputs)

    async def _run(self, request: InferRequest, tensors: dict[str, Any]) -> dict[str, Any]:
        """Every step, each as soon as the tensors it reads exist (steps that become ready
        together run together)."""
        left = list(self.steps)
        while left:
            ready = [s for s in left if all(t in tensors for t in s.inputs.values())]
            if not ready:  # an optional ensemble input the request left out
                coming = {t for s in left for t in s.outputs.values()}
                step, absent = next(
                    (s, t) for s in left for t in s.inputs.values()
                    if t not in tensors and t not in coming
                )  # fmt: skip
                raise InvalidArgument(
                    f"ensemble '{self.name}': {step.label} reads {absent}, which this "
                    "request did not give"
                )
            left = [s for s in left if s not in ready]
            if len(ready) == 1:
                results = [await self._step(ready[0], request, tensors)]
            else:
                runs = [self._step(step, request, tensors) for step in ready]
                results = await asyncio.gather(*runs, return_exceptions=True)
                for result in results:
                    if isinstance(result, BaseException):
                        raise result
            for written in results:
                tensors.update(written)  # type: ignore[arg-type]
        return tensors

    async def _step(
        self, step: Step, request: InferRequest, tensors: dict[str, Any]
    ) -> dict[str, Any]:
        inputs = [
            Tensor(name, self._datatypes[tensor], tensors[tensor])
            for name, tensor in step.inputs.items()
        ]
        call = InferRequest(
            model_name=step.model,
            model_version=step.version,
            id=request.id,
            parameters=request.parameters,
            inputs=inputs,
            outputs=[RequestedOutput(name, {}) for name in step.outputs],
            client_gone=request.client_gone,
            deadline=request.deadline,
            trace=request.trace,  # each step's queue and batch join the caller's trace
        )
        try:
            model = await self.resolve(step.model, step.version)
            response = await model.infer(call)
        except NotFound as exc:  # the ensemble exists: its member is not there (503)
            raise Unavailable(
                f"ensemble '{self.name}' {step.label} failed: {exc.message}"
            ) from None
        except GatewayError as exc:
            failed = type(exc)(f"ensemble '{self.name}' {step.label} failed: {exc.message}")
            raise failed from None
        except Exception as exc:  # a member's own failure, said with the step's name
            raise Internal(
                f"ensemble '{self.name}' {step.label} failed: {type(exc).__name__}: {exc}"
            ) from exc
        written = {}
        for output in response.outputs:
            target = step.outputs.get(output.name)
            if target is not None:
                written[target] = output.data
        missing = [name for name in step.outputs if step.outputs[name] not in written]
        if missing:
            raise Internal(f"ensemble '{self.name}' {step.label} gave no output {missing}")
        return written

    def metadata(self, versions: list[int]) -> dict[str, Any]:
        return model_metadata(self.config, versions)

    async def close(self) -> None:
        if self.cache is not None:  # its answers' room (a reload's keys differ anyway)
            self.cache.drop_where(lambda key: key[2][0] == self.generation)
