"""Where the replicas of every deployment post their statistics, so that the ingress
answers for a model as a whole, whichever replicas served it.

Each replica posts its counters every REPORT_S. A replica whose post is older than
STALE_S no longer counts as running, nor does its queue. After RETIRE_S its last counters
are folded into its model's retired totals (so counters never go back) and its later
posts, if any, ignored: the board stays the size of the replicas running.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

from gateway.core.statistics import ModelStatistics, merged

BOARD_NAME = "accel_gateway_board"
NAMESPACE = "accel_gateway"  # the board's; Serve's replicas live in namespace "serve"
REPORT_S = 0.5
STALE_S = 5.0
RETIRE_S = 60.0


@dataclass
class Post:
    """One replica's latest post: its deployment's model, and every model version it
    runs (an ensemble's replica runs its members too) with the requests it has."""

    model: str
    stats: list[ModelStatistics]
    pending: dict[tuple[str, str], int]
    failure: str | None = None  # why its model did not load, if it did not
    posted: float = 0.0


class Board:
    """The board's state (a Ray actor wraps it: see board_actor)."""

    def __init__(self) -> None:
        self.posts: dict[str, Post] = {}
        # Per replica retired, its last post: folded into the totals when asked for.
        self.retired: dict[str, Post] = {}

    def post(self, replica: str, post: Post) -> None:
        self.retired.pop(replica, None)  # back: its new counters hold the old ones
        post.posted = time.monotonic()
        self.posts[replica] = post
        self._retire()

    def _retire(self) -> None:
        now = time.monotonic()
        for replica, post in list(self.posts.items()):
            if now - post.posted < RETIRE_S:
                continue
            # Only its counters are kept; the post itself may grow no more.
            self.retired[replica] = Post(post.model, post.stats, {}, post.failure)
            del self.posts[replica]

    def replicas(self) -> dict[str, tuple[int, str | None]]:
        """By deployment's model: its replicas that posted lately with the model loaded,
        and why it failed to load where one of them says so (a model serves while any
        replica has it, wherever another failed)."""
        now, found = time.monotonic(), {}
        for post in self.posts.values():
            if now - post.posted < STALE_S:
                count, failure = found.get(post.model, (0, None))
                healthy = post.failure is None
                found[post.model] = (count + healthy, failure or post.failure)
        return found

    def replica_requests(self) -> list[tuple[str, str, int]]:
        """(model, replica, requests it answered for its own model), for every replica
        that ever posted: how a deployment's traffic spreads."""
        rows = []
        for replica, post in sorted(self.posts.items()):
            own = [s.success.count + s.fail.count for s in post.stats if s.name == post.model]
            rows.append((post.model, replica, sum(own)))
        return rows

    def statistics(self) -> list[tuple[ModelStatistics, int]]:
        """Every model version's counters summed over the replicas, and its requests
        pending at the replicas that posted lately."""
        now = time.monotonic()
        parts: dict[tuple[str, str], list[ModelStatistics]] = {}
        for post in self.retired.values():
            for stats in post.stats:
                parts.setdefault((stats.name, stats.version), []).append(stats)
        pending: dict[tuple[str, str], int] = {}
        for post in self.posts.values():
            for stats in post.stats:
                parts.setdefault((stats.name, stats.version), []).append(stats)
            if now - post.posted < STALE_S:
                for key, count in post.pending.items():
                    pending[key] = pending.get(key, 0) + count
        return [(merged(group), pending.get(key, 0)) for key, group in sorted(parts.items())]


def board_actor(ray: Any) -> Any:
    """The board's named actor in the cluster, created by the first who asks."""
    # Restarted if its process dies: its counters start again from what the replicas
    # post next (those of replicas retired before are lost then).
    remote = ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)(Board)
    return remote.options(
        name=BOARD_NAME, namespace=NAMESPACE, get_if_exists=True, lifetime="detached"
    ).remote()


def find_board(ray: Any) -> Any:
    return ray.get_actor(BOARD_NAME, namespace=NAMESPACE)


def remove_board(ray: Any) -> None:
    """The board and its counters go with the application (`ray shutdown`)."""
    with contextlib.suppress(ValueError):  # ValueError: there was none
        ray.kill(find_board(ray), no_restart=True)
