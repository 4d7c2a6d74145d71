"""The serve command's memory options, and the MemoryManager they make."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from gateway.core.placement.inventory import (
    DEFAULT_GPU_BUDGET,
    DEFAULT_HOST_BUDGET,
    DEFAULT_RESERVE,
    read_inventory,
)
from gateway.core.placement.manager import (
    DEFAULT_LOAD_CONCURRENCY,
    DEFAULT_LOAD_TIMEOUT_S,
    MemoryManager,
)
from gateway.core.placement.sizes import Budget, parse_budget

# Outside on-demand mode nothing is evicted, and a crude prediction must not refuse a
# model that fits: unless told otherwise, the budget there is all the memory free at start.
WHOLE = Budget(fraction=1.0)


@dataclass(frozen=True, slots=True)
class MemoryOptions:
    # None: the defaults of the control mode (on demand: DEFAULT_*; otherwise WHOLE, no
    # reserve).
    host_budget: Budget | None = None
    gpu_budget: Budget | None = None
    reserve: float | None = None
    load_timeout_s: float = DEFAULT_LOAD_TIMEOUT_S
    load_concurrency: int = DEFAULT_LOAD_CONCURRENCY
    pinned: frozenset[str] = frozenset()

    def manager(self, control_mode: str) -> MemoryManager:
        """Eviction only on demand: in the other modes a model that does not fit fails
        to load, and what is loaded stays until an operator unloads it."""
        on_demand = control_mode == "on-demand"
        devices = read_inventory(
            self.host_budget or (DEFAULT_HOST_BUDGET if on_demand else WHOLE),
            self.gpu_budget or (DEFAULT_GPU_BUDGET if on_demand else WHOLE),
            self.reserve if self.reserve is not None else (DEFAULT_RESERVE if on_demand else 0.0),
        )
        return MemoryManager(
            devices,
            evicts=control_mode == "on-demand",
            load_concurrency=self.load_concurrency,
            load_timeout_s=self.load_timeout_s,
            pinned=self.pinned,
        )


def _budget(text: str) -> Budget:
    try:
        return parse_budget(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"a fraction from 0 up to (not including) 1, not {text}")
    return value


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("memory and placement (gateway/core/placement)")
    group.add_argument(
        "--host-memory-budget", type=_budget, metavar="SHARE",
        help="host memory model instances on the CPU may take: a fraction of what is free "
        f"at start (0.8) or a size (16GiB) (default: {DEFAULT_HOST_BUDGET} on demand, all "
        "of it otherwise)",
    )  # fmt: skip
    group.add_argument(
        "--gpu-memory-budget", type=_budget, metavar="SHARE",
        help="memory model instances may take on each GPU: a fraction of what is free at "
        f"start or a size (default: {DEFAULT_GPU_BUDGET} on demand, all of it otherwise)",
    )  # fmt: skip
    group.add_argument(
        "--memory-reserve", type=_fraction, metavar="FRACTION",
        help="share of each budget kept free for activations and fragmentation "
        f"(default: {DEFAULT_RESERVE} on demand, 0 otherwise)",
    )  # fmt: skip
    group.add_argument(
        "--model-load-timeout", type=_positive(float), default=DEFAULT_LOAD_TIMEOUT_S,
        metavar="SECONDS",
        help="on-demand mode: a request waiting this long for its model's load gets 503 "
        "(default %(default)s)",
    )  # fmt: skip
    group.add_argument(
        "--model-load-concurrency", type=_positive(int), default=DEFAULT_LOAD_CONCURRENCY,
        metavar="N", help="model loads at once on each device (default %(default)s)",
    )  # fmt: skip
    group.add_argument(
        "--pin-model", action="append", default=[], metavar="NAME",
        help="never evict this model (on-demand mode loads it at start); repeatable; a "
        "model's config may also say parameters { key: \"pinned\" value: { string_value: "
        "\"true\" } }",
    )  # fmt: skip


def from_args(args: argparse.Namespace) -> MemoryOptions:
    return MemoryOptions(
        host_budget=args.host_memory_budget,
        gpu_budget=args.gpu_memory_budget,
        reserve=args.memory_reserve,
        load_timeout_s=args.model_load_timeout,
        load_concurrency=args.model_load_concurrency,
        pinned=frozenset(args.pin_model),
    )
