"""TF Serving's request metrics and its Prometheus page (monitoring.py)."""

from __future__ import annotations

import pytest

from gateway.protocols.tfserving import monitoring
from gateway.protocols.tfserving.monitoring import RequestMetrics, read_monitoring_config


def test_counts_and_latencies_as_tf_serving_writes_them() -> None:
    metrics = RequestMetrics()
    metrics.record("m", "OK", "Predict", "GRPC", 10)  # a value at a limit: the next bucket
    metrics.record("m", "OK", "Predict", "GRPC", 5)
    metrics.record("m", "NOT_FOUND")
    lines = metrics.render().splitlines()
    assert lines[:3] == [
        "# TYPE :tensorflow:serving:request_count counter",
        ':tensorflow:serving:request_count{model_name="m",status="OK"} 2',
        ':tensorflow:serving:request_count{model_name="m",status="NOT_FOUND"} 1',
    ]
    assert lines[3] == "# TYPE :tensorflow:serving:request_latency histogram"
    bucket = (
        ':tensorflow:serving:request_latency_bucket{model_name="m",API="Predict",entrypoint="GRPC",'
    )
    assert lines[4:7] == [f'{bucket}le="10"}} 1', f'{bucket}le="18"}} 2', f'{bucket}le="32.4"}} 2']
    assert len([line for line in lines if line.startswith(bucket)]) == 34  # 33, and +Inf
    assert lines[-3] == f'{bucket}le="+Inf"}} 2'
    labels = 'model_name="m",API="Predict",entrypoint="GRPC"'
    assert lines[-2:] == [f":tensorflow:serving:request_latency_sum{{{labels}}} 15",
                          f":tensorflow:serving:request_latency_count{{{labels}}} 2"]  # fmt: skip


def test_a_client_s_names_are_escaped_and_bounded(monkeypatch) -> None:
    metrics = RequestMetrics()
    metrics.record('a"b\\c\nd', "NOT_FOUND", known=True)
    assert 'model_name="a\\"b\\\\c\\nd"' in metrics.render()
    monkeypatch.setattr(monitoring, "MAX_MODELS", 2)
    for name in ("x", "y", "z"):
        metrics.record(name, "OK")
    metrics.record("w", "NOT_FOUND", known=True)
    page = metrics.render()
    assert 'model_name="x"' in page and 'model_name="z"' not in page
    assert f'model_name="{monitoring.OTHER_MODELS}",status="OK"}} 2' in page
    # A name no model has is never kept apart, however early it comes.
    fresh = RequestMetrics()
    fresh.record("made-up", "NOT_FOUND")
    fresh.record("real", "INVALID_ARGUMENT", known=True)
    page = fresh.render()
    assert 'model_name="made-up"' not in page and 'model_name="real"' in page
    assert f'model_name="{monitoring.OTHER_MODELS}",status="NOT_FOUND"}} 1' in page


def test_the_monitoring_config_file(tmp_path) -> None:
    config = tmp_path / "monitoring.config"
    config.write_text("prometheus_config { enable: true }")
    assert read_monitoring_config(config) == "/monitoring/prometheus/metrics"
    config.write_text('prometheus_config { enable: true, path: "/m" }')
    assert read_monitoring_config(config) == "/m"
    config.write_text('prometheus_config { path: "/m" }')
    assert read_monitoring_config(config) is None  # not enabled
    for text in ("prometheus_config { enable: maybe }", 'prometheus_config { path: "m" '
                 "enable: true }"):  # fmt: skip
        config.write_text(text)
        with pytest.raises(ValueError, match="--monitoring_config_file"):
            read_monitoring_config(config)
    with pytest.raises(ValueError, match="--monitoring_config_file"):
        read_monitoring_config(tmp_path / "absent")
