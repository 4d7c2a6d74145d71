"""One remote endpoint over HTTP/1.1: the V2 REST routes, tensors in the binary tensor
extension (or as JSON, for servers without it).

Connections are kept alive in a small pool that every instance thread shares; one taken
from the pool is checked first, since a server closes idle ones (uvicorn after 5 s)
and a request written to a closed connection could not be told from one the remote ran.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
import threading
from typing import Any
from urllib.parse import quote

import numpy as np
import orjson

from accel_base.datatypes import NUMPY_DTYPES, from_raw, json_data, to_raw
from accel_base.errors import GatewayError, InvalidArgument, Unavailable
from backends.remote.failures import Lost, NotSent, answered_error, malformed
from backends.remote.settings import Endpoint, RemoteSettings

HEADER_LENGTH = "Inference-Header-Content-Length"
MAX_IDLE = 32  # idle connections kept per endpoint; more are closed when returned


def _dropped(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle connection was closed (or sent something unasked) since its use:
    an idle connection with anything to read is at its end. poll(), not select(): it
    takes descriptors past 1024; and a TLS socket may hold decrypted bytes poll cannot see."""
    sock = connection.sock
    if sock is None:
        return True
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class HttpClient:
    def __init__(self, endpoint: Endpoint, settings: RemoteSettings) -> None:
        self.endpoint = str(endpoint)
        self._address = endpoint.address
        self._tls = ssl.create_default_context() if endpoint.tls else None
        self._settings = settings
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False
        model = f"/v2/models/{quote(settings.model, safe='')}"
        self._model_path = model + (
            f"/versions/{quote(settings.version, safe='')}" if settings.version else ""
        )

    # ---- connections ---------------------------------------------------------------

    def _connect(self) -> http.client.HTTPConnection:
        host, _, port = self._address.rpartition(":")
        timeout = self._settings.connect_timeout_s
        if self._tls is not None:
            connection = http.client.HTTPSConnection(
                host, int(port), timeout=timeout, context=self._tls
            )
        else:
            connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
        try:
            connection.connect()
        except (OSError, ssl.SSLError) as exc:
            connection.close()
            raise NotSent(f"{self.endpoint}: cannot connect: {exc}") from None
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    def _take(self) -> http.client.HTTPConnection:
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._connect()
            if not _dropped(connection):
                return connection
            connection.close()

    def _give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(connection)
                return
        connection.close()

    def _request(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str], timeout_s: float
    ) -> tuple[int, dict[str, str], bytes]:
        connection = self._take()
        try:
            connection.sock.settimeout(timeout_s)
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            limit = self._settings.max_message_bytes
            data = response.read(limit + 1)  # bounded, chunked or not
            if len(data) > limit:
                connection.close()
                raise Unavailable(
                    f"remote {self.endpoint} answered with more than {limit} bytes (parameter "
                    "max_message_mb)"
                )
        except TimeoutError:
            # Slow, not gone: this request fails, the endpoint stays in.
            connection.close()
            raise Unavailable(
                f"remote {self.endpoint} did not answer within {timeout_s:g} s (parameter "
                "timeout_ms)"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise Lost(f"{self.endpoint}: connection lost: {exc or type(exc).__name__}") from None
        except BaseException:
            connection.close()
            raise
        if response.will_close or not response.isclosed():
            connection.close()  # told to, or a body longer than the limit left unread
        else:
            self._give_back(connection)
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data

    def _json(self, path: str) -> Any:
        status, _, data = self._request("GET", path, None, {}, self._settings.connect_timeout_s)
        if status != 200:
            raise answered_error(status, self.endpoint, _error_text(data))
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise malformed(self.endpoint, f"{path}: {exc}") from None

    # ---- the protocol ----------------------------------------------------------------

    def ready(self) -> None:
        """Returns when the remote model is ready; raises NotSent, Lost or a GatewayError."""
        status, _, data = self._request(
            "GET", self._model_path + "/ready", None, {}, self._settings.connect_timeout_s
        )
        if status != 200:
            raise answered_error(status, self.endpoint, _error_text(data) or "not ready")

    def metadata(self) -> dict[str, Any]:
        return self._json(self._model_path)

    def max_batch_size(self) -> int | None:
        """The remote config's max_batch_size, or None where the server has no config route."""
        try:
            config = self._json(self._model_path + "/config")
        except GatewayError:  # answered, but with no config
            return None
        value = config.get("max_batch_size", 0) if isinstance(config, dict) else None
        return value if isinstance(value, int) else None

    def infer(
        self, inputs: dict[str, np.ndarray], datatypes: dict[str, str], output_names: list[str]
    ) -> dict[str, np.ndarray]:
        binary = self._settings.binary_data
        entries, blobs = [], []
        for name, array in inputs.items():
            datatype = datatypes[name]
            entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": array.shape}
            if binary:
                blob = to_raw(array, datatype)
                entry["parameters"] = {"binary_data_size": len(blob)}
                blobs.append(blob)
            else:
                entry["data"] = _json_data(array, datatype, name)
            entries.append(entry)
        outputs = [{"name": n, "parameters": {"binary_data": binary}} for n in output_names]
        header = orjson.dumps(
            {"inputs": entries, "outputs": outputs}, option=orjson.OPT_SERIALIZE_NUMPY
        )
        headers = {"Content-Type": "application/json"}
        if binary:
            headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(header))}
        body = b"".join([header, *blobs])
        status, answer_headers, data = self._request(
            "POST", self._model_path + "/infer", body, headers, self._settings.timeout_s
        )
        if status != 200:
            raise answered_error(status, self.endpoint, _error_text(data))
        return self._outputs(data, answer_headers.get(HEADER_LENGTH.lower()))

    def _outputs(self, data: bytes, header_length: str | None) -> dict[str, np.ndarray]:
        try:
            split = int(header_length) if header_length is not None else len(data)
            answer = _loads(data[:split])
            view, offset, outputs = memoryview(data), split, {}
            for tensor in answer["outputs"]:
                name, datatype = tensor["name"], tensor["datatype"]
                shape, where = tuple(tensor["shape"]), f"output '{tensor['name']}'"
                size = (tensor.get("parameters") or {}).get("binary_data_size")
                if size is None:
                    outputs[name] = _from_json(tensor["data"], datatype, shape)
                    continue
                if offset + size > len(data):
                    raise ValueError(f"{where}: binary_data_size {size} runs past the body")
                outputs[name] = from_raw(view[offset : offset + size], datatype, shape, where)
                offset += size
        except (InvalidArgument, KeyError, TypeError, ValueError) as exc:
            raise malformed(self.endpoint, str(exc)) from None
        return outputs

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def _loads(text: bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # NaN and Infinity, which Triton writes and orjson refuses
        return json.loads(text)


def _error_text(data: bytes) -> str:
    try:
        return str(_loads(data).get("error", ""))
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")


def _json_data(array: np.ndarray, datatype: str, name: str) -> Any:
    if datatype == "BF16":
        raise InvalidArgument(
            f"input '{name}': BF16 goes only as binary data; set parameter binary_data to true"
        )
    try:
        return json_data(array.reshape(-1), datatype)
    except UnicodeDecodeError:
        raise InvalidArgument(
            f"input '{name}' holds bytes that are not UTF-8, which JSON cannot carry; set "
            "parameter binary_data to true"
        ) from None


def _from_json(data: list, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    if datatype == "BF16":
        raise ValueError("BF16 output sent as JSON, which has no form for it")
    flat = np.asarray(data, dtype=object).reshape(-1)
    if datatype == "BYTES":
        return np.array([str(v).encode() for v in flat], dtype=object).reshape(shape)
    return flat.astype(NUMPY_DTYPES[datatype]).reshape(shape)
