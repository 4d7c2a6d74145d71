"""Trace settings: Triton's keys and values, per-model overrides, rate and count."""

from __future__ import annotations

import pickle

import pytest

from accel_base.errors import InvalidArgument
from gateway.operation.tracing.settings import TraceSettings
from gateway.operation.tracing.tracer import parse_trace_config


def traced(settings: TraceSettings, model: str, requests: int) -> int:
    return sum(settings.sample(model) for _ in range(requests))


def test_off_by_default_traces_nothing_and_shows_tritons_defaults() -> None:
    settings = TraceSettings()
    assert not settings.enabled
    assert traced(settings, "simple", 5000) == 0
    assert settings.as_dict() == {
        "trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
        "log_frequency": "0", "trace_file": "", "trace_mode": "opentelemetry",
    }  # fmt: skip


def test_rate_traces_one_request_in_n() -> None:
    settings = TraceSettings(("TIMESTAMPS",), rate=100)
    assert settings.enabled
    assert traced(settings, "simple", 1000) == 10
    settings.update({"trace_rate": "1"})
    assert traced(settings, "simple", 7) == 7


def test_count_stops_tracing_when_spent() -> None:
    settings = TraceSettings(("TIMESTAMPS",), rate=1, count=3)
    assert traced(settings, "simple", 10) == 3
    assert settings.as_dict()["trace_count"] == "0"
    assert not settings.enabled  # nothing left to trace: requests pay nothing again
    settings.update({"trace_count": "2"})
    assert settings.enabled and traced(settings, "simple", 10) == 2


def test_the_count_spent_says_so_once_and_the_callback_never_travels() -> None:
    settings = TraceSettings(("TIMESTAMPS",), rate=1, count=2)
    ended = []
    settings.on_ended = lambda: ended.append(settings.enabled)
    assert settings.sample("m") and ended == []
    assert settings.sample("m") and ended == [False]  # the last one: tracing ends
    assert not settings.sample("m") and ended == [False]
    copy = pickle.loads(pickle.dumps(settings))  # as a front process gets them
    assert copy.on_ended is None and copy.as_dict() == settings.as_dict()


def test_a_models_settings_override_the_servers_and_clear_with_null() -> None:
    settings = TraceSettings()
    shown = settings.update({"trace_level": ["TIMESTAMPS"], "trace_rate": 1}, model="simple")
    assert shown["trace_level"] == ["TIMESTAMPS"] and shown["trace_rate"] == "1"
    assert settings.as_dict()["trace_level"] == ["OFF"]  # the server's are untouched
    assert settings.enabled
    assert traced(settings, "simple", 4) == 4
    assert traced(settings, "other", 4) == 0
    settings.update({"trace_level": None, "trace_rate": None}, model="simple")
    assert settings.as_dict("simple") == settings.as_dict()
    assert not settings.enabled


def test_clearing_a_server_setting_restores_its_value_at_start() -> None:
    settings = TraceSettings(("TIMESTAMPS",), rate=50)
    settings.update({"trace_rate": "3", "trace_level": ["OFF"]})
    shown = settings.update({"trace_rate": None, "trace_level": None})
    assert shown["trace_rate"] == "50" and shown["trace_level"] == ["TIMESTAMPS"]


def test_a_model_without_its_own_count_draws_on_the_servers() -> None:
    settings = TraceSettings(("TIMESTAMPS",), rate=1, count=2)
    settings.update({"trace_rate": "1"}, model="a")
    assert traced(settings, "a", 5) + traced(settings, "b", 5) == 2


def test_tensors_level() -> None:
    settings = TraceSettings(("TIMESTAMPS", "TENSORS"))
    assert settings.tensors("simple")
    assert not TraceSettings(("TIMESTAMPS",)).tensors("simple")


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"trace_level": ["LOUD"]}, "'LOUD' is not one of OFF, TIMESTAMPS, TENSORS"),
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "OFF cannot be combined"),
        ({"trace_rate": "0"}, "trace_rate must be at least 1"),
        ({"trace_rate": "often"}, "trace_rate must be an integer"),
        ({"trace_count": "-2"}, "trace_count must be -1"),
        ({"trace_file": "/tmp/trace.json"}, "exports spans over OTLP"),
        ({"trace_mode": "triton"}, "trace_mode stays 'opentelemetry'"),
        ({"trace_colour": "red"}, "unknown trace setting 'trace_colour'"),
        ({"trace_ratee": None}, "unknown trace setting 'trace_ratee'"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(changes: dict, words: str) -> None:
    settings = TraceSettings()
    before = settings.as_dict()
    with pytest.raises(InvalidArgument, match=words):
        settings.update({"trace_level": ["TIMESTAMPS"], **changes})
    assert settings.as_dict() == before  # nothing of a refused update applies


def test_trace_config_parses_tritons_options() -> None:
    settings, exporter = parse_trace_config([
        "level=TIMESTAMPS", "rate=100", "count=5", "mode=opentelemetry",
        "opentelemetry,url=collector:4318/v1/traces", "opentelemetry,resource=team=ml",
        "opentelemetry,bsp_max_queue_size=512",
    ])  # fmt: skip
    assert settings.as_dict()["trace_level"] == ["TIMESTAMPS"]
    assert settings.as_dict()["trace_rate"] == "100"
    assert settings.as_dict()["trace_count"] == "5"
    assert exporter.url == "http://collector:4318/v1/traces"
    assert exporter.resource == {"team": "ml"}
    assert exporter.batch == {"max_queue_size": 512}


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("triton,file=/tmp/t.json", "does not: it exports OpenTelemetry spans"),
        ("rate=fast", "rate must be an integer"),
        ("level=LOUD", "'LOUD' is not one of"),
        ("opentelemetry,colour=red", "opentelemetry takes url"),
        ("loud", "is not \\[MODE,\\]SETTING=VALUE"),
    ],
)
def test_trace_config_mistakes_say_what_is_wrong(value: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_trace_config([value])
