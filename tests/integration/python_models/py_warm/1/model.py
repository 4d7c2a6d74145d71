"""Counts the warm-up requests each instance saw (INPUT 7), sleeping on each as a slow
first run does; INPUT 13 fails. OUTPUT: this instance's count so far."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

WARM_UP, FAIL = 7, 13


class TritonPythonModel:
    def initialize(self, args):
        self.warm_ups = 0
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.sleep_s = float(parameters.get("sleep_s", {}).get("string_value", "0"))

    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()[0, 0])
            if value == FAIL:
                raise RuntimeError("this model refuses 13")
            if value == WARM_UP:
                self.warm_ups += 1
                time.sleep(self.sleep_s)
            output = np.array([[self.warm_ups]], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", output)]))
        return responses
