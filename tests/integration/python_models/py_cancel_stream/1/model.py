"""Decoupled. INPUT 1: a response every 20 ms from a thread until the request's sender
says it is cancelled (10 s at most); INPUT 0: one final response at once. Each response:
SEEN, how many requests it has seen cancelled so far."""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

LONGEST_S = 10.0
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args):
        self.seen_cancelled = 0

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            if int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[0]):
                threading.Thread(target=self.stream, args=(sender,), daemon=True).start()
            else:
                sender.send(self.response(), flags=FINAL)
        return None

    def response(self):
        seen = np.array([self.seen_cancelled], dtype=np.int32)
        return pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", seen)])

    def stream(self, sender):
        deadline = time.monotonic() + LONGEST_S
        while time.monotonic() < deadline:
            if sender.is_cancelled():
                self.seen_cancelled += 1
                break
            sender.send(self.response())
            time.sleep(0.02)
        sender.send(flags=FINAL)
