"""argparse types shared by the `accel-gateway` commands."""

from __future__ import annotations

import argparse

from accel_base.cpu import usable_cores


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


def workers_count(text: str) -> int:
    """--workers: a positive count, or 'auto' for the cores this process may use."""
    if text == "auto":
        return usable_cores()
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive count or 'auto', got {text!r}")
    return value
