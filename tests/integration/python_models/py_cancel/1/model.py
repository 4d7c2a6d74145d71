"""INPUT 1: runs until its request is cancelled (10 s at most), counting the requests it
saw cancelled; INPUT 0: answers at once. SEEN: [requests seen cancelled, INPUT 0 runs]."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils

LONGEST_S = 10.0


class TritonPythonModel:
    def initialize(self, args):
        self.seen_cancelled = 0
        self.quick_runs = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            if int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[0, 0]):
                deadline = time.monotonic() + LONGEST_S
                while time.monotonic() < deadline:
                    if request.is_cancelled():
                        self.seen_cancelled += 1
                        break
                    time.sleep(0.02)
            else:
                self.quick_runs += 1
            seen = np.array([[self.seen_cancelled, self.quick_runs]], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", seen)]))
        return responses
