"""Where the replicas of every deployment post their statistics, so that the ingress
answers for a model as a whole, whichever replicas served it.

Each replica posts its counters every REPORT_S. A replica that stopped keeps its last
counters (they stay counted: counters never go back), but its queue no longer counts
once its post is older than STALE_S.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gateway.statistics import ModelStatistics, merged

BOARD_NAME = "accel_gateway_board"
NAMESPACE = "accel_gateway"  # the board's; Serve's replicas live in namespace "serve"
REPORT_S = 0.5
STALE_S = 5.0


@dataclass
class Post:
    """One replica's latest post: its deployment's model, and every model version it
    runs (an ensemble's replica runs its members too) with the requests it has."""

    model: str
    stats: list[ModelStatistics]
    pending: dict[tuple[str, str], int]
    posted: float = 0.0


class Board:
    """The board's state (a Ray actor wraps it: see board_actor)."""

    def __init__(self) -> None:
        self.posts: dict[str, Post] = {}

    def post(self, replica: str, post: Post) -> None:
        post.posted = time.monotonic()
        self.posts[replica] = post

    def replicas(self) -> dict[str, int]:
        """Replicas that posted lately, by their deployment's model."""
        now, counts = time.monotonic(), {}
        for post in self.posts.values():
            if now - post.posted < STALE_S:
                counts[post.model] = counts.get(post.model, 0) + 1
        return counts

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
    remote = ray.remote(num_cpus=0)(Board)
    return remote.options(
        name=BOARD_NAME, namespace=NAMESPACE, get_if_exists=True, lifetime="detached"
    ).remote()


def find_board(ray: Any) -> Any:
    return ray.get_actor(BOARD_NAME, namespace=NAMESPACE)
