"""Log lines as one JSON object each (`--log-format json`), in the gateway and in its
worker processes alike, and the id of the request being served that such a line carries.
"""

from __future__ import annotations

import json
import logging
import time
from contextvars import ContextVar
from typing import Any

# The id its client gave the request the current task serves ("" where none): a JSON
# line logged while serving it carries it. Each request runs in a task of its own, whose
# context this is; the fronts set it once they have decoded the request.
REQUEST_ID: ContextVar[str] = ContextVar("request_id", default="")
# How a worker process learns the format its parent logs in (workers/environment.py).
FORMAT_VARIABLE = "ACCEL_GATEWAY_LOG_FORMAT"


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC ISO 8601), level, logger, message, and the
    request id and model where the record carries them (`extra=`); the request id also
    where the line was logged while serving a request that has one (REQUEST_ID); and
    `fields` given here on every line (a worker process's name)."""

    def __init__(self, **fields: str) -> None:
        super().__init__()
        self.fields = fields

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **self.fields,
        }
        for key in ("request_id", "model", "version", "status", "duration_ms", "protocol"):
            value = getattr(record, key, None)
            if value is not None:
                entry[key] = value
        if "request_id" not in entry and (serving := REQUEST_ID.get()):
            entry["request_id"] = serving
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def logs_json() -> bool:
    """Whether this process logs JSON lines now (its root logger's handlers say)."""
    return any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers)
