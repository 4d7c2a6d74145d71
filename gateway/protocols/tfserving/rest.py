"""TF Serving's REST API on a port of its own (`--rest_api_port`), over the core:

- `GET /v1/models/{m}[/versions/{v}|/labels/{l}]`: the model's version states;
- `GET .../metadata`: its signatures (metadata.py);
- `POST .../{m}[...]:predict`: a signature run on JSON tensors (json_tensors.py);
- `POST ...:classify` and `...:regress`: a classify or regress signature run on JSON
  tf.Examples (examples.py, classify.py).

Errors are `{"error": "..."}` with TF Serving's status codes and, where clients match
on them, its words ("Servable not found for request: ...").
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import grpc

from accel_base.errors import GatewayError
from gateway.core.inference import Tensor
from gateway.core.interface import Core
from gateway.protocols.http.body import read_body
from gateway.protocols.http.infer_route import ASGIApp, Receive, Scope, Send, respond
from gateway.protocols.tfserving.classify import (
    CLASSIFY,
    REGRESS,
    Methods,
    Spec,
    classify_json,
    regress_json,
)
from gateway.protocols.tfserving.errors import TfsError, from_gateway, invalid, not_found
from gateway.protocols.tfserving.examples import input_from_json, shown
from gateway.protocols.tfserving.json_tensors import request_inputs, response_text
from gateway.protocols.tfserving.metadata import metadata_json
from gateway.protocols.tfserving.served import DEFAULT_SIGNATURE, TfServing
from gateway.protocols.tfserving.status import version_states

log = logging.getLogger("accel_gateway")

# /v1/models/{name}[/versions/{n}|/labels/{label}][/metadata|:predict|:classify|:regress]
# As TF Serving's: the path's case does not matter, the verb's and `metadata`'s do.
_PATH = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)"
    r"(?:/versions/(?P<version>[0-9]+)|/labels/(?P<label>[^/:]+))?"
    r"(?:/(?P<metadata>metadata)|:(?P<verb>[a-z]+))?$",
    re.IGNORECASE,
)
_VERBS = ("predict", "classify", "regress")
_INT64_MAX = 2**63 - 1
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


async def _reply(send: Send, status: int, body: Any) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    await respond(send, status, text.encode(), [(b"content-type", b"application/json")])


def _parsed(raw: bytes) -> Any:
    if not raw.strip():
        raise invalid("JSON Parse error: The document is empty")
    try:
        body = json.loads(raw)  # (accepts NaN and Infinity, as TF Serving does)
        if _ESCAPED_SURROGATE.search(raw):  # a lone one is no text: refused, as rapidjson does
            json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # (a ValueError: first)
        raise invalid("JSON Parse error: The surrogate pair in string is invalid.") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid(f"JSON Parse error: {exc}") from None
    except RecursionError:
        raise invalid("JSON Parse error: the document nests too deep") from None
    return body


def _signature(body: Any) -> str:
    signature = body.get("signature_name", "") if isinstance(body, dict) else ""
    if not isinstance(signature, str):
        raise invalid("'signature_name' key must be a string value.")
    return signature


async def predict(methods: Methods, name: str, version: int | None, label: str, raw: bytes) -> str:
    """A `:predict` body's answer (`predictions` or `outputs`), as JSON text."""
    core, tfs = methods.core, methods.tfs
    body = _parsed(raw)
    signature = _signature(body)
    served = await tfs.served(core, name, version, label, signature)
    await methods.check_predict(served, signature or DEFAULT_SIGNATURE)
    inputs, row = request_inputs(body, served.inputs)
    tensors = [Tensor(n, served.inputs[n], array) for n, array in inputs.items()]
    response = await served.run(core, tensors, list(served.outputs))
    return response_text({t.name: (t.data, t.datatype) for t in response.outputs}, row)


async def classify_or_regress(
    methods: Methods, name: str, version: int | None, label: str, raw: bytes, verb: str
) -> str:
    """A `:classify` or `:regress` body's answer (`results`), as JSON text."""
    body = _parsed(raw)
    if not isinstance(body, dict):
        raise invalid(f"JSON Value: {shown(body)} Is not object")
    spec = Spec(name, version, label, _signature(body))
    if verb == "classify":
        result, _ = await methods.run(spec, CLASSIFY, input_from_json(body))
        return classify_json(result)
    result, _ = await methods.run(spec, REGRESS, input_from_json(body))
    return regress_json(result)


def create_rest_app(
    core: Core, tfs: TfServing, max_body_bytes: int, timeout_s: float = 30.0,
    metrics_page: tuple[str, Callable[[], str]] | None = None,
) -> ASGIApp:  # fmt: skip
    """`timeout_s`: how long a prediction may take (--rest_api_timeout_in_ms);
    `metrics_page`: where to serve the Prometheus page, and the gateway's own metrics to
    write on it after TF Serving's (monitoring.py)."""
    methods = Methods(core, tfs, max_body_bytes)

    async def route(scope: Scope, receive: Receive, send: Send, asked: list[str]) -> None:
        """`asked`: filled with the model named and the URL's verb, for the metrics."""
        path, method = scope["path"], scope["method"]
        if not path.lower().startswith("/v1/"):
            raise not_found(f"no such path: {path}; TF Serving's API is under /v1/models")
        malformed = invalid(f"Malformed request: {method} {path}")
        if path.rstrip("/") == "/v1/models":
            raise invalid("Missing model name in request.")
        match = _PATH.match(path)  # (ASGI's path is decoded already)
        if match is None or (match["verb"] and match["verb"] not in _VERBS):
            raise malformed
        if match["metadata"] and match["metadata"] != "metadata":
            raise malformed
        name, label, version = match["name"], match["label"] or "", None
        asked[:] = [name, match["verb"] or ""]
        if match["version"]:
            if len(match["version"]) > 19 or int(match["version"]) > _INT64_MAX:
                raise invalid(f"Failed to convert version: {match['version']} to numeric.")
            version = int(match["version"])
        if match["verb"]:
            if method != "POST":
                raise malformed
            core.shedder.check()
            headers = dict(scope["headers"])
            raw = await read_body(receive, headers.get(b"content-length"), max_body_bytes)
            try:
                async with asyncio.timeout(timeout_s):
                    if match["verb"] == "predict":
                        answer = await predict(methods, name, version, label, raw)
                    else:
                        answer = await classify_or_regress(
                            methods, name, version, label, raw, match["verb"]
                        )
            except TimeoutError:
                message = f"Deadline exceeded (--rest_api_timeout_in_ms: {timeout_s * 1000:g})"
                raise TfsError(grpc.StatusCode.DEADLINE_EXCEEDED, message) from None
            await _reply(send, 200, answer)
        elif method != "GET":
            raise malformed
        elif match["metadata"]:
            await _reply(send, 200, await metadata_json(core, tfs, name, version, label))
        else:
            await _reply(send, 200, await version_states(core, tfs, name, version))

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if metrics_page is not None and scope["path"] == metrics_page[0]:
            page = tfs.metrics.render() + metrics_page[1]()
            await respond(send, 200, page.encode(), [(b"content-type", b"text/plain")])
            return
        start = time.perf_counter()
        asked = ["", ""]
        try:
            await route(scope, receive, send, asked)
        except TfsError as exc:
            error = exc
        except GatewayError as exc:
            error = from_gateway(exc)
        except Exception as exc:  # a bug of ours: the client still gets an answer
            log.exception("TF Serving REST request failed")
            error = TfsError(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}")
        else:
            micros = int((time.perf_counter() - start) * 1e6)
            tfs.metrics.record(asked[0], "OK", asked[1], "REST", micros)
            return
        tfs.metrics.record(asked[0], error.code.name, known=asked[0] in tfs.models)
        await _reply(send, error.http_status, {"error": error.message})

    return app
