"""Prometheus metrics with Triton's names and labels, read from the statistics at scrape time.

Reading the counters when Prometheus asks keeps the request path free of metric
updates, and makes the metrics agree with the statistics extension by construction.
The text is rendered here rather than by prometheus_client because Triton's counters
carry no `_total` suffix and dashboards query them by those exact names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.core.copies import statistics_of
from gateway.core.placement.metrics import memory_families
from gateway.core.repository import ModelRepository
from gateway.core.response_cache import ResponseCache
from gateway.core.routing.metrics import routing_families
from gateway.core.scheduling.process_instance import ProcessInstance
from gateway.operation.gpu import GpuReading, read_gpus
from gateway.operation.histogram import render_histogram
from gateway.operation.torchserve_metrics import torchserve_families

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_COUNTERS = (
    ("nv_inference_request_success", "Number of successful inference requests", "success_count"),
    (
        "nv_inference_count",
        "Number of inferences performed (batch rows counted one by one)",
        "inference_count",
    ),
    (
        "nv_inference_exec_count",
        "Number of model executions (batches) performed",
        "execution_count",
    ),
    (
        "nv_inference_request_duration_us",
        "Cumulative inference request duration in microseconds",
        "request_us",
    ),
    (
        "nv_inference_queue_duration_us",
        "Cumulative time requests spent queued, in microseconds",
        "queue_us",
    ),
    (
        "nv_inference_compute_input_duration_us",
        "Cumulative compute input duration in microseconds",
        "compute_input_us",
    ),
    (
        "nv_inference_compute_infer_duration_us",
        "Cumulative compute inference duration in microseconds",
        "compute_infer_us",
    ),
    (
        "nv_inference_compute_output_duration_us",
        "Cumulative compute output duration in microseconds",
        "compute_output_us",
    ),
)
# Of a model that answers from the response cache: (name, help, statistics field, scale).
_CACHE_COUNTERS = (
    ("nv_cache_num_hits_per_model", "Requests answered from the response cache",
     "cache_hit", "count"),
    ("nv_cache_num_misses_per_model", "Response cache lookups that missed",
     "cache_miss", "count"),
    ("nv_cache_hit_duration_per_model",
     "Cumulative time of cache hits (lookup and answer), in microseconds", "cache_hit", "us"),
    ("nv_cache_miss_duration_per_model",
     "Cumulative time of cache misses (lookup and insert), in microseconds", "cache_miss", "us"),
)  # fmt: skip
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


def _labels(labels: dict[str, str]) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{escape(value)}"' for key, value in labels.items()) + "}"


def family(name: str, documentation: str, kind: str, samples: list[tuple[dict, int]]) -> str:
    lines = [f"# HELP {name} {documentation}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{_labels(labels)} {value}" for labels, value in samples]
    return "\n".join(lines)


# Upper bounds of the batch-size histogram's buckets (rows per execution).
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _batch_size_histogram(models) -> str:
    lines = [
        "# HELP accel_gateway_batch_size Rows per backend execution",
        "# TYPE accel_gateway_batch_size histogram",
    ]
    for model in models:
        labels = {"model": model.name, "version": str(model.version)}
        sizes = {size: stats.compute_infer.count for size, stats in model.stats.batches.items()}
        for bound in BATCH_SIZE_BUCKETS:
            count = sum(n for size, n in sizes.items() if size <= bound)
            lines.append(
                f"accel_gateway_batch_size_bucket{_labels({**labels, 'le': str(bound)})} {count}"
            )
        total = sum(sizes.values())
        lines.append(f"accel_gateway_batch_size_bucket{_labels({**labels, 'le': '+Inf'})} {total}")
        lines.append(f"accel_gateway_batch_size_count{_labels(labels)} {total}")
        rows = sum(size * n for size, n in sizes.items())
        lines.append(f"accel_gateway_batch_size_sum{_labels(labels)} {rows}")
    return "\n".join(lines)


def _worker_families(models) -> list[str]:
    """Per worker-process instance: whether its worker runs, and how often one ended unasked."""
    up, ended = [], []
    for model in models:
        for instance in model.instances:
            if isinstance(instance, ProcessInstance):
                labels = {"model": model.name, "version": str(model.version),
                          "instance": instance.name}  # fmt: skip
                up.append((labels, int(instance.worker is not None)))
                ended.append((labels, instance.deaths))
    if not up:
        return []
    return [
        family("accel_gateway_worker_up", "Whether the instance's worker process runs",
                "gauge", up),
        family("accel_gateway_worker_deaths", "Worker processes that ended unasked (crash, "
                "kill, run timeout); each is restarted unless the instance retired",
                "counter", ended),
    ]  # fmt: skip


def _cache_families(cache: ResponseCache | None) -> list[str]:
    """The response cache as a whole (Triton's names), where the server has one."""
    if cache is None:
        return []
    return [
        family(name, documentation, kind, [({}, value)])
        for name, documentation, kind, value in (
            ("nv_cache_num_entries", "Answers the response cache holds", "gauge", len(cache)),
            ("nv_cache_num_lookups", "Response cache lookups", "counter", cache.lookups),
            ("nv_cache_num_hits", "Response cache hits", "counter", cache.hits),
            ("nv_cache_num_misses", "Response cache misses", "counter", cache.misses),
            ("nv_cache_num_evictions", "Answers evicted to make room", "counter", cache.evictions),
            ("nv_cache_util", "Share of the response cache's bytes in use", "gauge",
             round(cache.used_bytes / cache.size_bytes, 6) if cache.size_bytes else 0.0),
        )
    ]  # fmt: skip


def _gpu_families(readings: list[GpuReading]) -> list[str]:
    if not readings:
        return []
    families = []
    for name, documentation, value in (
        ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", lambda r: r.utilization),
        ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", lambda r: r.memory_total_bytes),
        ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", lambda r: r.memory_used_bytes),
    ):
        samples = [({"gpu_uuid": r.uuid}, value(r)) for r in readings]
        families.append(family(name, documentation, "gauge", samples))
    return families


def counter_families(models: list[Any]) -> list[str]:
    """The request counters, failures, requests pending and batch sizes of these model
    versions (anything with a name, version, stats and pending: a ModelVersion, or a
    Ray deployment's model summed over its replicas)."""
    families = []
    for name, documentation, key in _COUNTERS:
        samples = []
        for model in models:
            stats = model.stats
            values = {
                "success_count": stats.success.count,
                "inference_count": stats.inference_count,
                "execution_count": stats.execution_count,
                "request_us": (stats.success.ns + stats.fail.ns) // 1000,
                "queue_us": stats.queue.ns // 1000,
                "compute_input_us": stats.compute_input.ns // 1000,
                "compute_infer_us": stats.compute_infer.ns // 1000,
                "compute_output_us": stats.compute_output.ns // 1000,
            }
            samples.append(({"model": model.name, "version": str(model.version)}, values[key]))
        families.append(family(name, documentation, "counter", samples))
    failures, pending = [], []
    for model in models:
        labels = {"model": model.name, "version": str(model.version)}
        for reason in FAILURE_REASONS:
            count = model.stats.failure_reasons.get(reason, 0)
            failures.append(({**labels, "reason": reason}, count))
        pending.append((labels, model.pending))
    families.append(
        family(
            "nv_inference_request_failure",
            "Number of failed inference requests",
            "counter",
            failures,
        )
    )
    families.append(
        family(
            "nv_inference_pending_request_count",
            "Requests accepted by the scheduler and not yet answered",
            "gauge",
            pending,
        )
    )
    cached = [m for m in models if getattr(m, "cache", None) is not None]
    for name, documentation, field, unit in _CACHE_COUNTERS if cached else ():
        samples = []
        for model in cached:
            duration = getattr(model.stats, field)
            value = duration.count if unit == "count" else duration.ns // 1000
            samples.append(({"model": model.name, "version": str(model.version)}, value))
        families.append(family(name, documentation, "counter", samples))
    families.append(_batch_size_histogram(models))
    families.append(
        render_histogram(
            "accel_gateway_request_duration_seconds",
            "Seconds from a request's arrival at the model to its answer, failures included",
            [({"model": m.name, "version": str(m.version)}, m.stats.duration_histogram)
             for m in models],
            _labels,
        )
    )  # fmt: skip
    return families


def render(
    repository: ModelRepository,
    read_gpus: Callable[[], list[GpuReading]] = read_gpus,
    fronts: Any = None,
    names: frozenset[str] = frozenset(),
) -> str:
    """The Prometheus text exposition of every ready model version, and of the GPUs;
    with `names`, only those families (TorchServe's `/metrics?name[]=...`)."""
    models = repository.ready_models()
    counted = [_Summed(m) if getattr(m, "copy_stats", None) else m for m in models]
    families = counter_families(counted)
    families += _worker_families(models)
    families += memory_families(repository.memory, models, family, _labels)
    families += routing_families(models, family, _labels)
    families += _gpu_families(read_gpus())
    families += _cache_families(getattr(repository, "response_cache", None))
    families += torchserve_families(counted, family)
    if fronts is not None:
        families += _front_families(fronts)
    if names:
        families = [f for f in families if f.split(" ", 3)[2] in names]
    return "\n".join(families) + "\n"


class _Summed:
    """A model version whose `stats` are summed over its copies (gateway/core/copies.py)."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self.stats = statistics_of(model)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def _front_families(fronts: Any) -> list[str]:
    """Front processes (gateway/front_processes/supervisor.py): what each handed over, restarts."""
    requests = [({"front": str(link.index)}, fronts.requests(link)) for link in fronts.links]
    bundles = [({"front": str(link.index)}, link.bundles) for link in fronts.links]
    bundled = [({"front": str(link.index)}, link.bundled) for link in fronts.links]
    return [
        family(
            "accel_gateway_front_requests",
            "Inference requests each front process served, with its copies or through the host",
            "counter",
            requests,
        ),
        family(
            "accel_gateway_front_bundles",
            "Bundles of a front's requests for one batching model, each run as one request",
            "counter",
            bundles,
        ),
        family(
            "accel_gateway_front_bundled_requests",
            "Requests that a front's bundles carried (counted in front_requests too)",
            "counter",
            bundled,
        ),
        family(
            "accel_gateway_front_restarts",
            "Front processes started again after one exited",
            "counter",
            [({}, fronts.restarts())],
        ),
    ]


def create_metrics_app(repository: ModelRepository, fronts: Any = None):
    """A minimal ASGI app serving GET /metrics (with `fronts`, a FrontSupervisor, their
    counters too)."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    async def metrics(request) -> Response:
        names = frozenset(request.query_params.getlist("name[]"))
        text = render(repository, fronts=fronts, names=names)
        return PlainTextResponse(text, media_type=CONTENT_TYPE)

    return Starlette(routes=[Route("/metrics", metrics)])
