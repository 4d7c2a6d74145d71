"""The server's logging: its format (text or one JSON object a line), its levels (the
whole server's, and per component), and Triton's logging extension, which reads and
changes them at run time (`GET/POST v2/logging`, gRPC `LogSettings`).

The extension's settings map onto Python's levels, which nest: the lowest of log_info,
log_warning and log_error that is on sets the threshold, and a log_verbose_level above
0 sets it at debug. log_format is "default" (text with the
local time), "ISO8601" (text with UTC ISO 8601 time) or "json". log_file cannot be
changed through the protocol: a client must not choose where the server writes.
"""

from __future__ import annotations

import importlib
import logging
import time
from pathlib import Path
from typing import Any

from accel_base.errors import InvalidArgument, PermissionDenied
from accel_base.logs import JsonFormatter

log = logging.getLogger(__name__)

FORMATS = ("default", "ISO8601", "json")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Components whose level may be set on their own (--log-levels gateway.protocols.http=debug,...):
# any logger name works; these are the ones the server's modules log under.
COMPONENTS = ("accel_gateway", "gateway", "backends", "workers")


class IsoFormatter(logging.Formatter):
    converter = time.gmtime

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + (
            f".{int(record.msecs):03d}Z"
        )


class Occasional:
    """A line that may repeat thousands of times a second (a model failing every
    request), logged at most once every `every_s` per key: the first at once, then one
    an interval that counts the ones held back. The metrics count every one."""

    MAX_KEYS = 1024  # keys are models or routes: bounded all the same

    def __init__(self, logger: logging.Logger, level: int, every_s: float) -> None:
        self.logger, self.level, self.every_s = logger, level, every_s
        self._seen: dict[Any, tuple[float, int]] = {}  # key: (when last logged, held since)

    def __call__(self, key: Any, message: str, *args: Any) -> None:
        now = time.monotonic()
        last, held = self._seen.get(key, (-self.every_s, 0))
        if now - last < self.every_s:
            self._seen[key] = (last, held + 1)
            return
        if key not in self._seen and len(self._seen) >= self.MAX_KEYS:
            del self._seen[next(iter(self._seen))]  # the longest known goes
        self._seen[key] = (now, 0)
        if held:
            message += " (and %d more like it in the last %.0f s)"
            args += (held, now - last)
        self.logger.log(self.level, message, *args, stacklevel=2)  # the caller's line


def formatter(name: str) -> logging.Formatter:
    if name == "json":
        return JsonFormatter()
    return IsoFormatter(_TEXT) if name == "ISO8601" else logging.Formatter(_TEXT)


def parse_levels(text: str) -> dict[str, str]:
    """`gateway.protocols.http=debug,backends=warning` -> {logger: level}, checked."""
    levels = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, equals, level = part.partition("=")
        if not equals or not name or level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ValueError(
                f"'{part}' is not COMPONENT=LEVEL (LEVEL one of debug, info, warning, error; "
                f"COMPONENT a logger such as {', '.join(COMPONENTS)}, or gateway.protocols.http)"
            )
        levels[name] = level.upper()
    return levels


def _known_logger(name: str) -> bool:
    """A logger made already, a module or package of the server's (their loggers are
    named by their paths), or under `accel_gateway` (the access log's)."""
    root = name.split(".")[0]
    if name in logging.root.manager.loggerDict or root == "accel_gateway":
        return True
    if root not in COMPONENTS:
        return False
    try:  # found on disk, not imported: a name may lead into a framework's backend
        package = Path(importlib.import_module(root).__file__ or "").parent
    except Exception:  # noqa: BLE001 - a warning is not worth stopping the server for
        return False
    path = package.joinpath(*name.split(".")[1:])
    return path.is_dir() or path.with_suffix(".py").is_file()


class LogSettings:
    """The settings as the extension shows them, applied to Python's root logger."""

    def __init__(self, level: str = "info", log_format: str = "default",
                 components: dict[str, str] | None = None) -> None:  # fmt: skip
        self.format = log_format
        self.verbose = 1 if level.upper() == "DEBUG" else 0
        number = logging.getLevelName(level.upper())
        self.info = self.verbose > 0 or number <= logging.INFO
        self.warning = self.info or number <= logging.WARNING
        self.error = True
        self.components = dict(components or {})

    def as_dict(self) -> dict[str, Any]:
        return {
            "log_file": "",
            "log_info": self.info,
            "log_warning": self.warning,
            "log_error": self.error,
            "log_verbose_level": self.verbose,
            "log_format": self.format,
        }

    def level(self) -> int:
        if self.verbose > 0:
            return logging.DEBUG
        if self.info:
            return logging.INFO
        if self.warning:
            return logging.WARNING
        return logging.ERROR if self.error else logging.CRITICAL

    def update(self, changes: dict[str, Any]) -> None:
        """Apply the extension's changes (all checked before any is applied)."""
        checked: dict[str, Any] = {}
        for key, value in changes.items():
            if key in ("log_info", "log_warning", "log_error"):
                if not isinstance(value, bool):
                    raise InvalidArgument(f"logging setting {key} must be true or false")
            elif key == "log_verbose_level":
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
                    raise InvalidArgument(
                        "logging setting log_verbose_level must be 0 or more (a 32-bit count)"
                    )
            elif key == "log_format":
                if value not in FORMATS:
                    raise InvalidArgument(
                        f"logging setting log_format must be one of {', '.join(FORMATS)}"
                    )
            elif key == "log_file":
                if value not in ("", None):
                    raise InvalidArgument(
                        "log_file cannot be changed through the protocol; the server logs to "
                        "its standard error"
                    )
                continue
            else:
                raise InvalidArgument(
                    f"unknown logging setting '{key}'; the settings are: "
                    + ", ".join(self.as_dict())
                )
            checked[key] = value
        for key, value in checked.items():
            if key == "log_verbose_level":
                self.verbose = value
            elif key == "log_format":
                self.format = value
            else:
                setattr(self, key.removeprefix("log_"), value)
        self.apply()

    def apply(self) -> None:
        # Python's warnings (a library's deprecation, say) become log lines in the
        # server's format, not bare text among JSON lines.
        logging.captureWarnings(True)
        root = logging.getLogger()
        root.setLevel(self.level())
        for handler in root.handlers:
            handler.setFormatter(formatter(self.format))
        for name, level in self.components.items():
            if not _known_logger(name):  # a typo would otherwise change nothing, silently
                log.warning(
                    "--log-levels: '%s' names no logger this server has made yet; the "
                    "server's own are under %s (a module's path, e.g. gateway.protocols.http)",
                    name, ", ".join(COMPONENTS),
                )  # fmt: skip
            logging.getLogger(name).setLevel(level)


class LogSettingsCalls:
    """The logging extension's calls, for a core with `log_settings` and `check_token`
    (the admin token, when one is configured, guards changes)."""

    log_settings: LogSettings
    # Set where changes are refused whatever the token (gateway/server.py: a server
    # beyond loopback with no admin token), saying why.
    log_changes_refused: str | None = None

    def check_token(self, token: str | None) -> None:
        raise NotImplementedError

    async def log_settings_dict(self) -> dict[str, Any]:
        return self.log_settings.as_dict()

    async def update_log_settings(
        self, changes: dict[str, Any], token: str | None
    ) -> dict[str, Any]:
        if self.log_changes_refused is not None:
            raise PermissionDenied(self.log_changes_refused)
        self.check_token(token)
        self.log_settings.update(changes)
        return self.log_settings.as_dict()
