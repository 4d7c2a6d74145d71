"""Each request's INPUT0 back as OUTPUT0, 50 ms a batch; a restart (its worker's second
start, or later) takes RESTART_S, as a framework's import and a compile can."""

import time
from pathlib import Path

import triton_python_backend_utils as pb_utils

BATCH_S = 0.05
RESTART_S = 12.0


class TritonPythonModel:
    def initialize(self, args):
        # The first start leaves a mark in the model's directory; a start that finds it
        # is a restart.
        mark = Path(args["model_repository"]) / "started"
        if mark.exists():
            time.sleep(RESTART_S)
        mark.touch()

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
