"""The classifier's probabilities as the most likely digit and its probability."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            probabilities = pb_utils.get_input_tensor_by_name(request, "PROBABILITIES").as_numpy()
            label = probabilities.argmax(axis=1).astype(np.int32)[:, None]
            confidence = probabilities.max(axis=1).astype(np.float32)[:, None]
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("LABEL", label), pb_utils.Tensor("CONFIDENCE", confidence)]
                )
            )
        return responses
