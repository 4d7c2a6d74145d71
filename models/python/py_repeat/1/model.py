"""Decoupled: COUNT responses to each request, "TEXT i" and i, sent from a thread after
execute() has returned, then the final flag (Triton's response sender API)."""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()[0]
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            thread = threading.Thread(target=self.repeat, args=(sender, text, count))
            thread.start()
            self.threads.append(thread)
        self.threads = [t for t in self.threads if t.is_alive()]
        return None

    def repeat(self, sender, text, count):
        if count < 0:
            error = pb_utils.TritonError("COUNT must be >= 0", pb_utils.TritonError.INVALID_ARG)
            sender.send(
                pb_utils.InferenceResponse(error=error),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
            return
        for i in range(count):
            part = np.array([text + f" {i}".encode()], dtype=object)
            index = np.array([i], dtype=np.int32)
            sender.send(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("PART", part), pb_utils.Tensor("INDEX", index)]
                )
            )
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=5)
