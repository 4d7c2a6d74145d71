"""The whole numbers and flags of TorchServe's management parameters, checked: a number
past its bound is a 400 that names the bound, never a value a config cannot hold."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.protocols.torchserve.replies import TsError

# The most each may be: far past any real use, well inside what a config holds.
BOUNDS = {
    "initial_workers": 1024, "min_worker": 1024, "max_worker": 1024,
    "batch_size": 65_536, "max_batch_delay": 3_600_000,  # milliseconds: an hour
    "response_timeout": 86_400,  # seconds: a day
    "limit": 1_000_000, "next_page_token": 1_000_000_000,
}  # fmt: skip


def whole(params: Mapping[str, str], name: str) -> int | None:
    """`params[name]` as a whole number within its bound; None when absent or empty."""
    value = params.get(name)
    if value is None or value == "":
        return None
    try:
        number = int(value)
    except ValueError:
        raise TsError(400, f"Invalid parameter {name}: {value} is not a whole number") from None
    if not 0 <= number <= BOUNDS[name]:
        raise TsError(400, f"Invalid parameter {name}: {value} is not within 0 to {BOUNDS[name]}")
    return number


def flag(value: str | None, default: bool) -> bool:
    return default if value is None else value.lower() == "true"
