"""A custom handler subclassing TorchServe's BaseHandler: 64 pixels in (JSON, either
{"pixels": [...]} or the list itself), the digit and its probabilities out, one answer
per request of the batch, with the batch's size so that tests see batching. It runs
where TorchServe puts it (`self.device`: a worker's gpu_id, else the CPU)."""

import json

import torch
from ts.torch_handler.base_handler import BaseHandler


class DigitsHandler(BaseHandler):
    def preprocess(self, data):
        rows = []
        for request in data:
            body = request.get("data") or request.get("body")
            if isinstance(body, (bytes, bytearray)):
                body = json.loads(body)
            rows.append(body["pixels"] if isinstance(body, dict) else body)
        return torch.tensor(rows, dtype=torch.float32, device=self.device)

    def inference(self, data, *args, **kwargs):
        with torch.no_grad():
            return self.model(data)

    def postprocess(self, data):
        return [
            {"digit": int(row.argmax()), "probabilities": row.tolist(), "batch": len(data)}
            for row in data
        ]

    def describe_handle(self):
        """What `GET /models/digits?customized=true` shows (TorchServe's customized describe)."""
        return json.dumps({"model": "digits", "classes": 10, "device": str(self.device)})
