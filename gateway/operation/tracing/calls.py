"""The trace extension's calls on a core (`GET/POST v2[/models/{m}]/trace/setting`, gRPC
`TraceSetting`): changes need the admin token when one is set, like the logging
extension's, and are refused beyond loopback without one."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from accel_base.errors import NotFound, PermissionDenied, Unavailable
from gateway.operation.tracing.tracer import Tracing


class TraceSettingsCalls:
    tracing: Tracing
    repository: Any
    # Set where changes are refused whatever the token (gateway/server.py), saying why.
    trace_changes_refused: str | None = None

    def check_token(self, token: str | None) -> None:
        raise NotImplementedError

    def _check_known(self, model: str) -> None:
        if model and not self.repository.exists(model):
            raise NotFound(
                f"no model '{model}' in the repository: its trace settings cannot be set"
            )

    async def trace_settings_dict(self, model: str = "") -> dict[str, Any]:
        self._check_known(model)
        return self.tracing.settings.as_dict(model)

    async def update_trace_settings(
        self, changes: dict[str, Any], model: str, token: str | None
    ) -> dict[str, Any]:
        if self.trace_changes_refused is not None:
            raise PermissionDenied(self.trace_changes_refused)
        self.check_token(token)
        self._check_known(model)
        tracing = self.tracing
        # Checked on a copy first: a bad change is a 400 before anything else happens.
        probe = copy.deepcopy(tracing.settings)
        probe.update(changes, model)
        if probe.enabled and not tracing.ready:
            try:  # imports and resource detection: not on the event loop
                await asyncio.to_thread(tracing.prepare)
            except Exception as exc:
                raise Unavailable(
                    f"tracing cannot start ({type(exc).__name__}: {exc}); check "
                    "--trace-config and the OTEL_* variables; the settings are unchanged"
                ) from None
        return tracing.settings.update(changes, model)
