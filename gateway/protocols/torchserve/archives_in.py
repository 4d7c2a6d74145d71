"""Where a registration's `url` may take an archive from, and nowhere else:

- a path (or `file://` URL) of a file or directory inside the model store;
- an `http://` or `https://` URL that matches one of `allowed_urls` whole (regular
  expressions, as TorchServe's config.properties gives them), fetched once into the
  repository's staging area, bounded in bytes and in time (the whole download, not each
  read), two at a time at most, and never by a redirect (it could lead anywhere).

TorchServe allows every URL unless told otherwise; this server allows none until the
operator lists them: a registration must not make the server fetch what a caller names.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

from backends.torchserve.archive import DEFAULT_MAX_BYTES, inside
from gateway.protocols.torchserve.models import TorchServeModels
from gateway.protocols.torchserve.replies import TsError

FETCH_TIMEOUT_S = 300.0  # the whole download
CHUNK = 1 << 20
MAX_DOWNLOADS = 2  # at once; a third is refused (a download holds a thread meanwhile)
_slots = threading.BoundedSemaphore(MAX_DOWNLOADS)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        raise TsError(
            400, f"Failed to download archive from: {req.full_url} (it redirects to "
            f"{newurl}; give the archive's own URL)", "DownloadArchiveException",
        )  # fmt: skip


_OPENER = urllib.request.build_opener(_NoRedirects)


def _in_store(path_text: str, models: TorchServeModels, url: str) -> Path:
    store = models.model_store
    if store is None:
        raise TsError(400, f"{url}: this server has no model store to register archives from")
    path = inside(store, unquote(path_text))
    if path is None or not path.exists():
        raise TsError(404, f"Model not found at: {url}", "ModelNotFoundException")
    return path


def _download(url: str, destination: Path, max_bytes: int) -> None:
    request = urllib.request.Request(url, headers={"User-Agent": "accel-gateway"})
    deadline = time.monotonic() + FETCH_TIMEOUT_S
    with _OPENER.open(request, timeout=30) as reply, open(destination, "wb") as file:
        total = 0
        while chunk := reply.read1(CHUNK):
            if time.monotonic() > deadline:
                raise TsError(
                    400, f"Failed to download archive from: {url} (not whole after "
                    f"{FETCH_TIMEOUT_S:g} s)", "DownloadArchiveException",
                )  # fmt: skip
            total += len(chunk)
            if total > max_bytes:
                raise TsError(
                    413, f"{url}: the archive is over {max_bytes} bytes",
                    "DownloadArchiveException",
                )  # fmt: skip
            file.write(chunk)


@contextlib.asynccontextmanager
async def fetch_archive(url: str, models: TorchServeModels) -> AsyncIterator[Path]:
    """The archive `url` names, as a local path for as long as the block runs."""
    parts = urlsplit(url)
    if parts.scheme in ("", "file"):
        yield _in_store(parts.path if parts.scheme else url, models, url)
        return
    allowed = parts.scheme in ("http", "https") and any(
        pattern.fullmatch(url) for pattern in models.allowed_urls
    )
    if not allowed:
        raise TsError(
            400, f"Given URL {url} does not match any allowed URL(s); list it in "
            "config.properties' allowed_urls", "ModelException",
        )  # fmt: skip
    name = Path(parts.path).name or "archive.mar"
    with tempfile.TemporaryDirectory(dir=models.repository, prefix=".download-") as folder:
        destination = Path(folder) / name

        def fetch() -> None:
            # Taken and given back on the thread itself: a call cancelled before its
            # thread starts holds no slot.
            if not _slots.acquire(blocking=False):
                raise TsError(503, f"{MAX_DOWNLOADS} archives are downloading; try again soon")
            try:
                _download(url, destination, DEFAULT_MAX_BYTES)
            finally:
                _slots.release()

        try:
            await asyncio.to_thread(fetch)
        except OSError as exc:
            raise TsError(
                400, f"Failed to download archive from: {url} ({exc})",
                "DownloadArchiveException",
            ) from None  # fmt: skip
        yield destination
