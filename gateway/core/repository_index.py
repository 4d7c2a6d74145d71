"""The repository index (V2 `repository/index`): every model on disk or loaded, a row per
version with its state and why, and the memory of each loaded version."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.core.placement.footprint import memory_summary

if TYPE_CHECKING:
    from gateway.core.repository import ModelRepository


def index_rows(repository: ModelRepository, ready_only: bool = False) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    names = sorted(set(repository.model_names_on_disk()) | set(repository.models))
    for name in names:
        entry = repository.models.get(name)
        if entry is None or not entry.versions:
            if not ready_only:
                state = "UNAVAILABLE" if entry is not None and entry.error else ""
                reason = entry.error if entry is not None else ""
                if not state and repository.control_mode == "on-demand":
                    state, reason = "UNAVAILABLE", "not loaded; loads on its first request"
                rows.append({"name": name, "version": "", "state": state, "reason": reason})
            continue
        for version, state in sorted(entry.versions.items()):
            status, reason = state.state, state.reason
            down = state.model.unavailable_reason if state.model is not None else None
            if status == "READY" and down is not None:
                status, reason = "UNAVAILABLE", down
            if ready_only and status != "READY":
                continue
            row = {"name": name, "version": str(version), "state": status, "reason": reason}
            if state.model is not None and state.model.footprints:
                row["memory"] = memory_summary(state.model.footprints)
            rows.append(row)
    return rows
