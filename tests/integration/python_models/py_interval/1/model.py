"""Sleeps 0.3 s on each request and answers when it ran: [[start, end]] (wall clock)."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils

SLEEP_S = 0.3


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for _ in requests:
            start = time.time()
            time.sleep(SLEEP_S)
            ran = np.array([[start, time.time()]], dtype=np.float64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("RAN", ran)]))
        return responses
