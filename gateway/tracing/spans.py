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

Imported only once something is traced: this is where OpenTelemetry comes in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.propagate import extract
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from gateway.inference import InferRequest

log = logging.getLogger(__name__)


def _clock_offset() -> int:
    """Nanoseconds from perf_counter_ns to the epoch time OpenTelemetry wants."""
    return time.time_ns() - time.perf_counter_ns()


class RequestTrace:
    __slots__ = ("tracer", "span", "context", "offset", "tensors", "answered_ns", "ended")

    def __init__(
        self,
        tracer: trace.Tracer,
        request: InferRequest,
        protocol: str,
        started_ns: int,
        carrier: dict[str, str] | None,
        tensors: bool,
    ) -> None:
        self.tracer = tracer
        self.offset = _clock_offset()
        self.tensors = tensors
        self.answered_ns = 0  # when the scheduler answered (0: it never did)
        self.ended = False
        parent = extract(carrier) if carrier else None
        attributes: dict[str, Any] = {
            "model.name": request.model_name,
            "model.version": request.model_version,
            "request.id": request.id,
            "rpc.system": protocol,
        }
        if tensors:
            for tensor in request.inputs:
                attributes[f"input.{tensor.name}"] = f"{tensor.datatype}{list(tensor.shape)}"
        self.span = tracer.start_span(
            f"infer {request.model_name}", context=parent, kind=SpanKind.SERVER,
            attributes=attributes, start_time=started_ns + self.offset,
        )  # fmt: skip
        self.context = trace.set_span_in_context(self.span)

    def child(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: dict[str, Any] | None = None,
        links: Sequence[Link] = (),
        parent: Any = None,
    ) -> trace.Span:
        span = self.tracer.start_span(
            name, context=parent or self.context, attributes=attributes, links=links,
            start_time=start_ns + self.offset,
        )  # fmt: skip
        span.end(end_time=end_ns + self.offset)
        return span

    def queued(self, model: str, version: str, accepted_ns: int, started_ns: int) -> None:
        self.child(
            "queue", accepted_ns, started_ns, {"model.name": model, "model.version": version}
        )

    def finish(self, encoded_ns: int, response: Any = None, error: BaseException | None = None):
        """End the request's span (and its response span) once the front has its reply.
        Tracing never fails a request: a failure here is logged, and the span dropped."""
        try:
            self._finish(encoded_ns, response, error)
        except Exception:
            log.exception("tracing: a request's spans could not be ended")

    def _finish(self, encoded_ns: int, response: Any, error: BaseException | None) -> None:
        if self.ended:
            return
        self.ended = True
        end = encoded_ns + self.offset
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            self.span.set_attribute("error.type", type(error).__name__)
        elif self.answered_ns:
            self.child("response", self.answered_ns, encoded_ns)
            if self.tensors and response is not None:
                for tensor in response.outputs:
                    self.span.set_attribute(
                        f"output.{tensor.name}", f"{tensor.datatype}{list(tensor.shape)}"
                    )
        self.span.end(end_time=end)

    @staticmethod
    def batch_ran(
        traces: Sequence[RequestTrace],
        accepted_ns: Sequence[int],
        model: str,
        version: str,
        rows: int,
        padded_rows: int,
        started_ns: int,
        run_ns: int,
        ran_ns: int,
        done_ns: int,
    ) -> None:
        """Spans for one batch and the traced requests it served (`accepted_ns`: when the
        scheduler took each of them). The batch span hangs under the first request's span and
        links to every one. A failure is logged, never raised into the batch."""
        try:
            RequestTrace._batch_ran(
                traces, accepted_ns, model, version, rows, padded_rows, started_ns, run_ns,
                ran_ns, done_ns,
            )  # fmt: skip
        except Exception:
            log.exception("tracing: the spans of a batch of model '%s' were lost", model)

    @staticmethod
    def _batch_ran(
        traces: Sequence[RequestTrace],
        accepted_ns: Sequence[int],
        model: str,
        version: str,
        rows: int,
        padded_rows: int,
        started_ns: int,
        run_ns: int,
        ran_ns: int,
        done_ns: int,
    ) -> None:
        first = traces[0]
        attributes = {
            "model.name": model, "model.version": version, "batch.size": rows,
            "batch.padded_size": padded_rows, "batch.requests": len(traces),
        }  # fmt: skip
        links = [Link(t.span.get_span_context()) for t in traces]
        batch = first.child("batch", started_ns, done_ns, attributes, links)
        first.child(
            "instance run", ran_ns - run_ns, ran_ns, {"model.name": model, "batch.size": rows},
            parent=trace.set_span_in_context(batch),
        )  # fmt: skip
        for request_trace, accepted in zip(traces, accepted_ns, strict=True):
            request_trace.queued(model, version, accepted, started_ns)
            request_trace.answered_ns = done_ns
