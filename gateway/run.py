"""Running a gateway in this process until it is told to stop: the one way `serve` and
the drop-in commands (`torchserve`) run theirs."""

from __future__ import annotations

import asyncio
import sys

from gateway.listeners import event_loop_factory
from gateway.operation import heap
from gateway.operation.security import ConfigError
from gateway.server import Gateway, ServerOptions

# Instance threads hand batches back to the event loop's thread: with Python's 5 ms
# default, a thread that wants the GIL back may wait that long behind a busy loop.
GIL_SWITCH_INTERVAL_S = 0.0005


def run_gateway(options: ServerOptions, command: str = "accel-gateway") -> int:
    """Serve `options` until SIGTERM/SIGINT; the exit code (2: a setting refused it,
    1: a port or file it could not use)."""
    options.log.apply()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    heap.keep_freed_buffers()
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(Gateway(options).run())
    except ConfigError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 1
    return 0
