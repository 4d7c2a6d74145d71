"""A TF Serving model's version states (REST `GET /v1/models/{m}`, gRPC GetModelStatus),
from the repository index, newest first: READY is AVAILABLE, LOADING is LOADING, and a
version that failed or was unloaded has ENDed (with the reason of a failure as its
status). As TF Serving's, a label does not narrow the answer: every version is listed."""

from __future__ import annotations

from typing import Any

from gateway.core.interface import Core
from gateway.protocols.tfserving.errors import not_found
from gateway.protocols.tfserving.served import TfServing

_STATES = {"READY": "AVAILABLE", "LOADING": "LOADING", "UNLOADING": "UNLOADING"}


def _status(row: dict[str, Any]) -> dict[str, Any]:
    state = _STATES.get(row["state"], "END")
    failed = state == "END" and row.get("reason") and row["reason"] != "unloaded"
    return {
        "version": row["version"],
        "state": state,
        "status": {"error_code": "UNKNOWN" if failed else "OK",
                   "error_message": row["reason"] if failed else ""},
    }  # fmt: skip


async def version_states(core: Core, tfs: TfServing, name: str, version: int | None
                         ) -> dict[str, Any]:  # fmt: skip
    """`{"model_version_status": [...]}` for the model, or for the one version asked."""
    if name not in tfs.models and not tfs.from_repository(name):
        raise not_found(f"Could not find any versions of model {name}")
    rows = [r for r in await core.repository_index() if r["name"] == name and r["version"]]
    rows.sort(key=lambda r: -int(r["version"]))
    if version is not None:
        rows = [r for r in rows if r["version"] == str(version)]
        if not rows:
            raise not_found(f"Could not find version {version} of model {name}")
    if not rows:
        raise not_found(f"Could not find any versions of model {name}")
    return {"model_version_status": [_status(r) for r in rows]}
