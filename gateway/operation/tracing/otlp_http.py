"""Where spans go over OTLP/HTTP, and the POST that takes them there, on the event loop.

The destination is read as OpenTelemetry's Python exporter reads it:
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as the whole URL, else OTEL_EXPORTER_OTLP_ENDPOINT
with /v1/traces after it, else http://localhost:4318/v1/traces (--trace-config's url wins
over all three); the _HEADERS, _TIMEOUT (seconds), _COMPRESSION (gzip, deflate, none),
_CERTIFICATE, _CLIENT_CERTIFICATE and _CLIENT_KEY variables, the traces' own first.
Spans go to the collector directly: HTTP(S)_PROXY is not used (tracer.py says so in the
log when one is set).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import os
import ssl
import time
import zlib
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gateway import __version__

DEFAULT_URL = "http://localhost:4318/v1/traces"
MAX_RESPONSE_BYTES = 1 << 20  # a collector's answer is a few bytes; more is not read
# OTLP/HTTP: these answers say "try again later"; any other failure drops the batch.
RETRYABLE = frozenset({429, 502, 503, 504})


class ExportFailed(Exception):
    """A batch the collector refused or could not be reached for."""


def _variable(name: str) -> str | None:
    """OTEL_EXPORTER_OTLP_TRACES_{name}, else OTEL_EXPORTER_OTLP_{name}."""
    return os.environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or os.environ.get(
        f"OTEL_EXPORTER_OTLP_{name}"
    )


def _check_protocol() -> None:
    """OTLP over HTTP/protobuf only: spans sent to a collector's gRPC port are lost."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = os.environ.get(name, "").strip()
        if protocol:
            if protocol.lower() != "http/protobuf":
                raise ValueError(
                    f"{name} is '{protocol}': the gateway exports OTLP over HTTP/protobuf "
                    "only; set http/protobuf and the collector's HTTP endpoint (port 4318)"
                )
            return  # the traces' own setting wins over the general one


@dataclass(frozen=True)
class Destination:
    url: str = DEFAULT_URL
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    compression: str = "none"  # gzip, deflate or none
    certificate: str | None = None  # the CA bundle for https
    client_certificate: str | None = None
    client_key: str | None = None

    @classmethod
    def from_environment(cls, url: str | None = None) -> Destination:
        """`url` (--trace-config's) or the OTEL_* variables. ValueError on a bad one."""
        from opentelemetry.util.re import parse_env_headers

        if url is None:  # a url given here is ours: the variables' protocol is other SDKs'
            _check_protocol()
            url = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        if url is None:
            base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            url = f"{base.removesuffix('/')}/v1/traces" if base else DEFAULT_URL
        timeout = _variable("TIMEOUT") or "10"
        try:
            timeout_s = float(timeout)
        except ValueError:
            raise ValueError(f"OTEL_EXPORTER_OTLP_TIMEOUT '{timeout}' is not seconds") from None
        compression = (_variable("COMPRESSION") or "none").strip().lower()
        if compression not in ("gzip", "deflate", "none"):
            raise ValueError(
                f"OTEL_EXPORTER_OTLP_COMPRESSION '{compression}': use gzip, deflate or none"
            )
        destination = cls(
            url, parse_env_headers(_variable("HEADERS") or "", liberal=True), timeout_s,
            compression, _variable("CERTIFICATE"), _variable("CLIENT_CERTIFICATE"),
            _variable("CLIENT_KEY"),
        )  # fmt: skip
        destination.check()
        return destination

    def check(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the OTLP endpoint '{self.url}' is not an http(s)://HOST URL")
        if parts.username is not None:
            raise ValueError(
                "the OTLP endpoint carries a user and password; send credentials as a "
                "header (OTEL_EXPORTER_OTLP_HEADERS=Authorization=...)"
            )
        for name, value in self.headers.items():
            if any(c in f"{name}{value}" for c in "\r\n\0") or not name.strip():
                raise ValueError(f"the OTLP header '{name!r}' holds a line break or NUL")
        if self.timeout_s <= 0:
            raise ValueError(f"the OTLP timeout must be positive seconds, got {self.timeout_s}")
        if parts.scheme == "https":
            self.ssl_context()  # a missing or bad certificate file says so now

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.certificate)
        if self.client_certificate:
            context.load_cert_chain(self.client_certificate, self.client_key)
        return context


class Poster:
    """POSTs export requests to one destination over one kept-alive connection (opened
    again when the collector closed it)."""

    def __init__(self, destination: Destination) -> None:
        self.destination = destination
        parts = urlsplit(destination.url)
        self._host = parts.hostname or ""
        self._tls = parts.scheme == "https"
        self._port = parts.port or (443 if self._tls else 80)
        self._ssl = destination.ssl_context() if self._tls else None
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [
            f"POST {path} HTTP/1.1", f"Host: {parts.netloc.rpartition('@')[2]}",
            "Content-Type: application/x-protobuf", f"User-Agent: accel-gateway/{__version__}",
        ]  # fmt: skip
        lines += [f"{name}: {value}" for name, value in destination.headers.items()]
        if destination.compression != "none":
            lines.append(f"Content-Encoding: {destination.compression}")
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes, deadline: float) -> None:
        """Send one export request by time.monotonic() `deadline`, retrying what OTLP
        says to retry; ExportFailed says why it could not."""
        body = await self._compress(body)
        delay_s = 0.5
        while True:
            status, answer = await self._send(body, deadline)
            if 200 <= status < 300:
                return
            if status not in RETRYABLE or time.monotonic() + delay_s > deadline:
                text = answer[:200].decode("utf-8", "replace")
                raise ExportFailed(f"{self.destination.url} answered {status}: {text}")
            await asyncio.sleep(delay_s)
            delay_s *= 2

    async def _compress(self, body: bytes) -> bytes:
        if self.destination.compression == "gzip":  # zlib lets go of the GIL meanwhile
            return await asyncio.to_thread(gzip.compress, body)
        if self.destination.compression == "deflate":
            return await asyncio.to_thread(zlib.compress, body)
        return body

    async def _send(self, body: bytes, deadline: float) -> tuple[int, bytes]:
        # Each try waits the destination's timeout at most, and none past the deadline.
        deadline = min(deadline, time.monotonic() + self.destination.timeout_s)
        for reused in (self._writer is not None, False):  # a stale connection: once more
            try:
                async with asyncio.timeout_at(_loop_time(deadline)):
                    if self._writer is None:
                        self._reader, self._writer = await asyncio.open_connection(
                            self._host, self._port, ssl=self._ssl
                        )
                    self._writer.write(self._head + b"%d\r\n\r\n" % len(body) + body)
                    await self._writer.drain()
                    return await self._answer()
            except TimeoutError:
                self.close()
                raise ExportFailed(
                    f"{self.destination.url} did not answer in time "
                    f"(timeout {self.destination.timeout_s:g} s)"
                ) from None
            except (OSError, EOFError, ValueError) as exc:  # IncompleteRead, LimitOverrun
                self.close()
                if not reused:
                    raise ExportFailed(f"{self.destination.url}: {exc!r}") from None
            except BaseException:  # a half-read connection is never used again
                self.close()
                raise
        raise AssertionError("unreachable")

    async def _answer(self) -> tuple[int, bytes]:
        assert self._reader is not None
        while True:
            head = await self._reader.readuntil(b"\r\n\r\n")  # at most the reader's 64 KiB
            lines = head.decode("latin-1").split("\r\n")
            version, _, rest = lines[0].partition(" ")
            if not version.startswith("HTTP/") or not rest[:3].isdigit():
                raise ValueError(f"not an HTTP answer: {lines[0][:80]!r}")
            status = int(rest[:3])
            if status >= 200:
                break  # 1xx: an interim answer, the real one follows
        fields = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines[1:] if line)
        }
        if status in (204, 304):
            body = b""  # no body, whatever the fields say
        elif "chunked" in fields.get("transfer-encoding", ""):
            body = await self._chunks()
        elif "content-length" in fields:
            length = int(fields["content-length"])
            if length > MAX_RESPONSE_BYTES:
                raise ValueError(f"an answer of {length} bytes")
            body = await self._reader.readexactly(length)
        else:  # the answer ends with the connection
            body = await self._to_end()
            fields["connection"] = "close"
        if fields.get("connection", "").lower() == "close":
            self.close()
        return status, body

    async def _to_end(self) -> bytes:
        assert self._reader is not None
        body = bytearray()
        while chunk := await self._reader.read(MAX_RESPONSE_BYTES - len(body)):
            body += chunk
            if len(body) >= MAX_RESPONSE_BYTES:
                raise ValueError("an answer of more than 1 MiB")
        return bytes(body)

    async def _chunks(self) -> bytes:
        assert self._reader is not None
        body = bytearray()
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                while (await self._reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailers
                return bytes(body)
            if len(body) + size > MAX_RESPONSE_BYTES:
                raise ValueError("an answer of more than 1 MiB")
            body += await self._reader.readexactly(size + 2)
            del body[-2:]

    def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        self._reader = self._writer = None


def _loop_time(deadline: float) -> float:
    """A time.monotonic() deadline on the running loop's clock."""
    loop = asyncio.get_running_loop()
    return loop.time() + (deadline - time.monotonic())
