"""The spans of one traced request, made after the fact from the timestamps the request
path takes anyway (time.perf_counter_ns), so a traced request holds no span open across
its awaits and an untraced one pays nothing here.

    infer {model}          the front's whole handling: decoded to answered (SpanKind.SERVER,
                           the caller's span as parent when it sent a W3C traceparent)
      queue                accepted by the model's scheduler until its batch started
      batch                one run of the model over the batch holding this request, shared
                           by every traced request in it: the child of the first, linked to
                           each of them
        instance run       the backend's own time, within the batch
      response             the scheduler's answer until the front has encoded the reply

Spans are the SDK's finished ReadableSpans, built whole and handed to the span processor
(the OTLP exporter's batching, or any other): the SDK's live spans (locks, bounded
attribute maps, a processor call at each start and end) cost about 80 us a traced
request, these about 5 (benchmarks/tracing.py). Imported only once something is traced:
this is where OpenTelemetry comes in.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.propagate import extract
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    get_current_span,
)

from gateway import __version__
from gateway.core.inference import InferRequest

log = logging.getLogger(__name__)

SCOPE = InstrumentationScope("accel_gateway", __version__)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)
_bits = random.getrandbits
MAX_TENSOR_ATTRIBUTES = 32  # at level TENSORS, the first inputs and outputs a span names


class Sink:
    """Where finished spans go: a span processor, and the resource they describe."""

    __slots__ = ("processor", "resource")

    def __init__(self, processor: SpanProcessor, resource: Any) -> None:
        self.processor = processor
        self.resource = resource


class RequestTrace:
    __slots__ = (
        "sink", "request_attributes", "name", "parent", "context", "offset", "started_ns",
        "tensors", "answered_ns", "spans", "ended",
    )  # fmt: skip

    def __init__(
        self,
        sink: Sink,
        request: InferRequest,
        protocol: str,
        started_ns: int,
        carrier: dict[str, str] | None,
        tensors: bool,
    ) -> None:
        self.sink = sink
        self.offset = time.time_ns() - time.perf_counter_ns()  # to the epoch's nanoseconds
        self.started_ns = started_ns
        self.tensors = tensors
        self.answered_ns = 0  # when the scheduler answered (0: it never did)
        self.spans: list[ReadableSpan] = []  # the children, handed over with the root
        self.ended = False
        parent = get_current_span(extract(carrier)).get_span_context() if carrier else None
        self.parent = parent if parent is not None and parent.is_valid else None
        trace_id = self.parent.trace_id if self.parent is not None else _bits(128) or 1
        state = self.parent.trace_state if self.parent is not None else None
        self.context = SpanContext(trace_id, _bits(64) or 1, False, _SAMPLED, state)
        self.name = f"infer {request.model_name}"
        self.request_attributes: dict[str, Any] = {
            "model.name": request.model_name,
            "model.version": request.model_version,
            "request.id": request.id,
            "rpc.system": protocol,
        }
        if tensors:  # bounded: a request may carry any number of inputs
            for tensor in request.inputs[:MAX_TENSOR_ATTRIBUTES]:
                self.request_attributes[f"input.{tensor.name[:64]}"] = (
                    f"{tensor.datatype}{list(tensor.shape)}"
                )
            self.request_attributes["input.count"] = len(request.inputs)

    def child(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: dict[str, Any] | None = None,
        links: Sequence[Link] = (),
        parent: SpanContext | None = None,
    ) -> SpanContext:
        """Record a finished child span (of the request's span, or of `parent`)."""
        root = self.context
        context = SpanContext(root.trace_id, _bits(64) or 1, False, _SAMPLED, root.trace_state)
        self.spans.append(
            ReadableSpan(
                name, context, parent or root, resource=self.sink.resource,
                attributes=attributes, links=links, kind=SpanKind.INTERNAL,
                instrumentation_scope=SCOPE, status=_UNSET,
                start_time=start_ns + self.offset, end_time=end_ns + self.offset,
            )
        )  # fmt: skip
        return context

    def finish(self, encoded_ns: int, response: Any = None, error: BaseException | None = None):
        """End the request's span (with its response span) once the front has its reply,
        and hand the request's spans to the processor. Tracing never fails a request: a
        failure here is logged, and the spans dropped."""
        if self.ended:
            return
        self.ended = True
        try:
            self._finish(encoded_ns, response, error)
        except Exception:
            log.exception("tracing: a request's spans could not be ended")

    def _finish(self, encoded_ns: int, response: Any, error: BaseException | None) -> None:
        attributes = self.request_attributes
        status = _UNSET
        if error is not None:
            status = Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:1024])
            attributes["error.type"] = type(error).__name__
        elif self.answered_ns:
            self.child("response", self.answered_ns, encoded_ns)
            if self.tensors and response is not None:
                for tensor in response.outputs[:MAX_TENSOR_ATTRIBUTES]:
                    attributes[f"output.{tensor.name}"] = f"{tensor.datatype}{list(tensor.shape)}"
        root = ReadableSpan(
            self.name, self.context, self.parent, resource=self.sink.resource,
            attributes=attributes, kind=SpanKind.SERVER, instrumentation_scope=SCOPE,
            status=status, start_time=self.started_ns + self.offset,
            end_time=encoded_ns + self.offset,
        )  # fmt: skip
        processor = self.sink.processor
        for span in self.spans:
            processor.on_end(span)
        processor.on_end(root)


def batch_spans(
    entries: Sequence[tuple[RequestTrace, int]],
    model: str,
    version: str,
    rows: int,
    padded_rows: int,
    started_ns: int,
    run_ns: int,
    ran_ns: int,
    done_ns: int,
) -> None:
    """Spans for one batch and the open traced requests it served, each with when the
    scheduler took it (tracer.batch_ran picks them). The batch span hangs under the first
    request's span and links to every one. A failure is logged, never raised into the
    batch."""
    try:
        first = entries[0][0]
        attributes = {
            "model.name": model, "model.version": version, "batch.size": rows,
            "batch.padded_size": padded_rows, "batch.requests": len(entries),
        }  # fmt: skip
        links = [Link(trace.context) for trace, _ in entries]
        batch = first.child("batch", started_ns, done_ns, attributes, links)
        run = {"model.name": model, "batch.size": rows}
        first.child("instance run", ran_ns - run_ns, ran_ns, run, parent=batch)
        queued = {"model.name": model, "model.version": version}
        for trace, accepted in entries:
            trace.child("queue", accepted, started_ns, queued)
            trace.answered_ns = done_ns
            # The version that served it: a request for "" (the latest) now names it (an
            # ensemble's steps are other models, and leave its version as asked).
            if trace.request_attributes["model.name"] == model:
                trace.request_attributes["model.version"] = version
    except Exception:
        log.exception("tracing: the spans of a batch of model '%s' were lost", model)
