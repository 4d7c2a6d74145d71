"""TorchServe's token authorization: three keys, written to key_file.json.

- the inference key, for the inference API (HTTP and gRPC, `/ping` included);
- the management key, for the management API;
- the API key, for `POST /token?type=inference|management` on the management port, which
  makes a new key of that kind (the old one stops working) and rewrites the file.

Inference and management keys expire (`token_expiration_min`, 60 minutes by default),
as TorchServe's do; the API key does not. Clients send `Authorization: Bearer <key>`.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

KINDS = ("management", "inference")
KEY_FILE = "key_file.json"


class KeyCheck(Protocol):
    def check(self, kind: str, header: bytes | str | None) -> bool:
        """Whether `header` (an Authorization header's value) opens the API `kind`."""
        ...


def _bearer(header: bytes | str | None) -> str | None:
    if header is None:
        return None
    text = header.decode("latin-1") if isinstance(header, bytes) else header
    scheme, _, given = text.partition(" ")
    return given.strip() if scheme.lower() == "bearer" else None


class AdminKey:
    """Without TorchServe's keys (`accel-gateway serve`), the management fronts take the
    server's --admin-token, as its V2 model control does: they manage the same models."""

    def __init__(self, token: str) -> None:
        self.token = token

    def check(self, kind: str, header: bytes | str | None) -> bool:
        given = _bearer(header)
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())


def _new_key() -> str:
    return secrets.token_urlsafe(6)  # 8 characters, as TorchServe's


def _iso(seconds: float) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{stamp}.{int(seconds * 1e6) % 1_000_000:06d}Z"


class Keys:
    def __init__(
        self, directory: Path, expiry_min: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:  # fmt: skip
        self.path = directory / KEY_FILE
        self.expiry_s = expiry_min * 60
        self._clock = clock
        self._keys = {kind: (_new_key(), clock() + self.expiry_s) for kind in KINDS}
        self.api_key = _new_key()
        self.write()

    def key(self, kind: str) -> str:
        return self._keys[kind][0]

    def check(self, kind: str, header: bytes | str | None) -> bool:
        """Whether `header` (the Authorization header's value) carries the live key of
        `kind` ("inference", "management" or "API")."""
        given = _bearer(header)
        if given is None:
            return False
        if kind == "API":
            expected, expires = self.api_key, float("inf")
        else:
            expected, expires = self._keys[kind]
        return hmac.compare_digest(given.encode(), expected.encode()) and (self._clock() < expires)

    def renew(self, kind: str) -> None:
        """A new key of `kind` (the old one stops working), written to the key file."""
        self._keys[kind] = (_new_key(), self._clock() + self.expiry_s)
        self.write()

    def write(self) -> None:
        """The key file, readable by its owner only from its first byte, never through a
        link; replaced whole, so that a reader never sees half of it."""
        content = {kind: {"key": key, "expiration time": _iso(expires)}
                   for kind, (key, expires) in self._keys.items()}  # fmt: skip
        content["API"] = {"key": self.api_key}
        staged = self.path.with_name(f".{KEY_FILE}.{os.getpid()}")
        staged.unlink(missing_ok=True)
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(json.dumps(content, indent=2))
        staged.replace(self.path)
