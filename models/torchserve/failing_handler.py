"""A handler that refuses some inputs with TorchServe's PredictionException and its own
status code, and fails outright on others."""

from ts.utils.util import PredictionException


class FailingHandler:
    def initialize(self, context):
        self.initialized = True

    def handle(self, data, context):
        bodies = [request.get("body") for request in data]
        if any(body == b"refuse" for body in bodies):
            raise PredictionException("the input was refused", 513)
        if any(body == b"crash" for body in bodies):
            raise RuntimeError("the handler broke")
        return ["ok" for _ in data]
