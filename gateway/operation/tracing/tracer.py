"""The server's tracing: its settings, the span processor its spans go to (the OTLP/HTTP
exporter's, made off the event loop at start or when a change turns tracing on), and
what the fronts and schedulers call.

Where spans go: `--trace-config opentelemetry,url=...` when given, else what
OpenTelemetry's environment variables say (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
OTEL_EXPORTER_OTLP_ENDPOINT, their headers and timeouts; OTEL_SERVICE_NAME and
OTEL_RESOURCE_ATTRIBUTES for the resource; OTEL_BSP_* for the batching), else
http://localhost:4318/v1/traces. Spans leave in batches from a bounded queue (a full one
drops spans, never delays a request), encoded and sent on the event loop (export.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gateway.core.inference import InferRequest
from gateway.operation.tracing.settings import TraceSettings

log = logging.getLogger(__name__)

SERVICE_NAME = "accel-gateway"
TRACE_HEADERS = ("traceparent", "tracestate")
R = TypeVar("R")
E = TypeVar("E")


@dataclass
class ExporterConfig:
    """The `opentelemetry,...` part of --trace-config."""

    url: str | None = None  # None: OpenTelemetry's environment variables decide
    resource: dict[str, str] = field(default_factory=dict)
    batch: dict[str, int] = field(default_factory=dict)  # export.Batching's fields


class Tracing:
    def __init__(
        self,
        settings: TraceSettings | None = None,
        exporter: ExporterConfig | None = None,
        processor: Any = None,
        resource: Any = None,
    ) -> None:
        """`processor`: an OpenTelemetry SDK SpanProcessor to hand finished spans to,
        instead of the OTLP exporter's (a program that embeds the gateway, or a test with
        an in-memory exporter); it gets on_end for each finished span, never on_start.
        `resource`: what its spans describe."""
        self.settings = settings or TraceSettings()
        self.exporter = exporter or ExporterConfig()
        self._owned = processor is None  # shut down here only if made here
        self._preparing = threading.Lock()
        self._sink: Any = None
        if processor is not None:
            from gateway.operation.tracing.spans import Sink

            self._sink = Sink(processor, resource or _resource(self.exporter))

    def __getstate__(self) -> dict[str, Any]:
        """A front process gets the settings (it traces nothing itself), never the
        processor, which holds its queue and its connection."""
        return {"settings": self.settings, "exporter": self.exporter}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["settings"], state["exporter"])

    @property
    def ready(self) -> bool:
        return self._sink is not None

    def prepare(self) -> None:
        """Make the exporter and its batching (slow: imports, and resource detection);
        off the event loop, before anything is traced. Raises what the SDK says of a bad
        setting (ValueError), so that a server or a settings change can refuse it."""
        with self._preparing:  # two changes at once make one exporter
            if self._sink is None:
                from gateway.operation.tracing.spans import Sink

                # Their warnings come per span or per request (a full queue drops each span
                # with a line; a malformed tracestate warns): errors only.
                for name in ("opentelemetry.sdk._shared_internal", "opentelemetry.trace"):
                    logging.getLogger(name).setLevel(logging.ERROR)
                self._sink = Sink(_otlp_export(self.exporter), _resource(self.exporter))

    def start(
        self,
        request: InferRequest,
        protocol: str,
        started_ns: int,
        header: Callable[[str], str | None] | None,
    ) -> Any:
        """A RequestTrace for `request` (also set as request.trace) when the settings
        sample it, else None. `header` looks up the caller's traceparent. Tracing never
        fails a request: a trace that cannot start is logged, and the request goes on."""
        model = request.model_name
        sink = self._sink
        if sink is None or not self.settings.sample(model):
            return None
        try:
            from gateway.operation.tracing.spans import RequestTrace

            carrier = None
            if header is not None:
                carrier = {name: value for name in TRACE_HEADERS if (value := header(name))}
            trace = RequestTrace(
                sink, request, protocol, started_ns, carrier, self.settings.tensors(model)
            )
        except Exception:
            log.exception("tracing: a trace of model '%s' could not start", model)
            return None
        request.trace = trace
        return trace

    async def close(self) -> None:
        """Send what is still queued (bounded by the export timeout), on the loop the
        spans ended on; a processor given to the constructor is its owner's to stop."""
        if self._owned and self._sink is not None:
            started = time.monotonic()
            try:
                await self._sink.processor.close()
            except Exception:  # the server stops all the same
                log.exception("tracing: the exporter did not shut down cleanly")
            log.debug("tracing shut down in %.3f s", time.monotonic() - started)


async def traced(trace: Any, answer: Awaitable[R], encode: Callable[[R], E]) -> tuple[R, E]:
    """Await a traced request's answer and encode it; its trace ends with the encoding
    (or with the failure)."""
    try:
        response = await answer
        encoded = encode(response)
    except BaseException as exc:
        trace.finish(time.perf_counter_ns(), error=exc)
        raise
    trace.finish(time.perf_counter_ns(), response)
    return response, encoded


def batch_ran(
    entries: Iterable[tuple[Any, int]],
    model: str,
    version: str,
    rows: int,
    padded_rows: int,
    started_ns: int,
    run_ns: int,
    ran_ns: int,
    done_ns: int,
) -> None:
    """What a scheduler calls after a batch ran: `entries` are its requests'
    (request.trace, when the scheduler took it). Untraced requests are left out, and so
    are those that ended meanwhile (their callers went away: their spans are handed
    over); with none left, nothing happens."""
    live = [
        (trace, accepted) for trace, accepted in entries if trace is not None and not trace.ended
    ]
    if live:
        from gateway.operation.tracing.spans import batch_spans

        batch_spans(live, model, version, rows, padded_rows, started_ns, run_ns, ran_ns, done_ns)


def _resource(config: ExporterConfig) -> Any:
    """OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the gateway's own
    defaults; --trace-config's resource wins over both."""
    from opentelemetry.sdk.resources import Resource

    from gateway import __version__

    detected = Resource.create(config.resource)
    resource = Resource({"service.version": __version__}).merge(detected)
    if str(detected.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    return resource


def _otlp_export(config: ExporterConfig) -> Any:
    from gateway.operation.tracing.export import Batching, SpanExport
    from gateway.operation.tracing.otlp_http import Destination

    destination = Destination.from_environment(config.url)
    export = SpanExport(destination, Batching.resolve(config.batch))
    log.info("tracing: spans go over OTLP/HTTP to %s", destination.url)
    proxies = [name for name in os.environ if name.lower() in ("http_proxy", "https_proxy")]
    if proxies:
        log.warning("tracing: spans go to %s directly; %s is not used for them",
                    destination.url, " and ".join(proxies))  # fmt: skip
    return export


def parse_trace_config(values: list[str]) -> tuple[TraceSettings, ExporterConfig]:
    """Triton's --trace-config: `SETTING=VALUE` for level, rate, count, mode and
    log-frequency, `opentelemetry,SETTING=VALUE` for url, resource and the span batching's
    bsp_max_queue_size, bsp_schedule_delay and bsp_max_export_batch_size (export.Batching
    checks them together when tracing starts).
    ValueError saying what is wrong."""
    levels: list[str] = []
    numbers = {"rate": 1000, "count": -1, "log_frequency": 0}
    exporter = ExporterConfig()
    batch_keys = {
        "bsp_max_queue_size": "max_queue_size",
        "bsp_schedule_delay": "schedule_delay_millis",
        "bsp_max_export_batch_size": "max_export_batch_size",
    }
    for value in values:
        mode, comma, rest = value.partition(",")
        if not comma:
            mode, rest = "", value
        key, equals, setting = rest.partition("=")
        key = key.strip().replace("-", "_")
        if not equals or not key:
            raise ValueError(f"--trace-config '{value}' is not [MODE,]SETTING=VALUE")
        if mode == "triton":
            raise ValueError(
                "--trace-config triton,... writes Triton's trace file, which this server "
                "does not: it exports OpenTelemetry spans (--trace-config opentelemetry,url=...)"
            )
        if mode not in ("", "opentelemetry"):
            raise ValueError(f"--trace-config mode '{mode}' is not opentelemetry")
        if mode == "opentelemetry":
            if key == "url":
                exporter.url = setting if "://" in setting else f"http://{setting}"
            elif key == "resource":
                name, has, attribute = setting.partition("=")
                if not has or not name:
                    raise ValueError(f"--trace-config {value}: a resource is KEY=VALUE")
                exporter.resource[name] = attribute
            elif key in batch_keys:
                exporter.batch[batch_keys[key]] = _positive(value, setting)
            else:
                raise ValueError(
                    f"--trace-config {value}: opentelemetry takes url, resource, "
                    f"{', '.join(batch_keys)}"
                )
        elif key == "level":
            levels.append(setting)
        elif key in numbers:
            try:
                numbers[key] = int(setting)
            except ValueError:
                raise ValueError(f"--trace-config {value}: {key} must be an integer") from None
        elif key == "mode":
            if setting != "opentelemetry":
                raise ValueError(f"--trace-config mode={setting}: only opentelemetry is served")
        else:
            raise ValueError(
                f"--trace-config {value}: the settings are level, rate, count, mode, "
                "log-frequency, and opentelemetry,url/resource/bsp_*"
            )
    try:
        settings = TraceSettings(
            tuple(levels) or ("OFF",), numbers["rate"], numbers["count"], numbers["log_frequency"]
        )
    except Exception as exc:  # InvalidArgument: the same words fit the command line
        raise ValueError(f"--trace-config: {exc}") from None
    return settings, exporter


def _positive(value: str, setting: str) -> int:
    try:
        number = int(setting)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"--trace-config {value}: must be a positive integer")
    return number
