"""argparse types shared by the `accel-gateway` commands."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from accel_base.cpu import usable_cores
from gateway.core.copies import streaming_model

log = logging.getLogger("accel_gateway")


def positive_int(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return number


def positive_seconds(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {value}")
    return number


def positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}") from None
    if not (number > 0 and number != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return number


def port(value: str) -> int:
    """A TCP port; 0 asks the system for a free one."""
    number = int(value)
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0..65535, got {value}")
    return number


def distinct_ports(ports: dict[str, int]) -> None:
    """Raise ValueError when two listeners would share a port. Linux lets two sockets with
    SO_REUSEADDR bind one port before either listens, so the clash would otherwise start
    silently and hand connections to the wrong protocol."""
    owners: dict[int, str] = {}
    for what, number in ports.items():
        if number and number in owners:
            raise ValueError(
                f"{what} and {owners[number]} are both on port {number}: give each its own"
            )
        owners[number] = what


# From this many usable cores, `auto` runs a front process per core (gateway/front_processes).
AUTO_FRONTS_FROM_CORES = 4
AUTO = 0  # --front-processes auto, resolved by auto_fronts once the ports are known


def auto_fronts(
    ports: tuple[int, ...], cores: int | None = None, repository: Path | None = None
) -> int:
    """--front-processes auto: one front per usable core from AUTO_FRONTS_FROM_CORES cores
    (each front serves its own copies of the CPU models, so fronts add throughput while
    each has a core: benchmarks/cores.py), else one process. Also one process when a port
    is 0 (chosen by the system: fronts must share one fixed port), and when the
    repository has a model that answers over a stream (decoupled), which only one
    process serves."""
    cores = usable_cores() if cores is None else cores
    if cores < AUTO_FRONTS_FROM_CORES or 0 in ports:
        return 1
    if repository is not None and repository.is_dir():
        streaming = streaming_model(repository)
        if streaming is not None:
            log.info("one process serves the protocols: model '%s' answers over a stream, "
                     "which front processes cannot serve", streaming)  # fmt: skip
            return 1
    return cores


def workers_count(text: str) -> int:
    """--front-processes: a positive count, or 'auto' (AUTO, resolved by auto_fronts)."""
    if text == "auto":
        return AUTO
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive count or 'auto', got {text!r}")
    return value
