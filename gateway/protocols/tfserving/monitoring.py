"""TF Serving's request metrics, for `--monitoring_config_file` with
`prometheus_config { enable: true }`: its Prometheus page on the REST port writes them
as TF Serving does, and the gateway's own metrics follow on the same page.

- `:tensorflow:serving:request_count{model_name,status}`: every gRPC Predict, Classify
  and Regress and every REST `/v1/...` request, by its status code's name;
- `:tensorflow:serving:request_latency{model_name,API,entrypoint}`: the wall time in
  microseconds of those that succeeded; API is `Predict`, `Classify` or `Regress` over
  gRPC (entrypoint `GRPC`), the URL's verb or "" over REST (entrypoint `REST`), in TF
  Serving's buckets (10 µs growing by 1.8, 33 of them, then +Inf).

A client names the model, so only a served model's name is kept apart (one the fronts
know, or once a request for it has succeeded), at most MAX_MODELS of them; requests for
other names are counted under OTHER_MODELS: a page must not grow without bound, nor
made-up names push the real models off it.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import text_format

from accel_base.proto.tfserving.tensorflow_serving.config import monitoring_config_pb2

DEFAULT_PATH = "/monitoring/prometheus/metrics"  # TF Serving's
BUCKETS = tuple(10 * 1.8**i for i in range(33))  # µs: each bucket counts values below it
MAX_MODELS = 1000
OTHER_MODELS = "(other models)"
_COUNT = ":tensorflow:serving:request_count"
_LATENCY = ":tensorflow:serving:request_latency"


def read_monitoring_config(path: Path) -> str | None:
    """The path to serve the Prometheus page at (None: not enabled), from a text
    MonitoringConfig; ValueError naming the file when it cannot be read."""
    try:
        text = path.read_text()
        config = text_format.Parse(text, monitoring_config_pb2.MonitoringConfig())
    except (OSError, UnicodeDecodeError, text_format.ParseError) as exc:
        raise ValueError(f"--monitoring_config_file {path}: {exc}") from None
    prometheus = config.prometheus_config
    if not prometheus.enable:
        return None
    page = prometheus.path or DEFAULT_PATH
    if not page.startswith("/"):
        raise ValueError(f"--monitoring_config_file {path}: path {page!r} must start with '/'")
    return page


@dataclass
class _Latency:
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0


def _number(value: float) -> str:
    return f"{value:.6g}"  # (as TF Serving writes a double: six significant digits)


def _labels(**labels: str) -> str:
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
               for value in labels.values())  # fmt: skip
    return ",".join(f'{name}="{value}"' for name, value in zip(labels, escaped, strict=True))


class RequestMetrics:
    """The counts and latencies of TF Serving's requests, and their page."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.latencies: dict[tuple[str, str, str], _Latency] = {}
        self._models: set[str] = set()

    def _model(self, name: str, served: bool) -> str:
        if name not in self._models:
            if not served or len(self._models) >= MAX_MODELS:
                return OTHER_MODELS
            self._models.add(name)
        return name

    def record(self, model: str, status: str, api: str = "", entrypoint: str = "",
               micros: float | None = None, known: bool = False) -> None:  # fmt: skip
        """One request: its status code's name (`OK`, `NOT_FOUND`, ...) and, when it
        succeeded, how long it took; `known`: the model is one the fronts serve."""
        model = self._model(model, known or status == "OK")
        self.counts[(model, status)] = self.counts.get((model, status), 0) + 1
        if micros is not None:
            latency = self.latencies.setdefault((model, api, entrypoint), _Latency())
            latency.counts[bisect.bisect_right(BUCKETS, micros)] += 1
            latency.total += micros

    def render(self) -> str:
        """The page's TF Serving part, in its order (by metric name, then as recorded)."""
        lines = [f"# TYPE {_COUNT} counter"]
        for (model, status), count in self.counts.items():
            lines.append(f"{_COUNT}{{{_labels(model_name=model, status=status)}}} {count}")
        lines.append(f"# TYPE {_LATENCY} histogram")
        for (model, api, entrypoint), latency in self.latencies.items():
            labels = _labels(model_name=model, API=api, entrypoint=entrypoint)
            seen = 0
            for limit, count in zip((*map(_number, BUCKETS), "+Inf"), latency.counts,
                                    strict=True):  # fmt: skip
                seen += count
                lines.append(f'{_LATENCY}_bucket{{{labels},le="{limit}"}} {seen}')
            lines.append(f"{_LATENCY}_sum{{{labels}}} {_number(latency.total)}")
            lines.append(f"{_LATENCY}_count{{{labels}}} {seen}")
        return "\n".join(lines) + "\n"
