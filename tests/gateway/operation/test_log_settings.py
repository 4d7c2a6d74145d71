"""Log settings: the logging extension's view of Python's levels, its checked changes,
the formats, and per-component levels."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from accel_base.errors import InvalidArgument
from accel_base.logs import REQUEST_ID, JsonFormatter
from gateway.operation.log_settings import LogSettings, Occasional, parse_levels


@pytest.fixture(autouse=True)
def restore_logging():
    root = logging.getLogger()
    level, formatters = root.level, [h.formatter for h in root.handlers]
    yield
    root.setLevel(level)
    for handler, formatter in zip(root.handlers, formatters, strict=False):
        handler.setFormatter(formatter)
    logging.getLogger("gateway.protocols.http").setLevel(logging.NOTSET)
    logging.captureWarnings(False)  # LogSettings.apply turns it on


def test_the_extension_shows_the_level_the_server_started_with():
    assert LogSettings("info").as_dict() == {
        "log_file": "", "log_info": True, "log_warning": True, "log_error": True,
        "log_verbose_level": 0, "log_format": "default",
    }  # fmt: skip
    warning = LogSettings("warning").as_dict()
    assert (warning["log_info"], warning["log_warning"]) == (False, True)
    assert LogSettings("debug").as_dict()["log_verbose_level"] == 1


def test_changes_set_python_levels_and_formats():
    settings = LogSettings("info")
    settings.update({"log_info": False})
    assert logging.getLogger().level == logging.WARNING
    settings.update({"log_verbose_level": 2, "log_format": "json"})
    assert logging.getLogger().level == logging.DEBUG
    assert settings.as_dict()["log_format"] == "json"
    assert all(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"log_info": "yes"}, "log_info must be true or false"),
        ({"log_verbose_level": -1}, "log_verbose_level must be 0 or more"),
        ({"log_verbose_level": True}, "log_verbose_level must be 0 or more"),
        ({"log_format": "xml"}, "log_format must be one of default, ISO8601, json"),
        ({"log_file": "/etc/passwd"}, "log_file cannot be changed"),
        ({"log_colour": True}, "unknown logging setting 'log_colour'"),
    ],
)
def test_bad_changes_are_refused_and_nothing_is_applied(changes, words):
    settings = LogSettings("info")
    with pytest.raises(InvalidArgument) as raised:
        settings.update({"log_warning": False, **changes})
    assert words in raised.value.message
    assert settings.as_dict()["log_warning"] is True


def test_json_lines_carry_the_request_fields():
    record = logging.LogRecord("accel_gateway.access", logging.INFO, __file__, 1, "%s done",
                               ("m",), None)  # fmt: skip
    record.model, record.status, record.request_id = "m", 200, "r1"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "m done" and line["level"] == "INFO"
    assert (line["model"], line["status"], line["request_id"]) == ("m", 200, "r1")
    assert line["time"].endswith("Z")


def test_a_line_logged_while_serving_a_request_names_it():
    def line() -> dict:
        record = logging.LogRecord(
            "gateway.protocols.http", logging.ERROR, __file__, 1, "failed", (), None
        )
        return json.loads(JsonFormatter().format(record))

    async def serve(request_id: str) -> dict:
        REQUEST_ID.set(request_id)
        await asyncio.sleep(0)  # the other request's task runs meanwhile
        return line()

    async def both() -> list[dict]:
        return await asyncio.gather(serve("r1"), serve("r2"))

    first, second = asyncio.run(both())
    assert (first["request_id"], second["request_id"]) == ("r1", "r2")
    assert "request_id" not in line()  # outside any request's task


def test_an_occasional_line_is_logged_once_an_interval_counting_the_rest(monkeypatch, caplog):
    clock = [100.0]
    monkeypatch.setattr("gateway.operation.log_settings.time.monotonic", lambda: clock[0])
    failed = Occasional(logging.getLogger("gateway.test"), logging.ERROR, 10.0)
    with caplog.at_level(logging.ERROR, logger="gateway.test"):
        for _ in range(5):
            failed("m", "model %s failed", "m")
        failed("other", "model %s failed", "other")  # its own key: its own line
        clock[0] += 10.0
        failed("m", "model %s failed", "m")
    assert [r.getMessage() for r in caplog.records] == [
        "model m failed",
        "model other failed",
        "model m failed (and 4 more like it in the last 10 s)",
    ]


def test_component_levels():
    assert parse_levels("gateway.protocols.http=debug, backends=WARNING") == {
        "gateway.protocols.http": "DEBUG", "backends": "WARNING",
    }  # fmt: skip
    with pytest.raises(ValueError, match="is not COMPONENT=LEVEL"):
        parse_levels("gateway.protocols.http")
    with pytest.raises(ValueError, match="is not COMPONENT=LEVEL"):
        parse_levels("gateway=loud")
    LogSettings("info", components={"gateway.protocols.http": "DEBUG"}).apply()
    assert logging.getLogger("gateway.protocols.http").level == logging.DEBUG


def test_changes_are_refused_where_the_server_says_so_and_need_the_token():
    import asyncio

    from accel_base.errors import PermissionDenied
    from gateway.core.shared_memory_calls import SharedMemoryCalls
    from gateway.operation.log_settings import LogSettingsCalls

    class Core(SharedMemoryCalls, LogSettingsCalls):
        admin_token = "t"
        log_settings = LogSettings("info")

    core = Core()
    with pytest.raises(PermissionDenied):
        asyncio.run(core.update_log_settings({"log_info": True}, None))
    assert asyncio.run(core.update_log_settings({"log_info": True}, "t"))["log_info"]
    core.log_changes_refused = "beyond loopback without a token"
    with pytest.raises(PermissionDenied, match="beyond loopback"):
        asyncio.run(core.update_log_settings({"log_info": True}, "t"))
    with pytest.raises(InvalidArgument, match="32-bit"):
        LogSettings().update({"log_verbose_level": 2**32})


def test_a_component_that_names_no_logger_is_warned_about(caplog):
    settings = LogSettings(
        "info",
        components={
            "gateway.protocols.htp": "DEBUG",  # a typo
            "gateway.protocols.http": "DEBUG",
            "accel_gateway.access": "DEBUG",
            "no_such_library": "DEBUG",
        },
    )
    try:
        with caplog.at_level(logging.WARNING, logger="gateway.operation.log_settings"):
            settings.apply()
    finally:
        for name in settings.components:
            logging.getLogger(name).setLevel(logging.NOTSET)
    warned = [r.getMessage() for r in caplog.records if "--log-levels" in r.getMessage()]
    assert len(warned) == 2, warned
    assert "'gateway.protocols.htp'" in warned[0] and "'no_such_library'" in warned[1]
