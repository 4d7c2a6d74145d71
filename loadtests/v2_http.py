"""The V2 HTTP user: `POST /v2/models/<model>/infer`, binary tensors by default.

The binary tensor extension (Triton's): the body is a JSON header, then the raw bytes of
each input; `Inference-Header-Content-Length` says where the header ends. `--json-tensors`
sends (and asks for) JSON tensors instead. Each request is timed by Locust's FastHttpUser
client; a non-200 answer, or one without the expected body, is a failure.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from locust import FastHttpUser, constant, task
from locust.exception import StopUser

from loadtests.common import MetadataError, Prepared, plan_of
from loadtests.inputs import http_binary_body, http_json_body

HEADER_LENGTH = "Inference-Header-Content-Length"


class V2HttpUser(FastHttpUser):
    protocol = "http"
    wait_time = constant(0)  # closed loop: the next request as soon as the answer is in

    def on_start(self) -> None:
        self.plan = plan_of(self.environment)
        timeout = self.plan.options.request_timeout
        self.client.network_timeout = timeout
        self.client.connection_timeout = timeout

    def _metadata(self, model: str) -> dict:
        url = f"{self.host.rstrip('/')}/v2/models/{urllib.parse.quote(model, safe='')}"
        try:
            with urllib.request.urlopen(url, timeout=self.plan.options.request_timeout) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise MetadataError(f"GET {url}: HTTP {exc.code} {detail}") from None
        except (OSError, ValueError) as exc:
            raise MetadataError(f"GET {url}: {exc}") from None

    def _prepare(self, model: str) -> Prepared:
        inputs = self.plan.inputs(self._metadata(model))
        binary = not self.plan.options.json_tensors
        body, header_length = http_binary_body(inputs) if binary else http_json_body(inputs)
        headers = {"Content-Type": "application/json"}
        if header_length is not None:
            headers = {
                "Content-Type": "application/octet-stream",
                HEADER_LENGTH: str(header_length),
            }
        name = f"/v2/models/{model}/infer"
        return Prepared(model, name, body, headers, binary)

    def _report_setup_failure(self, model: str, exc: Exception) -> None:
        self.environment.events.request.fire(
            request_type="GET",
            name=f"/v2/models/{model} (metadata)",
            response_time=0,
            response_length=0,
            exception=exc,
            context={},
        )

    @task
    def infer(self) -> None:
        model = self.plan.choose()
        try:
            prepared = self.plan.prepared("http", model, self._prepare)
        except Exception as exc:  # noqa: BLE001 - reported as a failure, then this user stops
            self._report_setup_failure(model, exc)
            raise StopUser() from exc
        with self.client.post(
            f"/v2/models/{urllib.parse.quote(model, safe='')}/infer",
            data=prepared.payload,
            headers=prepared.headers,
            name=prepared.name,
            catch_response=True,
        ) as response:
            if response.status_code != 200:
                text = (response.text or "")[:300]
                response.failure(f"HTTP {response.status_code}: {text}")
            elif prepared.binary and HEADER_LENGTH.lower() not in {
                key.lower() for key in response.headers
            }:
                response.failure(f"binary outputs asked for, but no {HEADER_LENGTH} in the answer")
            elif not response.content:
                response.failure("empty answer")
