"""Which requests are traced: Triton's trace settings, server-wide and per model, as the
trace extension reads and changes them at run time (`GET/POST v2[/models/{m}]/trace/setting`,
gRPC `TraceSetting`).

    trace_level    ["OFF"], or any of "TIMESTAMPS" and "TENSORS": spans are made at any
                   level but OFF (TENSORS adds each tensor's datatype and shape)
    trace_rate     1 of every N requests is traced ("1": every request)
    trace_count    traces still to take; -1 has no limit, 0 stops tracing
    log_frequency  accepted and shown for Triton's clients; spans leave through the
                   exporter's own batching
    trace_file     always "": spans are exported over OTLP, never to a file
    trace_mode     always "opentelemetry"

A model's settings override the server's, one by one; setting one to null (an empty
value over gRPC) clears the override, and clears a server setting back to its value at
start. `enabled` is False while nothing can be traced: the
only cost a request pays then is reading it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accel_base.errors import InvalidArgument

LEVELS = ("OFF", "TIMESTAMPS", "TENSORS")
MODE = "opentelemetry"
_NUMBERS = ("trace_rate", "trace_count", "log_frequency")
_FIXED = {"trace_file": "", "trace_mode": MODE}
KEYS = ("trace_level", *_NUMBERS, *_FIXED)


def _level(value: Any) -> tuple[str, ...]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list | tuple) or not values:
        raise InvalidArgument(
            f"trace_level must be a list of levels ({', '.join(LEVELS)}), got {value!r}"
        )
    levels = tuple(str(v).upper() for v in values)
    unknown = [v for v in levels if v not in LEVELS]
    if unknown:
        raise InvalidArgument(f"trace_level {unknown[0]!r} is not one of {', '.join(LEVELS)}")
    if "OFF" in levels and len(levels) > 1:
        raise InvalidArgument("trace_level OFF cannot be combined with other levels")
    return levels


def _number(key: str, value: Any) -> int:
    text = value[0] if isinstance(value, list) and len(value) == 1 else value
    try:
        number = int(str(text).strip())
    except ValueError:
        number = None
    if number is None or isinstance(text, bool):
        raise InvalidArgument(f"{key} must be an integer, got {value!r}")
    if key == "trace_rate" and number < 1:
        raise InvalidArgument(
            f"trace_rate must be at least 1 (1 of every N requests), got {number}"
        )
    if key == "trace_count" and number < -1:
        raise InvalidArgument(f"trace_count must be -1 (no limit) or at least 0, got {number}")
    if key == "log_frequency" and number < 0:
        raise InvalidArgument(f"log_frequency must be at least 0, got {number}")
    return number


def checked(key: str, value: Any) -> Any:
    """`value` for setting `key`, in its stored form; InvalidArgument naming what is wrong."""
    if key == "trace_level":
        return _level(value)
    if key in _NUMBERS:
        return _number(key, value)
    if key in _FIXED:
        text = value[0] if isinstance(value, list) and len(value) == 1 else value
        if text not in (_FIXED[key], None):
            raise InvalidArgument(
                f"{key} cannot be {value!r}: this server exports spans over OTLP "
                f"(--trace-config opentelemetry,url=...), so {key} stays {_FIXED[key]!r}"
            )
        return _FIXED[key]
    raise InvalidArgument(f"unknown trace setting {key!r}; the settings are {', '.join(KEYS)}")


class _Scope:
    """One set of values (the server's, or a model's overrides) and its sampling state."""

    __slots__ = ("values", "seen")

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        self.seen = 0  # requests counted toward the rate since the rate last changed


class TraceSettings:
    def __init__(
        self,
        level: tuple[str, ...] = ("OFF",),
        rate: int = 1000,
        count: int = -1,
        log_frequency: int = 0,
    ) -> None:
        self.server = _Scope(
            {"trace_level": _level(list(level)), "trace_rate": _number("trace_rate", rate),
             "trace_count": _number("trace_count", count),
             "log_frequency": _number("log_frequency", log_frequency)}
        )  # fmt: skip
        self.startup = dict(self.server.values)  # what clearing a server setting restores
        self.models: dict[str, _Scope] = {}
        self.enabled = False
        # Called when the last trace a count allowed is taken and nothing is traced any
        # more (front processes then serve their own copies again: front_processes/).
        self.on_ended: Callable[[], None] | None = None
        self._refresh()

    def __getstate__(self) -> dict[str, Any]:
        """A front process gets the values, never the host's callback."""
        return {**self.__dict__, "on_ended": None}

    def as_dict(self, model: str = "") -> dict[str, Any]:
        """The settings in force for `model` (the server's where it overrides none), as
        the extension shows them: a list of levels, every other value a string."""
        values = dict(self.server.values)
        scope = self.models.get(model) if model else None
        if scope is not None:
            values.update(scope.values)
        shown: dict[str, Any] = {"trace_level": list(values["trace_level"])}
        shown.update({key: str(values[key]) for key in _NUMBERS})
        shown.update(_FIXED)
        return shown

    def update(self, changes: dict[str, Any], model: str = "") -> dict[str, Any]:
        """Apply `changes` (all checked before any applies); None clears a model's
        override. The settings in force afterwards, as as_dict."""
        if not isinstance(changes, dict):
            raise InvalidArgument(f"trace settings must be an object, got {changes!r}")
        parsed: dict[str, Any] = {}
        for key, value in changes.items():
            if key not in KEYS:
                raise InvalidArgument(
                    f"unknown trace setting {key!r}; the settings are {', '.join(KEYS)}"
                )
            parsed[key] = None if value is None or value == [] else checked(key, value)
        target = self.server if not model else self.models.setdefault(model, _Scope({}))
        for key, value in parsed.items():
            if key in _FIXED:
                continue
            if value is not None:
                target.values[key] = value
            elif model:  # a model's cleared setting falls back to the server's
                target.values.pop(key, None)
            else:  # the server's goes back to what it started with
                target.values[key] = self.startup[key]
            if key == "trace_rate":
                target.seen = 0
        if model and not target.values:
            del self.models[model]
        self._refresh()
        return self.as_dict(model)

    def sample(self, model: str) -> bool:
        """Whether to trace this request to `model`: counts it toward its scope's rate,
        and one traced toward its count."""
        # No model has settings of its own: a request the rate skips only counts.
        if not self.models and self.server.seen + 1 < self._server_rate:
            self.server.seen += 1
            return False
        scope = self.models.get(model) or self.server
        own, server = scope.values, self.server.values
        level = own.get("trace_level", server["trace_level"])
        rate = own.get("trace_rate", server["trace_rate"])
        # A model without a count of its own draws on the server's.
        counted = scope if "trace_count" in own else self.server
        count = counted.values["trace_count"]
        if level[0] == "OFF" or count == 0:
            return False
        scope.seen += 1
        if scope.seen < rate:
            return False
        scope.seen = 0
        if count > 0:
            counted.values["trace_count"] = count - 1
            if count == 1:
                self._refresh()
                if not self.enabled and self.on_ended is not None:
                    self.on_ended()
        return True

    def tensors(self, model: str) -> bool:
        """Whether traces of `model` carry its tensors' datatypes and shapes."""
        scope = self.models.get(model)
        level = (scope.values if scope else {}).get(
            "trace_level", self.server.values["trace_level"]
        )
        return "TENSORS" in level

    def _refresh(self) -> None:
        def active(values: dict[str, Any]) -> bool:
            return values["trace_level"][0] != "OFF" and values["trace_count"] != 0

        server = self.server.values
        self._server_rate = server["trace_rate"]
        self.enabled = active(server) or any(
            active({**server, **scope.values}) for scope in self.models.values()
        )
