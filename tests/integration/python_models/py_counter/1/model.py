"""A running sum per correlation id, kept in the model, reset by START, forgotten at END."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[0, 0])
            start = int(pb_utils.get_input_tensor_by_name(request, "START").as_numpy()[0, 0])
            end = int(pb_utils.get_input_tensor_by_name(request, "END").as_numpy()[0, 0])
            key = request.correlation_id()
            total = (0 if start else self.sums.get(key, 0)) + value
            self.sums[key] = total
            if end:
                del self.sums[key]
            output = np.array([[total]], dtype=np.int32)
            controls = np.array([[start, end]], dtype=np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT", output), pb_utils.Tensor("CONTROLS", controls)]
                )
            )
        return responses
