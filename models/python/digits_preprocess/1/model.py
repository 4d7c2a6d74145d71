"""An 8x8 grey image (0..255) as the 64 pixel values (0..16) `digits` takes."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            pixels = image.reshape(len(image), 64).astype(np.float32) * (16.0 / 255.0)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PIXELS", pixels)]))
        return responses
