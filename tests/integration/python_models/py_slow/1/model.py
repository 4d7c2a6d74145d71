"""Each request's INPUT0 back as OUTPUT0, after 80 ms a batch (a slow accelerator's run)."""

import time

import triton_python_backend_utils as pb_utils

BATCH_S = 0.08


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(BATCH_S)
        return [
            pb_utils.InferenceResponse(
                [
                    pb_utils.Tensor(
                        "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    )
                ]
            )
            for r in requests
        ]
